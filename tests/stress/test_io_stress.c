/*
 * tests/stress/test_io_stress.c — tasks' I/O under concurrent cancels, job
 * cancels and destroy, checked against a model of each operation:
 *
 *   model per actor: submitted (successful submissions) == continued (calls
 *   of its continuation), one at a time (never entered twice at once, never
 *   called while not in flight); each result is one its operation may give
 *   (sleep: 0 or -ECANCELED; receive: bytes, -ECANCELED, -ETIME); the bytes
 *   an actor receives are the bytes its writer sent, in order, none lost
 *   (after the run its socket is drained and the totals compared).
 *
 * Actors loop (each continuation submits the next operation) on 3 workers:
 * sleeps, receives, multishot receives into a buffer ring of their own
 * (each completion's bytes checked, the buffer given back at once; the last
 * call ends a submission); plain actors, and actors whose tasks belong to
 * jobs that a chaos thread
 * cancels at random; a chaos thread and chaos tasks on every worker call
 * urt_io_cancel on random actors (their own worker's or another's); writer
 * threads feed the sockets in random bursts. The run ends with
 * urt_runtime_destroy (CANCEL and DRAIN alternately) while operations are in
 * flight: every continuation still runs once.
 */
#include "helpers.h"
#include "../unit/io_helpers.h"

#include <pthread.h>

enum { WORKERS = 3 };

struct actor {
    struct urt_io io;
    int idx;
    bool sock;          /* a receiving actor (else sleeps) */
    bool multi;         /* receives with urt_io_recv_bufring (multishot) into its own ring */
    struct urt_bufring *br;
    int fd, peer;       /* its socket pair (receiving actors) */
    urt_job *job;       /* NULL, or the job its tasks belong to */
    uint64_t rng;
    unsigned char expect; /* the next byte it should receive (its writer's sequence) */
    _Atomic int inside, in_flight;
    _Atomic uint64_t submitted, continued, received, sent, bad;
    _Atomic int stopped;
    struct urt_task start;
    char buf[512];
};

static struct actor *g_actors;
static int g_n;
static _Atomic int g_stop;

static void actor_cont(struct urt_io *io, int32_t res, void *arg);

static int actor_submit(struct actor *a)
{
    urt_io_init(&a->io, actor_cont, a);
    int err;
    atomic_store(&a->in_flight, 1);
    if (a->multi) {
        if (!a->br && urt_bufring_create(4, 64, &a->br) != 0)
            return atomic_store(&a->stopped, 1), atomic_store(&a->in_flight, 0), -ENOMEM;
        err = urt_io_recv_bufring(&a->io, a->fd, a->br, 0);
    } else if (a->sock) {
        if (rng_next(&a->rng) % 3 == 0)
            urt_io_set_timeout(&a->io, 200000 + rng_next(&a->rng) % 2000000);
        err = urt_io_recv(&a->io, a->fd, a->buf, 1 + rng_next(&a->rng) % sizeof(a->buf), 0);
    } else {
        err = urt_io_sleep(&a->io, rng_next(&a->rng) % 1500000);
    }
    if (err) {
        atomic_store(&a->in_flight, 0);
        atomic_store(&a->stopped, 1); /* a cancelled job, or destroy: the actor ends here */
        return err;
    }
    atomic_fetch_add(&a->submitted, 1);
    return 0;
}

static void check_bytes(struct actor *a, const char *b, int32_t n)
{
    for (int i = 0; i < n; i++)
        if ((unsigned char)b[i] != a->expect++)
            atomic_fetch_add(&a->bad, 1000); /* a byte lost or out of order */
    atomic_fetch_add(&a->received, (uint64_t)n);
}

static void actor_cont(struct urt_io *io, int32_t res, void *arg)
{
    struct actor *a = arg;
    if (urt_io_flags(io) & URT_IO_F_MORE) { /* a multishot completion: the io stays in flight */
        uint16_t bid;
        const char *b = urt_io_buffer(io, &bid);
        if (atomic_exchange(&a->inside, 1) || !atomic_load(&a->in_flight) || !a->multi || res <= 0 || !b)
            atomic_fetch_add(&a->bad, 1);
        if (b && res > 0) {
            check_bytes(a, b, res);
            if (urt_bufring_put(a->br, bid) != 0)
                atomic_fetch_add(&a->bad, 1);
        }
        atomic_store(&a->inside, 0);
        return;
    }
    if (atomic_exchange(&a->inside, 1))
        atomic_fetch_add(&a->bad, 1); /* two continuations at once */
    if (!atomic_exchange(&a->in_flight, 0))
        atomic_fetch_add(&a->bad, 1); /* a continuation of nothing in flight */
    atomic_fetch_add(&a->continued, 1);
    if (a->multi) {
        if (res != -ECANCELED)
            atomic_fetch_add(&a->bad, 1); /* its last call: only a cancel ends it here */
    } else if (a->sock) {
        if (res > 0) {
            check_bytes(a, a->buf, res);
        } else if (res != -ECANCELED && res != -ETIME) {
            atomic_fetch_add(&a->bad, 1);
        }
    } else if (res != 0 && res != -ECANCELED) {
        atomic_fetch_add(&a->bad, 1);
    }
    atomic_store(&a->inside, 0);
    if (!atomic_load(&g_stop))
        actor_submit(a);
    else
        atomic_store(&a->stopped, 1);
}

static enum urt_task_result actor_start(struct urt_task *t, void *arg)
{
    (void)t;
    actor_submit(arg);
    return URT_TASK_DONE;
}

static enum urt_task_result chaos_task(struct urt_task *t, void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg | 1;
    (void)t;
    for (int i = 0; i < 8; i++)
        urt_io_cancel(&g_actors[rng_next(&seed) % (uint64_t)g_n].io);
    return URT_TASK_DONE;
}

struct chaos {
    urt_runtime *rt;
    urt_job **jobs;
    int n_jobs;
    uint64_t seed;
    unsigned char next[1024]; /* per receiving actor: the next byte its writer sends */
};

static void *chaos_main(void *arg)
{
    struct chaos *c = arg;
    while (!atomic_load(&g_stop)) {
        uint64_t r = rng_next(&c->seed);
        if (r % 4 == 0) { /* cancels from a task on a random worker */
            int w = (int)((r >> 8) % WORKERS);
            urt_spawn_to(c->rt, (uint32_t)w, chaos_task, NULL, (void *)(uintptr_t)(r >> 16), 0);
        } else if (r % 61 == 1 && c->n_jobs) {
            urt_job_cancel(c->jobs[(r >> 8) % (uint64_t)c->n_jobs]);
        } else { /* a burst of bytes to a receiving actor */
            struct actor *a = &g_actors[(r >> 8) % (uint64_t)g_n];
            if (a->sock) {
                unsigned char b[256];
                size_t len = 1 + (r >> 20) % sizeof(b);
                for (size_t i = 0; i < len; i++)
                    b[i] = c->next[a->idx]++;
                ssize_t w = send(a->peer, b, len, MSG_DONTWAIT); /* a full socket: what fits */
                if (w > 0)
                    atomic_fetch_add(&a->sent, (uint64_t)w);
                if (w < (ssize_t)len) /* the unsent tail is sent again next time */
                    c->next[a->idx] = (unsigned char)(c->next[a->idx] - (unsigned char)(len - (size_t)(w > 0 ? w : 0)));
            }
        }
        if (r % 16 == 0)
            sleep_us(100);
    }
    return NULL;
}

static void stress_round(int round, enum urt_shutdown mode)
{
    struct urt_config cfg;
    test_config(&cfg, WORKERS);
    urt_runtime *rt = g_rt = rt_create_or_skip(&cfg);
    g_n = SCALE(120, 40);
    g_actors = calloc((size_t)g_n, sizeof(*g_actors));
    enum { JOBS = 6 };
    urt_job *jobs[JOBS];
    for (int j = 0; j < JOBS; j++) {
        struct urt_job_options o;
        urt_job_options_init(&o);
        o.work_level = j % 2 ? URT_WORK_LEVEL_MAX : 0; /* serial and parallel jobs */
        cr_assert_eq(urt_job_create(rt, &o, &jobs[j]), 0);
    }
    atomic_store(&g_stop, 0);
    for (int i = 0; i < g_n; i++) {
        struct actor *a = &g_actors[i];
        a->idx = i;
        a->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + (uint64_t)round;
        a->sock = i % 4 != 0;
        a->multi = i % 4 == 3;
        if (a->sock) {
            int sv[2];
            cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
            a->fd = sv[0];
            a->peer = sv[1];
        }
        urt_task_init(&a->start, actor_start, a);
        if (i % 3 == 0) {
            a->job = jobs[i % JOBS];
            cr_assert_eq(urt_job_submit(a->job, &a->start, 0), 0);
        } else {
            cr_assert_eq(urt_task_submit_to(rt, (uint32_t)(i % WORKERS), &a->start, 0), 0);
        }
    }
    for (int j = 0; j < JOBS; j++)
        urt_job_close(jobs[j]);
    struct chaos c = {.rt = rt, .jobs = jobs, .n_jobs = JOBS, .seed = 0x1234567ull + (uint64_t)round};
    pthread_t th;
    pthread_create(&th, NULL, chaos_main, &c);
    sleep_us(SCALE(400000, 250000));
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    sleep_us(2000); /* let some settle, leave others in flight for destroy */
    int r = urt_runtime_destroy(rt, mode);
    cr_assert_geq(r, 0, "destroy: %s", urt_last_error());
    for (int j = 0; j < JOBS; j++)
        urt_job_release(jobs[j]);
    uint64_t total_ops = 0, total_bytes = 0;
    for (int i = 0; i < g_n; i++) {
        struct actor *a = &g_actors[i];
        uint64_t s = atomic_load(&a->submitted), k = atomic_load(&a->continued);
        cr_assert_eq(atomic_load(&a->bad), 0, "actor %d: %llu model violations", i,
                     (unsigned long long)atomic_load(&a->bad));
        cr_assert_eq(s, k, "actor %d: %llu submitted, %llu continued", i, (unsigned long long)s,
                     (unsigned long long)k);
        cr_assert_eq(atomic_load(&a->in_flight), 0, "actor %d: still in flight after destroy", i);
        total_ops += k;
        if (a->sock) {
            /* what was not received is still in the socket, in order */
            uint64_t left = 0;
            char b[4096];
            ssize_t n;
            while ((n = recv(a->fd, b, sizeof(b), MSG_DONTWAIT)) > 0) {
                for (ssize_t j = 0; j < n; j++)
                    cr_assert_eq((unsigned char)b[j], a->expect++, "actor %d: byte out of order", i);
                left += (uint64_t)n;
            }
            cr_assert_eq(atomic_load(&a->received) + left, atomic_load(&a->sent),
                         "actor %d: %llu received + %llu left != %llu sent", i,
                         (unsigned long long)atomic_load(&a->received), (unsigned long long)left,
                         (unsigned long long)atomic_load(&a->sent));
            total_bytes += atomic_load(&a->received);
            close(a->fd);
            close(a->peer);
        }
    }
    cr_log_info("round %d (%s): %llu operations, %llu bytes received", round,
                mode == URT_SHUTDOWN_CANCEL ? "cancel" : "drain", (unsigned long long)total_ops,
                (unsigned long long)total_bytes);
    cr_assert_gt(total_ops, (uint64_t)g_n);
    free(g_actors);
    leak_check();
}

Test(io_stress, cancels_jobs_and_destroy_against_the_model, .timeout = 300)
{
    for (int round = 0; round < SCALE(4, 2); round++)
        stress_round(round, round % 2 ? URT_SHUTDOWN_DRAIN : URT_SHUTDOWN_CANCEL);
}
