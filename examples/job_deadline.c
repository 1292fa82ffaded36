/* examples/job_deadline.c — a job: tasks with one completion; a deadline
 * ends it with -ETIME, and its tasks see urt_job_cancelled() to stop early.
 *   cc job_deadline.c $(pkg-config --cflags --libs urt) && ./a.out */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* usleep */
#endif
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
#include <urt/urt.h>

static atomic_int done_tasks;

static enum urt_task_result quick(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&done_tasks, 1);
    return URT_TASK_DONE;
}

/* Works in slices (yielding between them) until its job is cancelled. */
static enum urt_task_result endless(struct urt_task *t, void *arg)
{
    (void)arg;
    if (urt_job_cancelled(urt_task_job(t)))
        return URT_TASK_DONE;
    usleep(1000); /* one slice of work */
    return URT_TASK_YIELD;
}

static void on_done(urt_job *job, int status, void *arg)
{
    (void)job;
    *(int *)arg = status; /* urt_job_wait returns after this callback */
}

static const char *status_name(int s)
{
    return s == 0 ? "0 (all tasks done)" : s == -ETIME ? "-ETIME (deadline passed)"
                                       : s == -ECANCELED ? "-ECANCELED" : "other";
}

int main(void)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    urt_runtime *rt;
    if (urt_runtime_create(&cfg, &rt)) {
        fprintf(stderr, "urt: %s\n", urt_last_error());
        return 1;
    }

    /* A job that finishes: four tasks, then close; wait for the completion. */
    int status1 = 1;
    struct urt_job_options opt;
    urt_job_options_init(&opt);
    opt.done = on_done;
    opt.arg = &status1;
    urt_job *job;
    if (urt_job_create(rt, &opt, &job))
        return 1;
    for (int i = 0; i < 4; i++)
        urt_job_spawn(job, quick, NULL, NULL, 0);
    urt_job_close(job);
    int w = urt_job_wait(job, URT_WAIT_FOREVER);
    printf("job 1: wait %s, callback %s, %d tasks ran\n", status_name(w), status_name(status1),
           atomic_load(&done_tasks));
    urt_job_release(job);

    /* A job with a 20 ms deadline whose task would never end by itself. */
    int status2 = 1;
    urt_job_options_init(&opt);
    opt.done = on_done;
    opt.arg = &status2;
    opt.deadline_ns = 20 * 1000 * 1000;
    if (urt_job_create(rt, &opt, &job))
        return 1;
    urt_job_spawn(job, endless, NULL, NULL, 0);
    urt_job_close(job);
    w = urt_job_wait(job, URT_WAIT_FOREVER);
    printf("job 2: wait %s, callback %s, cancelled %s\n", status_name(w), status_name(status2),
           urt_job_cancelled(job) ? "yes" : "no");
    int late = urt_job_spawn(job, quick, NULL, NULL, 0);
    printf("spawn into the ended job: %s\n", late == -EINVAL || late == -ECANCELED ? "refused" : "accepted?");
    urt_job_release(job);

    return urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN) < 0;
}
