/*
 * tests/unit/test_config.c — struct urt_config: defaults, validation of every
 * field, text settings (urt_config_set), URT_* environment variables,
 * urt_config_describe, and urt_runtime_create refusing a bad config.
 *
 * The bad-value table lists, for every field, values that must be refused
 * with -EINVAL and a message naming the field, both in the err buffer and in
 * urt_last_error(); each case starts from a valid default config and changes
 * one field only (plus a partner field where the rule involves two). A
 * field-coverage test checks that the table names every field that
 * urt_config_describe() lists, so a new field without bad-value cases fails.
 * (bool fields cannot hold a bad value in C; their bad text values are
 * covered through urt_config_set.)
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/helpers.h"

static const char *const ALL_FIELDS[] = {
    "workers",
    "placement",
    "topology",
    "busy_worker",
    "worker_try_count",
    "worker_spin_adaptive",
    "worker_suspend_timeout_us",
    "task_polling_wait",
    "stealing_wait",
    "use_preferred_worker_for_current_thread",
    "dev_thousandths_ratio_check_local_first",
    "deque_capacity",
    "inbox_check_interval",
    "lightweight_job_level",
    "lifo_slot",
    "lane_balance",
    "ring_entries",
    "ring_cq_entries",
    "ring_disable",
    "sqpoll",
    "sqpoll_idle_ms",
    "io_fixed_files",
    "stats_timing",
    "watcher_interval_us",
    "max_pending_tasks",
    "task_runtime_limit_us",
    "watchdog_abort",
    "log_dir",
    "epoch_duration_us",
    "o_direct",
    "log_prealloc_kb",
    "log_sync",
    "direct_commit_callback",
    "log_segment_kb",
    "log_poll_us",
    "log_channels",
    "log_irq_affinity",
    "blocking_threads_max",
    "blocking_threads_min",
    "blocking_keepalive_ms",
    "blocking_queue_max",
    "backend",
};
#define N_ALL_FIELDS (sizeof(ALL_FIELDS) / sizeof(ALL_FIELDS[0]))

static void clear_urt_env(void)
{
    extern char **environ;
    for (;;) {
        char name[256] = "";
        for (char **e = environ; *e; e++) {
            if (strncmp(*e, "URT_", 4) == 0) {
                const char *eq = strchr(*e, '=');
                size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
                if (n < sizeof(name)) {
                    memcpy(name, *e, n);
                    name[n] = '\0';
                }
                break;
            }
        }
        if (!name[0])
            return;
        unsetenv(name);
    }
}

/* ---- defaults ---------------------------------------------------------------- */

Test(config, defaults_every_field, .timeout = 10)
{
    struct urt_config c;
    memset(&c, 0xa5, sizeof(c));
    urt_config_init(&c);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_eq(c.workers, (uint32_t)(cpus < 1 ? 1 : cpus > 1024 ? 1024 : cpus));
    cr_assert_eq(c.placement, URT_PLACEMENT_NUMA);
    cr_assert_null(c.topology);
    cr_assert_eq(c.busy_worker, false);
    cr_assert_eq(c.worker_try_count, 1000);
    cr_assert_eq(c.worker_spin_adaptive, true);
    cr_assert_eq(c.worker_suspend_timeout_us, 1000000);
    cr_assert_eq(c.task_polling_wait, 0);
    cr_assert_eq(c.stealing_wait, 1);
    cr_assert_eq(c.use_preferred_worker_for_current_thread, true);
    cr_assert_eq(c.dev_thousandths_ratio_check_local_first, 100);
    cr_assert_eq(c.deque_capacity, 4096);
    cr_assert_eq(c.inbox_check_interval, 61);
    cr_assert_eq(c.lightweight_job_level, 0);
    cr_assert_eq(c.lane_balance, true);
    cr_assert_eq(c.lifo_slot, true);
    cr_assert_eq(c.log_irq_affinity, true);
    cr_assert_eq(c.ring_entries, 256);
    cr_assert_eq(c.ring_cq_entries, 0);
    cr_assert_eq(c.ring_disable, 0);
    cr_assert_eq(c.sqpoll, false);
    cr_assert_eq(c.sqpoll_idle_ms, 100);
    cr_assert_eq(c.io_fixed_files, 1024);
    cr_assert_eq(c.stats_timing, false);
    cr_assert_eq(c.watcher_interval_us, 1000);
    cr_assert_eq(c.max_pending_tasks, 0);
    cr_assert_eq(c.task_runtime_limit_us, 0);
    cr_assert_eq(c.watchdog_abort, false);
    cr_assert_null(c.log_dir);
    cr_assert_eq(c.epoch_duration_us, 1000);
    cr_assert_eq(c.o_direct, false);
    cr_assert_eq(c.direct_commit_callback, false);
    cr_assert_eq(c.log_segment_kb, 65536);
    cr_assert_eq(c.log_sync, URT_LOG_SYNC_AUTO);
    cr_assert_eq(c.backend, URT_BACKEND_AUTO);
    cr_assert_eq(c.log_prealloc_kb, 4096);
    cr_assert_eq(c.log_poll_us, 1000);
    cr_assert_eq(c.log_channels, 0);
    cr_assert_eq(c.blocking_threads_max, 512);
    cr_assert_eq(c.blocking_threads_min, 0);
    cr_assert_eq(c.blocking_keepalive_ms, 10000);
    cr_assert_eq(c.blocking_queue_max, 65536);
    for (size_t i = 0; i < sizeof(c.reserved) / sizeof(c.reserved[0]); i++)
        cr_assert_eq(c.reserved[i], 0, "reserved[%zu] must be zeroed", i);
    char err[256] = "x";
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "defaults must validate: %s", err);
}

Test(config, validate_accepts_edges, .timeout = 10)
{
    struct urt_config c;
    urt_config_init(&c);
    c.workers = 1024;
    c.worker_try_count = 1;
    c.worker_suspend_timeout_us = 1;
    c.task_polling_wait = 1000000;
    c.stealing_wait = 0;
    c.dev_thousandths_ratio_check_local_first = 1000;
    c.deque_capacity = 16;
    c.inbox_check_interval = 1;
    c.ring_entries = 2;
    c.ring_cq_entries = 2;
    c.ring_disable = URT_RING_ALL_FEATURES;
    c.sqpoll_idle_ms = 60000;
    c.placement = URT_PLACEMENT_CORE;
    c.topology = "0-3,8;4-7";
    char err[256];
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "%s", err);
    c.deque_capacity = 1u << 24;
    c.ring_entries = 16384;
    c.ring_cq_entries = 0;
    c.worker_suspend_timeout_us = 3600000000ull;
    c.topology = "0";
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "%s", err);
    c.ring_entries = 32768;
    c.ring_cq_entries = 65536;
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "%s", err);
    c.io_fixed_files = 0;
    c.log_poll_us = 0;
    c.log_sync = URT_LOG_SYNC_SINGLE_WRITE; /* with the default log_prealloc_kb > 0 */
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "%s", err);
    c.io_fixed_files = 65536;
    c.log_poll_us = 1000000;
    c.log_channels = 1024; /* more than workers: one per worker (wal_open) */
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "%s", err);
    c.blocking_threads_max = 1;
    c.blocking_threads_min = 1;
    c.blocking_keepalive_ms = 1;
    c.blocking_queue_max = 1;
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "%s", err);
    c.blocking_threads_max = 32768;
    c.blocking_threads_min = 32768;
    c.blocking_keepalive_ms = 86400000;
    c.blocking_queue_max = 1ull << 32;
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(urt_config_validate(&c, NULL, 0), 0, "err may be NULL");
}

/* ---- bad values ------------------------------------------------------------------ */

enum bad_kind { K_U32, K_U64, K_PLACEMENT, K_LOG_SYNC, K_TOPOLOGY, K_RESERVED, K_RING_PAIR, K_LOG_DIR, K_BACKEND };

struct bad {
    const char *field;   /* must appear in the message */
    enum bad_kind kind;
    uint64_t value;
    const char *text;    /* topology */
    uint32_t partner;    /* K_RING_PAIR: ring_entries */
};

#define U32BAD(f, v) {#f, K_U32, (v), NULL, 0}
#define U64BAD(f, v) {#f, K_U64, (v), NULL, 0}

static const struct bad BAD[] = {
    U32BAD(workers, 0),
    U32BAD(workers, 1025),
    U32BAD(workers, UINT32_MAX),
    {"placement", K_PLACEMENT, 3, NULL, 0},
    {"placement", K_PLACEMENT, 77, NULL, 0},
    {"topology", K_TOPOLOGY, 0, "", 0},
    {"topology", K_TOPOLOGY, 0, "x", 0},
    {"topology", K_TOPOLOGY, 0, "0-", 0},
    {"topology", K_TOPOLOGY, 0, "3-1", 0},
    {"topology", K_TOPOLOGY, 0, "0;", 0},
    {"topology", K_TOPOLOGY, 0, ";0", 0},
    {"topology", K_TOPOLOGY, 0, "0;;1", 0},
    {"topology", K_TOPOLOGY, 0, "0:1", 0},
    {"topology", K_TOPOLOGY, 0, "0,", 0},
    {"topology", K_TOPOLOGY, 0, "0 ;1", 0},
    {"topology", K_TOPOLOGY, 0, "-1", 0},
    {"topology", K_TOPOLOGY, 0, "100000", 0},
    {"topology", K_TOPOLOGY, 0, "0-99999", 0},
    U32BAD(worker_try_count, 0),
    U32BAD(worker_try_count, 100000001),
    U64BAD(epoch_duration_us, 0),
    U64BAD(epoch_duration_us, 10000001ull),
    U32BAD(log_prealloc_kb, (1u << 22) + 1),
    U32BAD(log_segment_kb, 63),
    U32BAD(log_segment_kb, (1u << 24) + 1),
    {"log_dir", K_LOG_DIR, 0, "", 0},
    {"log_sync", K_LOG_SYNC, 4, NULL, 0},
    {"log_sync", K_LOG_SYNC, 1000, NULL, 0},
    {"log_sync", K_LOG_SYNC, URT_LOG_SYNC_SINGLE_FLUSH | 0x100, NULL, 0}, /* single_flush, prealloc 0 */
    {"log_sync", K_LOG_SYNC, URT_LOG_SYNC_SINGLE_WRITE | 0x100, NULL, 0}, /* single_write, prealloc 0 */
    U32BAD(log_poll_us, 1000001),
    U32BAD(log_channels, 1025),
    U32BAD(blocking_threads_max, 0),
    U32BAD(blocking_threads_max, 32769),
    U32BAD(blocking_threads_min, 32769),
    U32BAD(blocking_threads_min, 513), /* above blocking_threads_max (default 512) */
    U32BAD(blocking_keepalive_ms, 0),
    U32BAD(blocking_keepalive_ms, 86400001),
    U64BAD(blocking_queue_max, 0),
    U64BAD(blocking_queue_max, (1ull << 32) + 1),
    U64BAD(worker_suspend_timeout_us, 0),
    U64BAD(worker_suspend_timeout_us, 3600000001ull),
    U64BAD(worker_suspend_timeout_us, UINT64_MAX),
    U32BAD(task_polling_wait, 1000001),
    U32BAD(stealing_wait, 1000001),
    U32BAD(dev_thousandths_ratio_check_local_first, 1001),
    U32BAD(deque_capacity, 0),
    U32BAD(deque_capacity, 8),
    U32BAD(deque_capacity, 100),
    U32BAD(deque_capacity, 4097),
    U32BAD(deque_capacity, (1u << 24) + 1),
    U32BAD(deque_capacity, 1u << 25),
    U32BAD(inbox_check_interval, 0),
    U32BAD(inbox_check_interval, 1000001),
    U32BAD(lightweight_job_level, 61),
    U32BAD(lightweight_job_level, UINT32_MAX),
    U32BAD(ring_entries, 0),
    U32BAD(ring_entries, 1),
    U32BAD(ring_entries, 3),
    U32BAD(ring_entries, 100),
    U32BAD(ring_entries, 65536),
    {"ring_entries", K_RING_PAIR, 0, NULL, 32768}, /* 4 x 32768 CQ entries exceed 65536 */
    {"ring_cq_entries", K_RING_PAIR, 3, NULL, 256},
    {"ring_cq_entries", K_RING_PAIR, 1000, NULL, 256},
    {"ring_cq_entries", K_RING_PAIR, 128, NULL, 256}, /* below ring_entries */
    {"ring_cq_entries", K_RING_PAIR, 131072, NULL, 256},
    U32BAD(ring_disable, URT_RING_ALL_FEATURES + 1),
    U32BAD(ring_disable, 1u << 31),
    U32BAD(io_fixed_files, 65537),
    U32BAD(sqpoll_idle_ms, 0),
    U32BAD(sqpoll_idle_ms, 60001),
    {"watcher_interval_us", K_U64, 0, NULL, 0},
    {"watcher_interval_us", K_U64, 3600000001ull, NULL, 0},
    {"max_pending_tasks", K_U64, (1ull << 40) + 1, NULL, 0},
    {"task_runtime_limit_us", K_U64, 3600000001ull, NULL, 0},
    {"reserved", K_RESERVED, 0, NULL, 0},
    {"reserved", K_RESERVED, 3, NULL, 0},
    {"reserved", K_RESERVED, 5, NULL, 0},
    {"backend", K_BACKEND, 3, NULL, 0},
    {"backend", K_BACKEND, 99, NULL, 0},
    {"sqpoll", K_BACKEND, URT_BACKEND_PORTABLE | 0x100, NULL, 0}, /* portable with sqpoll */
};
#define N_BAD (sizeof(BAD) / sizeof(BAD[0]))

static void apply_bad(struct urt_config *c, const struct bad *b)
{
    const char *f = b->field;
    switch (b->kind) {
    case K_U32: {
        uint32_t v = (uint32_t)b->value;
#define SET32(name)                                                                                        \
    if (!strcmp(f, #name)) {                                                                               \
        c->name = v;                                                                                       \
        return;                                                                                            \
    }
        SET32(workers);
        SET32(worker_try_count);
        SET32(task_polling_wait);
        SET32(stealing_wait);
        SET32(dev_thousandths_ratio_check_local_first);
        SET32(deque_capacity);
        SET32(inbox_check_interval);
        SET32(lightweight_job_level);
        SET32(ring_entries);
        SET32(ring_cq_entries);
        SET32(ring_disable);
        SET32(sqpoll_idle_ms);
        SET32(io_fixed_files);
        SET32(log_prealloc_kb);
        SET32(log_segment_kb);
        SET32(log_poll_us);
        SET32(log_channels);
        SET32(blocking_threads_max);
        SET32(blocking_threads_min);
        SET32(blocking_keepalive_ms);
#undef SET32
        cr_assert_fail("no u32 field %s", f);
        return;
    }
    case K_U64:
#define SET64(name)                                                                                        \
    if (!strcmp(f, #name)) {                                                                               \
        c->name = b->value;                                                                                \
        return;                                                                                            \
    }
        SET64(worker_suspend_timeout_us);
        SET64(watcher_interval_us);
        SET64(max_pending_tasks);
        SET64(task_runtime_limit_us);
        SET64(epoch_duration_us);
        SET64(blocking_queue_max);
#undef SET64
        cr_assert_fail("no u64 field %s", f);
        return;
    case K_LOG_DIR:
        c->log_dir = b->text;
        return;
    case K_PLACEMENT:
        c->placement = (enum urt_placement)b->value;
        return;
    case K_LOG_SYNC:
        c->log_sync = (enum urt_log_sync)(b->value & 0xff);
        if (b->value & 0x100)
            c->log_prealloc_kb = 0;
        return;
    case K_TOPOLOGY:
        c->topology = b->text;
        return;
    case K_BACKEND:
        c->backend = (enum urt_backend)(b->value & 0xff);
        c->sqpoll = (b->value & 0x100) != 0;
        return;
    case K_RESERVED:
        c->reserved[b->value] = 1;
        return;
    case K_RING_PAIR:
        c->ring_entries = b->partner;
        c->ring_cq_entries = (uint32_t)b->value;
        return;
    }
}

Test(config, validate_rejects_every_bad_value_naming_the_field, .timeout = 30)
{
    for (size_t i = 0; i < N_BAD; i++) {
        const struct bad *b = &BAD[i];
        struct urt_config c;
        urt_config_init(&c);
        apply_bad(&c, b);
        char err[256] = "";
        int r = urt_config_validate(&c, err, sizeof(err));
        cr_assert_eq(r, -EINVAL, "case %zu (%s=%lu \"%s\"): validate returned %d", i, b->field,
                     (unsigned long)b->value, b->text ? b->text : "", r);
        cr_assert_not_null(strstr(err, b->field), "case %zu: message \"%s\" does not name %s", i, err, b->field);
        cr_assert_not_null(strstr(urt_last_error(), b->field), "case %zu: urt_last_error \"%s\" does not name %s", i,
                           urt_last_error(), b->field);
        /* one message: the buffer is a copy of urt_last_error() */
        cr_assert_str_eq(err, urt_last_error(), "case %zu", i);
        /* err may be NULL; the message still reaches urt_last_error(). */
        cr_assert_eq(urt_config_validate(&c, NULL, 0), -EINVAL);
        cr_assert_not_null(strstr(urt_last_error(), b->field));
        /* a one-byte buffer is not overrun and stays a string */
        char tiny[1] = {'z'};
        cr_assert_eq(urt_config_validate(&c, tiny, sizeof(tiny)), -EINVAL);
        cr_assert_eq(tiny[0], '\0');
    }
    cr_assert_eq(urt_config_validate(NULL, NULL, 0), -EINVAL);
}

/* Every field listed by describe has bad-value cases or is a bool (which
 * has its bad values through urt_config_set). */
Test(config, bad_value_table_covers_every_field, .timeout = 10)
{
    static const char *const bools[] = {"busy_worker", "use_preferred_worker_for_current_thread", "sqpoll",
                                        "stats_timing", "watchdog_abort", "o_direct", "lane_balance",
                                        "direct_commit_callback", "worker_spin_adaptive", "lifo_slot",
                                        "log_irq_affinity"};
    struct urt_config c;
    urt_config_init(&c);
    char buf[8192];
    int n = urt_config_describe(&c, buf, sizeof(buf));
    cr_assert_gt(n, 0);
    cr_assert_lt((size_t)n, sizeof(buf));
    size_t lines = 0;
    for (char *line = buf; *line;) {
        char *nl = strchr(line, '\n');
        cr_assert_not_null(nl);
        char name[128];
        cr_assert_eq(sscanf(line, "%127s", name), 1);
        bool covered = false;
        for (size_t i = 0; i < N_BAD && !covered; i++)
            covered = !strcmp(BAD[i].field, name);
        for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]) && !covered; i++)
            covered = !strcmp(bools[i], name);
        cr_assert(covered, "field %s has no bad-value case", name);
        lines++;
        line = nl + 1;
    }
    cr_assert_eq(lines, N_ALL_FIELDS, "describe lists %zu fields, the test knows %zu", lines, N_ALL_FIELDS);
}

Test(config, runtime_create_rejects_bad_config, .timeout = 30)
{
    for (size_t i = 0; i < N_BAD; i++) {
        struct urt_config c;
        urt_config_init(&c);
        c.workers = 1;
        apply_bad(&c, &BAD[i]);
        urt_runtime *rt = (urt_runtime *)&c; /* must be reset to NULL */
        int r = urt_runtime_create(&c, &rt);
        cr_assert_eq(r, -EINVAL, "case %zu (%s): create returned %d", i, BAD[i].field, r);
        cr_assert_null(rt, "case %zu: *out must be NULL after a failure", i);
        cr_assert_not_null(strstr(urt_last_error(), BAD[i].field), "case %zu: \"%s\"", i, urt_last_error());
    }
    struct urt_config c;
    urt_config_init(&c);
    cr_assert_eq(urt_runtime_create(&c, NULL), -EINVAL, "out NULL");
    cr_assert_eq(urt_runtime_destroy(NULL, URT_SHUTDOWN_DRAIN), 0);
    leak_check();
}

/* ---- urt_config_set ------------------------------------------------------------- */

struct set_case {
    const char *name, *value;
    int expect;
};

Test(config, set_from_text, .timeout = 10)
{
    struct urt_config c;
    urt_config_init(&c);
    cr_assert_eq(urt_config_set(&c, "workers", "7"), 0);
    cr_assert_eq(c.workers, 7);
    cr_assert_eq(urt_config_set(&c, "WORKERS", "0x10"), 0, "names are case-insensitive, numbers C-style");
    cr_assert_eq(c.workers, 16);
    cr_assert_eq(urt_config_set(&c, "worker_suspend_timeout_us", "3600000000"), 0);
    cr_assert_eq(c.worker_suspend_timeout_us, 3600000000ull);
    cr_assert_eq(urt_config_set(&c, "placement", "none"), 0);
    cr_assert_eq(c.placement, URT_PLACEMENT_NONE);
    cr_assert_eq(urt_config_set(&c, "placement", "CORE"), 0);
    cr_assert_eq(c.placement, URT_PLACEMENT_CORE);
    cr_assert_eq(urt_config_set(&c, "placement", "numa"), 0);
    cr_assert_eq(c.placement, URT_PLACEMENT_NUMA);
    static const char *const yes[] = {"true", "TRUE", "1", "yes", "on"};
    static const char *const no[] = {"false", "False", "0", "no", "off"};
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(urt_config_set(&c, "busy_worker", yes[i]), 0);
        cr_assert(c.busy_worker, "%s", yes[i]);
        cr_assert_eq(urt_config_set(&c, "busy_worker", no[i]), 0);
        cr_assert_not(c.busy_worker, "%s", no[i]);
    }
    cr_assert_eq(urt_config_set(&c, "use_preferred_worker_for_current_thread", "false"), 0);
    cr_assert_not(c.use_preferred_worker_for_current_thread);
    cr_assert_eq(urt_config_set(&c, "sqpoll", "on"), 0);
    cr_assert(c.sqpoll);
    cr_assert_eq(urt_config_set(&c, "stats_timing", "yes"), 0);
    cr_assert(c.stats_timing);

    char topo[] = "0-1;2";
    cr_assert_eq(urt_config_set(&c, "topology", topo), 0);
    cr_assert_str_eq(c.topology, "0-1;2");
    topo[0] = '9'; /* the config keeps its own copy */
    cr_assert_str_eq(c.topology, "0-1;2");
    cr_assert_eq(urt_config_set(&c, "topology", ""), 0, "empty text = discover");
    cr_assert_null(c.topology);

    cr_assert_eq(urt_config_set(&c, "ring_disable", "4095"), 0);
    cr_assert_eq(c.ring_disable, URT_RING_ALL_FEATURES);
    cr_assert_eq(urt_config_set(&c, "deque_capacity", "1024"), 0);
    cr_assert_eq(c.deque_capacity, 1024);
    cr_assert_eq(urt_config_set(&c, "log_sync", "single_write"), 0);
    cr_assert_eq(c.log_sync, URT_LOG_SYNC_SINGLE_WRITE);
    cr_assert_eq(urt_config_set(&c, "backend", "portable"), 0);
    cr_assert_eq(c.backend, URT_BACKEND_PORTABLE);
    cr_assert_eq(urt_config_set(&c, "backend", "io_uring"), 0);
    cr_assert_eq(c.backend, URT_BACKEND_IO_URING);
    cr_assert_eq(urt_config_set(&c, "io_fixed_files", "65536"), 0);
    cr_assert_eq(c.io_fixed_files, 65536);
    cr_assert_eq(urt_config_set(&c, "log_poll_us", "0"), 0);
    cr_assert_eq(c.log_poll_us, 0);
    leak_check();
}

Test(config, set_rejects_bad_text_naming_the_field, .timeout = 10)
{
    static const struct set_case cases[] = {
        {"workers", "abc", -EINVAL},
        {"workers", "", -EINVAL},
        {"workers", "-1", -EINVAL},
        {"workers", " 4", -EINVAL},
        {"workers", "4x", -EINVAL},
        {"workers", "0", -EINVAL},
        {"workers", "1025", -EINVAL},
        {"workers", "99999999999999999999999", -EINVAL},
        {"worker_try_count", "0", -EINVAL},
        {"worker_suspend_timeout_us", "0", -EINVAL},
        {"worker_suspend_timeout_us", "3600000001", -EINVAL},
        {"task_polling_wait", "1000001", -EINVAL},
        {"stealing_wait", "many", -EINVAL},
        {"dev_thousandths_ratio_check_local_first", "1001", -EINVAL},
        {"deque_capacity", "8", -EINVAL},
        {"inbox_check_interval", "0", -EINVAL},
        {"ring_entries", "1", -EINVAL},
        {"ring_cq_entries", "65537", -EINVAL},
        {"ring_disable", "4096", -EINVAL},
        {"sqpoll_idle_ms", "0", -EINVAL},
        {"busy_worker", "maybe", -EINVAL},
        {"busy_worker", "", -EINVAL},
        {"use_preferred_worker_for_current_thread", "2", -EINVAL},
        {"sqpoll", "enabled", -EINVAL},
        {"stats_timing", "t", -EINVAL},
        {"placement", "bogus", -EINVAL},
        {"placement", "", -EINVAL},
        {"topology", "x", -EINVAL},
        {"topology", "1-0", -EINVAL},
        {"topology", "0;", -EINVAL},
    };
    struct urt_config c, before;
    urt_config_init(&c);
    memcpy(&before, &c, sizeof(c));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int r = urt_config_set(&c, cases[i].name, cases[i].value);
        cr_assert_eq(r, cases[i].expect, "%s=\"%s\": %d", cases[i].name, cases[i].value, r);
        cr_assert_not_null(strstr(urt_last_error(), cases[i].name), "%s=\"%s\": message \"%s\"", cases[i].name,
                           cases[i].value, urt_last_error());
        cr_assert_eq(memcmp(&c, &before, sizeof(c)), 0, "%s=\"%s\": a refused value changed the config",
                     cases[i].name, cases[i].value);
    }
    cr_assert_eq(urt_config_set(&c, "no_such_field", "1"), -ENOENT);
    cr_assert_not_null(strstr(urt_last_error(), "no_such_field"));
    cr_assert_eq(urt_config_set(&c, "reserved", "1"), -ENOENT, "reserved is not settable");
    cr_assert_eq(urt_config_set(NULL, "workers", "1"), -EINVAL);
    cr_assert_eq(urt_config_set(&c, NULL, "1"), -EINVAL);
    cr_assert_eq(urt_config_set(&c, "workers", NULL), -EINVAL);
}

/* ---- environment ------------------------------------------------------------------- */

Test(config, from_env_applies_urt_variables, .timeout = 10)
{
    clear_urt_env();
    struct urt_config c;
    urt_config_init(&c);
    cr_assert_eq(urt_config_from_env(&c), 0, "no URT_ variables: nothing applied");

    setenv("URT_WORKERS", "3", 1);
    setenv("URT_BUSY_WORKER", "true", 1);
    setenv("URT_PLACEMENT", "core", 1);
    setenv("URT_TOPOLOGY", "0;1", 1);
    setenv("URT_WORKER_SUSPEND_TIMEOUT_US", "5000", 1);
    setenv("URT_USE_PREFERRED_WORKER_FOR_CURRENT_THREAD", "off", 1);
    setenv("URT_RING_DISABLE", "16", 1);
    setenv("URT_DEV_THOUSANDTHS_RATIO_CHECK_LOCAL_FIRST", "250", 1);
    setenv("URT_BACKEND", "portable", 1);
    setenv("URT_workers", "9", 1); /* variables are upper case: this one is ignored */
    cr_assert_eq(urt_config_from_env(&c), 9);
    cr_assert_eq(c.backend, URT_BACKEND_PORTABLE);
    cr_assert_eq(c.workers, 3);
    cr_assert(c.busy_worker);
    cr_assert_eq(c.placement, URT_PLACEMENT_CORE);
    cr_assert_str_eq(c.topology, "0;1");
    cr_assert_eq(c.worker_suspend_timeout_us, 5000);
    cr_assert_not(c.use_preferred_worker_for_current_thread);
    cr_assert_eq(c.ring_disable, URT_RING_RINGLESS_MSG);
    cr_assert_eq(c.dev_thousandths_ratio_check_local_first, 250);
    cr_assert_eq(c.stealing_wait, 1, "fields without a variable keep their value");
    char err[256];
    cr_assert_eq(urt_config_validate(&c, err, sizeof(err)), 0, "%s", err);
    clear_urt_env();
    leak_check();
}

Test(config, from_env_rejects_bad_values_naming_the_variable, .timeout = 10)
{
    static const struct {
        const char *var, *value, *field;
    } cases[] = {
        {"URT_WORKERS", "lots", "workers"},
        {"URT_WORKERS", "0", "workers"},
        {"URT_STEALING_WAIT", "-3", "stealing_wait"},
        {"URT_BUSY_WORKER", "perhaps", "busy_worker"},
        {"URT_PLACEMENT", "socket", "placement"},
        {"URT_TOPOLOGY", "0;;1", "topology"},
        {"URT_DEQUE_CAPACITY", "7", "deque_capacity"},
        {"URT_RING_DISABLE", "8192", "ring_disable"},
        {"URT_BACKEND", "epoll", "backend"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        clear_urt_env();
        struct urt_config c;
        urt_config_init(&c);
        setenv(cases[i].var, cases[i].value, 1);
        int r = urt_config_from_env(&c);
        cr_assert_eq(r, -EINVAL, "%s=%s: %d", cases[i].var, cases[i].value, r);
        cr_assert_not_null(strstr(urt_last_error(), cases[i].var), "%s=%s: message \"%s\"", cases[i].var,
                           cases[i].value, urt_last_error());
        cr_assert_not_null(strstr(urt_last_error(), cases[i].field), "%s=%s: message \"%s\"", cases[i].var,
                           cases[i].value, urt_last_error());
    }
    clear_urt_env();
}

/* ---- describe ------------------------------------------------------------------------ */

Test(config, describe_lists_every_field_with_value, .timeout = 10)
{
    struct urt_config c;
    urt_config_init(&c);
    c.workers = 13;
    c.stealing_wait = 4242;
    c.placement = URT_PLACEMENT_CORE;
    c.topology = "0-1;2-3";
    c.busy_worker = true;
    char buf[8192];
    int n = urt_config_describe(&c, buf, sizeof(buf));
    cr_assert_gt(n, 0);
    cr_assert_eq((size_t)n, strlen(buf));
    for (size_t i = 0; i < N_ALL_FIELDS; i++) {
        /* the name at the start of a line */
        char pat[128];
        snprintf(pat, sizeof(pat), "\n%s ", ALL_FIELDS[i]);
        bool first = strncmp(buf, ALL_FIELDS[i], strlen(ALL_FIELDS[i])) == 0 && buf[strlen(ALL_FIELDS[i])] == ' ';
        cr_assert(first || strstr(buf, pat), "describe does not list %s:\n%s", ALL_FIELDS[i], buf);
    }
    /* the config's values appear on their lines */
    static const struct {
        const char *field, *value;
    } vals[] = {{"workers", "13"}, {"stealing_wait", "4242"}, {"placement", "core"}, {"topology", "0-1;2-3"},
                {"busy_worker", "true"}};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        char pat[128];
        snprintf(pat, sizeof(pat), "%s ", vals[i].field);
        const char *line = strstr(buf, pat);
        while (line && line != buf && line[-1] != '\n')
            line = strstr(line + 1, pat);
        cr_assert_not_null(line, "%s", vals[i].field);
        const char *eol = strchr(line, '\n');
        char l[512];
        snprintf(l, sizeof(l), "%.*s", (int)(eol - line), line);
        cr_assert_not_null(strstr(l, vals[i].value), "line \"%s\" lacks value %s", l, vals[i].value);
    }
    /* snprintf semantics: the needed length whatever the buffer */
    char small[16];
    cr_assert_eq(urt_config_describe(&c, small, sizeof(small)), n);
    cr_assert_lt(strlen(small), sizeof(small));
    cr_assert_eq(urt_config_describe(&c, NULL, 0), n);
}

/* A topology override may name only CPUs the process may run on. */
Test(config, topology_cpu_outside_affinity_rejected, .timeout = 30)
{
    struct urt_config c;
    urt_config_init(&c);
    c.workers = 2;
    c.topology = "0;1023";
    urt_runtime *rt = NULL;
    int err = urt_runtime_create(&c, &rt);
    if (err == -ENOSYS || err == -EPERM)
        cr_skip_test("io_uring unavailable");
    cr_assert_eq(err, -EINVAL);
    cr_assert_null(rt);
    cr_assert(strstr(urt_last_error(), "topology") && strstr(urt_last_error(), "1023"), "message: %s",
              urt_last_error());
}
