/*
 * runtime/config.c — defaults, validation, text and environment settings.
 *
 * One table (FIELDS) describes every field of struct urt_config: its name,
 * type, range, default and meaning. urt_config_init() (the defaults),
 * validation, urt_config_set(),
 * urt_config_from_env() and urt_config_describe() all walk it, so a field
 * added to the struct and the table is validated, settable from URT_<NAME>
 * and documented at once. Checks that involve more than one field, or a
 * shape (power of two, a topology string), follow the table in validate().
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <urt/config.h>

#include "base/args.h"
#include "runtime/runtime.h"

enum ftype { F_U32, F_U64, F_BOOL, F_ENUM, F_STR };

/* Names of the values of the enum fields (F_ENUM: stored as an int-sized enum,
 * value = index in the list, min..max the valid range). */
static const char *const PLACEMENT_NAMES[] = {"none", "numa", "core", NULL};
static const char *const LOG_SYNC_NAMES[] = {"auto", "strict", "single_flush", "single_write", NULL};
static const char *const BACKEND_NAMES[] = {"auto", "io_uring", "portable", NULL};

struct field {
    const char *name;
    enum ftype type;
    size_t off;
    uint64_t min, max;
    const char *def; /* default, as text (for the table) */
    const char *doc;
    const char *const *names; /* F_ENUM: value names */
};

#define U32(n, lo, hi, d, doc) {#n, F_U32, offsetof(struct urt_config, n), lo, hi, d, doc, NULL}
#define U64(n, lo, hi, d, doc) {#n, F_U64, offsetof(struct urt_config, n), lo, hi, d, doc, NULL}
#define BOOL(n, d, doc) {#n, F_BOOL, offsetof(struct urt_config, n), 0, 1, d, doc, NULL}

static const struct field FIELDS[] = {
    U32(workers, 1, 1024, "online CPUs", "worker threads (fixed for the runtime's life)"),
    {"placement", F_ENUM, offsetof(struct urt_config, placement), 0, 2, "numa",
     "none | numa (spread over nodes, bound to the node's CPUs) | core (one CPU each)", PLACEMENT_NAMES},
    {"topology", F_STR, offsetof(struct urt_config, topology), 0, 0, "(libnuma)",
     "override: nodes separated by ';', each a CPU list, e.g. \"0;1\"", NULL},
    BOOL(busy_worker, "false", "idle workers never suspend"),
    U32(worker_try_count, 1, 100000000, "1000", "empty polls before a worker suspends (the most, with worker_spin_adaptive)"),
    BOOL(worker_spin_adaptive, "true",
         "after a lone wake the spin halves (down to 32 polls) after 4 suspensions in a row >= 500 µs, doubles (up to worker_try_count) after each < 50 µs; a worker fed a stream spins worker_try_count"),
    U64(worker_suspend_timeout_us, 1, 3600000000ull, "1000000", "longest suspension (µs)"),
    U32(task_polling_wait, 0, 1000000, "0", "pacing of every empty poll: 0 none, 1 sched_yield, n>=2 sleep n-2 µs (a spinning worker also yields every 64 empty polls)"),
    U32(stealing_wait, 0, 1000000, "1", "empty local polls before stealing"),
    BOOL(use_preferred_worker_for_current_thread, "true",
         "foreign threads submit to one preferred worker (else round robin per task)"),
    U32(dev_thousandths_ratio_check_local_first, 0, 1000, "100",
        "per mille of picks that look at the main queue before the sticky queue"),
    U32(deque_capacity, 16, 1u << 24, "4096", "initial local deque slots (power of two; grows)"),
    U32(inbox_check_interval, 1, 1000000, "61", "look at the inbox first every n tasks (fairness)"),
    U32(lightweight_job_level, 0, 60, "0", "jobs with work_level <= this run serially on one worker (own lane)"),
    BOOL(lifo_slot, "true",
         "a task submitted by a task (not a job's) waits in its worker's LIFO slot and runs next (no peer can steal it until the submitter returns; false: the deque)"),
    BOOL(lane_balance, "true",
         "a lane activated by a worker goes to the less loaded of the placement choice and a round-robin candidate"),
    U32(ring_entries, 2, 32768, "256", "SQ entries per worker ring (power of two)"),
    U32(ring_cq_entries, 0, 65536, "0", "CQ entries (power of two); 0 = 4 x ring_entries"),
    U32(ring_disable, 0, URT_RING_ALL_FEATURES, "0",
        "ring features not to use: 1 defer_taskrun, 2 coop_taskrun, 4 single_issuer, 8 registered_fd, "
        "16 ringless_msg, 32 ext_arg; tasks' I/O: 64 multishot_accept, 128 multishot_recv, 256 bufring, "
        "512 send_zc, 1024 fixed_accept, 2048 link_timeout"),
    BOOL(sqpoll, "false", "SQPOLL kernel thread per ring (opt-in)"),
    U32(io_fixed_files, 0, 65536, "1024",
        "registered file table per worker (tasks' I/O): lower half urt_io_register_file, upper half "
        "accepts with URT_IO_FIXED_FILE; 0 = none"),
    U32(sqpoll_idle_ms, 1, 60000, "100", "SQPOLL thread idle time (ms)"),
    BOOL(stats_timing, "false", "take timestamps for the latency statistics"),
    U64(watcher_interval_us, 1, 3600000000ull, "1000", "default check interval of conditional tasks (µs)"),
    U64(max_pending_tasks, 0, 1ull << 40, "0", "runtime-wide cap on pending tasks (0 = unlimited)"),
    U64(task_runtime_limit_us, 0, 3600000000ull, "0", "watchdog: report a task running longer (µs; 0 = off)"),
    BOOL(watchdog_abort, "false", "watchdog policy: dump every worker's state, then abort()"),
    /* C12 write-ahead log */
    {"log_dir", F_STR, offsetof(struct urt_config, log_dir), 0, 0, "(none)",
     "log directory: durable commits (urt/log.h) need one; NULL = no log", NULL},
    U64(epoch_duration_us, 10, 10000000, "1000", "epoch (durability marker) timer period, µs"),
    BOOL(o_direct, "false", "log channels written with O_DIRECT (aligned buffers)"),
    U32(log_prealloc_kb, 0, 1u << 22, "4096",
        "zero-filled space kept ahead of each channel's data (KiB; 0 = plain appends)"),
    {"log_sync", F_ENUM, offsetof(struct urt_config, log_sync), 0, 3, "auto",
     "auto (single_write on ext4/xfs/no-CoW btrfs, else strict) | strict (each write's own fdatasync "
     "before its marker) | single_flush (one device flush covers the write and its marker) | single_write "
     "(one O_DIRECT|RWF_DSYNC write carries the records and the marker they make durable)",
     LOG_SYNC_NAMES},
    U32(log_segment_kb, 64, 1u << 24, "65536",
        "a log channel file rolls over into a new segment past this size (KiB); checkpoints delete closed "
        "segments"),
    BOOL(direct_commit_callback, "false",
         "commit callbacks run where the response is reached (a worker's completion, or the thread of "
         "urt_durability_notify) instead of in a new task"),
    U32(log_poll_us, 0, 1000000, "1000",
        "a worker whose log write is in flight polls for its completion instead of suspending, at most this "
        "long (µs; adaptive; 0 = never)"),
    U32(log_channels, 0, 1024, "0",
        "log channels: the first n workers own one each, the others' commits hop to one (0 = one per "
        "worker)"),
    BOOL(log_irq_affinity, "true",
         "with one log channel, its worker runs on the CPU that takes the log device's interrupts, when one CPU "
         "takes at least 90 % of them (a device with one hardware queue)"),
    /* C22 blocking work */
    U32(blocking_threads_max, 1, 32768, "512", "blocking pool threads at most (created on demand)"),
    U32(blocking_threads_min, 0, 32768, "0",
        "blocking pool threads kept (started with the runtime, never retired); at most blocking_threads_max"),
    U32(blocking_keepalive_ms, 1, 86400000, "10000", "an idle blocking pool thread exits after this long (ms)"),
    U64(blocking_queue_max, 1, 1ull << 32, "65536",
        "offloads waiting for a blocking pool thread at most (beyond: -EAGAIN, or a wait with URT_SUBMIT_BLOCK)"),
    /* C23 hosts without io_uring */
    {"backend", F_ENUM, offsetof(struct urt_config, backend), 0, 2, "auto",
     "auto (io_uring; the portable backend where io_uring_setup is refused: EPERM, ENOSYS, no accepted "
     "set-up) | io_uring (or fail) | portable (epoll, eventfds, a file thread pool)",
     BACKEND_NAMES},
};
#define N_FIELDS (sizeof(FIELDS) / sizeof(FIELDS[0]))

static uint32_t online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    return n > 1024 ? 1024 : (uint32_t)n;
}

/* Defaults come from FIELDS' `def` texts, the ones the README's table shows:
 * one place to write a default. A text in parentheses (topology, log_dir:
 * NULL) or "online CPUs" (workers) is not a value. */
URT_API void urt_config_init(struct urt_config *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < N_FIELDS; i++) {
        const struct field *f = &FIELDS[i];
        if (f->def[0] != '(' && f->type != F_STR && strcmp(f->def, "online CPUs")) {
            int rc = urt_config_set(c, f->name, f->def);
            assert(rc == 0); /* every value default parses (test config::defaults_every_field) */
            (void)rc;
        }
    }
    c->workers = online_cpus();
}

static uint64_t get_num(const struct urt_config *c, const struct field *f)
{
    const char *p = (const char *)c + f->off;
    switch (f->type) {
    case F_U32:
        return *(const uint32_t *)p;
    case F_U64:
        return *(const uint64_t *)p;
    case F_BOOL:
        return *(const bool *)p;
    case F_ENUM:
        return (uint64_t)*(const int *)p;
    case F_STR:
        break;
    }
    return 0;
}

static bool is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

/* Parses "0-3,8;4-7" (checks only). Returns 0 or -EINVAL with a message. */
static int check_topology(const char *s)
{
    if (!*s)
        return urt__error(-EINVAL, "topology: empty string (use NULL to discover the topology)");
    int nodes = 0;
    const char *p = s;
    for (;;) {
        int cpus = 0;
        for (;;) {
            char *end;
            if (!isdigit((unsigned char)*p))
                return urt__error(-EINVAL, "topology: expected a CPU number at \"%s\"", p);
            unsigned long a = strtoul(p, &end, 10), b = a;
            p = end;
            if (*p == '-') {
                p++;
                if (!isdigit((unsigned char)*p))
                    return urt__error(-EINVAL, "topology: expected a CPU number after '-' at \"%s\"", p);
                b = strtoul(p, &end, 10);
                p = end;
            }
            if (a > b || b >= CPU_SETSIZE)
                return urt__error(-EINVAL, "topology: bad CPU range %lu-%lu (CPUs are 0..%d)", a, b, CPU_SETSIZE - 1);
            cpus += (int)(b - a + 1);
            if (*p != ',')
                break;
            p++;
        }
        if (cpus == 0)
            return urt__error(-EINVAL, "topology: node %d has no CPU", nodes);
        nodes++;
        if (*p == '\0')
            break;
        if (*p != ';')
            return urt__error(-EINVAL, "topology: unexpected '%c' (nodes are separated by ';')", *p);
        p++;
    }
    return 0;
}

/* Every check; a failure is recorded with urt__error (base/error.h). */
static int validate(const struct urt_config *c)
{
    if (!c)
        return urt__error(-EINVAL, "config: NULL");
    for (size_t i = 0; i < N_FIELDS; i++) {
        const struct field *f = &FIELDS[i];
        if (f->type == F_STR)
            continue;
        uint64_t v = get_num(c, f);
        if (v < f->min || v > f->max)
            return urt__error(-EINVAL, "%s: %" PRIu64 " is out of range (%" PRIu64 "..%" PRIu64 ")", f->name, v,
                              f->min, f->max);
    }
    if (!is_pow2(c->ring_entries))
        return urt__error(-EINVAL, "ring_entries: %u is not a power of two", c->ring_entries);
    if (c->ring_cq_entries && (!is_pow2(c->ring_cq_entries) || c->ring_cq_entries < c->ring_entries))
        return urt__error(-EINVAL, "ring_cq_entries: %u must be 0 or a power of two >= ring_entries (%u)",
                          c->ring_cq_entries, c->ring_entries);
    if (!c->ring_cq_entries && 4ull * c->ring_entries > 65536)
        return urt__error(-EINVAL, "ring_entries: %u needs ring_cq_entries set (4 x ring_entries exceeds 65536)",
                          c->ring_entries);
    if (!is_pow2(c->deque_capacity))
        return urt__error(-EINVAL, "deque_capacity: %u is not a power of two", c->deque_capacity);
    if (c->blocking_threads_min > c->blocking_threads_max)
        return urt__error(-EINVAL, "blocking_threads_min: %u exceeds blocking_threads_max (%u)",
                          c->blocking_threads_min, c->blocking_threads_max);
    if (c->watchdog_abort && c->task_runtime_limit_us == 0)
        return urt__error(-EINVAL, "watchdog_abort: true needs task_runtime_limit_us > 0 (the watchdog is off)");
    if (c->topology && check_topology(c->topology))
        return -EINVAL;
    if (c->log_dir && !*c->log_dir)
        return urt__error(-EINVAL, "log_dir: empty path (NULL means no log)");
    if (c->log_sync == URT_LOG_SYNC_SINGLE_FLUSH && c->log_prealloc_kb == 0)
        return urt__error(-EINVAL,
                          "log_sync: single_flush needs log_prealloc_kb > 0 (appending writes change metadata)");
    if (c->log_sync == URT_LOG_SYNC_SINGLE_WRITE && c->log_prealloc_kb == 0)
        return urt__error(-EINVAL, "log_sync: single_write needs log_prealloc_kb > 0 (its marker claims live in "
                                   "preallocated, zero-filled space)");
    if (c->backend == URT_BACKEND_PORTABLE && c->sqpoll)
        return urt__error(-EINVAL, "sqpoll: an io_uring feature, and backend is portable (no io_uring)");
    if (URT_CHECK_RESERVED("urt_config_validate", "cfg", c))
        return -EINVAL;
    return 0;
}

/* err/err_len is kept for callers written before urt_last_error(): the
 * buffer gets a copy of the one recorded message. */
URT_API int urt_config_validate(const struct urt_config *c, char *err, size_t len)
{
    int rc = validate(c);
    if (rc && err && len)
        snprintf(err, len, "%s", urt_last_error());
    return rc;
}

/* ---- text ------------------------------------------------------------------------------ */

static const struct field *find_field(const char *name)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcasecmp(FIELDS[i].name, name) == 0)
            return &FIELDS[i];
    return NULL;
}

static int parse_u64(const char *v, uint64_t *out)
{
    char *end;
    if (!*v || *v == '-' || isspace((unsigned char)*v))
        return -EINVAL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end)
        return -EINVAL;
    *out = x;
    return 0;
}

/* Topology strings set from text live as long as the process (a config is a
 * plain struct with no destructor); each distinct string is kept once. */
static pthread_mutex_t strings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kept {
    struct kept *next;
    char s[];
} *kept_strings;

static const char *keep_string(const char *v)
{
    pthread_mutex_lock(&strings_lock);
    struct kept *k;
    for (k = kept_strings; k; k = k->next)
        if (strcmp(k->s, v) == 0)
            break;
    if (!k && (k = malloc(sizeof(*k) + strlen(v) + 1))) {
        strcpy(k->s, v);
        k->next = kept_strings;
        kept_strings = k;
    }
    pthread_mutex_unlock(&strings_lock);
    return k ? k->s : NULL;
}

URT_API int urt_config_set(struct urt_config *c, const char *name, const char *v)
{
    if (!c || !name || !v)
        return urt__error(-EINVAL, "config: NULL argument");
    const struct field *f = find_field(name);
    if (!f)
        return urt__error(-ENOENT, "config: unknown field \"%s\"", name);
    char *p = (char *)c + f->off;
    uint64_t x;
    switch (f->type) {
    case F_BOOL:
        if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
            *(bool *)p = true;
        else if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
            *(bool *)p = false;
        else
            return urt__error(-EINVAL, "%s: \"%s\" is not a boolean (true/false)", f->name, v);
        return 0;
    case F_ENUM: {
        char list[128] = "";
        for (int i = 0; f->names[i]; i++) {
            if (!strcasecmp(v, f->names[i])) {
                *(int *)p = i;
                return 0;
            }
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "", f->names[i]);
        }
        return urt__error(-EINVAL, "%s: \"%s\" is not one of %s", f->name, v, list);
    }
    case F_STR: {
        if (!*v) {
            *(const char **)p = NULL;
            return 0;
        }
        if (f->off == offsetof(struct urt_config, topology) && check_topology(v))
            return -EINVAL;
        const char *k = keep_string(v);
        if (!k)
            return urt__error(-ENOMEM, "%s: out of memory", f->name);
        *(const char **)p = k;
        return 0;
    }
    case F_U32:
    case F_U64:
        if (parse_u64(v, &x) || x < f->min || x > f->max)
            return urt__error(-EINVAL, "%s: \"%s\" is not a number in %" PRIu64 "..%" PRIu64, f->name, v, f->min,
                              f->max);
        if (f->type == F_U32)
            *(uint32_t *)p = (uint32_t)x;
        else
            *(uint64_t *)p = x;
        return 0;
    }
    return -EINVAL;
}

URT_API int urt_config_from_env(struct urt_config *c)
{
    int applied = 0;
    for (size_t i = 0; i < N_FIELDS; i++) {
        char var[96] = "URT_";
        size_t j = 4;
        for (const char *n = FIELDS[i].name; *n && j + 1 < sizeof(var); n++)
            var[j++] = (char)toupper((unsigned char)*n);
        var[j] = '\0';
        const char *v = getenv(var);
        if (!v)
            continue;
        int err = urt_config_set(c, FIELDS[i].name, v);
        if (err) {
            char msg[256];
            snprintf(msg, sizeof(msg), "%s", urt_last_error());
            return urt__error(err, "environment %s: %s", var, msg);
        }
        applied++;
    }
    return applied;
}

static void value_text(const struct urt_config *c, const struct field *f, char *buf, size_t len)
{
    switch (f->type) {
    case F_BOOL:
        snprintf(buf, len, "%s", get_num(c, f) ? "true" : "false");
        break;
    case F_ENUM: {
        uint64_t v = get_num(c, f);
        snprintf(buf, len, "%s", v <= f->max ? f->names[v] : "?");
        break;
    }
    case F_STR: {
        const char *s = *(const char *const *)((const char *)c + f->off);
        snprintf(buf, len, "%s", s ? s : f->def);
        break;
    }
    default:
        snprintf(buf, len, "%" PRIu64, get_num(c, f));
    }
}

URT_API int urt_config_describe(const struct urt_config *c, char *buf, size_t len)
{
    size_t off = 0;
    int total = 0;
    for (size_t i = 0; i < N_FIELDS; i++) {
        char val[64];
        value_text(c, &FIELDS[i], val, sizeof(val));
        int n = snprintf(off < len ? buf + off : NULL, off < len ? len - off : 0, "%-42s %-12s %-12s %s\n",
                         FIELDS[i].name, val, FIELDS[i].def, FIELDS[i].doc);
        if (n < 0)
            return -EINVAL;
        total += n;
        off += (size_t)n;
    }
    return total;
}
