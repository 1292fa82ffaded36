/* examples/lanes_tx.c — a lane runs its tasks one at a time, in order; a
 * transaction is a lane of its own whose end is a commit or an abort.
 *   cc lanes_tx.c $(pkg-config --cflags --libs urt) && ./a.out */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <urt/urt.h>

static int order[8];
static int n_order; /* only lane tasks touch it: they never run concurrently */

static enum urt_task_result step(struct urt_task *t, void *arg)
{
    (void)t;
    order[n_order++] = (int)(intptr_t)arg;
    return URT_TASK_DONE;
}

static long sum; /* touched by the transaction's tasks only: serialized on its lane */
static atomic_int tasks_done;

static enum urt_task_result add(struct urt_task *t, void *arg)
{
    sum += (intptr_t)arg;
    char rec[32];
    int len = snprintf(rec, sizeof(rec), "add %ld", (long)(intptr_t)arg);
    urt_tx_log(urt_task_tx(t), rec, (size_t)len); /* kept with the tx; written only with a log */
    atomic_fetch_add(&tasks_done, 1); /* "done" at the end of fn: a commit may follow at once */
    return URT_TASK_DONE;
}

static atomic_int committed = -1000;

static void on_commit(urt_tx *tx, int status, void *arg)
{
    (void)tx;
    (void)arg;
    atomic_store(&committed, status);
}

static const char *state_name(enum urt_tx_state s)
{
    static const char *const n[] = {"active", "aborting", "aborted", "committing", "committed"};
    return n[s];
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

    /* A lane: five tasks from this thread run in submission order. */
    urt_lane *lane;
    if (urt_lane_create(rt, &lane))
        return 1;
    for (intptr_t i = 0; i < 5; i++)
        if (urt_lane_spawn(lane, step, NULL, (void *)i, 0))
            return 1;
    urt_lane_destroy(lane); /* from a thread that is not a worker: waits for the lane's tasks */
    printf("lane ran:");
    for (int i = 0; i < n_order; i++)
        printf(" %d", order[i]);
    printf("\n");

    /* A transaction: three tasks; once they said "done", the commit (if the
     * last one is still leaving its fn, the commit is deferred to it). A
     * commit requested earlier would stop the tasks not started yet: from
     * the commit request on, no task of the transaction starts (urt/tx.h). */
    urt_tx *tx;
    if (urt_tx_begin(rt, NULL, &tx))
        return 1;
    for (intptr_t i = 1; i <= 3; i++)
        if (urt_tx_spawn(tx, add, NULL, (void *)i, 0))
            fprintf(stderr, "urt_tx_spawn: %s\n", urt_last_error());
    while (atomic_load(&tasks_done) < 3)
        sched_yield();
    int rc = urt_tx_commit(tx, URT_COMMIT_AVAILABLE, on_commit, NULL);
    while (atomic_load(&committed) == -1000)
        sched_yield();
    printf("tx commit: %d, callback status %d, state %s, sum %ld\n", rc, atomic_load(&committed),
           state_name(urt_tx_state(tx)), sum);
    urt_tx_release(tx);

    /* A second transaction aborted: a later commit is refused. */
    if (urt_tx_begin(rt, NULL, &tx))
        return 1;
    rc = urt_tx_abort(tx);
    printf("tx abort: %d, state %s\n", rc, state_name(urt_tx_state(tx)));
    rc = urt_tx_commit(tx, URT_COMMIT_ACCEPTED, on_commit, NULL);
    printf("commit after abort: %s, reason %s\n", rc == -ECANCELED ? "-ECANCELED" : "unexpected",
           urt_last_error()[0] ? "recorded" : "missing");
    urt_tx_release(tx);

    return urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN) < 0;
}
