/*
 * tools/urt-wal.c — inspect a urt log directory (C14), public API only.
 *
 *   urt-wal list DIR       channels (file, generation, worker, size, valid
 *                          bytes, records, epochs) and the durable marker
 *   urt-wal verify DIR     check every record and the epoch file; exit 0 when
 *                          recovery would cut nothing, 1 when it would cut
 *                          (damage or records of non-durable epochs), printing
 *                          each cut and the epoch-file slots not believed (a
 *                          slot whose condition failed, and every later one:
 *                          the durable marker never covers missing records)
 *   urt-wal cuts DIR       what a recovery would cut (same as verify)
 *   urt-wal dump DIR [--all] [--hex N]
 *                          the records recovery would replay, in replay order
 *                          (--all: every valid record, durable or not);
 *                          --hex N shows the first N payload bytes (default 16)
 *   urt-wal recover DIR    run recovery for real (cut and fsync), print the cuts
 *
 * Everything but `recover` is a dry run: no lock taken, nothing written, so
 * it can look at the directory of a running process (then the newest
 * records may show as a torn tail: they are being written). Errors (missing
 * directory, a directory that is not a urt log, a locked one for `recover`)
 * are printed with their reason; exit status 2. Bad usage prints one line
 * saying why and exits 2; --help and --version answer on stdout.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urt/urt.h>

#define EXIT_OK 0
#define EXIT_CUT 1
#define EXIT_ERR 2

struct ctx {
    unsigned hex;
    uint64_t limit;
    bool all;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: urt-wal list|verify|cuts|recover DIR\n"
               "       urt-wal dump DIR [--all] [--hex N]\n"
               "       urt-wal --help | --version\n"
               "Inspects a urt write-ahead log directory (see urt/log.h). All but 'recover' are read-only.\n"
               "Exit: 0 ok, 1 verify/cuts/recover found something to cut, 2 error or bad usage.\n");
}

/* Bad usage: one line on stderr saying why, exit status 2. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("urt-wal: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (try --help)\n", stderr);
    va_end(ap);
    return EXIT_ERR;
}

static void on_channel(void *arg, const struct urt_log_channel_info *c)
{
    (void)arg;
    printf("channel %s gen %" PRIu64 " worker %u size %" PRIu64 " valid %" PRIu64 " records %" PRIu64
           " epochs %" PRIu64 "..%" PRIu64 "%s\n",
           c->file, c->gen, c->worker, c->size, c->valid_end, c->n_records, c->first_epoch, c->last_epoch,
           c->header_ok || c->size == 0 ? "" : " (no valid header)");
}

static void on_cut(void *arg, const struct urt_log_cut *c)
{
    (void)arg;
    printf("cut %s at %" PRIu64 ": %" PRIu64 " bytes, %s%s%s\n", c->file, c->offset, c->bytes, c->reason,
           c->corrupt ? " [corrupt]" : "", c->middle ? " [valid records follow: damage in the middle]" : "");
}

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct ctx *x = arg;
    printf("epoch %" PRIu64 " tx %" PRIu64 " lsn %" PRIu64 " gen %" PRIu64 " worker %u len %u%s", r->epoch, r->tx_id,
           r->lsn, r->gen, r->worker, r->len, x->all && r->epoch > x->limit ? " (not durable)" : "");
    if (x->hex) {
        printf(" ");
        const uint8_t *p = r->payload;
        for (uint32_t i = 0; i < r->len && i < x->hex; i++)
            printf("%02x", p[i]);
        if (r->len > x->hex)
            printf("...");
    }
    printf("\n");
    return 0;
}

static int fail(const char *cmd, int rc)
{
    const char *why = urt_last_error();
    fprintf(stderr, "urt-wal %s: %s\n", cmd, *why ? why : strerror(-rc));
    return EXIT_ERR;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return EXIT_OK;
    }
    if (argc >= 2 && (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version"))) {
        printf("urt-wal %s\n", URT_VERSION_STRING);
        return EXIT_OK;
    }
    if (argc < 2)
        return usage_error("missing command (list, verify, cuts, dump or recover)");
    const char *cmd = argv[1];
    if (cmd[0] == '-')
        return usage_error("unknown option %s", cmd);
    if (strcmp(cmd, "list") && strcmp(cmd, "verify") && strcmp(cmd, "cuts") && strcmp(cmd, "dump") &&
        strcmp(cmd, "recover"))
        return usage_error("unknown command '%s'", cmd);
    if (argc < 3)
        return usage_error("%s: missing the log directory", cmd);
    const char *dir = argv[2];
    struct ctx x = {.hex = 16};
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--all") && !strcmp(cmd, "dump"))
            x.all = true;
        else if (!strcmp(argv[i], "--hex") && i + 1 < argc && !strcmp(cmd, "dump")) {
            char *end;
            const char *a = argv[++i];
            unsigned long v = strtoul(a, &end, 10);
            if (end == a || *end || v > 1u << 20)
                return usage_error("--hex %s: expected a number of bytes (0..1048576)", a);
            x.hex = (unsigned)v;
        } else
            return usage_error("%s: unexpected argument '%s'", cmd, argv[i]);
    }
    struct urt_log_recovery out;
    int rc;
    if (!strcmp(cmd, "list")) {
        struct urt_log_recover_ops ops = {.channel = on_channel};
        rc = urt_log_recover(dir, URT_LOG_RECOVER_DRY_RUN, &ops, &x, &out);
        if (rc)
            return fail(cmd, rc);
        printf("durable marker %" PRIu64 " (epoch file); channels %u; generations up to %" PRIu64
               "; largest epoch %" PRIu64 "\n",
               out.durable_marker, out.channels, out.max_gen, out.max_epoch);
        return EXIT_OK;
    }
    if (!strcmp(cmd, "verify") || !strcmp(cmd, "cuts") || !strcmp(cmd, "recover")) {
        bool real = !strcmp(cmd, "recover");
        struct urt_log_recover_ops ops = {.cut = on_cut};
        rc = urt_log_recover(dir, real ? 0 : URT_LOG_RECOVER_DRY_RUN, &ops, &x, &out);
        if (rc)
            return fail(cmd, rc);
        printf("%s: %u channels, durable marker %" PRIu64 ", replay up to %" PRIu64 ", %u cut%s (%" PRIu64
               " bytes)%s\n",
               out.cuts ? (real ? "cut" : "would cut") : "ok", out.channels, out.durable_marker, out.replay_marker,
               out.cuts, out.cuts == 1 ? "" : "s", out.cut_bytes, real && out.cuts ? ", done" : "");
        if (out.broken_slots)
            printf("%u epoch-file slot%s not believed: the first one's condition failed (log bytes it "
                   "relied on are gone), so no later marker counts either\n",
                   out.broken_slots, out.broken_slots == 1 ? "" : "s");
        return out.cuts ? EXIT_CUT : EXIT_OK;
    }
    if (!strcmp(cmd, "dump")) {
        struct urt_log_recover_ops probe = {0};
        rc = urt_log_recover(dir, URT_LOG_RECOVER_DRY_RUN, &probe, NULL, &out);
        if (rc)
            return fail(cmd, rc);
        x.limit = out.replay_marker;
        struct urt_log_recover_ops ops = {.record = on_record};
        rc = urt_log_recover(dir, URT_LOG_RECOVER_DRY_RUN | (x.all ? URT_LOG_RECOVER_ALL : 0), &ops, &x, &out);
        if (rc)
            return fail(cmd, rc);
        printf("# %" PRIu64 " records; durable marker %" PRIu64 "\n", out.replayed, out.durable_marker);
        return EXIT_OK;
    }
    return usage_error("unknown command '%s'", cmd); /* not reached: checked above */
}
