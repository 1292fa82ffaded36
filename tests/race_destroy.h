/*
 * tests/race_destroy.h — threads that are not workers submitting while
 * urt_runtime_destroy runs: the model both the shutdown suite
 * (tests/unit/test_shutdown.c) and the fence's fresh-process check
 * (tests/stress/fence_child.c) run. Plain C (no criterion): race_run returns
 * the first broken invariant as a message.
 *
 * Racer threads submit (urt_spawn_ex, or urt_lane_spawn on one of the
 * lanes; every 5th submission URT_SUBMIT_URGENT) until destroy refused them
 * 100 times. A holder task keeps a worker busy until every racer stopped,
 * so the runtime outlives their last call (destroy waits for running tasks).
 * Invariants: every accepted task ends exactly once (ran or cancelled: one
 * hit counter per task for the first `cap` tasks of a racer, one shared
 * counter after), no submission is accepted after a refusal, every racer
 * saw a refusal, errors are 0 or -ESHUTDOWN only, and the lanes end with
 * nothing pending (a push the fence let through after the drain or the
 * cancel would leave its lane pending for ever).
 *
 * Memory ordering: the counters are seq_cst atomics; destroy's return and
 * the joins order the checks after every submission and every end.
 */
#ifndef URT_TESTS_RACE_DESTROY_H
#define URT_TESTS_RACE_DESTROY_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <urt/urt.h>

#define RACE_MAX_RACERS 8
#define RACE_MAX_LANES 8

struct racer {
    urt_runtime *rt;
    urt_lane *lane; /* NULL: plain spawns */
    _Atomic uint64_t accepted, refused, errors, after_refusal_accepted;
    _Atomic bool done;
    _Atomic uint32_t *hits;         /* per task, the first cap tasks */
    _Atomic uint32_t overflow_hits; /* the tasks after the first cap */
    size_t cap;
};

static inline uint64_t race_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void race_sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
    nanosleep(&ts, NULL);
}

static enum urt_task_result race_hit_fn(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add((_Atomic uint32_t *)arg, 1);
    return URT_TASK_DONE;
}

static void race_hit_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    atomic_fetch_add((_Atomic uint32_t *)arg, 1);
}

/* Submits until destroy refuses it 100 times (or 60 s passed). */
static void *racer_main(void *arg)
{
    struct racer *r = arg;
    bool refused = false;
    uint64_t deadline = race_now_ns() + 60ull * 1000000000ull;
    for (size_t i = 0; race_now_ns() < deadline; i++) {
        _Atomic uint32_t *hit = i < r->cap ? &r->hits[i] : &r->overflow_hits;
        unsigned flags = i % 5 == 0 ? URT_SUBMIT_URGENT : 0;
        int err = r->lane ? urt_lane_spawn(r->lane, race_hit_fn, race_hit_cancel, (void *)hit, flags)
                          : urt_spawn_ex(r->rt, race_hit_fn, race_hit_cancel, (void *)hit, flags);
        if (err == 0) {
            atomic_fetch_add(&r->accepted, 1);
            if (refused)
                atomic_fetch_add(&r->after_refusal_accepted, 1);
        } else if (err == -ESHUTDOWN) {
            refused = true;
            if (atomic_fetch_add(&r->refused, 1) >= 100)
                break;
        } else {
            atomic_fetch_add(&r->errors, 1);
        }
    }
    atomic_store(&r->done, true);
    return NULL;
}

struct race_holder {
    struct urt_task task;
    struct racer *racers;
    int n;
    _Atomic bool started;
};

static enum urt_task_result race_holder_fn(struct urt_task *t, void *arg)
{
    (void)t;
    struct race_holder *h = arg;
    atomic_store(&h->started, true);
    uint64_t deadline = race_now_ns() + 60ull * 1000000000ull;
    for (int i = 0; i < h->n; i++)
        while (!atomic_load(&h->racers[i].done) && race_now_ns() < deadline)
            race_sleep_us(100);
    return URT_TASK_DONE;
}

#define RACE_FAIL(...)                                                                                           \
    do {                                                                                                         \
        snprintf(msg, len, __VA_ARGS__);                                                                         \
        return -1;                                                                                               \
    } while (0)

/* The invariants of one racer after the joins (see the top). */
static int race_check_racer(struct racer *r, int i, char *msg, size_t len)
{
    if (atomic_load(&r->errors))
        RACE_FAIL("racer %d: an error other than -ESHUTDOWN", i);
    if (atomic_load(&r->after_refusal_accepted))
        RACE_FAIL("racer %d: accepted after a refusal", i);
    if (atomic_load(&r->refused) == 0)
        RACE_FAIL("racer %d never saw -ESHUTDOWN", i);
    uint64_t accepted = atomic_load(&r->accepted), sum = atomic_load(&r->overflow_hits);
    for (size_t k = 0; k < r->cap; k++) {
        uint32_t v = atomic_load(&r->hits[k]);
        if (v > 1)
            RACE_FAIL("racer %d task %zu ended %u times", i, k, v);
        sum += v;
    }
    if (sum != accepted)
        RACE_FAIL("racer %d: %llu accepted, %llu ended", i, (unsigned long long)accepted, (unsigned long long)sum);
    return 0;
}

/* Runs the race on rt (created by the caller, destroyed here with mode):
 * racers threads; with n_lanes > 0 they spawn on n_lanes lanes of rt
 * (racer i on lane i % n_lanes, or, with plain_too, racer 0 plain and the
 * others on the lanes). 0, or -1 with the first broken invariant in msg. */
static int race_run(urt_runtime *rt, enum urt_shutdown mode, int racers, int n_lanes, bool plain_too, size_t cap,
                    char *msg, size_t len)
{
    static struct racer rc[RACE_MAX_RACERS];
    pthread_t th[RACE_MAX_RACERS];
    urt_lane *lane[RACE_MAX_LANES] = {NULL};
    if (racers > RACE_MAX_RACERS || n_lanes > RACE_MAX_LANES)
        RACE_FAIL("race_run: at most %d racers and %d lanes", RACE_MAX_RACERS, RACE_MAX_LANES);
    memset(rc, 0, sizeof(rc));
    for (int i = 0; i < n_lanes; i++)
        if (urt_lane_create(rt, &lane[i]) != 0)
            RACE_FAIL("urt_lane_create: %s", urt_last_error());
    for (int i = 0; i < racers; i++) {
        rc[i].rt = rt;
        if (n_lanes > 0 && !(plain_too && i == 0))
            rc[i].lane = lane[(plain_too ? i - 1 : i) % n_lanes];
        rc[i].cap = cap;
        rc[i].hits = calloc(cap, sizeof(*rc[i].hits));
        if (!rc[i].hits || pthread_create(&th[i], NULL, racer_main, &rc[i]) != 0)
            RACE_FAIL("racer %d: no memory or no thread", i); /* the process ends with the failure */
    }
    struct race_holder h = {.racers = rc, .n = racers, .started = false};
    urt_task_init(&h.task, race_holder_fn, &h);
    uint64_t deadline = race_now_ns() + 10ull * 1000000000ull;
    while (atomic_load(&rc[0].accepted) < 1000 && race_now_ns() < deadline)
        race_sleep_us(100);
    if (urt_task_submit(rt, &h.task, 0) != 0)
        RACE_FAIL("the holder task was refused: %s", urt_last_error());
    while (!atomic_load(&h.started)) /* else a cancel could drop it */
        race_sleep_us(100);
    int ret = urt_runtime_destroy(rt, mode);
    for (int i = 0; i < racers; i++)
        pthread_join(th[i], NULL);
    if (ret < 0 || (mode == URT_SHUTDOWN_DRAIN && ret != 0))
        RACE_FAIL("urt_runtime_destroy returned %d", ret);
    for (int i = 0; i < n_lanes; i++) {
        uint32_t p = urt_lane_pending(lane[i]);
        if (p != 0)
            RACE_FAIL("lane %d: %u pending after destroy", i, p);
        urt_lane_destroy(lane[i]);
    }
    int err = 0;
    uint64_t accepted = 0; /* each racer's accepted tasks all ended (race_check_racer) */
    for (int i = 0; i < racers; i++) {
        if (!err)
            err = race_check_racer(&rc[i], i, msg, len);
        accepted += atomic_load(&rc[i].accepted);
        free(rc[i].hits);
    }
    if (!err && accepted == 0)
        RACE_FAIL("no submission was accepted");
    return err;
}

#undef RACE_FAIL

#endif
