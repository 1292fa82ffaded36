/*
 * urt/deprecated.h — names renamed on the way to urt 1.0, kept for one
 * release. Each is still exported and behaves exactly as the function that
 * replaced it (a failing call's message, urt_last_error(), names the new
 * function); a call compiles with a deprecation warning that names the
 * replacement. They go away with the next major release (liburt.so.2).
 *
 * - urt_io_init2 is urt_io_init_ex: an extended form ends in _ex, as
 *   urt_spawn_ex.
 * - urt_dispatch_done, urt_dispatch_nap, urt_dispatch_fail and
 *   urt_dispatch_sql are urt_dispatch_run_done, urt_dispatch_run_nap,
 *   urt_dispatch_run_fail and urt_dispatch_run_sql: they take a run, as
 *   urt_dispatch_run_strand and urt_dispatch_run_job.
 * - urt_graph_output is urt_graph_add_output, the same arguments.
 * - urt_graph_input(g, exchange, step) is urt_graph_add_input(g, step,
 *   exchange): both connecting calls take the step, then the exchange.
 *
 * Changed in place, with no old name to keep: urt_task_submit_to(rt, worker,
 * task, flags) and urt_task_submit_at(rt, due_ns, task, flags) take the
 * worker or the time right after rt, as urt_spawn_to and urt_spawn_at do
 * (before 1.0: the task first). A call in the old order passes a pointer as
 * an integer, which every C compiler diagnoses (GCC before 14 with a
 * warning: build with -Werror=int-conversion to make it an error); a
 * program built against liburt.so.0 keeps using that library (the soname
 * is liburt.so.1 now). urt_task_submit_at and urt_spawn_at moved from
 * urt/io.h to urt/task.h; urt/limits.h became urt/admission.h and
 * urt/watchdog.h (urt/limits.h still includes both, for one release).
 */
#ifndef URT_DEPRECATED_H
#define URT_DEPRECATED_H

#include <urt/common.h>
#include <urt/dispatch.h>
#include <urt/graph.h>
#include <urt/io.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Deprecated: urt_io_init_ex (urt/io.h), the same arguments. */
URT_API URT_DEPRECATED("use urt_io_init_ex") int urt_io_init2(struct urt_io *io, urt_io_fn *fn, void *arg,
                                                                unsigned flags);

/* Deprecated: urt_dispatch_run_done, urt_dispatch_run_nap,
 * urt_dispatch_run_fail, urt_dispatch_run_sql (urt/dispatch.h), the same
 * arguments. Present when urt is built with dispatch (libpq). */
URT_API URT_DEPRECATED("use urt_dispatch_run_done") int urt_dispatch_done(struct urt_dispatch_run *run,
                                                                           const char *exitval);
URT_API URT_DEPRECATED("use urt_dispatch_run_nap") int urt_dispatch_nap(struct urt_dispatch_run *run, uint64_t ns);
URT_API URT_DEPRECATED("use urt_dispatch_run_fail") int urt_dispatch_fail(struct urt_dispatch_run *run,
                                                                           const char *reason);
URT_API URT_DEPRECATED("use urt_dispatch_run_sql") int urt_dispatch_sql(struct urt_dispatch_run *run,
                                                                         const char *sql,
                                                                         const char *const *params,
                                                                         uint32_t n_params,
                                                                         urt_dispatch_sql_fn *fn, void *arg);

/* Deprecated: urt_graph_add_output (urt/graph.h), the same arguments. */
URT_API URT_DEPRECATED("use urt_graph_add_output") int urt_graph_output(urt_graph *g, int step, int exchange);

/* Deprecated: urt_graph_add_input (urt/graph.h), which takes the step
 * before the exchange: urt_graph_input(g, exchange, step) is
 * urt_graph_add_input(g, step, exchange). */
URT_API URT_DEPRECATED("use urt_graph_add_input: step first") int urt_graph_input(urt_graph *g, int exchange,
                                                                                    int step);

#ifdef __cplusplus
}
#endif

#endif
