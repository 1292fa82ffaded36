/*
 * dispatch/conn.h — one PostgreSQL connection driven without blocking, on a
 * lane of its own (SPEC C21, "never block a worker on the database").
 *
 * A connection is libpq's non-blocking API (PQconnectStartParams /
 * PQconnectPoll, PQsendQueryPrepared / PQflush / PQconsumeInput / PQisBusy /
 * PQgetResult, PQnotifies) whose socket is watched through the worker's ring
 * with urt_io_poll (urt/io.h). Everything that touches the PGconn runs as a
 * task of the connection's lane, so one task at a time touches it, and the
 * poll continuations come back as tasks of that lane: the lane is the lock.
 * It moves between workers only while it has nothing queued (urt/lane.h),
 * which is the "one worker at a time" of the connection.
 *
 * Requests (struct dreq) are handed over from any thread with dconn_submit
 * (a lane task embedded in the request: no allocation) and are sent in FIFO
 * order. With options.pipeline = 1 one statement is at the server at a
 * time; with more, libpq's pipeline mode keeps up to that many in flight,
 * each followed by a Sync (so each is its own implicit transaction, as
 * without a pipeline, and an error aborts nothing else); their results come
 * back in send order. Each request's callback runs once, on the lane, with
 * the PGresult of the statement (or NULL and an error: -EIO the statement
 * failed, -ECONNRESET the connection broke under it, -ESHUTDOWN the
 * connection closed, -ECANCELED its abandon flag was set before it was
 * sent). The callback must not keep the PGresult.
 *
 * Batches. The statements take, done and enqueue_one of dispatch.sql take
 * arrays: every such request waiting at a connection goes out as ONE statement,
 * with at most one such statement of each kind in flight per connection —
 * group commit for statements: under load the next batch fills while the
 * last one is at the server; alone, a request goes out at once, as a batch
 * of one. Such requests wait in pend[] (not the FIFO: no order binds them to
 * the other requests), are sent by the connection's struct dbatch carrier
 * (a request of its own, one pipeline slot), and each member's callback gets
 * the batch's result with r->row, the row that answers it (the statement
 * returns each row's 1-based position in its arrays, `ord`), or -1 when no
 * row does (a take that found the strand taken, a release that found the
 * lease changed). A batch that fails (-EIO: a deadlock with a transaction of
 * the user's, a trigger's error) is split: its members are sent again one
 * by one (r->alone), so one bad member costs only itself. A break fails
 * the members or puts the resend ones back, as for single requests.
 *
 * States:  DOWN -> [RESOLVING ->] CONNECTING -> READY <-> (a request in flight)
 *            ^          |               |           |
 *            |          v               v           v
 *          BACKOFF <- BROKEN <----------+-----------+     CLOSED (dconn_close)
 * RESOLVING: libpq resolves a host name with a blocking getaddrinfo(), so a
 * conninfo that names hosts (not a socket directory, and no hostaddr) has
 * them resolved on the runtime's blocking pool first (urt/blocking.h); the
 * lane holds meanwhile (nothing else of the connection runs), and the
 * continuation connects to the addresses found (hostaddr=, with host= kept
 * for TLS and messages). A name that does not resolve is left out (logged),
 * as libpq would go on to the next host; none left breaks the attempt
 * (backoff, then again).
 * After each connect the statements of dispatch/dispatch.sql are prepared
 * (internal requests at the head of the FIFO), then ops->ready runs. A break
 * fails the requests in flight with -ECONNRESET, or puts them back at the
 * head, in order, when marked resend (statements that are safe to send
 * twice); the queued ones wait for the next connection. Reconnection waits
 * reconnect_min_ns, doubling up to reconnect_max_ns, with jitter; a connect
 * that reached READY resets it.
 *
 * I/O discipline: while a socket is open exactly one read poll (POLLIN) is in
 * flight (it brings responses and notifications alike), plus one write poll
 * while libpq has unsent data (PQflush returned 1). A socket is closed
 * (PQfinish) only after both polls came back (a poll holds the file), so a
 * break or a close first cancels them and finishes when the last returns.
 *
 * Memory-ordering contract: the PGconn, the FIFO and every field below the
 * "lane only" line are touched only by tasks of the lane; the hand-over of a
 * request is the lane's submission (its queue push and pop order the
 * request's fields). `closed` is the one field read by other threads (stop
 * waits for it): stored with release after PQfinish, loaded with acquire.
 */
#ifndef URT_DISPATCH_CONN_H
#define URT_DISPATCH_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>

#include <urt/blocking.h>
#include <urt/io.h>
#include <urt/lane.h>

#include "dispatch/dispatch_sql.h"
#include "dispatch/resolve.h"

struct dconn;
struct dreq;
struct urt_dispatch;

/* A request's completion, on the connection's lane. err: 0 (res holds the
 * last result), -EIO (res NULL, msg the server's message), -ECONNRESET,
 * -ESHUTDOWN. */
typedef void dreq_fn(struct dreq *r, PGresult *res, int err, const char *msg);

enum dreq_kind {
    DREQ_PREPARED, /* EXECUTE of a statement of dispatch_sql.h (stmt) */
    DREQ_PARAMS,   /* sql with parameters, unnamed */
    DREQ_SIMPLE,   /* sql without parameters, simple protocol (LISTEN) */
    DREQ_PREPARE,  /* internal: PREPARE of statement stmt */
};

struct dreq {
    struct urt_task task; /* the hand-over to the lane (runtime's while queued) */
    struct dreq *next;
    struct dconn *conn;
    enum dreq_kind kind;
    int stmt;
    const char *sql;
    int nparams;
    const char *const *params; /* text values, NULL = SQL NULL; valid until the callback */
    dreq_fn *fn;
    void *arg;
    const _Atomic bool *abandon; /* optional: when true before it is sent, it is not sent
                                    (-ECANCELED): a statement of a run that ended */
    bool resend; /* safe to send again after a break (else -ECONNRESET) */
    bool resent; /* was in flight on a connection that broke */
    /* batches (take, done): the member's params are one element each
     * (take: id, lease, backoff base, backoff max; done: id, lease, exitval) */
    int row;     /* its row of the batch's result, -1 for none (set before fn) */
    bool alone;  /* its batch failed: sent in a batch of one */
};

/* The batched statements (pend[] and batch[] of a connection). */
enum dbatch_kind { DB_TAKE, DB_DONE, DB_ENQ, DB_N };
#define DBATCH_MAX 256 /* members per statement (array_position: O(n) per row) */

/* The carrier of one batch (lane only). */
struct dbatch {
    struct dreq req;         /* the statement sent: its params are the arrays below */
    struct dreq **members;   /* member i answers to ord i + 1 */
    uint32_t n, cap;
    char *text[3];           /* the array parameters ("{...}") */
    size_t text_cap[3];
    const char *params[4];
    bool busy;               /* in flight */
};

struct dconn_ops {
    void (*ready)(struct dconn *c);                                     /* connected, statements prepared */
    void (*notify)(struct dconn *c, const char *channel, const char *payload); /* a NOTIFY heard */
};

/* A FIFO of requests linked through dreq.next (conn.c). */
struct dreq_q {
    struct dreq *head, *tail;
};

enum dconn_state { DC_DOWN, DC_RESOLVING, DC_CONNECTING, DC_READY, DC_BROKEN, DC_BACKOFF, DC_CLOSED };

struct dconn {
    struct urt_dispatch *d;
    urt_lane *lane;
    const struct dconn_ops *ops;
    void *owner;
    uint32_t id;
    _Atomic bool closed; /* after close: PQfinish done, no I/O in flight */
    /* ---- lane only ---- */
    enum dconn_state state;
    PGconn *pg;
    int fd;
    struct dreq_q wait;       /* waiting */
    struct dreq_q fly;        /* sent, not answered yet (send order) */
    uint32_t n_fly, depth;    /* in flight, and at most (options.pipeline) */
    bool pipelined;           /* libpq pipeline mode is on (depth > 1) */
    PGresult *res;            /* the last result of the oldest in flight */
    bool head_ended;          /* pipeline: the oldest's results ended, its Sync (the commit) not yet seen */
    bool flushing;            /* PQflush returned 1: unsent data */
    bool closing;
    bool rio_busy, wio_busy, sio_busy;
    struct urt_io rio, wio, sio; /* read poll, write poll, backoff sleep */
    uint64_t backoff_ns;
    uint64_t connects;        /* successful connects (READY reached) */
    uint32_t rng;
    char msg[256];            /* the last error message (for logs) */
    struct dreq prep[DSQL_N];
    struct dreq close_req;
    struct dreq_q pend[DB_N]; /* batchable requests waiting */
    struct dbatch batch[DB_N];
    /* host names resolved on the blocking pool (RESOLVING): written by the
     * pool thread while the lane holds, read by the continuation */
    struct urt_blocking resolve;
    struct dresolve names;
};

/* Sets c up (lane creation: urt_lane_create). Returns 0 or -errno. Any thread. */
int dconn_init(struct dconn *c, struct urt_dispatch *d, uint32_t id, const struct dconn_ops *ops, void *owner);
/* Starts connecting (a lane task). Any thread. */
int dconn_start(struct dconn *c);
/* Queues r (its kind, stmt/sql, params, fn, arg, resend set). 0, or the
 * lane's submission error (r is the caller's again). Any thread. */
int dconn_submit(struct dconn *c, struct dreq *r);
/* Closes: waiting and in-flight requests fail with -ESHUTDOWN; closed is set
 * once the socket is closed. Any thread; once. */
int dconn_close(struct dconn *c);
/* Frees the lane (after closed, or if never started). Not on a worker. */
void dconn_fini(struct dconn *c);

/* Rows affected (PQcmdTuples) of a result, 0 if none. */
uint64_t dconn_affected(PGresult *res);

#endif
