/*
 * tests/unit/test_admission_paths.c — max_pending_tasks on every way in
 * (urt/admission.h): plain submit and spawn, to a worker, a lane, a
 * transaction, a heavy job and a serial job. For each path, T threads flood
 * it with URT_SUBMIT_BLOCK at a cap of CAP while the tasks run slowly:
 *  - the cap holds (the admission high-water mark, and the tasks' own count
 *    of how many are pending at once, never exceed CAP);
 *  - nothing is lost: every submitted task runs exactly once;
 *  - the blocked submitters all finish (they did block: blocked > 0);
 *  - from a worker, URT_SUBMIT_BLOCK at the cap returns -EAGAIN (a worker
 *    never blocks) on the lane path as on the others.
 */
#include "helpers.h"

#include <pthread.h>
#include <urt/urt.h>

#define CAP 4
#define T 4
#define PER SCALE(300, 60)

enum path { P_SUBMIT, P_SPAWN, P_TO, P_LANE, P_LANE_SPAWN, P_TX, P_TX_SPAWN, P_JOB, P_JOB_SERIAL, P_N };
static const char *const path_name[P_N] = {"urt_task_submit", "urt_spawn",     "urt_spawn_to",
                                           "urt_lane_submit", "urt_lane_spawn", "urt_tx_submit",
                                           "urt_tx_spawn",    "urt_job_submit", "urt_job_spawn (serial job)"};

static urt_runtime *rt;
static urt_lane *lane;
static urt_tx *tx;
static urt_job *job;
static _Atomic uint64_t ran, inside, inside_max, errors;
static struct urt_task tasks[T][PER];

static enum urt_task_result slow(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    uint64_t now_in = atomic_fetch_add(&inside, 1) + 1;
    uint64_t m = atomic_load(&inside_max);
    while (now_in > m && !atomic_compare_exchange_weak(&inside_max, &m, now_in))
        ;
    for (volatile int i = 0; i < 2000; i++)
        ;
    atomic_fetch_sub(&inside, 1);
    atomic_fetch_add(&ran, 1);
    return URT_TASK_DONE;
}

static int submit_one(enum path p, struct urt_task *t)
{
    urt_task_init(t, slow, NULL);
    switch (p) {
    case P_SUBMIT: return urt_task_submit(rt, t, URT_SUBMIT_BLOCK);
    case P_SPAWN: return urt_spawn(rt, slow, NULL, URT_SUBMIT_BLOCK);
    case P_TO: return urt_spawn_to(rt, 1, slow, NULL, NULL, URT_SUBMIT_BLOCK);
    case P_LANE: return urt_lane_submit(lane, t, URT_SUBMIT_BLOCK);
    case P_LANE_SPAWN: return urt_lane_spawn(lane, slow, NULL, NULL, URT_SUBMIT_BLOCK);
    case P_TX: return urt_tx_submit(tx, t, URT_SUBMIT_BLOCK);
    case P_TX_SPAWN: return urt_tx_spawn(tx, slow, NULL, NULL, URT_SUBMIT_BLOCK);
    case P_JOB:
    case P_JOB_SERIAL: return urt_job_submit(job, t, URT_SUBMIT_BLOCK);
    default: return -EINVAL;
    }
}

struct flooder {
    enum path p;
    int id;
};

static void *flood(void *arg)
{
    struct flooder *f = arg;
    for (int i = 0; i < PER; i++)
        if (submit_one(f->p, &tasks[f->id][i]) != 0)
            atomic_fetch_add(&errors, 1);
    return NULL;
}

static void run_path(enum path p)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.max_pending_tasks = CAP;
    rt = rt_create_or_skip(&cfg);
    atomic_store(&ran, 0);
    atomic_store(&inside_max, 0);
    atomic_store(&errors, 0);
    if (p == P_LANE || p == P_LANE_SPAWN)
        cr_assert_eq(urt_lane_create(rt, &lane), 0);
    if (p == P_TX || p == P_TX_SPAWN)
        cr_assert_eq(urt_tx_begin(rt, NULL, &tx), 0);
    if (p == P_JOB || p == P_JOB_SERIAL) {
        struct urt_job_options o;
        urt_job_options_init(&o);
        o.work_level = p == P_JOB_SERIAL ? 0 : URT_WORK_LEVEL_MAX;
        cr_assert_eq(urt_job_create(rt, &o, &job), 0);
    }
    pthread_t th[T];
    struct flooder f[T];
    for (int i = 0; i < T; i++) {
        f[i] = (struct flooder){p, i};
        cr_assert_eq(pthread_create(&th[i], NULL, flood, &f[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL); /* every blocked submitter finishes */
    uint64_t total = (uint64_t)T * PER;
    cr_assert_eq(atomic_load(&errors), 0, "%s: submissions failed: %s", path_name[p], urt_last_error());
    cr_assert(WAIT_UNTIL(atomic_load(&ran) == total, 30000), "%s: %lu of %lu ran", path_name[p],
              (unsigned long)atomic_load(&ran), (unsigned long)total);
    struct urt_admission_stats st;
    cr_assert_eq(urt_admission_stats(rt, &st), 0);
    cr_assert_leq(st.max_pending, CAP, "%s: high-water %lu over the cap", path_name[p], (unsigned long)st.max_pending);
    cr_assert_leq(atomic_load(&inside_max), CAP, "%s: %lu tasks ran at once", path_name[p],
                  (unsigned long)atomic_load(&inside_max));
    cr_assert_gt(st.blocked, 0, "%s: nobody blocked: the path is not counted", path_name[p]);
    cr_assert(WAIT_UNTIL((urt_admission_stats(rt, &st), st.pending == 0), 5000), "%s: %lu still pending",
              path_name[p], (unsigned long)st.pending);
    if (job) {
        cr_assert_eq(urt_job_close(job), 0);
        cr_assert_eq(urt_job_wait(job, 10ull * 1000000000ull), 0);
        urt_job_release(job);
        job = NULL;
    }
    if (tx) {
        cr_assert_eq(urt_tx_abort(tx), 0);
        urt_tx_release(tx);
        tx = NULL;
    }
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    if (lane) {
        cr_assert_eq(urt_lane_destroy(lane), 0);
        lane = NULL;
    }
}

Test(admission_paths, task_submit, .timeout = 60) { run_path(P_SUBMIT); }
Test(admission_paths, spawn, .timeout = 60) { run_path(P_SPAWN); }
Test(admission_paths, spawn_to_a_worker, .timeout = 60) { run_path(P_TO); }
Test(admission_paths, lane_submit, .timeout = 60) { run_path(P_LANE); }
Test(admission_paths, lane_spawn, .timeout = 60) { run_path(P_LANE_SPAWN); }
Test(admission_paths, tx_submit, .timeout = 60) { run_path(P_TX); }
Test(admission_paths, tx_spawn, .timeout = 60) { run_path(P_TX_SPAWN); }
Test(admission_paths, job_submit, .timeout = 60) { run_path(P_JOB); }
Test(admission_paths, serial_job_submit, .timeout = 60) { run_path(P_JOB_SERIAL); }

/* From a worker: fill the cap with slow tasks, then a blocking lane
 * submission must not block (-EAGAIN). */
static _Atomic int worker_rc = 1;
static _Atomic int release_slow;

static enum urt_task_result parked(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    while (!atomic_load(&release_slow))
        sleep_us(100);
    return URT_TASK_DONE;
}

static enum urt_task_result try_from_worker(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&worker_rc, urt_lane_spawn(lane, slow, NULL, NULL, URT_SUBMIT_BLOCK));
    return URT_TASK_DONE;
}

Test(admission_paths, worker_never_blocks_on_a_lane, .timeout = 60)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    cfg.max_pending_tasks = 2;
    rt = rt_create_or_skip(&cfg);
    cr_assert_eq(urt_lane_create(rt, &lane), 0);
    /* Each on its own worker: from one thread both would go to the same
     * worker's inbox, and a parked task running first would keep the other
     * from ever running (inbox tasks are not stolen). The parked task is
     * admitted first, so when try_from_worker runs, the cap is already full
     * (parked + itself) and its lane submission has nothing to race with.
     * (Admitted the other way round, try_from_worker could run and take the
     * second slot with its lane task before parked was admitted; parked's
     * own non-blocking spawn then met the cap.) */
    cr_assert_eq(urt_spawn_to(rt, 1, parked, NULL, NULL, 0), 0);          /* slot 1 */
    cr_assert_eq(urt_spawn_to(rt, 0, try_from_worker, NULL, NULL, 0), 0); /* slot 2, runs and tries */
    cr_assert(WAIT_UNTIL(atomic_load(&worker_rc) != 1, 5000));
    int rc = atomic_load(&worker_rc);
    cr_assert_eq(rc, -EAGAIN, "a worker's blocking lane submission at the cap: %d", rc);
    atomic_store(&release_slow, 1);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(urt_lane_destroy(lane), 0);
    lane = NULL;
}
