/*
 * urt/config.h — the runtime's configuration.
 *
 * One struct with every knob. urt_config_init() sets every default (the
 * jogasaki/tateyama defaults where they exist); urt_runtime_create() validates
 * the whole struct and rejects any bad value with -EINVAL and a message naming
 * the field (urt_last_error()).
 *
 * Every field also has a text name (the C field name). urt_config_set() sets a
 * field from text and urt_config_from_env() reads URT_<NAME> variables (upper
 * case, e.g. URT_WORKERS=4, URT_BUSY_WORKER=true), so tools can be tuned
 * without recompiling. urt_config_describe() lists the fields with their
 * defaults.
 */
#ifndef URT_CONFIG_H
#define URT_CONFIG_H

#include <urt/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where worker threads run. */
enum urt_placement {
    URT_PLACEMENT_NONE = 0, /* no binding: the kernel decides */
    URT_PLACEMENT_NUMA = 1, /* default: workers spread round-robin over NUMA nodes,
                               each bound to its node's CPUs, its structures on its node */
    URT_PLACEMENT_CORE = 2, /* one CPU per worker (round-robin over the allowed CPUs) */
};

/* How the log makes a group commit durable (docs/durability.md). */
enum urt_log_sync {
    URT_LOG_SYNC_AUTO = 0,         /* default: single_write where the file system keeps its
                                      promise (ext4, xfs, btrfs with no-CoW log files, when
                                      preallocation is on and O_DIRECT works; single_flush
                                      there without O_DIRECT), strict everywhere else */
    URT_LOG_SYNC_STRICT = 1,       /* each log write's own fdatasync completes before the
                                      marker that covers it is written to the epoch file */
    URT_LOG_SYNC_SINGLE_FLUSH = 2, /* write(log) -> sync_file_range -> epoch slot ->
                                      fdatasync(epochs): one device flush per group; only where
                                      log writes overwrite allocated blocks in place */
    URT_LOG_SYNC_SINGLE_WRITE = 3, /* one O_DIRECT write with RWF_DSYNC per group into
                                      preallocated, zero-filled space, carrying the durable
                                      marker it makes true (a claim): one device write and one
                                      flush, no epoch-file write while one channel is active */
};

/* Which backend the workers wait, wake and do I/O with (README, "Running
 * where io_uring is disabled"; docs/io.md). */
enum urt_backend {
    URT_BACKEND_AUTO = 0,     /* default: io_uring; the portable backend only where the ring is
                                 unavailable (io_uring_setup refused with EPERM, e.g. by a
                                 container's seccomp profile or kernel.io_uring_disabled; ENOSYS;
                                 or no ring set-up this kernel accepts), never on a resource
                                 error (ENOMEM, EMFILE stay errors), nor with sqpoll set (an
                                 io_uring feature: its refusal stays an error) */
    URT_BACKEND_IO_URING = 1, /* io_uring or fail (-EPERM, -ENOSYS, ... with a message) */
    URT_BACKEND_PORTABLE = 2, /* epoll, eventfds and a file thread pool, even where io_uring
                                 works: slower, same contracts (or a documented -EOPNOTSUPP) */
};

/* Ring features urt must not use even where the kernel offers them
 * (ring_disable bit set). Used to test the fallbacks, and by users who want to. */
enum urt_ring_feature {
    URT_RING_DEFER_TASKRUN = 1u << 0, /* IORING_SETUP_DEFER_TASKRUN (+ SINGLE_ISSUER) */
    URT_RING_COOP_TASKRUN = 1u << 1,  /* IORING_SETUP_COOP_TASKRUN + TASKRUN_FLAG */
    URT_RING_SINGLE_ISSUER = 1u << 2, /* IORING_SETUP_SINGLE_ISSUER */
    URT_RING_REGISTERED_FD = 1u << 3, /* io_uring_register_ring_fd() */
    URT_RING_RINGLESS_MSG = 1u << 4,  /* IORING_REGISTER_SEND_MSG_RING for threads that are not workers */
    URT_RING_EXT_ARG = 1u << 5,       /* timeouts passed to io_uring_enter (else a timeout SQE) */
    /* tasks' I/O (urt/io.h, URT_IO_FEAT_* << 6): each forbidden one falls back */
    URT_RING_MULTISHOT_ACCEPT = 1u << 6, /* multishot accept (else one accept re-armed per connection) */
    URT_RING_MULTISHOT_RECV = 1u << 7,   /* multishot receive into a buffer ring (else readiness + recv) */
    URT_RING_BUFRING = 1u << 8,          /* provided buffer rings (else the pool, taken at completion) */
    URT_RING_SEND_ZC = 1u << 9,          /* zero-copy send (else a copy) */
    URT_RING_FIXED_ACCEPT = 1u << 10,    /* accept into the file table (else accept, then register) */
    URT_RING_LINK_TIMEOUT = 1u << 11,    /* linked timeouts (else a timer that cancels the operation) */
    URT_RING_ALL_FEATURES = (1u << 12) - 1,
};

struct urt_config {
    /* --- worker pool ------------------------------------------------- */
    uint32_t workers;               /* worker threads, 1..1024; default: online CPUs */
    enum urt_placement placement;   /* default URT_PLACEMENT_NUMA */
    /* NULL: the topology is discovered with libnuma. Otherwise a list of
     * nodes separated by ';', each a CPU list ("0-3,8"), e.g. "0;1" = two nodes
     * with one CPU each. Lets multi-node placement be tested on one node. */
    const char *topology;

    /* --- suspend and wake -------------------------------------------- */
    bool busy_worker;               /* true: idle workers never suspend (default false) */
    uint32_t worker_try_count;      /* empty polls before suspending (default 1000); with
                                       worker_spin_adaptive the most a worker makes */
    bool worker_spin_adaptive;      /* true (default): after a lone task since its wake a
                                       worker spins a budget that halves (down to 32 polls)
                                       after 4 suspensions in a row that lasted >= 500 µs and
                                       doubles (up to worker_try_count) after each one < 50 µs,
                                       so a worker parked between rare requests spends little
                                       CPU spinning for them; a worker fed more than one task
                                       since its wake (a stream) spins worker_try_count; false:
                                       always worker_try_count */
    uint64_t worker_suspend_timeout_us; /* longest suspension, µs (default 1,000,000) */
    uint32_t task_polling_wait;     /* pacing of empty polls: 0 none, 1 sched_yield,
                                       n>=2 sleep n-2 µs (default 0) */

    /* --- queues, stealing, placement --------------------------------- */
    uint32_t stealing_wait;         /* empty local polls before stealing (default 1) */
    bool use_preferred_worker_for_current_thread; /* default true */
    uint32_t dev_thousandths_ratio_check_local_first; /* per mille of picks that look at the
                                       main queue before the sticky queue (default 100) */
    uint32_t deque_capacity;        /* initial local deque slots, power of two (default 4096;
                                       the deque grows when full) */
    uint32_t inbox_check_interval;  /* a worker looks at its inbox before its own deque
                                       every n tasks, for fairness (default 61); when the
                                       inbox is empty it runs its deque's oldest task
                                       instead if no thief took one since the last look,
                                       so a task that keeps spawning its successor cannot
                                       starve the tasks under it */

    /* --- lanes and hybrid scheduling --------------------------------- */
    uint32_t lightweight_job_level; /* jobs with work_level <= this run serially on one
                                       worker through their own lane (0..60, default 0) */
    bool lane_balance;              /* a lane a worker activates goes to the worker with fewer
                                       active lanes among the placement rule's choice and
                                       one round-robin candidate (default true); a lane
                                       activated from another thread always goes to the
                                       placement rule's choice */

    /* --- rings ------------------------------------------------------- */
    uint32_t ring_entries;          /* SQ entries per worker ring, power of two (default 256) */
    uint32_t ring_cq_entries;       /* CQ entries; 0 = 4 x ring_entries */
    uint32_t ring_disable;          /* enum urt_ring_feature bits not to use (default 0) */
    bool sqpoll;                    /* opt-in SQPOLL kernel thread per ring (default false) */
    uint32_t io_fixed_files;        /* registered file table per worker (urt/io.h; default 1024,
                                       0 = none): urt_io_register_file takes the lower half,
                                       URT_IO_FIXED_FILE accepts the upper half */
    uint32_t sqpoll_idle_ms;        /* SQPOLL thread idle time (default 100) */

    /* --- statistics -------------------------------------------------- */
    bool stats_timing;              /* take timestamps for latency statistics (default false) */

    /* --- watcher, admission, watchdog (urt/watcher.h, admission.h, watchdog.h) --- */
    uint64_t watcher_interval_us;   /* default check interval of conditional tasks, µs (default 1000) */
    uint64_t max_pending_tasks;     /* runtime-wide cap on pending tasks; 0 = unlimited (default 0) */
    uint64_t task_runtime_limit_us; /* watchdog: report a task running longer, µs; 0 = off (default 0) */
    bool watchdog_abort;            /* watchdog policy: dump every worker's state, then abort() (default false) */

    /* --- write-ahead log (urt/log.h) --------------------------------- */
    const char *log_dir;            /* log directory; NULL (default): no log */
    uint64_t epoch_duration_us;     /* epoch timer period, µs (default 1000) */
    bool o_direct;                  /* channel files opened with O_DIRECT (default false) */
    uint32_t log_prealloc_kb;       /* zero-filled space ahead of each channel's data, KiB
                                       (default 4096; 0 = plain appends, and never single_flush) */
    enum urt_log_sync log_sync;     /* how a group commit is made durable (default auto;
                                       docs/durability.md) */
    uint32_t log_segment_kb;        /* a channel file rolls over into a new segment past this
                                       size, KiB (default 65536); urt_log_checkpoint deletes
                                       closed segments it covers */
    bool direct_commit_callback;    /* commit callbacks run where the response is reached
                                       (urt/log.h) instead of in a new task (default false) */
    uint32_t log_poll_us;           /* a worker whose log write is in flight polls its ring for
                                       the completion instead of suspending, for at most this
                                       long (µs; adaptive: about twice its recent writes' time);
                                       0 = never (default 1000) */
    uint32_t log_channels;          /* log channels (files, writers): the first log_channels
                                       workers own one each, the others' commits hop to
                                       channel (worker % log_channels) in order; 0 (default) =
                                       one per worker; more than workers = one per worker.
                                       Fewer channels: a stored commit waits for fewer writes
                                       (docs/durability.md) */

    /* --- blocking work (urt/blocking.h) ------------------------------ */
    uint32_t blocking_threads_max;  /* pool threads at most, 1..32768 (default 512, as Tokio) */
    uint32_t blocking_threads_min;  /* pool threads kept (started with the runtime, never
                                       retired), 0..blocking_threads_max (default 0) */
    uint32_t blocking_keepalive_ms; /* an idle pool thread exits after this long, ms (default
                                       10000, as Tokio) */
    uint64_t blocking_queue_max;    /* offloads waiting for a pool thread at most; beyond it
                                       -EAGAIN or, with URT_SUBMIT_BLOCK, a wait (default 65536) */

    /* --- backend ----------------------------------------------------- */
    enum urt_backend backend;       /* auto (default) | io_uring | portable: see enum urt_backend
                                       and urt_runtime_backend() */

    /* --- added in reserved space (the struct keeps its size and offsets) --- */
    bool lifo_slot;                 /* a task that a task submits (urt_task_submit, urt_spawn;
                                       not a job's task) waits in its worker's LIFO slot and runs
                                       next, without the deque's fence; no peer can steal it
                                       until the submitting task returns (default true; false:
                                       the deque, stealable at once) */
    bool log_irq_affinity;          /* with one log channel (log_channels = 1), its worker runs on
                                       the CPU that takes the log device's interrupts, when one
                                       CPU takes at least 90 % of them (a device with one
                                       hardware queue) and the worker may run there: a log
                                       write's completion then wakes nothing on another CPU
                                       (default true; docs/durability.md) */

    uint32_t reserved[6];           /* must be zero */
};

/* Sets every field to its default. Any thread. */
URT_API void urt_config_init(struct urt_config *cfg);

/* Checks every field; returns 0 or -EINVAL with a message naming the field,
 * read with urt_last_error() (pass err NULL, err_len 0). err, when not NULL,
 * gets a copy of that message (at most err_len bytes with the final '\0'):
 * kept for callers written before urt_last_error(). Any thread. */
URT_API int urt_config_validate(const struct urt_config *cfg, char *err, size_t err_len);

/* Sets the field called name (e.g. "workers") from text. Returns 0, or
 * -ENOENT for an unknown name, -EINVAL for a value that does not parse or is
 * out of range (message names the field). The topology string is copied into
 * storage owned by the config module and stays valid until the process ends.
 * Any thread (not concurrently on the same cfg). */
URT_API int urt_config_set(struct urt_config *cfg, const char *name, const char *value);

/* For every field, reads the environment variable URT_<NAME> if set.
 * Returns the number of variables applied or the first error. Any thread. */
URT_API int urt_config_from_env(struct urt_config *cfg);

/* Writes a table of every field (name, value of cfg, default, meaning) to buf;
 * returns the length it needed (snprintf-like). Any thread. */
URT_API int urt_config_describe(const struct urt_config *cfg, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
