/*
 * tools/urt-load/workloads.h — the registry of urt-load's workloads.
 *
 * A workload family is one file, wl_<family>.c, that exports a table
 *
 *     const struct workload WL_<FAMILY>[] = {
 *         {.name = "...", .metrics = ..., .run = ...},
 *         ...
 *         {0},                          // terminator: name == NULL
 *     };
 *
 * main.c walks every table listed in WORKLOAD_FAMILIES (below) for the
 * per-process protocol (`urt-load <name>`), --list, --help, and the default
 * run (every workload, each in a fresh child process, in table order).
 *
 * To add a family: write wl_<family>.c, add it to urt_load_sources in
 * tools/meson.build, declare its table below and append it to
 * WORKLOAD_FAMILIES. Nothing else changes.
 *
 * Contract of one entry (all called on the external thread, once per
 * process, and only for the workload the process was started for):
 *  1. configure (optional) adjusts the configuration after urt_config_init()
 *     and before the URT_* environment variables and WORKERS are applied
 *     (so a user can still override it), e.g. a log directory. Strings it
 *     stores must live as long as the process (static storage, or set them
 *     with urt_config_set(), which copies). Returns 0, or non-zero after
 *     printing a message on stderr (the process exits 2).
 *  2. The runtime is created with exactly WORKERS workers; urt-load sleeps
 *     START_SLEEP_MS, then calls run(rt, name). The calling thread is the
 *     external thread: it must never run tasks.
 *  3. run prints the result lines (measure.h) and returns 0, or 1 when a
 *     correctness check failed. It must leave no task of its own queued or
 *     running when it returns (urt-load then destroys the runtime in drain
 *     mode; memory the tasks use must outlive that).
 *  4. metrics lists the metric names run prints, in order (NULL-terminated);
 *     the summary table shows a missing one as such.
 *  5. settings (optional, NULL-terminated) lists the numeric environment
 *     variables run reads (measure.h struct wl_setting; run reads each with
 *     measure_setting). main.c checks every one of them before the runtime
 *     exists, so a bad value exits 2 with nothing to tear down (from inside
 *     run, the exit left the runtime's memory to the leak checker).
 */
#ifndef URT_LOAD_WORKLOADS_H
#define URT_LOAD_WORKLOADS_H

#include <urt/urt.h>

#define WORKLOAD_MAX_METRICS 8

struct wl_setting; /* measure.h */

struct workload {
    const char *name;                                  /* NULL ends a table */
    const char *summary;                               /* one line for --help */
    const char *metrics[WORKLOAD_MAX_METRICS + 1];     /* metric names, NULL-terminated (rule 4) */
    int (*configure)(struct urt_config *cfg);          /* optional, see rule 1 */
    int (*run)(urt_runtime *rt, const char *name);     /* rule 2 and 3 */
    const struct wl_setting *const *settings;          /* optional, NULL-terminated: rule 5 */
};

/* ---- the families, in the order of the default run ------------------------ */
extern const struct workload WL_CORE[]; /* wl_core.c: docs/benchmarks.md 3.1-3.7 */
extern const struct workload WL_STICKY[]; /* wl_sticky.c: docs/benchmarks.md 3.8 */
extern const struct workload WL_COMMIT[]; /* wl_commit.c: docs/benchmarks.md 3.9 */
extern const struct workload WL_GRAPH[]; /* wl_graph.c: docs/benchmarks.md 3.10, 3.11, 3.15 */
extern const struct workload WL_IO[]; /* wl_io.c: docs/benchmarks.md 3.13 */
/* commit_stored_c<N> / commit_available_c<N> for any N (1..4096) and the bare
 * names (N from CLIENTS, default 16); NULL for anything else. */
const struct workload *commit_workload_for(const char *name);
extern const struct workload WL_BATCH[]; /* wl_batch.c: docs/benchmarks.md 3.12 */
extern const struct workload WL_BLOCKING[]; /* wl_blocking.c: docs/benchmarks.md 3.14 */
extern const struct workload WL_DEADLINE[]; /* wl_deadline.c: docs/benchmarks.md 3.16 */

#define WORKLOAD_FAMILIES WL_CORE, WL_STICKY, WL_COMMIT, WL_GRAPH, WL_IO, WL_BATCH, WL_BLOCKING, WL_DEADLINE

#endif
