/*
 * tests/dispatch/pg_harness.h — a private PostgreSQL cluster for the
 * dispatch suites, and the helpers their scenarios share (SPEC C21).
 *
 * The cluster: the first test of a test executable's run that asks for it
 * creates it — initdb into /tmp/urt-pg-<runner pid>/data, the server's Unix
 * socket in /tmp/urt-pg-<runner pid>/ (no TCP), fsync off — and starts it
 * with pg_ctl; every later test of the same run finds it there (criterion
 * runs each test in a child process of one runner; the runner's pid names
 * the cluster). As root, initdb and pg_ctl run as the `postgres` user (a
 * forked child that drops to its uid and gid). A reaper process, detached in
 * its own session, watches the runner: when the runner exits — passed,
 * failed, crashed or killed by meson's timeout — it stops the server
 * (pg_ctl stop -m immediate) and removes the directory. Where PostgreSQL's
 * binaries (initdb, pg_ctl, postgres: $URT_PG_BINDIR, `pg_config --bindir`,
 * /usr/lib/postgresql/<newest>/bin) or, as root, the postgres user are
 * missing, the test is skipped with the reason.
 *
 * Each test uses a database of its own (pg_create_db), so tests do not see
 * each other's strands.
 */
#ifndef URT_TESTS_PG_HARNESS_H
#define URT_TESTS_PG_HARNESS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The cluster's base connection string ("host=DIR port=5432 user=postgres"),
 * starting the cluster if this run has none yet; skips the test when
 * PostgreSQL is missing. */
const char *pg_cluster(void);
/* The cluster's directory (removed with it when the run ends: scratch files
 * of the tests may go there). After pg_cluster(). */
const char *pg_cluster_dir(void);
/* Creates database `name` (dropping an old one) and writes a connection
 * string for it into conninfo. */
void pg_create_db(const char *name, char *conninfo, size_t len);
/* Restarts the server (pg_ctl restart -m fast): every connection breaks.
 * Returns 0, or -1 (pg_ctl failed; its log is printed). */
int pg_restart(void);

/* Blocking helpers for the test's own checks (they assert on failure). */
PGconn *pg_open(const char *conninfo);
void pg_ok(PGconn *pg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
long long pg_ll(PGconn *pg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Child processes (the urt-dispatch tool). spawn runs argv[0] with argv,
 * stdout and stderr to log (appended); the child gets SIGKILL when the
 * test's process ends (PR_SET_PDEATHSIG), so a failed test leaves none
 * behind. */
pid_t proc_spawn(char *const argv[], const char *log);
/* Waits up to ms for pid to exit; true and *status if it did. */
bool proc_wait(pid_t pid, int ms, int *status);
/* True when the file contains needle (the children's logs). */
bool file_contains(const char *path, const char *needle);
/* Prints a file to stderr (a failing test's children's logs). */
void file_dump(const char *path);

#endif
