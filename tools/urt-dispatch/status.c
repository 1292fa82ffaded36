/*
 * tools/urt-dispatch/status.c — the commands that only read the database
 * over a blocking libpq connection: status (strands per kind and state with
 * the oldest due strand's age, the latest dead letters, and the partition
 * map heard on the dispatchers' channel), failed (the dead letters) and
 * verify (the demo run log, urt_dispatch_runs: no two runs of one strand may
 * overlap).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include <libpq-fe.h>

#include "demo.h"
#include "opts.h"

static PGconn *connect_or_say(const char *conninfo)
{
    PGconn *pg = PQconnectdb(conninfo);
    if (PQstatus(pg) != CONNECTION_OK) {
        fprintf(stderr, "urt-dispatch: cannot connect: %s", PQerrorMessage(pg));
        PQfinish(pg);
        return NULL;
    }
    return pg;
}

/* Runs sql; prints the error and returns NULL on failure. */
static PGresult *query(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
        fprintf(stderr, "urt-dispatch: %s", PQresultErrorMessage(r));
        PQclear(r);
        return NULL;
    }
    return r;
}

/* Strands per kind and state; the oldest due strand's age per kind. */
static int print_states(PGconn *pg)
{
    PGresult *r = query(pg, "SELECT kind,"
                            " count(*) FILTER (WHERE exitval IS NULL AND halted IS NULL AND lease <= now() AND schedule <= now()),"
                            " count(*) FILTER (WHERE exitval IS NULL AND halted IS NULL AND lease <= now() AND schedule > now()),"
                            " count(*) FILTER (WHERE exitval IS NULL AND halted IS NULL AND lease > now()),"
                            " count(*) FILTER (WHERE exitval IS NOT NULL),"
                            " count(*) FILTER (WHERE halted = 'failed'),"
                            " count(*) FILTER (WHERE halted = 'cancelled'),"
                            " coalesce(to_char(extract(epoch FROM now() - min(schedule) FILTER (WHERE exitval IS NULL"
                            "   AND halted IS NULL AND lease <= now() AND schedule <= now())), 'FM9999999990.000'), '-')"
                            " FROM urt_strand GROUP BY kind ORDER BY kind");
    if (!r)
        return 1;
    printf("%-20s %10s %10s %10s %10s %10s %10s %14s\n", "kind", "due", "scheduled", "running", "done", "failed",
           "cancelled", "oldest due s");
    for (int i = 0; i < PQntuples(r); i++)
        printf("%-20s %10s %10s %10s %10s %10s %10s %14s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
               PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5),
               PQgetvalue(r, i, 6), PQgetvalue(r, i, 7));
    PQclear(r);
    return 0;
}

/* The latest `limit` dead letters (of kind, or all): id, kind, tries, when, last error. */
static int print_failed(PGconn *pg, const char *kind, uint32_t limit)
{
    char lim[16];
    snprintf(lim, sizeof(lim), "%u", limit);
    const char *p[2] = {kind, lim};
    PGresult *r = PQexecParams(pg, "SELECT id::text, kind, try, max_attempts,"
                                   " to_char(halted_at, 'YYYY-MM-DD HH24:MI:SS'), coalesce(last_error, ''),"
                                   " count(*) OVER ()"
                                   " FROM urt_strand WHERE halted = 'failed' AND ($1::text IS NULL OR kind = $1)"
                                   " ORDER BY halted_at DESC LIMIT $2::integer", 2, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "urt-dispatch: %s", PQresultErrorMessage(r));
        PQclear(r);
        return 1;
    }
    int n = PQntuples(r);
    printf("failed strands (the dead letters: tries used up; `urt-dispatch requeue ID` runs one again): %s\n",
           n ? PQgetvalue(r, 0, 6) : "0");
    if (n)
        printf("  %-36s %-16s %9s %-19s %s\n", "id", "kind", "tries", "failed at", "last error");
    for (int i = 0; i < n; i++) {
        char tries[24];
        snprintf(tries, sizeof(tries), "%s/%s", PQgetvalue(r, i, 2), PQgetvalue(r, i, 3));
        printf("  %-36s %-16s %9s %-19s %.200s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), tries,
               PQgetvalue(r, i, 4), PQgetvalue(r, i, 5));
    }
    PQclear(r);
    return 0;
}

/* Listens for heartbeats for 4 heartbeat periods; seen[p] = 1 when heard. */
static int listen_heartbeats(PGconn *pg, const struct tool_opts *o, uint8_t seen[257])
{
    char sql[96];
    snprintf(sql, sizeof(sql), "LISTEN \"%s\"", o->dopt.channel);
    PGresult *r = query(pg, sql);
    if (!r)
        return 1;
    PQclear(r);
    uint64_t end = urt_now_ns() + 4 * o->dopt.heartbeat_ns;
    for (uint64_t now = urt_now_ns(); now < end; now = urt_now_ns()) {
        int fd = PQsocket(pg);
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(fd, &rd);
        struct timeval tv = {.tv_sec = (time_t)((end - now) / 1000000000ull),
                             .tv_usec = (suseconds_t)((end - now) % 1000000000ull / 1000)};
        if (select(fd + 1, &rd, NULL, NULL, &tv) < 0 || !PQconsumeInput(pg))
            break;
        PGnotify *n;
        while ((n = PQnotifies(pg))) {
            char *e;
            unsigned long p = strtoul(n->extra, &e, 10);
            if (!*e && p >= 1 && p <= 256)
                seen[p] = 1;
            else
                printf("ignored payload \"%.40s\" (not a partition number)\n", n->extra);
            PQfreemem(n);
        }
    }
    return 0;
}

int cmd_status(const struct tool_opts *o)
{
    PGconn *pg = connect_or_say(o->dopt.conninfo);
    if (!pg)
        return 1;
    uint8_t seen[257] = {0};
    int rc = print_states(pg);
    if (rc == 0)
        rc = print_failed(pg, NULL, o->limit);
    if (rc == 0)
        rc = listen_heartbeats(pg, o, seen);
    PQfinish(pg);
    if (rc)
        return rc;
    uint32_t n = 0;
    for (uint32_t p = 1; p <= 256; p++)
        if (seen[p])
            n = p;
    if (n == 0) {
        printf("partitions: none heard on \"%s\" within %.1f s\n", o->dopt.channel, 4 * o->dopt.heartbeat_ns / 1e9);
        return 0;
    }
    printf("partitions: %u (the highest heard on \"%s\")\n", n, o->dopt.channel);
    for (uint32_t p = 1; p <= n; p++) {
        char first[37], last[37];
        urt_dispatch_partition_range(p, n, first, last);
        printf("  %3u %s .. %s  %s\n", p, first, last, seen[p] ? "live" : "silent (its strands wait for takeover)");
    }
    return 0;
}

int cmd_failed(const struct tool_opts *o)
{
    PGconn *pg = connect_or_say(o->dopt.conninfo);
    if (!pg)
        return 1;
    int rc = print_failed(pg, o->filter_kind, o->limit);
    PQfinish(pg);
    return rc;
}

int cmd_verify(const struct tool_opts *o)
{
    PGconn *pg = connect_or_say(o->dopt.conninfo);
    if (!pg)
        return 1;
    PGresult *r = query(pg,
        "SELECT (" DEMO_OVERLAPS "),"
        " (SELECT count(*) FROM urt_dispatch_runs WHERE ended IS NULL),"
        " (SELECT count(*) FROM (SELECT strand FROM urt_dispatch_runs WHERE ended IS NOT NULL"
        "                        GROUP BY strand HAVING count(*) > 1) m),"
        " (SELECT count(DISTINCT strand) FROM urt_dispatch_runs),"
        " (SELECT count(*) FROM urt_strand WHERE kind = 'record' AND exitval IS NULL)");
    PQfinish(pg);
    if (!r)
        return 1;
    long overlaps = atol(PQgetvalue(r, 0, 0));
    printf("runs overlapping another run of their strand: %ld\n"
           "runs that never recorded their end (process died, statement failed, or running; counted to their "
           "lease's end): %s\n"
           "strands with more than one ended run: %s\n"
           "strands in the run log: %s; record strands not finished: %s\n",
           overlaps, PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3), PQgetvalue(r, 0, 4));
    PQclear(r);
    return overlaps ? 1 : 0;
}
