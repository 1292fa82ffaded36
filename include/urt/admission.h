/*
 * urt/admission.h — the admission limit: at most max_pending_tasks tasks
 * pending runtime-wide.
 *
 * With max_pending_tasks = N > 0 (urt/config.h), at most N tasks are
 * pending: a task is pending from its successful submission
 * until its function returns URT_TASK_DONE or it is cancelled. Every way a
 * task comes in counts: urt_task_submit, urt_spawn*, urt_task_submit_to,
 * urt_spawn_to, urt_lane_submit/spawn, urt_tx_submit/spawn,
 * urt_job_submit/spawn (serial jobs included), and a conditional task's body
 * when the watcher hands it over (it never blocks: at the limit it keeps the
 * passed task and retries every interval). Exempt, with the reason: the
 * runtime's own tasks (lane runners, job teardown and deadline tasks, the
 * log's flush and notification tasks: each serves tasks or commits already
 * admitted, and refusing one would strand them), and log commits
 * (urt_log_commit, urt_tx_commit): a commit is the end of work that was
 * admitted, its memory is the caller's, and the log bounds its own backlog by
 * group commit. Timed submissions (urt_task_submit_at, urt_spawn_at, urt/task.h)
 * count from the call on, while they wait for their time. An I/O
 * continuation (urt/io.h) is exempt: it is the rest of a task that was
 * admitted, and refusing it would lose the operation's result.
 * A yield is not a completion. At the limit a submission fails with -EAGAIN,
 * or, with URT_SUBMIT_BLOCK, waits until a slot frees up. Blocked submitters
 * get slots in the order they blocked (first come, first served: a slot freed
 * while someone waits goes to the oldest waiter, never to a newcomer). A
 * worker never blocks: its URT_SUBMIT_BLOCK submissions fail with -EAGAIN
 * at the limit (a task that resubmits itself still holds its own slot until
 * it returns). Destroying the runtime makes blocked submitters return
 * -ESHUTDOWN. With max_pending_tasks = 0 (the default) nothing is counted.
 */
#ifndef URT_ADMISSION_H
#define URT_ADMISSION_H

#include <urt/common.h>
#include <urt/task.h>

#ifdef __cplusplus
extern "C" {
#endif

struct urt_admission_stats {
    uint64_t limit;       /* max_pending_tasks (0: no limit, everything else 0) */
    uint64_t pending;     /* pending tasks now */
    uint64_t max_pending; /* highest pending count seen */
    uint64_t rejected;    /* submissions that failed with -EAGAIN */
    uint64_t blocked;     /* submissions that had to wait */
    uint64_t waiting;     /* submitters waiting right now */
};

/* Reads the admission counters. Returns 0 or -EINVAL (NULL rt or out). Any
 * thread. */
URT_API int urt_admission_stats(const urt_runtime *rt, struct urt_admission_stats *out);

#ifdef __cplusplus
}
#endif

#endif
