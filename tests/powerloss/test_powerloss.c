/*
 * tests/powerloss/test_powerloss.c — power loss under the write-ahead log
 * (issue 20 point 4): a writer is SIGKILLed, the data the device never got is
 * dropped, and recovery must still hold every acknowledged commit and the
 * invariant of issue 10 point 3 (every record of every epoch <= the reported
 * marker is present and valid; transactions whole).
 *
 * The writer is tests/crash/crash_child (plain STORED commits, transactions
 * of 2..5 records on lanes, jobs whose tasks commit, ACCEPTED/AVAILABLE
 * commits mixed in; workers 2..4); the checks are tests/crash/crash_check.h
 * (recover, check every acknowledged commit, start and stop a runtime,
 * recover again: same records, marker not lower; nothing an earlier cycle
 * replayed goes missing). Two drivers:
 *
 * Loop driver (ext4, xfs, btrfs): a sparse 2 GiB image A, formatted once.
 * Each cycle: mount A (loop) at M; run the writer on M/log; SIGKILL it at a
 * random moment (every other round of the modes: after its first
 * acknowledgement; else from the exec) and reap it;
 * at once `cp --sparse=always A B` — B is what the device held: whatever the
 * mounted file system had not written back from its page cache is absent;
 * umount A; mount B at M (xfs: nouuid); check M/log; umount; B replaces A
 * (the next cycle continues from the recovered state). Modes rotate per
 * cycle: log_prealloc_kb 0 / 4096 x log_sync auto / strict, and 4096 with
 * single_flush, all asserted (auto is single_write on these file systems:
 * the durable marker carried by the log writes as claims).
 * Caveat: the copy is taken while the host may still be writing back the
 * image's pages (never the writer's, which is dead), so it is a snapshot of
 * writes the device had accepted, the model of a power cut.
 *
 * FUSE driver (tests/powerloss/plfs): plfs BACK M holds every write in memory
 * until its file's fsync/fdatasync; unmounting drops the rest (the power
 * loss). Each cycle: start plfs, run the writer on M/log, SIGKILL it, reap
 * it, umount M (retried while the dead ring holds files), reap plfs (its
 * drop line is logged), check BACK/log directly. Modes rotate: prealloc
 * 0 / 4096 x log_sync auto / strict, and 4096 with single_flush and with
 * single_write (which need preallocated channels). auto and strict are
 * asserted; single_flush and single_write are reported only (forced on plfs
 * the modes are wrong by design: sync_file_range makes nothing durable
 * there, and an O_DIRECT write with RWF_DSYNC is not made durable there
 * either — plfs keeps a file's writes until that file's own fsync, and the
 * FUSE direct-I/O write sends none — so acknowledged commits are lost; that
 * is why auto never picks them on FUSE).
 *
 * Every driver, file system and mode ends with a line "powerloss <driver>
 * <fs> <mode>: N cycles, A acknowledged commits checked (T transactions),
 * L lost, P other problems" (stdout, and criterion's info log), then asserts
 * L = P = 0 for the asserted modes with the first problem described.
 * Failures of the machinery (mkfs, mount, a writer that exits by itself)
 * fail at once. Cycles per file system: URT_POWERLOSS_CYCLES, default 40
 * (6 in the sanitizer builds). Needs root, loop devices, the mkfs tools and
 * /dev/fuse: otherwise each test is skipped with the reason. Mounts and loop
 * devices are released in the fixture's teardown, also after a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "crash/crash_check.h"
#include "powerloss/pl_mount.h"

#define IMAGE_BYTES (2048ull << 20)
#define KILL_MAX_US SCALE(100000, 300000)
#define MAX_MODES 6

/* ---- modes and tallies ------------------------------------------------------------- */

struct pl_mode {
    uint32_t prealloc_kb;
    const char *log_sync;
    bool asserted;
};

struct pl_tally {
    uint64_t cycles, acked, acked_tx, lost, problems, early_kills;
    char first[400];
};

struct pl_run {
    const char *driver, *fs;
    const struct pl_mode *modes;
    int n_modes;
    struct pl_tally tally[MAX_MODES];
    struct crash_history hist;
    uint64_t rng;
};

static uint64_t pl_cycles(void)
{
    const char *env = getenv("URT_POWERLOSS_CYCLES");
    return env && *env ? strtoull(env, NULL, 10) : (uint64_t)SCALE(40, 6);
}

static void pl_child_opts(struct pl_run *run, uint64_t cycle, const char *dir, struct crash_child_opts *o,
                          struct crash_kill_plan *k)
{
    const struct pl_mode *m = &run->modes[cycle % (uint64_t)run->n_modes];
    *o = (struct crash_child_opts){.dir = dir, .cycle = cycle, .workers = 2 + (uint32_t)(cycle % 3),
                                   .prealloc_kb = m->prealloc_kb, .log_sync = m->log_sync};
    k->after_ack = (cycle / (uint64_t)run->n_modes) % 2 == 0; /* both plans in every mode */
    k->delay_us = rng_next(&run->rng) % KILL_MAX_US;
}

static void pl_restart_config(const struct crash_child_opts *o, struct urt_config *cfg)
{
    test_config(cfg, o->workers);
    cfg->log_prealloc_kb = o->prealloc_kb;
    cr_assert_eq(urt_config_set(cfg, "log_sync", o->log_sync), 0, "%s", urt_last_error());
}

/* Adds one cycle's result to its mode's tally. */
static void pl_account(struct pl_run *run, uint64_t cycle, const struct crash_cycle_result *res, bool acked_any)
{
    struct pl_tally *t = &run->tally[cycle % (uint64_t)run->n_modes];
    const struct crash_verdict *v = &res->verdict;
    uint64_t other = crash_verdict_problems(v) - v->lost_acks + (res->durable2 < res->durable1) +
                     (res->second_missing + res->second_extra > 0) + res->history_missing + (res->dry_mismatch > 0) +
                     (res->repeat_mismatch > 0);
    t->cycles++;
    t->acked += v->checked_acks;
    t->acked_tx += v->checked_tx;
    t->lost += v->lost_acks;
    t->problems += other;
    t->early_kills += !acked_any;
    if (!t->first[0] && (v->lost_acks || other)) {
        const char *what = v->first[0]               ? v->first
                           : res->dry_first[0]       ? res->dry_first
                           : res->repeat_first[0]    ? res->repeat_first
                           : res->second_first[0]    ? res->second_first
                           : res->history_first[0]   ? res->history_first
                                                     : "durable marker lower after a restart";
        snprintf(t->first, sizeof(t->first), "cycle %" PRIu64 ": %.360s", cycle, what);
    }
}

/* The table lines, then the assertions of the asserted modes. */
static void pl_report(struct pl_run *run)
{
    for (int i = 0; i < run->n_modes; i++) {
        const struct pl_mode *m = &run->modes[i];
        const struct pl_tally *t = &run->tally[i];
        char line[700];
        snprintf(line, sizeof(line),
                 "powerloss %s %s prealloc=%u log_sync=%s%s: %" PRIu64 " cycles, %" PRIu64
                 " acknowledged commits checked (%" PRIu64 " transactions), %" PRIu64 " lost, %" PRIu64
                 " other problems, %" PRIu64 " kills before any ack%s%s",
                 run->driver, run->fs, m->prealloc_kb, m->log_sync, m->asserted ? "" : " (informative)", t->cycles,
                 t->acked, t->acked_tx, t->lost, t->problems, t->early_kills, t->first[0] ? "; first: " : "",
                 t->first);
        printf("%s\n", line);
        cr_log_info("%s", line);
    }
    fflush(stdout);
    for (int i = 0; i < run->n_modes; i++) {
        const struct pl_mode *m = &run->modes[i];
        const struct pl_tally *t = &run->tally[i];
        if (m->asserted)
            cr_expect(t->lost == 0 && t->problems == 0,
                      "powerloss %s %s prealloc=%u log_sync=%s: %" PRIu64 " acknowledged commits lost, %" PRIu64
                      " other problems in %" PRIu64 " cycles; first: %s",
                      run->driver, run->fs, m->prealloc_kb, m->log_sync, t->lost, t->problems, t->cycles, t->first);
    }
}

/* Every driver's run: its cycles (mount, write, cut, check), the report,
 * no leak. */
static void pl_drive(struct pl_run *run, void (*cycle_fn)(struct pl_run *run, uint64_t cycle))
{
    uint64_t cycles = pl_cycles();
    for (uint64_t cycle = 1; cycle <= cycles; cycle++)
        cycle_fn(run, cycle);
    pl_report(run);
    crash_history_free(&run->hist);
    leak_check();
}

static bool have_tool(const char *name)
{
    return crash_sh("command -v %s >/dev/null 2>&1", name) == 0;
}

static void skip_unless_root(void)
{
    if (geteuid() != 0)
        cr_skip_test("needs root (mount, loop devices, FUSE); euid %u", (unsigned)geteuid());
}

/* ---- loop driver ----------------------------------------------------------------------- */

struct loopfs {
    const char *fs;           /* "ext4", "xfs", "btrfs" */
    char *tmp;
    char image[4200], copy[4200], mnt[4200], log[4300];
    bool mounted;
};
static struct loopfs g_loop;

static void loop_umount(void)
{
    if (!g_loop.mounted)
        return;
    pl_umount(g_loop.mnt, g_loop.fs);
    g_loop.mounted = false;
}

static int loop_mount_status(const char *image)
{
    const char *opts = !strcmp(g_loop.fs, "xfs") ? "loop,nouuid" : "loop";
    int st = crash_sh("mount -t %s -o %s '%s' '%s'", g_loop.fs, opts, image, g_loop.mnt);
    g_loop.mounted = st == 0;
    return st;
}

static void loop_mount(const char *image, const char *what)
{
    int st = loop_mount_status(image);
    cr_assert_eq(st, 0, "mount -t %s -o loop %s %s (%s): exit status %d (message above)", g_loop.fs, image,
                 g_loop.mnt, what, st);
}

static void loop_teardown(void);

/* Formats a fresh sparse image and creates the log directory; skips the test
 * when the tools or the mount are not there. */
static void loop_prepare(const char *fs)
{
    skip_unless_root();
    const char *mkfs = !strcmp(fs, "ext4") ? "mkfs.ext4" : !strcmp(fs, "xfs") ? "mkfs.xfs" : "mkfs.btrfs";
    if (!have_tool("losetup") || !have_tool(mkfs))
        cr_skip_test("%s: losetup or %s not installed (Debian: util-linux, e2fsprogs / xfsprogs / btrfs-progs)", fs,
                     mkfs);
    if (access("/dev/loop-control", F_OK) != 0)
        cr_skip_test("%s: no loop devices (/dev/loop-control missing)", fs);
    g_loop.fs = fs;
    g_loop.tmp = crash_tmpdir("urt-powerloss");
    snprintf(g_loop.image, sizeof(g_loop.image), "%s/a.img", g_loop.tmp);
    snprintf(g_loop.copy, sizeof(g_loop.copy), "%s/b.img", g_loop.tmp);
    snprintf(g_loop.mnt, sizeof(g_loop.mnt), "%s/mnt", g_loop.tmp);
    snprintf(g_loop.log, sizeof(g_loop.log), "%s/log", g_loop.mnt);
    cr_assert_eq(mkdir(g_loop.mnt, 0755), 0, "mkdir %s: %s", g_loop.mnt, strerror(errno));
    int fd = open(g_loop.image, O_RDWR | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0, "create %s: %s", g_loop.image, strerror(errno));
    cr_assert_eq(ftruncate(fd, (off_t)IMAGE_BYTES), 0, "truncate %s: %s", g_loop.image, strerror(errno));
    close(fd);
    const char *args = !strcmp(fs, "ext4") ? "-F -q -E lazy_itable_init=0,lazy_journal_init=0" : "-f -q";
    int st = crash_sh("%s %s '%s' >/dev/null", mkfs, args, g_loop.image);
    cr_assert_eq(st, 0, "%s %s %s: exit status %d", mkfs, args, g_loop.image, st);
    if ((st = loop_mount_status(g_loop.image)) != 0) {
        loop_teardown(); /* criterion runs no fini after cr_skip_test */
        cr_skip_test("%s: mount -o loop of a fresh image failed (exit status %d): no loop or %s support here", fs, st,
                     fs);
    }
    cr_assert_eq(mkdir(g_loop.log, 0755), 0, "mkdir %s: %s", g_loop.log, strerror(errno));
    loop_umount();
}

/* Fixture teardown: runs after a failed assertion too. */
static void loop_teardown(void)
{
    pl_detach(g_loop.mnt, &g_loop.mounted);
    if (g_loop.tmp) {
        crash_sh("for i in '%s' '%s'; do losetup -j \"$i\" -O NAME -n 2>/dev/null | xargs -r -n1 losetup -d; done",
                 g_loop.image, g_loop.copy);
        crash_remove_tree(g_loop.tmp);
        free(g_loop.tmp);
        g_loop.tmp = NULL;
    }
}

static void loop_cycle(struct pl_run *run, uint64_t cycle)
{
    struct crash_child_opts o;
    struct crash_kill_plan k;
    struct urt_config cfg;
    pl_child_opts(run, cycle, g_loop.log, &o, &k);
    pl_restart_config(&o, &cfg);

    loop_mount(g_loop.image, "the image");
    struct crash_acks acks = {0};
    bool acked_any = crash_run(&o, &k, &acks);
    int st = crash_sh("cp --sparse=always '%s' '%s'", g_loop.image, g_loop.copy);
    cr_assert_eq(st, 0, "cp --sparse=always %s %s: exit status %d", g_loop.image, g_loop.copy, st);
    loop_umount();

    loop_mount(g_loop.copy, "the copy taken at the power cut");
    struct crash_cycle_result res;
    crash_cycle_check(g_loop.log, &acks, &run->hist, &cfg, &res);
    loop_umount();
    cr_assert_eq(rename(g_loop.copy, g_loop.image), 0, "rename %s -> %s: %s", g_loop.copy, g_loop.image,
                 strerror(errno));
    pl_account(run, cycle, &res, acked_any);
    crash_acks_free(&acks);
}

static const struct pl_mode loop_modes[] = {{0, "auto", true},      {4096, "auto", true},
                                            {0, "strict", true},    {4096, "strict", true},
                                            {4096, "single_flush", true}};

static void loop_driver(const char *fs)
{
    loop_prepare(fs);
    struct pl_run run = {.driver = "loop", .fs = fs, .modes = loop_modes,
                         .n_modes = (int)(sizeof(loop_modes) / sizeof(loop_modes[0])), .rng = now_ns() | 1};
    cr_log_info("loop %s: kill-moment seed %" PRIu64 ", image %s", fs, run.rng, g_loop.image);
    pl_drive(&run, loop_cycle);
}

Test(powerloss, loop_ext4, .fini = loop_teardown, .timeout = 1800)
{
    loop_driver("ext4");
}

Test(powerloss, loop_xfs, .fini = loop_teardown, .timeout = 1800)
{
    loop_driver("xfs");
}

Test(powerloss, loop_btrfs, .fini = loop_teardown, .timeout = 1800)
{
    loop_driver("btrfs");
}

/* ---- FUSE driver ------------------------------------------------------------------------ */

struct plfs_mount {
    char *tmp;
    char back[4200], mnt[4200], back_log[4300], mnt_log[4300];
    pid_t pid;
    int err_fd;            /* plfs's stderr (its drop line) */
    bool mounted;
};
static struct plfs_mount g_plfs = {.pid = -1, .err_fd = -1};

#ifdef PLFS
/* Starts plfs BACK MNT and waits for "plfs: ready"; false (with why) when it
 * exits first. */
static bool plfs_start(char *why, size_t len)
{
    int out[2], err[2];
    cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
    cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        execl(PLFS, PLFS, g_plfs.back, g_plfs.mnt, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", PLFS, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    g_plfs.pid = pid;
    g_plfs.err_fd = err[0];
    char buf[512];
    size_t have = 0;
    ssize_t n;
    while (have < sizeof(buf) - 1 && (n = read(out[0], buf + have, sizeof(buf) - 1 - have)) > 0) {
        have += (size_t)n;
        buf[have] = 0;
        if (strstr(buf, "plfs: ready"))
            break;
    }
    buf[have] = 0;
    close(out[0]);
    if (strstr(buf, "plfs: ready")) {
        g_plfs.mounted = true;
        return true;
    }
    char msg[512] = "";
    n = read(err[0], msg, sizeof(msg) - 1);
    msg[n > 0 ? n : 0] = 0;
    int st;
    waitpid(pid, &st, 0);
    g_plfs.pid = -1;
    close(err[0]);
    g_plfs.err_fd = -1;
    snprintf(why, len, "plfs exited before ready (status %d): %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, msg);
    return false;
}

/* The power cut: umount (retried on EBUSY), plfs exits without applying
 * unsynced writes; returns its drop line. */
static void plfs_cut(char *drop, size_t len)
{
    pl_umount(g_plfs.mnt, "plfs");
    g_plfs.mounted = false;
    int st;
    cr_assert_eq(waitpid(g_plfs.pid, &st, 0), g_plfs.pid, "waitpid plfs: %s", strerror(errno));
    g_plfs.pid = -1;
    size_t have = 0;
    ssize_t n;
    while (have < len - 1 && (n = read(g_plfs.err_fd, drop + have, len - 1 - have)) > 0)
        have += (size_t)n;
    drop[have] = 0;
    if (have && drop[have - 1] == '\n')
        drop[have - 1] = 0;
    close(g_plfs.err_fd);
    g_plfs.err_fd = -1;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "plfs did not exit cleanly after umount (status %d): %s",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, drop);
}
#endif

static void plfs_teardown(void)
{
    pl_detach(g_plfs.mnt, &g_plfs.mounted);
    if (g_plfs.pid > 0) {
        kill(g_plfs.pid, SIGTERM);
        waitpid(g_plfs.pid, NULL, 0);
        g_plfs.pid = -1;
    }
    if (g_plfs.err_fd >= 0)
        close(g_plfs.err_fd), g_plfs.err_fd = -1;
    if (g_plfs.tmp) {
        crash_remove_tree(g_plfs.tmp);
        free(g_plfs.tmp);
        g_plfs.tmp = NULL;
    }
}

#ifdef PLFS
static void plfs_prepare(void)
{
    skip_unless_root();
    if (access("/dev/fuse", R_OK | W_OK) != 0)
        cr_skip_test("/dev/fuse not usable: %s", strerror(errno));
    g_plfs.tmp = crash_tmpdir("urt-powerloss-fuse");
    snprintf(g_plfs.back, sizeof(g_plfs.back), "%s/back", g_plfs.tmp);
    snprintf(g_plfs.mnt, sizeof(g_plfs.mnt), "%s/mnt", g_plfs.tmp);
    snprintf(g_plfs.back_log, sizeof(g_plfs.back_log), "%s/log", g_plfs.back);
    snprintf(g_plfs.mnt_log, sizeof(g_plfs.mnt_log), "%s/log", g_plfs.mnt);
    cr_assert_eq(mkdir(g_plfs.back, 0755), 0);
    cr_assert_eq(mkdir(g_plfs.mnt, 0755), 0);
    cr_assert_eq(mkdir(g_plfs.back_log, 0755), 0);
}

static void fuse_cycle(struct pl_run *run, uint64_t cycle)
{
    struct crash_child_opts o;
    struct crash_kill_plan k;
    struct urt_config cfg;
    pl_child_opts(run, cycle, g_plfs.mnt_log, &o, &k);
    pl_restart_config(&o, &cfg);

    char why[600];
    bool up = plfs_start(why, sizeof(why));
    if (!up && cycle == 1) {
        plfs_teardown(); /* criterion runs no fini after cr_skip_test */
        cr_skip_test("FUSE mount not possible here: %s", why);
    }
    cr_assert(up, "cycle %" PRIu64 ": %s", cycle, why);
    struct crash_acks acks = {0};
    bool acked_any = crash_run(&o, &k, &acks);
    char drop[512];
    plfs_cut(drop, sizeof(drop));

    struct crash_cycle_result res;
    crash_cycle_check(g_plfs.back_log, &acks, &run->hist, &cfg, &res);
    if (crash_verdict_problems(&res.verdict))
        cr_log_info("cycle %" PRIu64 " (prealloc %u, %s): %s; %" PRIu64 " lost; first: %s", cycle, o.prealloc_kb,
                    o.log_sync, drop, res.verdict.lost_acks, res.verdict.first);
    pl_account(run, cycle, &res, acked_any);
    crash_acks_free(&acks);
}
#endif

/* single_flush needs preallocation (the log fixes refuse it with 0). */
static const struct pl_mode fuse_modes[] = {{0, "auto", true},   {4096, "auto", true},
                                            {0, "strict", true}, {4096, "strict", true},
                                            {4096, "single_flush", false}, {4096, "single_write", false}};

Test(powerloss, fuse_plfs, .fini = plfs_teardown, .timeout = 1800)
{
#ifndef PLFS
    (void)fuse_modes;
    cr_skip_test("plfs not built: libfuse3 (libfuse3-dev) was not found when configuring");
#else
    plfs_prepare();
    struct pl_run run = {.driver = "fuse", .fs = "plfs", .modes = fuse_modes,
                         .n_modes = (int)(sizeof(fuse_modes) / sizeof(fuse_modes[0])), .rng = now_ns() | 1};
    cr_log_info("fuse: kill-moment seed %" PRIu64 ", backing %s", run.rng, g_plfs.back);
    pl_drive(&run, fuse_cycle);
#endif
}
