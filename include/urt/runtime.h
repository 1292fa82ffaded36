/*
 * urt/runtime.h — creating and destroying a runtime; what the kernel offered.
 *
 * Lifecycle:
 *  1. urt_runtime_create() starts config.workers worker threads; each creates
 *     its own io_uring ring in its own thread. The pool never grows.
 *  2. Tasks may be submitted from any thread until destroy starts.
 *  3. urt_runtime_destroy() is called once, from a thread that is not a
 *     worker of the runtime. In URT_SHUTDOWN_DRAIN mode it runs every queued
 *     task (and the tasks those submit, timed ones at their time) before
 *     stopping, but not their I/O: operations in flight are cancelled (their
 *     continuations run, with -ECANCELED where they did not complete) and a
 *     new urt_io_<op>() fails with -ESHUTDOWN (urt/io.h rule 9) — an
 *     operation may wait for ever (a receive on an idle connection), and a
 *     continuation that submits the next one would never let the drain end; in
 *     URT_SHUTDOWN_CANCEL mode running tasks finish and every task still
 *     queued gets its cancel callback exactly once. Submissions from other
 *     threads after destroy started fail with -ESHUTDOWN. A drain waits for
 *     every task to finish: a task that yields forever (or a tree that never
 *     stops growing) keeps it from returning; use CANCEL for those.
 *  4. Destroying NULL is a no-op.
 */
#ifndef URT_RUNTIME_H
#define URT_RUNTIME_H

#include <urt/common.h>
#include <urt/config.h>

#ifdef __cplusplus
extern "C" {
#endif

enum urt_shutdown {
    URT_SHUTDOWN_DRAIN = 0,
    URT_SHUTDOWN_CANCEL = 1,
};

/* Creates a runtime. cfg NULL means all defaults. Returns 0 and *out, or
 * -EINVAL (bad configuration, see urt_last_error()), -ENOMEM, or the error of
 * the kernel call that failed (e.g. -ENOSYS without io_uring; -ENOSPC when
 * log_dir is on a full disk: a session writes new channel files, the message
 * says to free space, the log is left as it was and urt_log_recover works
 * there). Any thread. */
URT_API int urt_runtime_create(const struct urt_config *cfg, urt_runtime **out);

/* Stops the runtime (see the lifecycle above). Returns the number of tasks
 * cancelled (0 in drain mode), or -EINVAL for an unknown mode, -EDEADLK when
 * called from one of its own workers or its watcher thread (a conditional
 * task's check or cancel callback). Not from a worker of rt. */
URT_API int urt_runtime_destroy(urt_runtime *rt, enum urt_shutdown mode);

/* The configuration the runtime runs with (after defaults). Any thread. */
URT_API const struct urt_config *urt_runtime_config(const urt_runtime *rt);

/* What the start-up probe found. */
struct urt_features {
    uint32_t setup_flags;      /* IORING_SETUP_* flags the worker rings use */
    uint32_t kernel_features;  /* IORING_FEAT_* the kernel reported */
    bool defer_taskrun;        /* rings use DEFER_TASKRUN (+ SINGLE_ISSUER) */
    bool coop_taskrun;         /* rings use COOP_TASKRUN (fallback) */
    bool single_issuer;
    bool registered_ring_fd;   /* io_uring_register_ring_fd() worked */
    bool ringless_msg;         /* threads that are not workers wake through
                                  IORING_REGISTER_SEND_MSG_RING (no ring of their own) */
    bool ext_arg;              /* IORING_FEAT_EXT_ARG: timeouts without a timeout SQE */
    bool sqpoll;
    uint8_t backend;           /* enum urt_backend (urt/config.h): URT_BACKEND_IO_URING or
                                  URT_BACKEND_PORTABLE, the one that runs (never auto; 0 in an all-zero
                                  struct). The fields above are io_uring's: all zero on the portable
                                  backend. (It sits where padding was: size and offsets unchanged.) */
    uint32_t numa_nodes;       /* nodes of the topology in use */
    uint32_t io_features;      /* URT_IO_FEAT_* (urt/io.h) tasks' I/O uses: found by the probe, minus
                                  ring_disable; a missing one falls back (the portable backend
                                  emulates them all: every one not in ring_disable) */
};

/* Fills *out (all zero for a NULL rt; nothing for a NULL out). Any thread. */
URT_API void urt_runtime_features(const urt_runtime *rt, struct urt_features *out);

/* Which backend the runtime runs on: URT_BACKEND_IO_URING or
 * URT_BACKEND_PORTABLE (never auto; urt/config.h, enum urt_backend), and,
 * when why is not NULL, a line saying why (e.g. "backend=auto: io_uring_setup
 * refused (EPERM: a seccomp profile or kernel.io_uring_disabled)"), valid
 * while rt lives. The same line is written to the log directory's
 * sessions.log. -EINVAL for a NULL rt. Any thread. */
URT_API int urt_runtime_backend(const urt_runtime *rt, const char **why);

/* One line describing features, beginning with the backend that runs. On
 * io_uring, e.g. "backend=io_uring setup=SINGLE_ISSUER|DEFER_TASKRUN
 * ringfd=registered wake-from-foreign=ringless ext_arg=yes numa_nodes=1
 * io=multishot_accept|multishot_recv|bufring|send_zc|fixed_accept|link_timeout";
 * on the portable backend, which has no ring, none of io_uring's fields:
 * "backend=portable wait=epoll wake=eventfd files=thread-pool numa_nodes=1
 * io=multishot_accept|...|link_timeout" (the I/O features emulated). A
 * struct whose backend is 0 (all zero, or filled by hand) is described by
 * its io_uring fields, without a backend= field. snprintf semantics;
 * -EINVAL for a NULL f, or a NULL buf with len > 0. Any thread. */
URT_API int urt_features_describe(const struct urt_features *f, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
