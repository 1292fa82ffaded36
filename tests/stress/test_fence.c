/*
 * tests/stress/test_fence.c — the foreign submitters' shutdown fence
 * (sched/core/foreign.h) and the asymmetric fences under it (base/fence.h):
 *  - in a fresh process (tests/stress/fence_child.c), with membarrier(2)
 *    (the expedited mode) and with it refused by seccomp (the symmetric
 *    fallback), and with it refused only after the registration (the
 *    switch back to symmetric fences): Dekker rounds on the fences never let both sides miss, and
 *    destroy racing foreign plain and lane submissions ends every accepted
 *    task exactly once and accepts none after a refusal;
 *  - threads that get no mark (no memory: forced by fault injection) submit
 *    on the spare mark, and destroy racing them keeps its promises;
 *  - the marks: a thread's mark goes back at its exit and is reused, so
 *    threads that come and go do not grow the list; threads alive at once
 *    hold one each.
 */
#include <criterion/criterion.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "race_destroy.h"
#include "sched/core/foreign.h"

extern char **environ;

/* Runs fence_child with arg (or none); its exit status, its stdout in out. */
static int run_child(const char *arg, char *out, size_t len)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    char *argv[] = {(char *)FENCE_CHILD, (char *)arg, NULL};
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, FENCE_CHILD, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    read_pipe(fds[0], out, len);
    close(fds[0]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool membarrier_expedited_here(void)
{
    long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

/* Runs fence_child with arg: it must pass, in mode `expedited` at the start
 * and `after` at the end, with no Dekker round where both sides missed. */
static void child_passes(const char *arg, int expedited, int after)
{
    char out[4096], want[32];
    int rc = run_child(arg, out, sizeof out);
    if (rc == 125)
        cr_skip_test("cannot install a seccomp filter here");
    cr_assert_eq(rc, 0, "fence_child %s exited %d:\n%s", arg ? arg : "", rc, out);
    snprintf(want, sizeof want, "expedited=%d ", expedited);
    cr_assert(strstr(out, want) != NULL, "fence_child %s: want %s at the start:\n%s", arg ? arg : "", want, out);
    snprintf(want, sizeof want, "after=%d", after);
    cr_assert(strstr(out, want) != NULL, "fence_child %s: want %s at the end:\n%s", arg ? arg : "", want, out);
    cr_assert(strstr(out, "both_missed=0 ") != NULL, "%s", out);
}

Test(fence, expedited_mode_holds, .timeout = 240)
{
    if (!membarrier_expedited_here())
        cr_skip_test("membarrier(2) has no private expedited command here: the fallback test covers this host");
    child_passes(NULL, 1, 1);
}

Test(fence, symmetric_fallback_holds, .timeout = 240)
{
    child_passes("--refuse-membarrier", 0, 0);
}

/* Registered, then refused by a filter installed later: the first heavy
 * fence's call fails, and the process goes back to symmetric fences (after
 * a grace period for the fast sides that used a compiler barrier). */
Test(fence, refused_after_registration_degrades_to_symmetric, .timeout = 240)
{
    if (!membarrier_expedited_here())
        cr_skip_test("membarrier(2) has no private expedited command here");
    child_passes("--refuse-membarrier-later", 1, 0);
}

/* Threads that get no mark of their own (no memory for one: forced here)
 * submit on the spare, one at a time under its lock: destroy racing such
 * submitters keeps every promise of tests/race_destroy.h, and no mark is
 * added to the list. */
Test(fence, threads_without_a_mark_submit_on_the_spare, .timeout = 120)
{
#if URT_FAULT_INJECTION
    size_t n0 = foreign_marks_count(NULL);
    atomic_store(&urt__foreign_fault_no_mark, true);
    for (int mode = 0; mode < 2; mode++) {
        struct urt_config c;
        test_config(&c, 2);
        urt_runtime *rt = rt_create_or_skip(&c);
        char msg[256] = "";
        int rc = race_run(rt, mode ? URT_SHUTDOWN_CANCEL : URT_SHUTDOWN_DRAIN, 3, 2, true, SCALE(100000, 20000), msg,
                          sizeof msg);
        cr_assert_eq(rc, 0, "%s (%s)", msg, mode ? "cancel" : "drain");
    }
    atomic_store(&urt__foreign_fault_no_mark, false);
    cr_assert_eq(foreign_marks_count(NULL), n0, "a thread without a mark of its own added one");
    leak_check();
#else
    cr_skip_test("needs -Dfault_injection=true (the README's test command sets it)");
#endif
}

/* ---- the marks --------------------------------------------------------------------------- */

static urt_runtime *g_rt;
static _Atomic int g_ran;
static pthread_barrier_t g_hold;

static enum urt_task_result count_fn(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_fetch_add(&g_ran, 1);
    return URT_TASK_DONE;
}

static void *submit_once(void *arg)
{
    cr_assert_eq(urt_spawn(g_rt, count_fn, NULL, 0), 0);
    if (arg)
        pthread_barrier_wait(&g_hold); /* alive, with its mark, until all have one */
    return NULL;
}

#define ONE_BY_ONE 200
#define AT_ONCE 8

Test(fence, marks_are_given_back_at_thread_exit, .timeout = 60)
{
    struct urt_config c;
    test_config(&c, 2);
    g_rt = rt_create_or_skip(&c);
    size_t taken0, n0 = foreign_marks_count(&taken0);
    for (int i = 0; i < ONE_BY_ONE; i++) {
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, submit_once, NULL), 0);
        pthread_join(th, NULL);
    }
    size_t taken1, n1 = foreign_marks_count(&taken1);
    cr_assert_leq(n1, n0 + 1, "%d threads one after another grew the list from %zu to %zu marks", ONE_BY_ONE, n0, n1);
    cr_assert_eq(taken1, taken0, "marks still taken after their threads exited: %zu, before %zu", taken1, taken0);

    pthread_t th[AT_ONCE];
    cr_assert_eq(pthread_barrier_init(&g_hold, NULL, AT_ONCE + 1), 0);
    for (int i = 0; i < AT_ONCE; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, submit_once, (void *)1), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&g_ran) == ONE_BY_ONE + AT_ONCE, 10000));
    size_t taken2, n2 = foreign_marks_count(&taken2);
    cr_assert_geq(taken2, taken0 + AT_ONCE, "%d threads alive at once hold %zu marks (before: %zu)", AT_ONCE, taken2,
                  taken0);
    cr_assert_geq(n2, taken2);
    pthread_barrier_wait(&g_hold);
    for (int i = 0; i < AT_ONCE; i++)
        pthread_join(th[i], NULL);
    size_t taken3;
    foreign_marks_count(&taken3);
    cr_assert_eq(taken3, taken0, "marks taken after all exited: %zu, before %zu", taken3, taken0);
    pthread_barrier_destroy(&g_hold);
    cr_assert_eq(urt_runtime_destroy(g_rt, URT_SHUTDOWN_DRAIN), 0);
    leak_check();
}
