/*
 * dispatch/resolve.h — a connection string's host names, resolved where
 * blocking is allowed (SPEC C21, "never block a worker on the database").
 *
 * libpq resolves a host name with getaddrinfo(), which blocks. A connection
 * (dispatch/conn.c) whose conninfo names hosts therefore has them resolved
 * by dresolve_run on the runtime's blocking pool (urt/blocking.h) and
 * connects with the results as host=, hostaddr= (and port=) keywords, which
 * override the conninfo's: libpq then resolves nothing.
 *
 *   dresolve_init: parses conninfo (PQconninfoParse): hosts is its host
 *     list when one entry is a name (not a socket directory: '/' or '@'),
 *     and no hostaddr= is given (libpq resolves nothing then); ports its
 *     port list when it has one entry per host; else both NULL.
 *   dresolve_run (blocks): each host to a numeric address (a socket
 *     directory to an empty entry, as libpq wants); a name that does not
 *     resolve is left out with its port, as libpq would skip to the next
 *     host, and err says why; none left: -1.
 *
 * Memory ordering: none of its own; the caller hands the object to the
 * pool and back (the offload's queue and delivery order it).
 */
#ifndef URT_DISPATCH_RESOLVE_H
#define URT_DISPATCH_RESOLVE_H

#include <stdbool.h>

#include <urt/blocking.h>

struct dresolve {
    char *hosts, *ports;  /* from the conninfo (malloc'd), or NULL: nothing to resolve */
    char hostlist[512];   /* the hosts kept (that resolved, and socket directories) */
    char hostaddr[512];   /* their addresses, one per kept host ("" for a socket directory) */
    char portlist[128];   /* their ports when the conninfo has one per host */
    char err[256];        /* why the last name left out did not resolve ("": none) */
};

void dresolve_init(struct dresolve *r, const char *conninfo);
void dresolve_fini(struct dresolve *r);
/* 0, or -1 with err (no host resolved, or the lists do not fit). Blocks. */
int dresolve_run(struct dresolve *r);
/* Offloads dresolve_run(r) to rt's blocking pool with b (arg r): done runs
 * on a worker, in the calling task's context (a lane task's lane holds).
 * urt_blocking_submit's result. */
int dresolve_submit(struct dresolve *r, urt_runtime *rt, struct urt_blocking *b, urt_blocking_done_fn *done);
/* The keywords and values (NULL-terminated, 6 entries) of
 * PQconnectStartParams for conninfo, expanded: with resolved, the kept hosts,
 * their addresses (and ports) override the conninfo's (later keywords win). */
void dresolve_params(const struct dresolve *r, bool resolved, const char *conninfo, const char **keys,
                     const char **vals);

#endif
