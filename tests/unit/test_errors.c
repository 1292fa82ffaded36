/*
 * tests/unit/test_errors.c — every public function that fails says why
 * (issue 10, points 5 and 7).
 *
 * Each case calls a public function of the headers of include/urt/ with a bad argument
 * (NULL pointer, unknown flags, out-of-range value) or in a wrong state (an
 * ended job, a transaction after commit or abort, a lane being destroyed, a
 * cond after cancel) and checks that
 *   (a) the return value is one of the codes the function's header comment
 *       documents (copied from the header once per function, E_<function>
 *       below, used by CHECK_FN; listed in the case where one case differs),
 *       and
 *   (b) urt_last_error() was set — it is emptied before the call with the
 *       internal urt__error_clear() — to a message naming the function and
 *       the argument or state at fault (a word of it, given in the case).
 * Calls that must run on a worker (urt_job_wait, urt_lane_destroy,
 * urt_runtime_destroy) run in a task that copies its own thread's message.
 *
 * Not covered, and why: -ENOMEM (no allocation failure is injected here);
 * -ESHUTDOWN of the submission functions (needs a submitter racing destroy;
 * tests/unit/test_shutdown.c covers the code, the message comes from the
 * same helper as -EAGAIN below); the log functions' write errors
 * (tests/unit/test_wal*.c). Using a handle after its release is undefined
 * behaviour (urt/job.h rule 7, urt/tx.h rule 4, urt/lane.h rule 3) and is
 * not tested.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "runtime/runtime.h" /* urt__error_clear */
#include "tests/helpers.h"

/* got is one of codes[n], and the message m names fn and needle. m is the
 * thread's urt_last_error() for a call on this thread, a copy of it for a
 * call made on a worker. */
static void check_one(const char *what, int got, const char *m, const char *fn, const char *needle,
                      const int *codes, size_t n)
{
    bool documented = false;
    for (size_t i = 0; i < n; i++)
        documented |= got == codes[i];
    cr_assert(documented, "%s returned %d (%s), not one of its documented codes", what, got,
              got < 0 ? strerror(-got) : "not an error");
    cr_assert(m[0] != '\0', "%s returned %d without a message", what, got);
    cr_assert(strstr(m, fn), "%s: the message \"%s\" does not name %s", what, m, fn);
    cr_assert(strstr(m, needle), "%s: the message \"%s\" does not name \"%s\"", what, m, needle);
}

/* CHECK(call, "function", "word of the message", documented codes...) */
#define CHECK(expr, fn, needle, ...)                                                                         \
    do {                                                                                                     \
        static const int codes_[] = {__VA_ARGS__};                                                           \
        urt__error_clear();                                                                                  \
        int got_ = (int)(expr);                                                                              \
        check_one(#expr, got_, urt_last_error(), fn, needle, codes_, sizeof(codes_) / sizeof(codes_[0]));    \
    } while (0)

static enum urt_task_result nop(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return URT_TASK_DONE;
}

static _Atomic bool g_gate;

static enum urt_task_result gated(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    while (!atomic_load(&g_gate))
        sched_yield();
    return URT_TASK_DONE;
}

/* Keeps its place (a lane task stays pending) but lets the worker run others. */
static enum urt_task_result yield_until_gate(struct urt_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return atomic_load(&g_gate) ? URT_TASK_DONE : URT_TASK_YIELD;
}

static urt_runtime *make_rt(uint32_t workers, uint64_t max_pending)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.max_pending_tasks = max_pending;
    return rt_create_or_skip(&cfg);
}

/* The codes each function's header comment documents, copied once per function:
 * CHECK_FN(fn, (args...), "word") is CHECK(fn(args...), "fn", "word", E_fn). */
#define CHECK_FN(fn, args, needle) CHECK_FN_(fn args, #fn, needle, E_##fn)
#define CHECK_FN_(expr, fn, needle, ...) CHECK(expr, fn, needle, __VA_ARGS__)
#define E_urt_admission_stats -EINVAL
#define E_urt_batch_cancel -EINVAL, -EALREADY
#define E_urt_batch_start BATCH_START_CODES
#define E_urt_batch_stats -EINVAL
#define E_urt_batch_stmt_done -EINVAL, -EALREADY
#define E_urt_batch_wait -EINVAL, -ETIMEDOUT, -EDEADLK
#define E_urt_blocking_spawn BLOCKING_CODES, -ENOMEM
#define E_urt_blocking_submit BLOCKING_CODES
#define E_urt_cond_add -EINVAL, -EBUSY, -ESHUTDOWN, -ENOTSUP
#define E_urt_cond_cancel -EINVAL, -EALREADY, -ESHUTDOWN
#define E_urt_dispatch_cancel -EINVAL, -ENOTCONN, -ENOMEM
#define E_urt_dispatch_create -EINVAL
#define E_urt_dispatch_enqueue -EINVAL, -ENOTCONN, -ENOMEM
#define E_urt_dispatch_handle -EINVAL, -EEXIST, -EBUSY, -ENOSPC
#define E_urt_dispatch_metrics -EINVAL
#define E_urt_dispatch_migrate -EINVAL, -ECONNREFUSED, -EIO, -EPROTO
#define E_urt_dispatch_options_from_env -EINVAL
#define E_urt_dispatch_partition_range -EINVAL
#define E_urt_dispatch_requeue -EINVAL, -ENOTCONN, -ENOMEM
#define E_urt_dispatch_start -EINVAL, -EALREADY, -ENOMEM, -ESHUTDOWN
#define E_urt_dispatch_wake -EINVAL, -ENOTCONN, -ENOMEM
#define E_urt_dump_state -EINVAL
#define E_urt_graph_add_exchange -EINVAL, -ENOMEM
#define E_urt_graph_add_input -EINVAL, -ENOMEM
#define E_urt_graph_add_output -EINVAL, -ENOMEM
#define E_urt_graph_add_step -EINVAL, -ENOMEM
#define E_urt_graph_cancel -EINVAL, -EALREADY
#define E_urt_graph_create -EINVAL, -ENOMEM
#define E_urt_graph_prepare -EINVAL, -EALREADY, -ENOMEM
#define E_urt_graph_start -EINVAL, -EALREADY, -ESHUTDOWN, -EAGAIN, -ENOMEM
#define E_urt_graph_step_state -EINVAL
#define E_urt_graph_wait -EINVAL, -ETIMEDOUT, -EDEADLK
#define E_urt_io_set_timeout -EINVAL, -EBUSY
#define E_urt_job_abort -EINVAL, -EALREADY
#define E_urt_job_cancel -EINVAL, -EALREADY
#define E_urt_job_close -EINVAL, -EALREADY
#define E_urt_job_create -EINVAL, -ENOMEM, -ESHUTDOWN
#define E_urt_job_spawn -EINVAL, -ECANCELED, -EAGAIN, -ESHUTDOWN, -ENOMEM
#define E_urt_job_submit -EINVAL, -ECANCELED, -EAGAIN, -ESHUTDOWN
#define E_urt_job_wait -EINVAL, -ETIMEDOUT, -EDEADLK
#define E_urt_lane_create -EINVAL, -ENOMEM
#define E_urt_lane_spawn -EINVAL, -ESHUTDOWN, -ENOMEM
#define E_urt_lane_submit -EINVAL, -ESHUTDOWN
#define E_urt_spawn -EINVAL, -ESHUTDOWN, -EAGAIN, -ENOMEM
#define E_urt_task_submit -EINVAL, -ESHUTDOWN, -EAGAIN
#define E_urt_tx_abort -EINVAL, -EALREADY
#define E_urt_tx_begin -EINVAL, -ENOMEM, -ESHUTDOWN
#define E_urt_tx_commit -EINVAL, -ECANCELED, -EALREADY, -EOPNOTSUPP
#define E_urt_tx_log -EINVAL, -ENOMEM, URT_TX_EINACTIVE
#define E_urt_tx_spawn -EINVAL, -ESHUTDOWN, URT_TX_EINACTIVE, -ENOMEM
#define E_urt_tx_submit -EINVAL, -ESHUTDOWN, URT_TX_EINACTIVE
#define E_urt_watcher_stats -EINVAL

/* ---- running a call on a worker -------------------------------------------------------------- */

struct on_worker {
    int (*call)(void *ctx);
    void *ctx;
    _Atomic int done;
    int ret;
    char msg[256];
};

static enum urt_task_result on_worker_fn(struct urt_task *t, void *arg)
{
    struct on_worker *o = arg;
    (void)t;
    urt__error_clear();
    o->ret = o->call(o->ctx);
    snprintf(o->msg, sizeof(o->msg), "%s", urt_last_error()); /* the message is per thread */
    atomic_store_explicit(&o->done, 1, memory_order_release);
    return URT_TASK_DONE;
}

/* Runs call(ctx) in a task; checks as CHECK does. */
static void check_on_worker(urt_runtime *rt, const char *what, int (*call)(void *), void *ctx, const char *fn,
                            const char *needle, const int *codes, size_t n)
{
    static struct on_worker o;
    memset(&o, 0, sizeof(o));
    o.call = call;
    o.ctx = ctx;
    cr_assert_eq(urt_spawn(rt, on_worker_fn, &o, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load_explicit(&o.done, memory_order_acquire), 10000));
    check_one(what, o.ret, o.msg, fn, needle, codes, n);
}

#define CHECK_ON_WORKER(rt, call, ctx, fn, needle, ...)                                                      \
    do {                                                                                                     \
        static const int codes_[] = {__VA_ARGS__};                                                           \
        check_on_worker(rt, #call, call, ctx, fn, needle, codes_, sizeof(codes_) / sizeof(codes_[0]));       \
    } while (0)

/* ---- urt/task.h --------------------------------------------------------------------------------- */

/* URT_SUBMIT_LOCAL is refused from a thread that is not a worker (below);
 * from a worker it is accepted and the task runs, once. */
static _Atomic int local_rc = 1, local_runs;
static enum urt_task_result count_run(struct urt_task *t, void *arg)
{
    (void)t, (void)arg;
    atomic_fetch_add(&local_runs, 1);
    return URT_TASK_DONE;
}

static enum urt_task_result submit_local(struct urt_task *t, void *arg)
{
    static struct urt_task inner;
    urt_task_init(&inner, count_run, NULL);
    atomic_store(&local_rc, urt_task_submit(arg, &inner, URT_SUBMIT_LOCAL));
    (void)t;
    return URT_TASK_DONE;
}

Test(errors, local_submission_from_a_worker_runs, .timeout = 30)
{
    struct urt_config cfg;
    test_config(&cfg, 2);
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_task t;
    urt_task_init(&t, submit_local, rt);
    cr_assert_eq(urt_task_submit(rt, &t, 0), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&local_runs) == 1, 5000), "the local task did not run");
    cr_assert_eq(atomic_load(&local_rc), 0, "URT_SUBMIT_LOCAL from a worker: %d", atomic_load(&local_rc));
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
    cr_assert_eq(atomic_load(&local_runs), 1);
}

Test(errors, task_submission, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 0);
    struct urt_task t, nofn;
    urt_task_init(&t, nop, NULL);
    urt_task_init(&nofn, NULL, NULL);
    CHECK_FN(urt_task_submit, (NULL, &t, 0), "rt");
    CHECK_FN(urt_task_submit, (rt, NULL, 0), "task");
    CHECK_FN(urt_task_submit, (rt, &nofn, 0), "fn");
    CHECK_FN(urt_task_submit, (rt, &t, 0x80), "flags");
    CHECK_FN(urt_task_submit, (rt, &t, URT_SUBMIT_LOCAL), "not a worker");
    CHECK_FN(urt_task_submit, (rt, &t, URT_SUBMIT_LOCAL | URT_SUBMIT_URGENT), "contradict");
    CHECK_FN(urt_spawn, (NULL, nop, NULL, 0), "rt");
    CHECK_FN(urt_spawn, (rt, NULL, NULL, 0), "fn");
    CHECK_FN(urt_spawn, (rt, nop, NULL, 0x80), "flags");
    CHECK(urt_spawn_ex(rt, NULL, NULL, NULL, 0), "urt_spawn", "fn", -EINVAL, -ESHUTDOWN, -EAGAIN, -ENOMEM);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(errors, admission_limit, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 1);
    atomic_store(&g_gate, false);
    cr_assert_eq(urt_spawn(rt, gated, NULL, 0), 0);
    struct urt_task t;
    urt_task_init(&t, nop, NULL);
    CHECK_FN(urt_task_submit, (rt, &t, 0), "max_pending_tasks");
    CHECK_FN(urt_spawn, (rt, nop, NULL, 0), "max_pending_tasks");
    urt_job *job = NULL;
    cr_assert_eq(urt_job_create(rt, NULL, &job), 0);
    CHECK_FN(urt_job_spawn, (job, nop, NULL, NULL, 0), "max_pending_tasks");
    CHECK_FN(urt_admission_stats, (rt, NULL), "out");
    CHECK_FN(urt_admission_stats, (NULL, NULL), "rt");
    atomic_store(&g_gate, true);
    cr_assert_eq(urt_job_close(job), 0);
    cr_assert_eq(urt_job_wait(job, URT_WAIT_FOREVER), 0);
    urt_job_release(job);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/job.h ----------------------------------------------------------------------------------- */

static int wait_call(void *job)
{
    return urt_job_wait(job, URT_WAIT_FOREVER);
}

Test(errors, jobs, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 0);
    urt_job *job = NULL;
    struct urt_job_options o;
    urt_job_options_init(&o);
    CHECK_FN(urt_job_create, (NULL, NULL, &job), "runtime");
    CHECK_FN(urt_job_create, (rt, NULL, NULL), "out");
    o.work_level = URT_WORK_LEVEL_MAX + 1;
    CHECK_FN(urt_job_create, (rt, &o, &job), "urt_job_create: work_level 61 is out of range (0..60)");
    urt_job_options_init(&o);
    o.flags = 0x40;
    CHECK_FN(urt_job_create, (rt, &o, &job), "flags");
    urt_job_options_init(&o);
    o.ready_interval_ns = 0;
    CHECK_FN(urt_job_create, (rt, &o, &job), "ready_interval_ns");
    urt_job_options_init(&o);
    o.reserved[0] = 1;
    CHECK_FN(urt_job_create, (rt, &o, &job), "urt_job_create: opt->reserved[0] must be zero");

    cr_assert_eq(urt_job_create(rt, NULL, &job), 0);
    struct urt_task t, nofn;
    urt_task_init(&t, nop, NULL);
    urt_task_init(&nofn, NULL, NULL);
    CHECK_FN(urt_job_submit, (NULL, &t, 0), "job");
    CHECK_FN(urt_job_submit, (job, NULL, 0), "task");
    CHECK_FN(urt_job_submit, (job, &nofn, 0), "fn");
    CHECK_FN(urt_job_submit, (job, &t, 0x80), "flags");
    CHECK_FN(urt_job_spawn, (NULL, nop, NULL, NULL, 0), "job");
    CHECK_FN(urt_job_spawn, (job, NULL, NULL, NULL, 0), "fn");
    CHECK_FN(urt_job_spawn, (job, nop, NULL, NULL, 0x80), "flags");
    CHECK_FN(urt_job_close, (NULL), "job");
    CHECK_FN(urt_job_cancel, (NULL), "job");
    CHECK(urt_job_poll(NULL), "urt_job_poll", "job", -EINVAL);
    CHECK_FN(urt_job_wait, (NULL, 0), "job");
    CHECK_FN(urt_job_wait, (job, 1000), "timeout_ns");
    CHECK_ON_WORKER(rt, wait_call, job, "urt_job_wait", "worker", -EINVAL, -ETIMEDOUT, -EDEADLK);

    CHECK_FN(urt_job_abort, (NULL, -EIO), "job");
    CHECK_FN(urt_job_abort, (job, 0), "err");
    CHECK_FN(urt_job_abort, (job, -EINPROGRESS), "err");
    CHECK_FN(urt_job_abort, (job, -5000), "err");

    /* wrong state: cancelled, closed twice, ended */
    cr_assert_eq(urt_job_cancel(job), 0);
    CHECK_FN(urt_job_abort, (job, -EIO), "cancelled");
    CHECK_FN(urt_job_cancel, (job), "cancelled");
    CHECK_FN(urt_job_spawn, (job, nop, NULL, NULL, 0), "cancelled");
    cr_assert_eq(urt_job_close(job), 0);
    CHECK_FN(urt_job_close, (job), "closed");
    cr_assert_eq(urt_job_wait(job, URT_WAIT_FOREVER), -ECANCELED);
    CHECK_FN(urt_job_submit, (job, &t, 0), "ended");
    CHECK_FN(urt_job_spawn, (job, nop, NULL, NULL, 0), "ended");
    urt_job_release(job);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/lane.h ---------------------------------------------------------------------------------- */

static int destroy_lane_call(void *lane)
{
    return urt_lane_destroy(lane);
}

Test(errors, lanes, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 0);
    urt_lane *lane = NULL;
    CHECK_FN(urt_lane_create, (NULL, &lane), "rt");
    CHECK_FN(urt_lane_create, (rt, NULL), "out");
    cr_assert_eq(urt_lane_create(rt, &lane), 0);
    struct urt_task t, nofn;
    urt_task_init(&t, nop, NULL);
    urt_task_init(&nofn, NULL, NULL);
    CHECK_FN(urt_lane_submit, (NULL, &t, 0), "lane");
    CHECK_FN(urt_lane_submit, (lane, NULL, 0), "task");
    CHECK_FN(urt_lane_submit, (lane, &nofn, 0), "fn");
    CHECK_FN(urt_lane_submit, (lane, &t, 0x80), "flags");
    CHECK_FN(urt_lane_spawn, (NULL, nop, NULL, NULL, 0), "lane");
    CHECK_FN(urt_lane_spawn, (lane, NULL, NULL, NULL, 0), "fn");
    CHECK_FN(urt_lane_spawn, (lane, nop, NULL, NULL, 0x80), "flags");
    /* a worker may not wait for the lane's tasks */
    atomic_store(&g_gate, false);
    cr_assert_eq(urt_lane_spawn(lane, yield_until_gate, NULL, NULL, 0), 0);
    CHECK_ON_WORKER(rt, destroy_lane_call, lane, "urt_lane_destroy", "pending", -EBUSY, -EINVAL);
    atomic_store(&g_gate, true);
    cr_assert_eq(urt_lane_destroy(lane), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* Point 5: a submission while urt_lane_destroy waits for the lane's tasks is
 * refused (-EINVAL), not queued on a lane about to be freed. After destroy
 * returned the lane is gone: using it is undefined (urt/lane.h rule 3). */
struct destroyer {
    urt_lane *lane;
    _Atomic int started, ret;
};

static void *destroy_thread(void *arg)
{
    struct destroyer *d = arg;
    atomic_store(&d->started, 1);
    atomic_store(&d->ret, urt_lane_destroy(d->lane));
    return NULL;
}

Test(errors, lane_submit_during_destroy_is_refused, .timeout = 30)
{
    urt_runtime *rt = make_rt(2, 0);
    static struct destroyer d;
    atomic_store(&d.ret, 1);
    cr_assert_eq(urt_lane_create(rt, &d.lane), 0);
    atomic_store(&g_gate, false);
    cr_assert_eq(urt_lane_spawn(d.lane, gated, NULL, NULL, 0), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, destroy_thread, &d), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&d.started), 5000));
    /* destroy is waiting for the gated task: its flag is set before it waits */
    cr_assert(WAIT_UNTIL((urt__error_clear(), urt_lane_spawn(d.lane, nop, NULL, NULL, 0) == -EINVAL), 5000),
              "a submission during destroy was accepted");
    cr_assert(strstr(urt_last_error(), "being destroyed"), "%s", urt_last_error());
    cr_assert_eq(atomic_load(&d.ret), 1, "destroy returned while a task was pending");
    atomic_store(&g_gate, true);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&d.ret), 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/tx.h ------------------------------------------------------------------------------------ */

static void commit_cb(urt_tx *tx, int status, void *arg)
{
    (void)tx;
    atomic_store((_Atomic int *)arg, status == 0 ? 1 : -1);
}

Test(errors, transactions, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 0);
    urt_tx *tx = NULL;
    struct urt_tx_options o;
    urt_tx_options_init(&o);
    CHECK_FN(urt_tx_begin, (NULL, NULL, &tx), "runtime");
    CHECK_FN(urt_tx_begin, (rt, NULL, NULL), "out");
    o.reserved[3] = 7;
    CHECK_FN(urt_tx_begin, (rt, &o, &tx), "urt_tx_begin: opt->reserved[3] must be zero");
    cr_assert_eq(urt_tx_begin(rt, NULL, &tx), 0);
    struct urt_task t, nofn;
    urt_task_init(&t, nop, NULL);
    urt_task_init(&nofn, NULL, NULL);
    CHECK_FN(urt_tx_submit, (NULL, &t, 0), "tx");
    CHECK_FN(urt_tx_submit, (tx, NULL, 0), "task");
    CHECK_FN(urt_tx_submit, (tx, &nofn, 0), "fn");
    CHECK_FN(urt_tx_submit, (tx, &t, 0x80), "flags");
    CHECK_FN(urt_tx_spawn, (NULL, nop, NULL, NULL, 0), "tx");
    CHECK_FN(urt_tx_spawn, (tx, NULL, NULL, NULL, 0), "fn");
    CHECK_FN(urt_tx_spawn, (tx, nop, NULL, NULL, 0x80), "flags");
    CHECK_FN(urt_tx_abort, (NULL), "tx");
    static _Atomic int cb;
    CHECK_FN(urt_tx_commit, (NULL, URT_COMMIT_ACCEPTED, commit_cb, &cb), "tx");
    CHECK_FN(urt_tx_commit, (tx, URT_COMMIT_ACCEPTED, NULL, &cb), "cb");
    CHECK_FN(urt_tx_commit, (tx, (enum urt_commit_response)9, commit_cb, &cb), "response");
    CHECK_FN(urt_tx_commit, (tx, URT_COMMIT_STORED, commit_cb, &cb), "write-ahead log");
    CHECK_FN(urt_tx_log, (NULL, "x", 1), "tx");
    CHECK_FN(urt_tx_log, (tx, NULL, 1), "record");
    CHECK_FN(urt_tx_log, (tx, "x", 0), "urt_tx_log: len 0 is out of range (1..");
    CHECK_FN(urt_tx_log, (tx, "x", (16u << 20) + 1), "len");

    /* Point 5: after the commit, every request is refused and says why. */
    cr_assert_eq(urt_tx_commit(tx, URT_COMMIT_ACCEPTED, commit_cb, &cb), 0);
    cr_assert(WAIT_UNTIL(atomic_load(&cb) == 1, 5000));
    CHECK_FN(urt_tx_commit, (tx, URT_COMMIT_ACCEPTED, commit_cb, &cb), "commit");
    CHECK_FN(urt_tx_abort, (tx), "commit");
    CHECK_FN(urt_tx_submit, (tx, &t, 0), "inactive");
    CHECK_FN(urt_tx_spawn, (tx, nop, NULL, NULL, 0), "inactive");
    CHECK_FN(urt_tx_log, (tx, "x", 1), "ended");
    urt_tx_release(tx);

    /* ... and after the abort. */
    cr_assert_eq(urt_tx_begin(rt, NULL, &tx), 0);
    cr_assert_eq(urt_tx_abort(tx), 0);
    CHECK_FN(urt_tx_commit, (tx, URT_COMMIT_ACCEPTED, commit_cb, &cb), "abort");
    CHECK_FN(urt_tx_submit, (tx, &t, 0), "inactive");
    CHECK_FN(urt_tx_log, (tx, "x", 1), "ended");
    cr_assert_eq(urt_tx_abort(tx), 0, "abort stays idempotent");
    urt_tx_release(tx);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/watcher.h ------------------------------------------------------------------------------- */

static bool never(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    return false;
}

static enum urt_task_result cond_body(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    return URT_TASK_DONE;
}

static _Atomic int g_cond_cancels;

static void cond_cancelled(struct urt_cond *c, void *arg)
{
    (void)c;
    (void)arg;
    atomic_fetch_add(&g_cond_cancels, 1);
}

Test(errors, conds, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 0);
    urt_runtime *other = make_rt(1, 0);
    static struct urt_cond c;
    urt_cond_init(&c, never, cond_body, NULL);
    c.cancel = cond_cancelled;
    CHECK_FN(urt_cond_add, (NULL, &c), "rt");
    CHECK_FN(urt_cond_add, (rt, NULL), "cond");
    c.check = NULL;
    CHECK_FN(urt_cond_add, (rt, &c), "check");
    c.check = never;
    c.body = NULL;
    CHECK_FN(urt_cond_add, (rt, &c), "body");
    c.body = cond_body;
    c.interval_us = 3600000001ull;
    CHECK_FN(urt_cond_add, (rt, &c), "urt_cond_add: cond->interval_us 3600000001 is out of range");
    c.interval_us = 0;
    urt_job *foreign_job;
    cr_assert_eq(urt_job_create(other, NULL, &foreign_job), 0);
    c.job = foreign_job; /* a job of another runtime */
    CHECK_FN(urt_cond_add, (rt, &c), "job");
    c.job = NULL;
    cr_assert_eq(urt_job_close(foreign_job), 0);
    cr_assert_eq(urt_job_wait(foreign_job, 5ull * 1000000000ull), 0);
    urt_job_release(foreign_job);
    CHECK_FN(urt_cond_cancel, (NULL, &c), "rt");
    CHECK_FN(urt_cond_cancel, (rt, NULL), "cond");
    CHECK_FN(urt_cond_cancel, (rt, &c), "not watched");
    struct urt_watcher_stats ws;
    CHECK_FN(urt_watcher_stats, (NULL, &ws), "rt");
    CHECK_FN(urt_watcher_stats, (rt, NULL), "out");

    /* wrong state: watched twice, another runtime, cancelled twice, added while cancelling */
    cr_assert_eq(urt_cond_add(rt, &c), 0);
    CHECK_FN(urt_cond_add, (rt, &c), "watched");
    CHECK_FN(urt_cond_cancel, (other, &c), "another runtime");
    cr_assert_eq(urt_cond_cancel(rt, &c), 0);
    /* until its cancel callback ran the cond is the runtime's: both refused */
    urt__error_clear();
    int again = urt_cond_cancel(rt, &c);
    cr_assert_eq(again, -EALREADY);
    cr_assert(strstr(urt_last_error(), "urt_cond_cancel"), "%s", urt_last_error());
    urt__error_clear();
    int add = urt_cond_add(rt, &c);
    if (atomic_load(&g_cond_cancels) == 0) { /* the watcher may have run the callback meanwhile */
        cr_assert_eq(add, -EBUSY);
        cr_assert(strstr(urt_last_error(), "urt_cond_add"), "%s", urt_last_error());
    } else if (add == 0) {
        cr_assert_eq(urt_cond_cancel(rt, &c), 0);
    }
    cr_assert(WAIT_UNTIL(atomic_load(&g_cond_cancels) >= 1 && urt_cond_add(rt, &c) == 0, 5000),
              "the cond is the caller's again after its cancel callback");
    cr_assert_eq(urt_cond_cancel(rt, &c), 0);
    cr_assert(WAIT_UNTIL(urt_cond_cancel(rt, &c) == -EALREADY && strstr(urt_last_error(), "not watched"), 5000),
              "%s", urt_last_error());
    rt_destroy_clean(other, URT_SHUTDOWN_DRAIN, 0);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/graph.h ------------------------------------------------------------------------------------ */

static int gnop(struct urt_graph_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return URT_STEP_DONE;
}

/* Calls made inside a step's task (the messages are per thread: copied there). */
#define G_INSIDE 6
static struct {
    int ret[G_INSIDE];
    char msg[G_INSIDE][256];
} g_inside;

static void inside(int i, int ret)
{
    g_inside.ret[i] = ret;
    snprintf(g_inside.msg[i], sizeof(g_inside.msg[i]), "%s", urt_last_error());
    urt__error_clear();
}

static int bad_calls(struct urt_graph_ctx *ctx, void *arg)
{
    struct urt_graph_unit u;
    (void)arg;
    urt__error_clear();
    inside(0, urt_graph_emit(ctx, 7, 0, NULL, 1));          /* port out of range */
    inside(1, urt_graph_emit(ctx, 0, 99, NULL, 1));         /* shuffle partition out of range */
    inside(2, urt_graph_next(ctx, 9, &u));                  /* port out of range */
    inside(3, urt_graph_pull(ctx, 0, &u));                  /* not a processor */
    inside(4, urt_graph_push(ctx, 0, NULL, 1));
    inside(5, urt_graph_async_done(ctx, 0));                /* not a processor */
    return URT_STEP_DONE;
}

static int gwait_call(void *g)
{
    return urt_graph_wait(g, 0);
}

#define CHECK_INSIDE(i, fn, needle, ...)                                                                      \
    do {                                                                                                     \
        static const int codes_[] = {__VA_ARGS__};                                                           \
        check_one("inside call " #i, g_inside.ret[i], g_inside.msg[i], fn, needle, codes_,                  \
                  sizeof(codes_) / sizeof(codes_[0]));                                                       \
    } while (0)

static void graph_build_errors(urt_runtime *rt)
{
    urt_graph *g = NULL;
    struct urt_graph_options o;
    urt_graph_options_init(&o);
    CHECK_FN(urt_graph_create, (NULL, NULL, &g), "rt");
    CHECK_FN(urt_graph_create, (rt, NULL, NULL), "out");
    o.flags = 1;
    CHECK_FN(urt_graph_create, (rt, &o, &g), "flags");
    urt_graph_options_init(&o);
    o.reserved[2] = 1;
    CHECK_FN(urt_graph_create, (rt, &o, &g), "urt_graph_create: opt->reserved[2] must be zero");
    urt_graph_options_init(&o);
    o.partitions = 1u << 20;
    CHECK_FN(urt_graph_create, (rt, &o, &g), "partitions");
    cr_assert_eq(urt_graph_create(rt, NULL, &g), 0);
    CHECK_FN(urt_graph_prepare, (g), "no step");

    struct urt_step_desc d = {.name = "s", .fn = gnop};
    struct urt_processor proc = {0};
    CHECK_FN(urt_graph_add_step, (NULL, &d), "g");
    CHECK_FN(urt_graph_add_step, (g, NULL), "d");
    d.fn = NULL;
    CHECK_FN(urt_graph_add_step, (g, &d), "fn and processor");
    d.processor = &proc;
    CHECK_FN(urt_graph_add_step, (g, &d), "event");
    proc.event = gnop;
    d.max_in_flight = 2;
    CHECK_FN(urt_graph_add_step, (g, &d), "max_in_flight");
    d = (struct urt_step_desc){.fn = gnop, .flags = 0x80};
    CHECK_FN(urt_graph_add_step, (g, &d), "flags");
    d = (struct urt_step_desc){.fn = gnop, .reserved = {0, 1}};
    CHECK_FN(urt_graph_add_step, (g, &d), "urt_graph_add_step: d->reserved[1] must be zero");
    d = (struct urt_step_desc){.fn = gnop, .partitions = (1u << 20) + 1};
    CHECK_FN(urt_graph_add_step, (g, &d), "partitions");

    struct urt_exchange_desc x = {.kind = 9};
    CHECK_FN(urt_graph_add_exchange, (NULL, &x), "g");
    CHECK_FN(urt_graph_add_exchange, (g, NULL), "d");
    CHECK_FN(urt_graph_add_exchange, (g, &x), "kind");
    x = (struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD, .capacity = (1u << 24) + 1};
    CHECK_FN(urt_graph_add_exchange, (g, &x), "capacity");
    x = (struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE, .limit_rows = 5};
    CHECK_FN(urt_graph_add_exchange, (g, &x), "limit_rows");
    x = (struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE, .reserved = {1}};
    CHECK_FN(urt_graph_add_exchange, (g, &x), "urt_graph_add_exchange: d->reserved[0] must be zero");

    d = (struct urt_step_desc){.name = "a", .fn = gnop};
    int a = urt_graph_add_step(g, &d), b = urt_graph_add_step(g, &d);
    d = (struct urt_step_desc){.name = "p", .processor = &proc};
    int pr = urt_graph_add_step(g, &d);
    int fx = urt_graph_add_exchange(g, &(struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD});
    int fx2 = urt_graph_add_exchange(g, &(struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD});
    int sx = urt_graph_add_exchange(g, &(struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE});
    cr_assert(a >= 0 && b >= 0 && pr >= 0 && fx >= 0 && fx2 >= 0 && sx >= 0);
    CHECK_FN(urt_graph_add_output, (NULL, a, fx), "g");
    CHECK_FN(urt_graph_add_output, (g, 42, fx), "step 42");
    CHECK_FN(urt_graph_add_output, (g, a, 42), "exchange 42");
    cr_assert_eq(urt_graph_add_output(g, a, fx), 0);
    CHECK_FN(urt_graph_add_output, (g, a, fx), "already");
    CHECK_FN(urt_graph_add_input, (g, 42, fx), "step 42");
    cr_assert_eq(urt_graph_add_input(g, b, fx), 0);
    CHECK_FN(urt_graph_add_input, (g, b, fx), "already");
    CHECK_FN(urt_graph_add_input, (g, b, fx2), "forward");
    CHECK_FN(urt_graph_add_input, (g, b, sx), "shuffle");
    CHECK_FN(urt_graph_add_input, (g, pr, sx), "processor");
    CHECK_FN(urt_graph_prepare, (g), "exchange");
    CHECK(urt_graph_step_partitions(g, a), "urt_graph_step_partitions", "prepared", -EINVAL);
    CHECK_FN(urt_graph_step_state, (NULL, 0), "g");
    CHECK_FN(urt_graph_step_state, (g, 42), "step 42");
    CHECK(urt_graph_step_stats(g, 0, NULL), "urt_graph_step_stats", "out", -EINVAL);
    CHECK_FN(urt_graph_cancel, (NULL), "g");
    CHECK_FN(urt_graph_cancel, (g), "started");
    CHECK_FN(urt_graph_wait, (NULL, 0), "g");
    CHECK_FN(urt_graph_wait, (g, 0), "started");
    CHECK_FN(urt_graph_start, (NULL), "g");
    /* a start refused by the pending-task limit is final */
    {
        urt_runtime *lim = make_rt(1, 1);
        urt_graph *lg = NULL;
        cr_assert_eq(urt_graph_create(lim, NULL, &lg), 0);
        cr_assert_geq(urt_graph_add_step(lg, &(struct urt_step_desc){.fn = gnop, .partitions = 1}), 0);
        atomic_store(&g_gate, false);
        cr_assert_eq(urt_spawn(lim, gated, NULL, 0), 0); /* holds the one pending slot */
        CHECK_FN(urt_graph_start, (lg), "bootstrap");
        CHECK_FN(urt_graph_start, (lg), "earlier start");
        atomic_store(&g_gate, true);
        urt_graph_release(lg);
        rt_destroy_clean(lim, URT_SHUTDOWN_DRAIN, 0);
    }
    urt_graph_release(g);
    urt_graph_release(NULL);
}

Test(errors, graphs, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 0);
    graph_build_errors(rt);
    /* NULL contexts */
    struct urt_graph_unit u;
    CHECK(urt_graph_next(NULL, 0, &u), "urt_graph_next", "ctx", -EINVAL);
    CHECK(urt_graph_emit(NULL, 0, 0, NULL, 0), "urt_graph_emit", "ctx", -EINVAL, -EAGAIN, -ENOBUFS, -EPIPE, -ENOMEM);
    CHECK(urt_graph_complete(NULL), "urt_graph_complete", "ctx", -EINVAL, -EALREADY);
    CHECK(urt_graph_pull(NULL, 0, &u), "urt_graph_pull", "port", -EINVAL, -EPIPE);
    CHECK(urt_graph_push(NULL, 0, NULL, 0), "urt_graph_push", "port", -EINVAL, -EAGAIN, -EPIPE);
    CHECK(urt_graph_finish(NULL, 0), "urt_graph_finish", "port", -EINVAL);
    CHECK(urt_graph_unit_release(NULL, 0, NULL, 0), "urt_graph_unit_release", "port", -EINVAL);
    CHECK(urt_graph_async_done(NULL, 0), "urt_graph_async_done", "ctx", -EINVAL, -ESHUTDOWN, -EAGAIN);
    /* a graph whose step makes bad calls; then start twice, cancel after the end, wait on a worker */
    urt_graph *g = NULL;
    cr_assert_eq(urt_graph_create(rt, NULL, &g), 0);
    int a = urt_graph_add_step(g, &(struct urt_step_desc){.name = "bad", .fn = bad_calls, .partitions = 1});
    int b = urt_graph_add_step(g, &(struct urt_step_desc){.name = "sink", .fn = gnop, .partitions = 2});
    int x = urt_graph_add_exchange(g, &(struct urt_exchange_desc){.kind = URT_EXCHANGE_SHUFFLE});
    cr_assert_eq(urt_graph_add_output(g, a, x), 0);
    cr_assert_eq(urt_graph_add_input(g, b, x), 0);
    cr_assert_eq(urt_graph_prepare(g), 0);
    CHECK_FN(urt_graph_prepare, (g), "prepared");
    cr_assert_eq(urt_graph_start(g), 0);
    CHECK_FN(urt_graph_start, (g), "started");
    CHECK_FN(urt_graph_add_step, (g, &(struct urt_step_desc){.fn = gnop}), "started");
    CHECK_ON_WORKER(rt, gwait_call, g, "urt_graph_wait", "worker", -EINVAL, -ETIMEDOUT, -EDEADLK);
    cr_assert_eq(urt_graph_wait(g, URT_WAIT_FOREVER), 0);
    CHECK_FN(urt_graph_cancel, (g), "ended");
    CHECK_INSIDE(0, "urt_graph_emit", "port 7", -EINVAL);
    CHECK_INSIDE(1, "urt_graph_emit", "partition 99", -EINVAL);
    CHECK_INSIDE(2, "urt_graph_next", "port 9", -EINVAL);
    CHECK_INSIDE(3, "urt_graph_pull", "port", -EINVAL);
    CHECK_INSIDE(4, "urt_graph_push", "port", -EINVAL);
    CHECK_INSIDE(5, "urt_graph_async_done", "processor", -EINVAL);
    urt_graph_release(g);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/admission.h, urt/watchdog.h, urt/runtime.h, urt/stats.h, urt/config.h, urt/log.h ---------------------------- */

static int destroy_call(void *rt)
{
    return urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
}

Test(errors, runtime_and_the_rest, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 0);
    CHECK(urt_watchdog_set_callback(NULL, NULL, NULL), "urt_watchdog_set_callback", "rt", -EINVAL);
    CHECK_FN(urt_dump_state, (NULL, 2), "rt");
    CHECK_FN(urt_dump_state, (rt, -1), "fd");
    CHECK(urt_runtime_create(NULL, NULL), "urt_runtime_create", "out", -EINVAL, -ENOMEM, -ENOSYS, -EPERM);
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.workers = 0;
    urt_runtime *bad = NULL;
    CHECK(urt_runtime_create(&cfg, &bad), "workers", "workers", -EINVAL, -ENOMEM, -ENOSYS, -EPERM);
    CHECK(urt_runtime_destroy(rt, (enum urt_shutdown)5), "urt_runtime_destroy", "mode", -EINVAL, -EDEADLK);
    CHECK_ON_WORKER(rt, destroy_call, rt, "urt_runtime_destroy", "worker", -EINVAL, -EDEADLK);
    CHECK(urt_features_describe(NULL, NULL, 0), "urt_features_describe", "f", -EINVAL);
    urt__error_clear();
    cr_assert_null(urt_stats_snapshot(NULL));
    cr_assert(strstr(urt_last_error(), "urt_stats_snapshot: rt"), "%s", urt_last_error());
    /* config.h and log.h (their messages are runtime/config.c's and runtime/log.c's) */
    CHECK(urt_config_set(&cfg, "no_such_field", "1"), "no_such_field", "no_such_field", -ENOENT, -EINVAL);
    CHECK(urt_config_set(&cfg, "workers", "many"), "workers", "workers", -ENOENT, -EINVAL);
    CHECK(urt_config_validate(&cfg, NULL, 0), "workers", "workers", -EINVAL);
    test_config(&cfg, 1);
    cfg.reserved[5] = 2;
    CHECK(urt_config_validate(&cfg, NULL, 0), "urt_config_validate",
          "urt_config_validate: cfg->reserved[5] must be zero", -EINVAL);
    struct urt_commit c;
    CHECK(urt_log_commit(NULL, &c, 1, "x", 1, URT_COMMIT_ACCEPTED, NULL, NULL), "urt_log_commit", "NULL",
          -EINVAL, -ENOTSUP, -ESHUTDOWN);
    CHECK(urt_log_on_durable(rt, NULL, NULL), "urt_log_on_durable", "log_dir", -ENOTSUP);
    struct urt_log_stats ls;
    CHECK(urt_log_stats(rt, &ls), "urt_log_stats", "log_dir", -ENOTSUP);
    CHECK(urt_log_recover(NULL, 0, NULL, NULL, NULL), "urt_log_recover", "dir", -EINVAL, -ENOENT, -ENOTDIR,
          -EMEDIUMTYPE, -EBUSY);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/io.h ------------------------------------------------------------------------------------ */

static void io_nop(struct urt_io *io, int32_t res, void *arg)
{
    (void)io, (void)res, (void)arg;
}

#define IO_COMMON -EINVAL, -EBUSY, -EPERM, -EOPNOTSUPP, -ENOMEM, -ESHUTDOWN, -ECANCELED, -EAGAIN

static struct urt_io g_io;
static char g_buf[8];
static struct iovec g_iov = {g_buf, 8};

static int io_read_bad_off(void *c) { (void)c; return urt_io_read(&g_io, 0, g_buf, 1, -5); }
static int io_read_null_buf(void *c) { (void)c; return urt_io_read(&g_io, 0, NULL, 1, 0); }
static int io_write_huge(void *c) { (void)c; return urt_io_write(&g_io, 0, g_buf, (size_t)1 << 33, 0); }
static int io_readv_zero(void *c) { (void)c; return urt_io_readv(&g_io, 0, &g_iov, 0, 0); }
static int io_writev_null(void *c) { (void)c; return urt_io_writev(&g_io, 0, NULL, 1, 0); }
static int io_fsync_flags(void *c) { (void)c; return urt_io_fsync(&g_io, 0, 0x40); }
static int io_openat_null(void *c) { (void)c; return urt_io_openat(&g_io, 0, NULL, 0, 0); }
static int io_statx_null(void *c) { (void)c; return urt_io_statx(&g_io, 0, "x", 0, 0, NULL); }
static int io_fallocate_len(void *c) { (void)c; return urt_io_fallocate(&g_io, 0, 0, 0, 0); }
static int io_accept_flags(void *c) { (void)c; return urt_io_accept(&g_io, 0, NULL, NULL, URT_IO_ZEROCOPY); }
static int io_accept_addr(void *c)
{
    (void)c;
    static struct sockaddr_storage ss;
    return urt_io_accept(&g_io, 0, (struct sockaddr *)&ss, NULL, 0);
}
static int io_connect_null(void *c) { (void)c; return urt_io_connect(&g_io, 0, NULL, 4); }
static int io_recv_null(void *c) { (void)c; return urt_io_recv(&g_io, 0, NULL, 4, 0); }
static int io_send_flags(void *c) { (void)c; return urt_io_send(&g_io, 0, g_buf, 1, 0, 0x10000000u); }
static int io_sendmsg_null(void *c) { (void)c; return urt_io_sendmsg(&g_io, 0, NULL, 0); }
static int io_recvmsg_null(void *c) { (void)c; return urt_io_recvmsg(&g_io, 0, NULL, 0); }
static int io_poll_events(void *c) { (void)c; return urt_io_poll(&g_io, 0, 0); }
static int io_close_null_io(void *c) { (void)c; return urt_io_close(NULL, 0); }
static int io_sleep_null_fn(void *c)
{
    (void)c;
    static struct urt_io nofn;
    urt_io_init(&nofn, NULL, NULL);
    return urt_io_sleep(&nofn, 1);
}
static int io_sleep_until_busy(void *c)
{
    (void)c;
    static struct urt_io busy;
    urt_io_init(&busy, io_nop, NULL);
    int err = urt_io_sleep_until(&busy, urt_now_ns() + 1000000);
    return err ? err : urt_io_sleep_until(&busy, 0);
}
static int io_sleep_timeout(void *c)
{
    (void)c;
    static struct urt_io t;
    urt_io_init(&t, io_nop, NULL);
    urt_io_set_timeout(&t, 1000);
    return urt_io_sleep(&t, 1);
}
static int io_cancel_idle(void *c) { (void)c; return urt_io_cancel(&g_io); }
static int io_bufring_count(void *c) { (void)c; struct urt_bufring *b; return urt_bufring_create(6, 8, &b); }
static int io_bufring_null(void *c) { (void)c; return urt_bufring_destroy(NULL); }
static int io_recv_bufring_null(void *c) { (void)c; return urt_io_recv_bufring(&g_io, 0, NULL, 0); }
static int io_register_bad_fd(void *c) { (void)c; return urt_io_register_file(-1); }
static int io_unregister_unused(void *c) { (void)c; return urt_io_unregister_file(5); }
static int io_register_buffers_null(void *c) { (void)c; return urt_io_register_buffers(NULL, 1); }

Test(errors, io, .timeout = 30)
{
    urt_runtime *rt = make_rt(1, 0);
    urt_io_init(&g_io, io_nop, NULL);
    /* worker only (rule 5): every operation names itself and the reason */
    CHECK(urt_io_read(&g_io, 0, g_buf, 1, 0), "urt_io_read", "not a worker", IO_COMMON);
    CHECK(urt_io_write(&g_io, 0, g_buf, 1, 0), "urt_io_write", "not a worker", IO_COMMON);
    CHECK(urt_io_readv(&g_io, 0, &g_iov, 1, 0), "urt_io_readv", "not a worker", IO_COMMON);
    CHECK(urt_io_writev(&g_io, 0, &g_iov, 1, 0), "urt_io_writev", "not a worker", IO_COMMON);
    CHECK(urt_io_fsync(&g_io, 0, 0), "urt_io_fsync", "not a worker", IO_COMMON);
    CHECK(urt_io_openat(&g_io, 0, "x", 0, 0), "urt_io_openat", "not a worker", IO_COMMON);
    CHECK(urt_io_close(&g_io, 0), "urt_io_close", "not a worker", IO_COMMON);
    struct statx stx;
    CHECK(urt_io_statx(&g_io, 0, "x", 0, 0, &stx), "urt_io_statx", "not a worker", IO_COMMON);
    CHECK(urt_io_fallocate(&g_io, 0, 0, 0, 1), "urt_io_fallocate", "not a worker", IO_COMMON);
    CHECK(urt_io_accept(&g_io, 0, NULL, NULL, 0), "urt_io_accept", "not a worker", IO_COMMON);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    CHECK(urt_io_connect(&g_io, 0, (struct sockaddr *)&sa, sizeof(sa)), "urt_io_connect", "not a worker",
          IO_COMMON);
    CHECK(urt_io_recv(&g_io, 0, g_buf, 1, 0), "urt_io_recv", "not a worker", IO_COMMON);
    CHECK(urt_io_send(&g_io, 0, g_buf, 1, 0, 0), "urt_io_send", "not a worker", IO_COMMON);
    struct msghdr mh = {0};
    CHECK(urt_io_sendmsg(&g_io, 0, &mh, 0), "urt_io_sendmsg", "not a worker", IO_COMMON);
    CHECK(urt_io_recvmsg(&g_io, 0, &mh, 0), "urt_io_recvmsg", "not a worker", IO_COMMON);
    CHECK(urt_io_poll(&g_io, 0, 1), "urt_io_poll", "not a worker", IO_COMMON);
    CHECK(urt_io_sleep(&g_io, 1), "urt_io_sleep", "not a worker", IO_COMMON);
    CHECK(urt_io_sleep_until(&g_io, 1), "urt_io_sleep_until", "not a worker", IO_COMMON);
    CHECK(urt_io_cancel(&g_io), "urt_io_cancel", "not a worker", -EALREADY, -EPERM, -EINVAL);
    CHECK_FN(urt_io_set_timeout, (&g_io, 0), "ns");
    CHECK_FN(urt_io_set_timeout, (NULL, 1), "io");
    CHECK(urt_io_init_ex(&g_io, io_nop, NULL, 0x100), "urt_io_init_ex", "flags", -EINVAL);
    CHECK(urt_spawn_at(NULL, 0, nop, NULL, NULL, 0), "urt_spawn_at", "rt", -EINVAL, -ESHUTDOWN, -EAGAIN,
          -ENOMEM);
    CHECK(urt_task_submit_at(rt, 0, NULL, 0), "urt_task_submit_at", "task", -EINVAL, -ESHUTDOWN, -EAGAIN,
          -ENOMEM);
    /* arguments, on a worker */
    CHECK_ON_WORKER(rt, io_read_bad_off, NULL, "urt_io_read", "off", IO_COMMON);
    CHECK_ON_WORKER(rt, io_read_null_buf, NULL, "urt_io_read", "buf", IO_COMMON);
    CHECK_ON_WORKER(rt, io_write_huge, NULL, "urt_io_write", "len", IO_COMMON);
    CHECK_ON_WORKER(rt, io_readv_zero, NULL, "urt_io_readv", "iovcnt", IO_COMMON);
    CHECK_ON_WORKER(rt, io_writev_null, NULL, "urt_io_writev", "iov", IO_COMMON);
    CHECK_ON_WORKER(rt, io_fsync_flags, NULL, "urt_io_fsync", "flags", IO_COMMON);
    CHECK_ON_WORKER(rt, io_openat_null, NULL, "urt_io_openat", "path", IO_COMMON);
    CHECK_ON_WORKER(rt, io_statx_null, NULL, "urt_io_statx", "out", IO_COMMON);
    CHECK_ON_WORKER(rt, io_fallocate_len, NULL, "urt_io_fallocate", "len", IO_COMMON);
    CHECK_ON_WORKER(rt, io_accept_flags, NULL, "urt_io_accept", "flags", IO_COMMON);
    CHECK_ON_WORKER(rt, io_accept_addr, NULL, "urt_io_accept", "addrlen", IO_COMMON);
    CHECK_ON_WORKER(rt, io_connect_null, NULL, "urt_io_connect", "addr", IO_COMMON);
    CHECK_ON_WORKER(rt, io_recv_null, NULL, "urt_io_recv", "buf", IO_COMMON);
    CHECK_ON_WORKER(rt, io_send_flags, NULL, "urt_io_send", "flags", IO_COMMON);
    CHECK_ON_WORKER(rt, io_sendmsg_null, NULL, "urt_io_sendmsg", "msg", IO_COMMON);
    CHECK_ON_WORKER(rt, io_recvmsg_null, NULL, "urt_io_recvmsg", "msg", IO_COMMON);
    CHECK_ON_WORKER(rt, io_poll_events, NULL, "urt_io_poll", "events", IO_COMMON);
    CHECK_ON_WORKER(rt, io_close_null_io, NULL, "urt_io_close", "io", IO_COMMON);
    CHECK_ON_WORKER(rt, io_sleep_null_fn, NULL, "urt_io_sleep", "io->fn", IO_COMMON);
    CHECK_ON_WORKER(rt, io_sleep_until_busy, NULL, "urt_io_sleep_until", "in flight", IO_COMMON);
    CHECK_ON_WORKER(rt, io_sleep_timeout, NULL, "urt_io_sleep", "timeout", IO_COMMON);
    CHECK_ON_WORKER(rt, io_cancel_idle, NULL, "urt_io_cancel", "not in flight", -EALREADY, -EPERM, -EINVAL);
    /* buffer rings, registered files and buffers */
    struct urt_bufring *br;
    CHECK(urt_bufring_create(4, 8, &br), "urt_bufring_create", "not a worker", -EINVAL, -EPERM, -ENOMEM);
    CHECK(urt_io_register_file(0), "urt_io_register_file", "not a worker", -EPERM, -ENFILE, -EBADF, -ENOMEM);
    CHECK(urt_io_unregister_file(0), "urt_io_unregister_file", "not a worker", -EPERM, -EINVAL);
    CHECK(urt_io_register_buffers(&g_iov, 1), "urt_io_register_buffers", "not a worker", -EPERM, -EINVAL,
          -EBUSY, -ENOMEM);
    CHECK(urt_io_recv_bufring(&g_io, 0, NULL, 0), "urt_io_recv_bufring", "br", IO_COMMON);
    CHECK_ON_WORKER(rt, io_bufring_count, NULL, "urt_bufring_create", "count", -EINVAL, -EPERM, -ENOMEM);
    CHECK_ON_WORKER(rt, io_bufring_null, NULL, "urt_bufring_destroy", "br", -EINVAL, -EPERM, -EBUSY);
    CHECK_ON_WORKER(rt, io_recv_bufring_null, NULL, "urt_io_recv_bufring", "br", IO_COMMON);
    CHECK_ON_WORKER(rt, io_register_bad_fd, NULL, "urt_io_register_file", "fd", -EPERM, -ENFILE, -EBADF,
                    -ENOMEM);
    CHECK_ON_WORKER(rt, io_unregister_unused, NULL, "urt_io_unregister_file", "index", -EPERM, -EINVAL);
    CHECK_ON_WORKER(rt, io_register_buffers_null, NULL, "urt_io_register_buffers", "iov", -EPERM, -EINVAL,
                    -EBUSY, -ENOMEM);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/blocking.h ------------------------------------------------------------------------------- */

#define BLOCKING_CODES -EINVAL, -EBUSY, -EAGAIN, -ECANCELED, -ESHUTDOWN

static int64_t blk_wait_gate(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_gate))
        sched_yield();
    return 0;
}

static void blk_done_nop(struct urt_blocking *b, int64_t res, void *arg)
{
    (void)b, (void)res, (void)arg;
}

Test(errors, blocking, .timeout = 30)
{
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.blocking_threads_max = 1;
    cfg.blocking_queue_max = 1;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct urt_blocking b, c, d;
    urt_blocking_init(&b, blk_wait_gate, blk_done_nop, NULL);
    CHECK_FN(urt_blocking_submit, (NULL, &b, 0), "rt");
    CHECK_FN(urt_blocking_submit, (rt, NULL, 0), "b");
    CHECK_FN(urt_blocking_submit, (rt, &b, 0x2), "flags");
    b.fn = NULL;
    CHECK_FN(urt_blocking_submit, (rt, &b, 0), "b->fn");
    urt_blocking_init(&b, blk_wait_gate, NULL, NULL);
    CHECK_FN(urt_blocking_submit, (rt, &b, 0), "b->done");
    CHECK_FN(urt_blocking_spawn, (rt, NULL, blk_done_nop, NULL, 0), "fn");
    CHECK_FN(urt_blocking_spawn, (rt, blk_wait_gate, NULL, NULL, 0), "done");
    CHECK_FN(urt_blocking_spawn, (NULL, blk_wait_gate, blk_done_nop, NULL, 0), "rt");
    CHECK(urt_blocking_stats(rt, NULL), "urt_blocking_stats", "out", -EINVAL);
    /* in flight, and the queue full (one thread busy, one offload waiting) */
    atomic_store(&g_gate, false);
    urt_blocking_init(&b, blk_wait_gate, blk_done_nop, NULL);
    urt_blocking_init(&c, blk_wait_gate, blk_done_nop, NULL);
    urt_blocking_init(&d, blk_wait_gate, blk_done_nop, NULL);
    cr_assert_eq(urt_blocking_submit(rt, &b, 0), 0);
    struct urt_blocking_stats st;
    cr_assert(WAIT_UNTIL(urt_blocking_stats(rt, &st) == 0 && st.running == 1, 5000));
    cr_assert_eq(urt_blocking_submit(rt, &c, 0), 0);
    CHECK_FN(urt_blocking_submit, (rt, &b, 0), "in flight");
    CHECK_FN(urt_blocking_submit, (rt, &d, 0), "blocking_queue_max");
    atomic_store(&g_gate, true);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

/* ---- urt/batch.h --------------------------------------------------------------------------------- */

#define BATCH_START_CODES -EINVAL, -EOPNOTSUPP, -ENOMEM, -ESHUTDOWN

static _Atomic(struct urt_batch_stmt *) g_held; /* a statement kept pending until the test lets it go */

static int batch_stmt_hold(struct urt_batch_stmt *s, void *arg)
{
    (void)arg;
    atomic_store(&g_held, s);
    return URT_BATCH_PENDING;
}

static int batch_wait_call(void *b)
{
    return urt_batch_wait(b, URT_WAIT_FOREVER);
}

Test(errors, batches, .timeout = 30)
{
    urt_runtime *rt = make_rt(2, 0);
    char *dir = test_tmpdir("urt-errors-batch"); /* under $TMPDIR */
    char path[4200];
    snprintf(path, sizeof(path), "%s/in.csv", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, "a,b\n", 4), 4);
    close(fd);
    const char *files[1] = {path};
    struct urt_batch_options o;
    urt_batch *b = NULL;
#define BATCH_OPT(stmt)                                                                                      \
    (urt_batch_options_init(&o), o.files = files, o.n_files = 1, o.statement = batch_stmt_hold, stmt, &o)
    CHECK_FN(urt_batch_start, (NULL, BATCH_OPT((void)0), &b), "rt");
    CHECK_FN(urt_batch_start, (rt, NULL, &b), "opt");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT((void)0), NULL), "out");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT(o.n_files = 0), &b), "n_files");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT(o.statement = NULL), &b), "statement");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT(o.format = (enum urt_batch_format)5), &b), "format");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT(o.flags = 0x80), &b), "flags");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT(o.block_bytes = 1), &b), "block_bytes");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT(o.max_concurrent_files = 0), &b), "max_concurrent_files");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT(o.reserved[0] = 1), &b), "urt_batch_start: opt->reserved[0] must be zero");
    CHECK_FN(urt_batch_start, (rt, BATCH_OPT(o.flags = URT_BATCH_BLOCK_TX), &b), "write-ahead log");
    struct urt_batch_stmt dummy = {0};
    CHECK_FN(urt_batch_stmt_done, (NULL, 0), "stmt");
    CHECK_FN(urt_batch_stmt_done, (&dummy, 3), "positive");
    CHECK(urt_batch_stmt_error(NULL, -EIO, "x"), "urt_batch_stmt_error", "stmt", -EINVAL);
    CHECK_FN(urt_batch_cancel, (NULL), "batch");
    CHECK(urt_batch_poll(NULL), "urt_batch_poll", "batch", -EINVAL);
    CHECK_FN(urt_batch_wait, (NULL, 0), "batch");
    struct urt_batch_stats st;
    CHECK_FN(urt_batch_stats, (NULL, &st), "batch");
    cr_assert_str_eq(urt_batch_error(NULL), "");
    cr_assert_null(urt_batch_job(NULL));
    cr_assert(!urt_batch_aborting(NULL));
    urt_batch_release(NULL);

    /* a batch whose one statement is held pending */
    atomic_store(&g_held, NULL);
    cr_assert_eq(urt_batch_start(rt, BATCH_OPT((void)0), &b), 0, "%s", urt_last_error());
    CHECK_FN(urt_batch_stats, (b, NULL), "out");
    CHECK_FN(urt_batch_wait, (b, 1000000), "did not end");
    CHECK_ON_WORKER(rt, batch_wait_call, b, "urt_batch_wait", "worker", -EINVAL, -ETIMEDOUT, -EDEADLK);
    cr_assert(WAIT_UNTIL(atomic_load(&g_held) != NULL, 5000));
    struct urt_batch_stmt *s = atomic_load(&g_held);
    CHECK(urt_batch_stmt_error(s, -EDOM, "field %s is bad", s->fields[0].data), "urt_batch_stmt_error",
          "field a is bad", -EDOM);
    CHECK_FN(urt_batch_cancel, (b), "failed before");
    cr_assert_eq(urt_batch_stmt_done(s, 0), 0);
    cr_assert_eq(urt_batch_wait(b, URT_WAIT_FOREVER), -EDOM);
    CHECK_FN(urt_batch_cancel, (b), "ended");
    urt_batch_release(b);
#undef BATCH_OPT
    test_remove_dir(dir);
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}
/* ---- urt/dispatch.h (built with libpq) --------------------------------------------------------------- */
#if URT_HAVE_DISPATCH

static void dispatch_quiet(const char *line, void *arg)
{
    (void)line, (void)arg; /* the connections to a missing server fail and retry: not this test's business */
}

static void dispatch_handler(struct urt_dispatch_run *run, const struct urt_dispatch_strand *s, void *ctx)
{
    (void)s, (void)ctx;
    urt_dispatch_run_done(run, NULL);
}

static struct urt_dispatch_options g_dopt;
static urt_dispatch *g_d;

static int dispatch_create_call(void *rt)
{
    urt_dispatch *d;
    return urt_dispatch_create(rt, &g_dopt, &d);
}

static int dispatch_stop_call(void *d)
{
    return urt_dispatch_stop(d, 0);
}

/* Options of a dispatcher that never reaches a server (no migration). */
static void dispatch_opts(struct urt_dispatch_options *o)
{
    urt_dispatch_options_init(o);
    o->conninfo = "host=/nonexistent/urt-errors port=5432";
    o->flags = URT_DISPATCH_NO_MIGRATE;
    o->log = dispatch_quiet;
}

#define DISPATCH_CREATE_BAD(field, value, needle)                                                            \
    do {                                                                                                     \
        dispatch_opts(&o);                                                                                   \
        o.field = value;                                                                                     \
        CHECK(urt_dispatch_create(wd, &o, &d), "urt_dispatch_create", needle, -EINVAL, -EDEADLK,            \
              -ECONNREFUSED, -EIO, -EPROTO, -ENOMEM);                                                        \
    } while (0)

Test(errors, dispatch, .timeout = 60)
{
    urt_runtime *plain = make_rt(1, 0);
    struct urt_config cfg;
    test_config(&cfg, 1);
    cfg.task_runtime_limit_us = 1000000;
    urt_runtime *wd = rt_create_or_skip(&cfg);
    struct urt_dispatch_options o;
    urt_dispatch *d = NULL;
    /* options and the migration */
    CHECK_FN(urt_dispatch_options_from_env, (NULL), "opt");
    setenv("URT_DISPATCH_PARTITION", "300", 1);
    dispatch_opts(&o);
    CHECK_FN(urt_dispatch_options_from_env, (&o), "URT_DISPATCH_PARTITION");
    unsetenv("URT_DISPATCH_PARTITION");
    CHECK_FN(urt_dispatch_migrate, (NULL), "conninfo");
    CHECK_FN(urt_dispatch_migrate, ("host=/nonexistent/urt-errors"), "cannot connect");
    /* create */
    dispatch_opts(&o);
    CHECK_FN(urt_dispatch_create, (NULL, &o, &d), "rt");
    CHECK_FN(urt_dispatch_create, (wd, NULL, &d), "opt");
    CHECK_FN(urt_dispatch_create, (plain, &o, &d), "watchdog");
    DISPATCH_CREATE_BAD(pool, 0, "pool");
    DISPATCH_CREATE_BAD(partition, 257, "partition");
    DISPATCH_CREATE_BAD(lease_ns, 1500000000ull, "twice the watchdog");
    DISPATCH_CREATE_BAD(run_budget_ns, 200ull * 1000000000ull, "run_budget_ns");
    DISPATCH_CREATE_BAD(channel, "Bad-Name", "channel");
    DISPATCH_CREATE_BAD(conninfo, NULL, "conninfo");
    DISPATCH_CREATE_BAD(flags, 0x80, "flags");
    DISPATCH_CREATE_BAD(reserved[3], 1, "urt_dispatch_create: opt->reserved[3] must be zero");
    DISPATCH_CREATE_BAD(sleep_min_ns, 5000000000ull, "sleep_min_ns");
    dispatch_opts(&g_dopt);
    CHECK_ON_WORKER(wd, dispatch_create_call, wd, "urt_dispatch_create", "worker", -EDEADLK);
    /* a dispatcher that never reaches its server */
    dispatch_opts(&o);
    cr_assert_eq(urt_dispatch_create(wd, &o, &g_d), 0, "%s", urt_last_error());
    CHECK(urt_dispatch_handle(NULL, "k", NULL, NULL), "urt_dispatch_handle", "d", -EINVAL);
    CHECK_FN(urt_dispatch_handle, (g_d, "bad kind!", dispatch_handler, NULL), "kind");
    cr_assert_eq(urt_dispatch_handle(g_d, "k", dispatch_handler, NULL), 0);
    CHECK_FN(urt_dispatch_handle, (g_d, "k", dispatch_handler, NULL), "has a handler");
    CHECK_FN(urt_dispatch_enqueue, (g_d, "k", NULL, 0, 1, NULL, NULL), "not started");
    CHECK_FN(urt_dispatch_enqueue, (g_d, "k", NULL, 0, 0, NULL, NULL), "count");
    CHECK_FN(urt_dispatch_enqueue, (g_d, "a b", NULL, 0, 1, NULL, NULL), "kind");
    CHECK_FN(urt_dispatch_wake, (g_d, "not-a-uuid", NULL, NULL), "uuid");
    CHECK_FN(urt_dispatch_wake, (g_d, NULL, NULL, NULL), "id");
    struct urt_dispatch_item items[2] = {{.kind = "k"}, {.kind = "k"}};
#define ITEMS_BAD(d_, it_, n_, mode_, needle)                                                               \
    CHECK(urt_dispatch_enqueue_items(d_, it_, n_, mode_, NULL, NULL), "urt_dispatch_enqueue_items", needle,     \
          -EINVAL, -ENOTCONN, -ENOMEM)
    ITEMS_BAD(NULL, items, 1, URT_DISPATCH_KEY_REPLACE, "d is NULL");
    ITEMS_BAD(g_d, NULL, 1, URT_DISPATCH_KEY_REPLACE, "items is NULL");
    ITEMS_BAD(g_d, items, 0, URT_DISPATCH_KEY_REPLACE, "n 0");
    ITEMS_BAD(g_d, items, 1, (enum urt_dispatch_key_mode)7, "mode 7");
    items[1].kind = NULL;
    ITEMS_BAD(g_d, items, 2, URT_DISPATCH_KEY_REPLACE, "items[1].kind is NULL");
    items[1].kind = "a b";
    ITEMS_BAD(g_d, items, 2, URT_DISPATCH_KEY_REPLACE, "items[1].kind");
    items[1].kind = "k";
    items[0].key = "";
    ITEMS_BAD(g_d, items, 2, URT_DISPATCH_KEY_KEEP, "items[0].key is empty");
    items[0].key = NULL;
    items[1].max_attempts = 2000000;
    ITEMS_BAD(g_d, items, 2, URT_DISPATCH_KEY_KEEP, "items[1].max_attempts");
    items[1].max_attempts = 0;
    items[0].delay_ns = UINT64_MAX;
    ITEMS_BAD(g_d, items, 2, URT_DISPATCH_KEY_KEEP, "items[0].delay_ns");
    items[0].delay_ns = 0;
    ITEMS_BAD(g_d, items, 2, URT_DISPATCH_KEY_KEEP, "not started");
#undef ITEMS_BAD
    CHECK_FN(urt_dispatch_cancel, (NULL, "x", NULL, NULL), "d");
    CHECK_FN(urt_dispatch_cancel, (g_d, NULL, NULL, NULL), "id");
    CHECK_FN(urt_dispatch_cancel, (g_d, "x", NULL, NULL), "uuid");
    CHECK_FN(urt_dispatch_requeue, (g_d, "00000000-0000-0000-0000-00000000000", NULL, NULL), "uuid");
    CHECK_FN(urt_dispatch_requeue, (g_d, "00000000-0000-0000-0000-000000000000", NULL, NULL), "not started");
    CHECK(urt_dispatch_stop(g_d, 0), "urt_dispatch_stop", "never started", -EINVAL, -ETIMEDOUT, -EDEADLK);
    CHECK_FN(urt_dispatch_start, (NULL), "d");
    cr_assert_eq(urt_dispatch_start(g_d), 0, "%s", urt_last_error());
    CHECK_FN(urt_dispatch_start, (g_d), "started before");
    CHECK_FN(urt_dispatch_handle, (g_d, "k2", dispatch_handler, NULL), "started");
    CHECK_ON_WORKER(wd, dispatch_stop_call, g_d, "urt_dispatch_stop", "worker", -EINVAL, -ETIMEDOUT, -EDEADLK);
    /* readers and the pure helper */
    struct urt_dispatch_metrics m;
    struct urt_dispatch_partitions p;
    char lo[37], hi[37];
    CHECK_FN(urt_dispatch_metrics, (NULL, &m), "d");
    CHECK_FN(urt_dispatch_metrics, (g_d, NULL), "out");
    CHECK(urt_dispatch_partitions(NULL, &p), "urt_dispatch_partitions", "d", -EINVAL);
    CHECK_FN(urt_dispatch_partition_range, (0, 1, lo, hi), "partition 0 of 1");
    CHECK_FN(urt_dispatch_partition_range, (3, 2, lo, hi), "out of range");
    CHECK_FN(urt_dispatch_partition_range, (1, 1, NULL, hi), "first_id");
    /* a run's functions with no run */
    CHECK(urt_dispatch_run_done(NULL, "x"), "urt_dispatch_run_done", "run", -EINVAL, -EALREADY);
    CHECK(urt_dispatch_run_nap(NULL, 1), "urt_dispatch_run_nap", "run", -EINVAL, -EALREADY);
    CHECK(urt_dispatch_run_fail(NULL, "x"), "urt_dispatch_run_fail", "run", -EINVAL, -EALREADY);
    CHECK(urt_dispatch_run_sql(NULL, "SELECT 1", NULL, 0, NULL, NULL), "urt_dispatch_run_sql", "run", -EINVAL, -EBUSY,
          -EALREADY, -ECANCELED, -ENOMEM, -EPERM);
    cr_assert_null(urt_dispatch_run_strand(NULL));
    cr_assert_null(urt_dispatch_run_job(NULL));
    cr_assert_eq(urt_dispatch_stop(g_d, 10ull * 1000000000ull), 0, "%s", urt_last_error());
    urt_dispatch_destroy(g_d);
    urt_dispatch_destroy(NULL);
    rt_destroy_clean(wd, URT_SHUTDOWN_DRAIN, 0);
    rt_destroy_clean(plain, URT_SHUTDOWN_DRAIN, 0);
}
#endif
