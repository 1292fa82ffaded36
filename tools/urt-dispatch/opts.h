/*
 * tools/urt-dispatch/opts.h — urt-dispatch's command line (opts.c) and the
 * commands that only read the database (status.c).
 */
#ifndef URT_DISPATCH_TOOL_OPTS_H
#define URT_DISPATCH_TOOL_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include <urt/urt.h>

struct tool_opts {
    const char *cmd;             /* migrate, enqueue, run, status, verify, failed, cancel, requeue */
    bool help;
    struct urt_dispatch_options dopt;
    const char *kinds;           /* run */
    uint32_t workers;            /* run: 0 = the runtime's default (URT_WORKERS) */
    uint64_t watchdog_ms;        /* run: task_runtime_limit_us (default lease / 3) */
    uint64_t duration_s;         /* run: 0 = until a signal */
    bool quiet;
    const char *kind, *payload;  /* enqueue */
    uint32_t count;
    uint64_t delay_ms;
    int32_t priority;            /* enqueue --priority */
    const char *key;             /* enqueue --key */
    int key_mode;                /* enqueue --key-mode (enum urt_dispatch_key_mode) */
    uint32_t max_attempts;       /* enqueue --max-attempts (0: the default) */
    bool itemized;               /* enqueue: --priority, --key or --max-attempts given */
    const char *filter_kind;     /* failed, requeue --failed: --kind */
    uint32_t limit;              /* status, failed: --limit (rows of failed strands shown) */
    bool all_failed;             /* requeue --failed */
    char **ids;                  /* cancel, requeue: the ids (argv) */
    int n_ids;
};

/* Parses argv into *o. Returns -1 to go on, or an exit status: 0 after
 * --version (printed), 2 after a usage error (one line printed). --help
 * sets o->help and returns -1. */
int tool_parse(int argc, char **argv, struct tool_opts *o);
/* One line on stderr ("urt-dispatch: ... (try --help)"); returns 2. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int cmd_status(const struct tool_opts *o);
int cmd_verify(const struct tool_opts *o);
int cmd_failed(const struct tool_opts *o);

#endif
