/*
 * tools/urt-dispatch/opts.c — urt-dispatch's command line: one table of
 * numeric options (name, which commands take it, range, where it goes), the
 * string options, and the positional arguments of each command. Every
 * rejection is one line on stderr and exit status 2.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"
#include "opts.h"

#define MS 1000000ull

enum unit { U32, U64, U64_MS, U64_S };
enum cmdbit { C_RUN = 1, C_ENQ = 2, C_STATUS = 4, C_FAILED = 8, C_CANCEL = 16, C_REQUEUE = 32 };

struct numopt {
    const char *name;
    unsigned cmds;
    uint64_t lo, hi;
    enum unit unit;
    size_t off;   /* in struct tool_opts */
};

#define D(f) offsetof(struct tool_opts, dopt) + offsetof(struct urt_dispatch_options, f)
#define T(f) offsetof(struct tool_opts, f)
static const struct numopt numopts[] = {
    {"--partition", C_RUN, 0, 256, U32, D(partition)},
    {"--pool", C_RUN, 1, 4096, U32, D(pool)},
    {"--connections", C_RUN, 1, 256, U32, D(connections)},
    {"--pipeline", C_RUN, 1, 256, U32, D(pipeline)},
    {"--queue-ratio", C_RUN, 1, 64, U32, D(queue_ratio)},
    {"--metrics-every", C_RUN, 10, 1000000, U32, D(metrics_every)},
    {"--workers", C_RUN, 1, 1024, U32, T(workers)},
    {"--lease-ms", C_RUN, 10, 86400000, U64_MS, D(lease_ns)},
    {"--budget-ms", C_RUN, 1, 86400000, U64_MS, D(run_budget_ns)},
    {"--watchdog-ms", C_RUN, 1, 86400000, U64, T(watchdog_ms)},
    {"--backoff-ms", C_RUN, 1, 86400000, U64_MS, D(backoff_base_ns)},
    {"--backoff-max-ms", C_RUN, 1, 604800000, U64_MS, D(backoff_max_ns)},
    {"--sleep-min-ms", C_RUN, 1, 3600000, U64_MS, D(sleep_min_ns)},
    {"--sleep-max-ms", C_RUN, 1, 3600000, U64_MS, D(sleep_max_ns)},
    {"--heartbeat-ms", C_RUN | C_STATUS, 1, 3600000, U64_MS, D(heartbeat_ns)},
    {"--old-delay-ms", C_RUN, 0, 86400000, U64_MS, D(old_strand_delay_ns)},
    {"--old-scan-ms", C_RUN, 1, 86400000, U64_MS, D(old_scan_interval_ns)},
    {"--duration-s", C_RUN, 1, 86400 * 365, U64, T(duration_s)},
    {"--delay-ms", C_ENQ, 0, 86400000ull * 365, U64, T(delay_ms)},
    {"--max-attempts", C_ENQ, 0, 1000000, U32, T(max_attempts)},
    {"--limit", C_STATUS | C_FAILED, 1, 1000000, U32, T(limit)},
};

static unsigned cmd_bit(const char *cmd)
{
    static const struct {
        const char *name;
        unsigned bit;
    } cmds[] = {{"run", C_RUN},       {"enqueue", C_ENQ},   {"status", C_STATUS},
                {"failed", C_FAILED}, {"cancel", C_CANCEL}, {"requeue", C_REQUEUE}};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (!strcmp(cmd, cmds[i].name))
            return cmds[i].bit;
    return 0;
}

static int set_num(struct tool_opts *o, const struct numopt *n, const char *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!v[0] || *end || errno || v[0] == '-' || x < n->lo || x > n->hi)
        return usage_error("%s %s: expected a number %llu..%llu", n->name, v, (unsigned long long)n->lo,
                           (unsigned long long)n->hi);
    char *p = (char *)o + n->off;
    if (n->unit == U32)
        *(uint32_t *)p = (uint32_t)x;
    else
        *(uint64_t *)p = n->unit == U64_MS ? x * MS : x;
    return -1;
}

static int set_key_mode(struct tool_opts *o, const char *v)
{
    static const char *const modes[] = {"replace", "preserve_schedule", "keep"};
    for (int m = 0; m < 3; m++)
        if (!strcmp(v, modes[m])) {
            o->key_mode = m;
            return -1;
        }
    return usage_error("--key-mode %s: expected replace, preserve_schedule or keep", v);
}

static int set_priority(struct tool_opts *o, const char *v)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!v[0] || *end || errno || x < INT32_MIN || x > INT32_MAX)
        return usage_error("--priority %s: expected a number %d..%d", v, INT32_MIN, INT32_MAX);
    o->priority = (int32_t)x;
    o->itemized = true;
    return -1;
}

static int option(struct tool_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    unsigned bit = cmd_bit(o->cmd);
    for (size_t k = 0; k < sizeof(numopts) / sizeof(numopts[0]); k++) {
        if (strcmp(a, numopts[k].name))
            continue;
        if (!(numopts[k].cmds & bit))
            return usage_error("%s: not an option of %s", a, o->cmd);
        if (*i + 1 >= argc)
            return usage_error("%s: missing its value", a);
        return set_num(o, &numopts[k], argv[++*i]);
    }
    bool takes = (!strcmp(a, "--kinds") && bit == C_RUN) || (!strcmp(a, "--payload") && bit == C_ENQ) ||
                 (!strcmp(a, "--channel") && (bit & (C_RUN | C_STATUS))) ||
                 ((!strcmp(a, "--key") || !strcmp(a, "--key-mode") || !strcmp(a, "--priority")) && bit == C_ENQ) ||
                 (!strcmp(a, "--kind") && (bit & (C_FAILED | C_REQUEUE)));
    if (takes && *i + 1 >= argc)
        return usage_error("%s: missing its value", a);
    if (!strcmp(a, "--kinds") && bit == C_RUN)
        o->kinds = argv[++*i];
    else if (!strcmp(a, "--payload") && bit == C_ENQ)
        o->payload = argv[++*i];
    else if (!strcmp(a, "--channel") && (bit & (C_RUN | C_STATUS)))
        o->dopt.channel = argv[++*i];
    else if (!strcmp(a, "--quiet") && bit == C_RUN)
        o->quiet = true;
    else if (!strcmp(a, "--key") && bit == C_ENQ)
        o->key = argv[++*i], o->itemized = true;
    else if (!strcmp(a, "--key-mode") && bit == C_ENQ)
        return set_key_mode(o, argv[++*i]);
    else if (!strcmp(a, "--priority") && bit == C_ENQ)
        return set_priority(o, argv[++*i]);
    else if (!strcmp(a, "--kind") && (bit & (C_FAILED | C_REQUEUE)))
        o->filter_kind = argv[++*i];
    else if (!strcmp(a, "--failed") && bit == C_REQUEUE)
        o->all_failed = true;
    else
        return usage_error("unknown option %s for %s", a, o->cmd);
    return -1;
}

static bool uuid_ok(const char *s)
{
    if (strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
                                   (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    }
    return true;
}

static int positional(struct tool_opts *o, const char *a, int *n_pos)
{
    int k = (*n_pos)++;
    if (!strcmp(o->cmd, "enqueue") && k == 0) {
        o->kind = a;
        return -1;
    }
    if (!strcmp(o->cmd, "enqueue") && k == 1) {
        char *end;
        unsigned long c = strtoul(a, &end, 10);
        if (!a[0] || *end || a[0] == '-' || c < 1 || c > 1000000)
            return usage_error("enqueue: COUNT %s: expected a number 1..1000000", a);
        o->count = (uint32_t)c;
        return -1;
    }
    if (!strcmp(o->cmd, "cancel") || !strcmp(o->cmd, "requeue")) {
        if (!uuid_ok(a))
            return usage_error("%s: '%s' is not a strand id (a uuid)", o->cmd, a);
        return -1; /* collected by tool_parse */
    }
    return usage_error("%s: unexpected argument '%s'", o->cmd, a);
}

static void defaults(struct tool_opts *o)
{
    memset(o, 0, sizeof(*o));
    urt_dispatch_options_init(&o->dopt);
    const char *ci = getenv("URT_DISPATCH_CONNINFO");
    o->dopt.conninfo = ci ? ci : "";
    o->kinds = DEMO_KINDS;
    o->count = 1;
    o->payload = "";
    o->limit = 10;
}

/* After parsing: what depends on other options. */
static int finish(struct tool_opts *o)
{
    if (!strcmp(o->cmd, "enqueue") && !o->kind)
        return usage_error("enqueue: missing KIND");
    if (o->max_attempts)
        o->itemized = true;
    if (!strcmp(o->cmd, "cancel") && o->n_ids == 0)
        return usage_error("cancel: missing ID");
    if (!strcmp(o->cmd, "requeue") && (o->n_ids == 0) == !o->all_failed)
        return usage_error("requeue: give IDs or --failed (not both)");
    if (o->filter_kind && !strcmp(o->cmd, "requeue") && !o->all_failed)
        return usage_error("requeue: --kind goes with --failed");
    if (!strcmp(o->cmd, "run")) {
        if (o->dopt.partition == 0 && urt_dispatch_options_from_env(&o->dopt) < 0)
            return usage_error("%s", urt_last_error());
        if (!o->watchdog_ms)
            o->watchdog_ms = o->dopt.lease_ns / MS / 3 ? o->dopt.lease_ns / MS / 3 : 1;
        if (o->dopt.run_budget_ns >= o->dopt.lease_ns)
            return usage_error("--budget-ms must be below --lease-ms");
        if (o->watchdog_ms * 2 * MS > o->dopt.lease_ns)
            return usage_error("--watchdog-ms must be at most half of --lease-ms");
    }
    return -1;
}

int tool_parse(int argc, char **argv, struct tool_opts *o)
{
    defaults(o);
    int i = 1, n_pos = 0, r;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            o->help = true;
            return -1;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("urt-dispatch %s\n", URT_VERSION_STRING);
            return 0;
        }
        if (strcmp(argv[i], "--conninfo"))
            return usage_error("unknown option %s", argv[i]);
        if (i + 1 >= argc)
            return usage_error("--conninfo: missing its value");
        o->dopt.conninfo = argv[++i];
    }
    if (i >= argc)
        return usage_error("missing command (migrate, enqueue, run, status or verify)");
    o->cmd = argv[i++];
    if (strcmp(o->cmd, "migrate") && strcmp(o->cmd, "verify") && !cmd_bit(o->cmd))
        return usage_error("unknown command '%s'", o->cmd);
    o->ids = &argv[i];
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            o->help = true;
            return -1;
        }
        bool pos = argv[i][0] != '-';
        if ((r = pos ? positional(o, argv[i], &n_pos) : option(o, argc, argv, &i)) >= 0)
            return r;
        if (pos && (cmd_bit(o->cmd) & (C_CANCEL | C_REQUEUE)))
            o->ids[o->n_ids++] = argv[i]; /* compacted in place: the options before them are passed */
    }
    return finish(o);
}
