/*
 * tests/dispatch/pg_harness.c — the private PostgreSQL cluster and the
 * helpers of the dispatch suites (design in pg_harness.h).
 *
 * Start-up protocol (first test of a run): take an exclusive flock on
 * /tmp/urt-pg-<runner>.lock; if /tmp/urt-pg-<runner>/ready exists, the
 * cluster is up: done. Else fork; the child calls setsid() and forks the
 * reaper (so the reaper is nobody's child but init's and shares no process
 * group with the tests: meson's timeout kill does not reach it) and exits.
 * The reaper runs initdb and pg_ctl start, writes one line to a pipe ("ok"
 * or why not), then waits for the runner's exit (pidfd_open and poll; a
 * kill(pid, 0) loop where pidfd_open is missing), stops the server with
 * pg_ctl stop -m immediate and removes the directory and the lock file. The
 * test reads the pipe, writes `ready`, and unlocks.
 */
#include "pg_harness.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[64], g_bindir[256], g_conninfo[160];

/* ---- finding PostgreSQL --------------------------------------------------- */

static bool has_bins(const char *dir)
{
    char p[320];
    const char *need[] = {"initdb", "pg_ctl", "postgres"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, need[i]);
        if (access(p, X_OK) != 0)
            return false;
    }
    return true;
}

static bool find_bindir(char *out, size_t n)
{
    const char *env = getenv("URT_PG_BINDIR");
    if (env && has_bins(env))
        return snprintf(out, n, "%s", env), true;
    FILE *f = popen("pg_config --bindir 2>/dev/null", "r");
    if (f) {
        char line[256] = "";
        bool got = fgets(line, sizeof(line), f) != NULL;
        pclose(f);
        line[strcspn(line, "\n")] = '\0';
        if (got && has_bins(line))
            return snprintf(out, n, "%s", line), true;
    }
    int best = -1;
    DIR *d = opendir("/usr/lib/postgresql");
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[280];
        snprintf(p, sizeof(p), "/usr/lib/postgresql/%s/bin", e->d_name);
        if (atoi(e->d_name) > best && has_bins(p)) {
            best = atoi(e->d_name);
            if ((size_t)snprintf(out, n, "%s", p) >= n)
                best = -1;
        }
    }
    if (d)
        closedir(d);
    return best >= 0;
}

/* ---- running PostgreSQL's programs -------------------------------------------- */

/* Runs bindir/prog with args (NULL-terminated) as the postgres user when
 * root, output appended to dir/cmd.log. Returns the exit status, -1 if it
 * did not exit normally. */
static int run_pg(const char *prog, const char *const *args)
{
    char path[320], log[128];
    snprintf(path, sizeof(path), "%s/%s", g_bindir, prog);
    snprintf(log, sizeof(log), "%s/cmd.log", g_dir);
    const char *argv[16] = {path};
    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = args[i];
    struct passwd *pw = geteuid() == 0 ? getpwnam("postgres") : NULL; /* before fork: not async-signal-safe */
    uid_t uid = pw ? pw->pw_uid : 0;
    gid_t gid = pw ? pw->pw_gid : 0;
    bool drop = geteuid() == 0;
    pid_t pid = fork();
    if (pid == 0) {
        if (drop && (!uid || setgroups(0, NULL) || setgid(gid) || setuid(uid)))
            _exit(126);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(path, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void remove_tree(const char *path)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "pg_harness: could not remove %s\n", path);
}

static const char *start_cluster(void)
{
    char data[96], opts[256];
    snprintf(data, sizeof(data), "%s/data", g_dir);
    snprintf(opts, sizeof(opts),
             "-k %s -c listen_addresses= -p 5432 -c fsync=off -c synchronous_commit=off "
             "-c full_page_writes=off -c max_connections=200",
             g_dir);
    const char *init[] = {"-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale", "-N", NULL};
    if (run_pg("initdb", init) != 0)
        return "initdb failed (see its log above)";
    char log[96];
    snprintf(log, sizeof(log), "%s/server.log", g_dir);
    const char *start[] = {"-D", data, "-l", log, "-w", "-t", "60", "-o", opts, "start", NULL};
    if (run_pg("pg_ctl", start) != 0)
        return "pg_ctl start failed (see its log above)";
    return NULL;
}

static void stop_cluster(void)
{
    char data[96];
    snprintf(data, sizeof(data), "%s/data", g_dir);
    const char *stop[] = {"-D", data, "-m", "immediate", "-w", "stop", NULL};
    run_pg("pg_ctl", stop);
}

/* ---- the reaper -------------------------------------------------------------------- */

static void wait_for_exit(pid_t runner)
{
    int fd = (int)syscall(SYS_pidfd_open, runner, 0);
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (poll(&p, 1, -1) < 0 && errno == EINTR)
            ;
        close(fd);
        return;
    }
    while (kill(runner, 0) == 0 || errno == EPERM)
        sleep(1);
}

/* The reaper keeps nothing of the tests' open files (meson waits for its
 * output pipes to close) and writes to the cluster's directory. */
static void detach_files(int keep)
{
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    for (int fd = 3; fd < 4096; fd++)
        if (fd != keep)
            close(fd);
}

static _Noreturn void reaper(pid_t runner, int report)
{
    detach_files(report);
    const char *why = NULL;
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (!pw)
            why = "running as root and there is no postgres user to run the server as";
        else if (chown(g_dir, pw->pw_uid, pw->pw_gid) != 0)
            why = "cannot give the cluster's directory to the postgres user";
    }
    if (!why)
        why = start_cluster();
    dprintf(report, "%s\n", why ? why : "ok");
    close(report);
    if (!why)
        wait_for_exit(runner);
    stop_cluster();
    remove_tree(g_dir);
    char lock[96];
    snprintf(lock, sizeof(lock), "%s.lock", g_dir);
    unlink(lock);
    _exit(0);
}

/* Forks the reaper through a child that starts a new session. */
static void launch(pid_t runner, char *result, size_t n)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t c = fork();
    if (c == 0) {
        close(p[0]);
        setsid();
        if (fork() == 0)
            reaper(runner, p[1]);
        _exit(0);
    }
    close(p[1]);
    waitpid(c, NULL, 0);
    FILE *f = fdopen(p[0], "r");
    if (!f || !fgets(result, (int)n, f))
        snprintf(result, n, "the reaper died before it reported");
    result[strcspn(result, "\n")] = '\0';
    if (f)
        fclose(f);
}

const char *pg_cluster(void)
{
    if (!find_bindir(g_bindir, sizeof(g_bindir)))
        cr_skip_test("PostgreSQL is not installed (no initdb/pg_ctl/postgres in $URT_PG_BINDIR, pg_config --bindir "
                     "or /usr/lib/postgresql/*/bin): the dispatch suite needs a server (scripts/deps.sh installs it)");
    pid_t runner = getppid();
    snprintf(g_dir, sizeof(g_dir), "/tmp/urt-pg-%d", (int)runner);
    snprintf(g_conninfo, sizeof(g_conninfo), "host=%s port=5432 user=postgres", g_dir);
    char lock[96], ready[96], result[256];
    snprintf(lock, sizeof(lock), "%s.lock", g_dir);
    snprintf(ready, sizeof(ready), "%s/ready", g_dir);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(lfd, 0, "open %s: %s", lock, strerror(errno));
    flock(lfd, LOCK_EX);
    if (access(ready, F_OK) != 0) {
        remove_tree(g_dir); /* a dead run's leftovers under a reused pid */
        cr_assert_eq(mkdir(g_dir, 0700), 0, "mkdir %s: %s", g_dir, strerror(errno));
        launch(runner, result, sizeof(result));
        if (strcmp(result, "ok") != 0) {
            char log[96];
            snprintf(log, sizeof(log), "%s/cmd.log", g_dir);
            file_dump(log);
            flock(lfd, LOCK_UN);
            close(lfd);
            if (strstr(result, "postgres user"))
                cr_skip_test("%s", result);
            cr_assert_fail("the private PostgreSQL cluster did not start: %s", result);
        }
        close(open(ready, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    }
    flock(lfd, LOCK_UN);
    close(lfd);
    return g_conninfo;
}

const char *pg_cluster_dir(void)
{
    return g_dir;
}

int pg_restart(void)
{
    char data[96];
    snprintf(data, sizeof(data), "%s/data", g_dir);
    const char *args[] = {"-D", data, "-w", "-t", "60", "-m", "fast", "restart", NULL};
    int r = run_pg("pg_ctl", args);
    if (r != 0) {
        char log[96];
        snprintf(log, sizeof(log), "%s/cmd.log", g_dir);
        file_dump(log);
    }
    return r == 0 ? 0 : -1;
}

/* ---- databases ------------------------------------------------------------------------ */

PGconn *pg_open(const char *conninfo)
{
    PGconn *pg = PQconnectdb(conninfo);
    cr_assert(PQstatus(pg) == CONNECTION_OK, "connect %s: %s", conninfo, PQerrorMessage(pg));
    PQclear(PQexec(pg, "SET client_min_messages = warning"));
    return pg;
}

static PGresult *vexec(PGconn *pg, const char *fmt, va_list ap)
{
    char sql[2048];
    vsnprintf(sql, sizeof(sql), fmt, ap);
    PGresult *r = PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(r);
    cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(r));
    return r;
}

void pg_ok(PGconn *pg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PQclear(vexec(pg, fmt, ap));
    va_end(ap);
}

long long pg_ll(PGconn *pg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PGresult *r = vexec(pg, fmt, ap);
    va_end(ap);
    cr_assert(PQntuples(r) == 1 && PQnfields(r) >= 1, "expected one value, got %d rows", PQntuples(r));
    long long v = PQgetisnull(r, 0, 0) ? 0 : atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

void pg_create_db(const char *name, char *conninfo, size_t len)
{
    const char *base = pg_cluster();
    char admin[256];
    snprintf(admin, sizeof(admin), "%s dbname=postgres", base);
    PGconn *pg = pg_open(admin);
    pg_ok(pg, "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
    pg_ok(pg, "CREATE DATABASE %s", name);
    PQfinish(pg);
    snprintf(conninfo, len, "%s dbname=%s", base, name);
}

/* ---- child processes -------------------------------------------------------------------- */

pid_t proc_spawn(char *const argv[], const char *log)
{
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* the test ended before prctl */
            _exit(127);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

bool proc_wait(pid_t pid, int ms, int *status)
{
    for (int waited = 0;; waited++) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return true;
        if (r < 0 || waited >= ms)
            return false;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

bool file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

void file_dump(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "---- %s\n", path);
    char line[1024];
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fprintf(stderr, "---- end of %s\n", path);
    fclose(f);
}
