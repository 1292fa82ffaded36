/* examples/hello.c — the smallest urt program: a runtime, one task, a drain.
 *   cc hello.c $(pkg-config --cflags --libs urt) && ./a.out */
#include <stdio.h>
#include <urt/urt.h>

static enum urt_task_result hello(struct urt_task *t, void *arg)
{
    (void)t;
    printf("hello from a worker, arg %d\n", *(int *)arg);
    return URT_TASK_DONE; /* URT_TASK_YIELD = run me again later */
}

int main(void)
{
    struct urt_config cfg;
    urt_config_init(&cfg); /* every default */
    cfg.workers = 2;
    urt_config_from_env(&cfg); /* URT_WORKERS=4 ... */
    urt_runtime *rt;
    int err = urt_runtime_create(&cfg, &rt);
    if (err) {
        fprintf(stderr, "urt: %s\n", urt_last_error());
        return 1;
    }
    int x = 42;
    if (urt_spawn(rt, hello, &x, 0) != 0) /* any thread; no allocation */
        fprintf(stderr, "urt_spawn: %s\n", urt_last_error());
    int rc = urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN); /* runs what is queued */
    printf("runtime destroyed: %d tasks cancelled\n", rc);
    return rc < 0;
}
