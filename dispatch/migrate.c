/*
 * dispatch/migrate.c — urt_dispatch_migrate: the versioned schema of
 * dispatch/dispatch.sql applied over a blocking connection (SPEC C21).
 *
 * One transaction: take an advisory lock (so processes of a fleet starting
 * together apply each step once, one after the other), create the version
 * table if it is missing, read the highest version applied, refuse a schema
 * newer than this library, apply each missing migration and record it,
 * commit. Any failure rolls everything back (the transaction), so a schema
 * is never half migrated. Runs on the calling thread, which is not a
 * worker (it blocks on the database); no shared state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include <urt/dispatch.h>

#include "base/error.h"
#include "dispatch/dispatch_sql.h"

#define MIGRATE_LOCK "7526981253474304836" /* pg_advisory_xact_lock key: "urt_disp" as a bigint */

static const char *first_line(const char *m, char *buf, size_t n)
{
    snprintf(buf, n, "%s", m && m[0] ? m : "unknown error");
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
    return buf;
}

/* Runs sql (params as text); 0, or -EIO with the message recorded. */
static int exec(PGconn *pg, const char *sql, int n, const char *const *params, PGresult **keep)
{
    PGresult *r = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        char buf[256];
        int err = urt__error(-EIO, "urt_dispatch_migrate: \"%.40s...\" failed: %s", sql,
                             first_line(PQresultErrorMessage(r), buf, sizeof(buf)));
        PQclear(r);
        return err;
    }
    if (keep)
        *keep = r;
    else
        PQclear(r);
    return 0;
}

static int current_version(PGconn *pg)
{
    PGresult *r = NULL;
    int err = exec(pg, "SELECT coalesce(max(version), 0) FROM urt_dispatch_schema", 0, NULL, &r);
    if (err < 0)
        return err;
    int v = atoi(PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* One multi-statement migration: the simple protocol runs them in order. */
static int apply(PGconn *pg, int version)
{
    PGresult *r = PQexec(pg, dsql_migrations[version - 1]);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        char buf[256];
        int err = urt__error(-EIO, "urt_dispatch_migrate: migration %d (%s) failed: %s", version,
                             dsql_migration_titles[version - 1], first_line(PQresultErrorMessage(r), buf, sizeof(buf)));
        PQclear(r);
        return err;
    }
    PQclear(r);
    char v[16];
    snprintf(v, sizeof(v), "%d", version);
    const char *p[2] = {v, dsql_migration_titles[version - 1]};
    return exec(pg, "INSERT INTO urt_dispatch_schema (version, title) VALUES ($1::integer, $2)", 2, p, NULL);
}

static int migrate_in_tx(PGconn *pg)
{
    int err;
    if ((err = exec(pg, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK ")", 0, NULL, NULL)) < 0 ||
        (err = exec(pg, "CREATE TABLE IF NOT EXISTS urt_dispatch_schema (version integer PRIMARY KEY, title text "
                        "NOT NULL, applied timestamptz NOT NULL DEFAULT now())", 0, NULL, NULL)) < 0)
        return err;
    int v = current_version(pg);
    if (v < 0)
        return v;
    if (v > DSQL_N_MIGRATIONS)
        return urt__error(-EPROTO, "urt_dispatch_migrate: the database's schema is version %d, this library knows "
                                   "up to %d", v, DSQL_N_MIGRATIONS);
    for (int i = v + 1; i <= DSQL_N_MIGRATIONS; i++)
        if ((err = apply(pg, i)) < 0)
            return err;
    return DSQL_N_MIGRATIONS;
}

URT_API int urt_dispatch_migrate(const char *conninfo)
{
    if (!conninfo)
        return urt__error(-EINVAL, "urt_dispatch_migrate: conninfo is NULL");
    const char *keys[] = {"dbname", "fallback_application_name", NULL};
    const char *vals[] = {conninfo, "urt-dispatch", NULL};
    PGconn *pg = PQconnectdbParams(keys, vals, 1);
    char buf[256];
    if (!pg || PQstatus(pg) != CONNECTION_OK) {
        int err = urt__error(-ECONNREFUSED, "urt_dispatch_migrate: cannot connect: %s",
                             first_line(pg ? PQerrorMessage(pg) : "out of memory", buf, sizeof(buf)));
        PQfinish(pg);
        return err;
    }
    PQclear(PQexec(pg, "SET client_min_messages = warning")); /* no NOTICE for IF NOT EXISTS */
    int err = exec(pg, "BEGIN", 0, NULL, NULL);
    int v = err < 0 ? err : migrate_in_tx(pg);
    if (v >= 0 && (err = exec(pg, "COMMIT", 0, NULL, NULL)) < 0)
        v = err;
    if (v < 0)
        PQclear(PQexec(pg, "ROLLBACK"));
    PQfinish(pg);
    return v;
}
