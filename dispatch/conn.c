/*
 * dispatch/conn.c — a non-blocking PostgreSQL connection on its own lane
 * (design, states, I/O discipline and memory-ordering contract in
 * dispatch/conn.h).
 *
 * Every function below except dconn_init/start/submit/close/fini runs as a
 * task of the connection's lane: the lane tasks that accept a request, close
 * the connection, and the continuations of the urt_io operations (read and
 * write polls, backoff sleep) and of host-name resolution. Each ends in
 * conn_pump(), which moves the state machine as far as it can go without waiting.
 */
#include "dispatch/conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urt/task.h>

#include "dispatch/dispatch_int.h"

static void conn_pump(struct dconn *c);
static void conn_break(struct dconn *c, const char *why);

/* ---- small helpers ------------------------------------------------------ */

static void copy_msg(struct dconn *c, const char *m)
{
    snprintf(c->msg, sizeof(c->msg), "%s", m && m[0] ? m : "unknown error");
    char *nl = strchr(c->msg, '\n');
    if (nl)
        *nl = '\0';
}

uint64_t dconn_affected(PGresult *res)
{
    const char *t = res ? PQcmdTuples(res) : "";
    return t && t[0] ? strtoull(t, NULL, 10) : 0;
}

static void q_push(struct dreq_q *q, struct dreq *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

static void q_push_front(struct dreq_q *q, struct dreq *r)
{
    r->next = q->head;
    q->head = r;
    if (!q->tail)
        q->tail = r;
}

static struct dreq *q_pop(struct dreq_q *q)
{
    struct dreq *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head)
            q->tail = NULL;
        r->next = NULL;
    }
    return r;
}

/* Puts what `front` holds, in its order, before what q holds. */
static void q_prepend(struct dreq_q *q, struct dreq_q *front)
{
    if (!front->head)
        return;
    front->tail->next = q->head;
    q->head = front->head;
    if (!q->tail)
        q->tail = front->tail;
}

/* The pipeline: requests sent and not answered, in send order. */
static void fly_push(struct dconn *c, struct dreq *r)
{
    q_push(&c->fly, r);
    c->n_fly++;
}

static struct dreq *fly_pop(struct dconn *c)
{
    struct dreq *r = q_pop(&c->fly);
    if (r)
        c->n_fly--;
    return r;
}

static void complete(struct dreq *r, PGresult *res, int err, const char *msg)
{
    if (r->kind == DREQ_PREPARE)
        return; /* internal: a failed PREPARE breaks the connection instead */
    r->fn(r, res, err, msg ? msg : "");
}

/* ---- polls ----------------------------------------------------------- */

static void on_rio(struct urt_io *io, int32_t res, void *arg);
static void on_wio(struct urt_io *io, int32_t res, void *arg);
static void on_sio(struct urt_io *io, int32_t res, void *arg);

static void arm_read(struct dconn *c)
{
    if (c->rio_busy || c->fd < 0)
        return;
    urt_io_init(&c->rio, on_rio, c);
    int err = urt_io_poll(&c->rio, c->fd, POLLIN);
    if (err < 0) {
        conn_break(c, urt_last_error());
        return;
    }
    c->rio_busy = true;
}

static void arm_write(struct dconn *c)
{
    if (c->wio_busy || c->fd < 0)
        return;
    urt_io_init(&c->wio, on_wio, c);
    int err = urt_io_poll(&c->wio, c->fd, POLLOUT);
    if (err < 0) {
        conn_break(c, urt_last_error());
        return;
    }
    c->wio_busy = true;
}

/* ---- connecting -------------------------------------------------------- */

static void connect_libpq(struct dconn *c, bool resolved)
{
    const char *keys[6], *vals[6];
    dresolve_params(&c->names, resolved, c->d->conninfo, keys, vals);
    c->pg = PQconnectStartParams(keys, vals, 1);
    if (!c->pg || PQstatus(c->pg) == CONNECTION_BAD) {
        conn_break(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
        return;
    }
    PQsetnonblocking(c->pg, 1);
    c->state = DC_CONNECTING;
    c->fd = PQsocket(c->pg);
    arm_write(c); /* libpq: start as if PQconnectPoll had returned PGRES_POLLING_WRITING */
}

/* The continuation, on the lane (it held: nothing of the connection ran meanwhile). */
static void hosts_resolved(struct urt_blocking *b, int64_t res, void *arg)
{
    struct dconn *c = (struct dconn *)(void *)((char *)b - offsetof(struct dconn, resolve));
    (void)arg;
    if (res < 0) {
        conn_break(c, res == -ECANCELED ? "the runtime is being destroyed" : c->names.err);
        return;
    }
    if (c->names.err[0]) /* a name left out; the others are tried */
        dispatch_log(c->d, "connection %u: %s", c->id, c->names.err);
    connect_libpq(c, true);
    conn_pump(c);
}

static void connect_begin(struct dconn *c)
{
    if (!c->names.hosts)
        connect_libpq(c, false);
    else if (dresolve_submit(&c->names, c->d->rt, &c->resolve, hosts_resolved))
        conn_break(c, urt_last_error());
    else
        c->state = DC_RESOLVING; /* getaddrinfo on the blocking pool (the lane holds until hosts_resolved) */
}

static void prepare_all(struct dconn *c)
{
    for (int i = DSQL_N - 1; i >= 0; i--) {
        struct dreq *r = &c->prep[i];
        memset(r, 0, sizeof(*r));
        r->conn = c;
        r->kind = DREQ_PREPARE;
        r->stmt = i;
        q_push_front(&c->wait, r);
    }
}

static void connect_step(struct dconn *c)
{
    PostgresPollingStatusType st = PQconnectPoll(c->pg);
    c->fd = PQsocket(c->pg); /* may change while libpq tries addresses */
    switch (st) {
    case PGRES_POLLING_READING:
        arm_read(c);
        return;
    case PGRES_POLLING_WRITING:
        arm_write(c);
        return;
    case PGRES_POLLING_OK:
        c->state = DC_READY;
        c->backoff_ns = 0;
        c->pipelined = c->depth > 1 && PQenterPipelineMode(c->pg) == 1;
        prepare_all(c);
        arm_read(c);
        return;
    default:
        conn_break(c, PQerrorMessage(c->pg));
    }
}

/* ---- requests ---------------------------------------------------------- */

static bool send_one(struct dconn *c, struct dreq *r)
{
    switch (r->kind) {
    case DREQ_PREPARED:
        return PQsendQueryPrepared(c->pg, dsql[r->stmt].name, r->nparams, r->params, NULL, NULL, 0);
    case DREQ_PARAMS:
        return PQsendQueryParams(c->pg, r->sql, r->nparams, NULL, r->params, NULL, NULL, 0);
    case DREQ_SIMPLE: /* extended protocol without parameters: allowed in pipeline mode */
        return PQsendQueryParams(c->pg, r->sql, 0, NULL, NULL, NULL, NULL, 0);
    case DREQ_PREPARE:
        return PQsendPrepare(c->pg, dsql[r->stmt].name, dsql[r->stmt].text, dsql[r->stmt].nparams, NULL);
    }
    return false;
}

static void flush_step(struct dconn *c)
{
    int f = PQflush(c->pg);
    if (f < 0) {
        conn_break(c, PQerrorMessage(c->pg));
        return;
    }
    c->flushing = f == 1;
    if (c->flushing)
        arm_write(c);
}

/* ---- batches (conn.h) ----------------------------------------------------- */

/* The batched statements: a member's params 0..arrays-1 become the
 * statement's arrays (quoted: the text ones), its params arrays..nparams-1
 * are the first member's (the same for all). */
static const struct bdef {
    int stmt, arrays, nparams;
    unsigned quoted;
    const char *what;
} bdefs[DB_N] = {
    [DB_TAKE] = {DSQL_TAKE, 1, 2, 0, "takes"},
    [DB_DONE] = {DSQL_DONE, 3, 3, 1u << 2, "releases"},
    [DB_ENQ] = {DSQL_ENQUEUE_ONE, 3, 4, 0x3, "enqueues"},
};

static int batch_kind(const struct dreq *r)
{
    for (int k = 0; r->kind == DREQ_PREPARED && k < DB_N; k++)
        if (r->stmt == bdefs[k].stmt)
            return k;
    return -1;
}

/* Appends s to text[i] (grown as needed); false without memory. */
static bool text_add(struct dbatch *b, int i, size_t *len, const char *s, size_t n)
{
    if (*len + n + 2 > b->text_cap[i]) {
        size_t cap = b->text_cap[i] ? b->text_cap[i] : 256;
        while (cap < *len + n + 2)
            cap *= 2;
        char *t = realloc(b->text[i], cap);
        if (!t)
            return false;
        b->text[i] = t;
        b->text_cap[i] = cap;
    }
    memcpy(b->text[i] + *len, s, n);
    *len += n;
    b->text[i][*len] = '\0';
    return true;
}

/* One array element: plain (uuids, numbers) or quoted (text: " and \ escaped). */
static bool elem_add(struct dbatch *b, int i, size_t *len, const char *s, bool quote)
{
    if (!text_add(b, i, len, *len > 1 ? "," : "", *len > 1 ? 1 : 0))
        return false;
    if (!quote)
        return text_add(b, i, len, s, strlen(s));
    if (!text_add(b, i, len, "\"", 1))
        return false;
    for (const char *p = s; *p; p++) {
        if ((*p == '"' || *p == '\\') && !text_add(b, i, len, "\\", 1))
            return false;
        if (!text_add(b, i, len, p, 1))
            return false;
    }
    return text_add(b, i, len, "\"", 1);
}

static void batch_done(struct dreq *r, PGresult *res, int err, const char *msg);

/* Takes the waiting requests of kind k (at most DBATCH_MAX; one if the
 * first is alone) into the carrier and builds its array parameters. False
 * when there is nothing to send or no memory (they stay waiting). */
static bool batch_build(struct dconn *c, int k)
{
    struct dbatch *b = &c->batch[k];
    struct dreq_q *q = &c->pend[k];
    const struct bdef *def = &bdefs[k];
    int arrays = def->arrays;
    size_t len[3] = {0, 0, 0};
    b->n = 0;
    for (int i = 0; i < arrays; i++)
        if (!text_add(b, i, &len[i], "{", 1))
            return false;
    for (struct dreq *m = q->head; m && b->n < DBATCH_MAX; m = m->next) {
        if (m->alone && b->n > 0)
            break;
        if (b->n == b->cap) {
            uint32_t cap = b->cap ? b->cap * 2 : 64;
            struct dreq **a = realloc(b->members, cap * sizeof(*a));
            if (!a)
                return false;
            b->members = a;
            b->cap = cap;
        }
        for (int i = 0; i < arrays; i++)
            if (!elem_add(b, i, &len[i], m->params[i], def->quoted & (1u << i)))
                return false;
        b->members[b->n++] = m;
        if (m->alone)
            break;
    }
    for (int i = 0; i < arrays; i++)
        if (!text_add(b, i, &len[i], "}", 1))
            return false;
    for (uint32_t i = 0; i < b->n; i++)
        q_pop(q); /* the members are the head of the queue, in order */
    struct dreq *first = b->members[0];
    memset(&b->req, 0, sizeof(b->req));
    b->req.conn = c;
    b->req.kind = DREQ_PREPARED;
    b->req.stmt = def->stmt;
    b->req.nparams = def->nparams;
    b->req.params = b->params;
    b->req.fn = batch_done;
    b->req.arg = b;
    b->req.resend = true; /* a session ended under it: conn_break sorts its members */
    for (int i = 0; i < def->nparams; i++)
        b->params[i] = i < arrays ? b->text[i] : first->params[i];
    return true;
}

/* A break (or a close) with the carrier in flight: its resend members go
 * back to the head of their queue, in order; the others fail. */
static void batch_break(struct dconn *c, struct dbatch *b, int err, const char *msg)
{
    int k = (int)(b - c->batch);
    b->busy = false;
    for (uint32_t i = b->n; i-- > 0;) {
        struct dreq *m = b->members[i];
        if (m->resend && err == -ECONNRESET) {
            m->resent = true;
            q_push_front(&c->pend[k], m);
        } else {
            m->row = -1;
            m->fn(m, NULL, err, msg);
        }
    }
    b->n = 0;
}

/* The carrier's answer: each member's row, then each member's callback. */
static void batch_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    struct dbatch *b = r->arg;
    struct dconn *c = r->conn;
    int k = (int)(b - c->batch);
    b->busy = false;
    if (err == -EIO && b->n > 1) {
        dispatch_log(c->d, "connection %u: a batch of %u %s failed (%s): its members go one by one", c->id, b->n,
                     bdefs[k].what, msg);
        for (uint32_t i = b->n; i-- > 0;) {
            b->members[i]->alone = true;
            q_push_front(&c->pend[k], b->members[i]);
        }
        b->n = 0;
        return;
    }
    for (uint32_t i = 0; i < b->n; i++)
        b->members[i]->row = -1;
    int rows = err == 0 ? PQntuples(res) : 0;
    for (int i = 0; i < rows; i++) {
        unsigned long ord = strtoul(PQgetvalue(res, i, 0), NULL, 10);
        if (ord >= 1 && ord <= b->n)
            b->members[ord - 1]->row = i;
    }
    uint32_t n = b->n;
    b->n = 0;
    for (uint32_t i = 0; i < n; i++)
        b->members[i]->fn(b->members[i], err == 0 ? res : NULL, err, msg);
}

/* Sends one carrier per kind that has requests waiting and none in flight. */
static void send_batches(struct dconn *c)
{
    for (int k = 0; k < DB_N && c->state == DC_READY && c->n_fly < c->depth; k++) {
        struct dbatch *b = &c->batch[k];
        if (b->busy || !c->pend[k].head || !batch_build(c, k))
            continue;
        if (!send_one(c, &b->req) || (c->pipelined && !PQpipelineSync(c->pg))) {
            for (uint32_t i = b->n; i-- > 0;)
                q_push_front(&c->pend[k], b->members[i]);
            b->n = 0;
            conn_break(c, PQerrorMessage(c->pg));
            return;
        }
        b->busy = true;
        fly_push(c, &b->req);
        flush_step(c);
    }
}

/* Sends what waits, up to depth requests in flight. In pipeline mode each
 * statement is followed by a Sync: its own implicit transaction, as without
 * a pipeline (an error aborts nothing else). */
static void send_next(struct dconn *c)
{
    bool sent = false;
    while (c->state == DC_READY && c->wait.head && c->n_fly < c->depth) {
        struct dreq *r = q_pop(&c->wait);
        if (r->abandon && atomic_load_explicit(r->abandon, memory_order_acquire)) {
            complete(r, NULL, -ECANCELED, "abandoned before it was sent");
            continue;
        }
        if (!send_one(c, r) || (c->pipelined && !PQpipelineSync(c->pg))) {
            q_push_front(&c->wait, r);
            conn_break(c, PQerrorMessage(c->pg));
            return;
        }
        fly_push(c, r);
        sent = true;
    }
    if (sent)
        flush_step(c);
    send_batches(c);
}

/* The oldest statement in flight is complete: hand its result over. */
static void finish_head(struct dconn *c)
{
    struct dreq *r = fly_pop(c);
    PGresult *res = c->res;
    c->res = NULL;
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    if (!ok && r->resend && PQstatus(c->pg) == CONNECTION_BAD) {
        /* the server ended the session under the statement (FATAL: a
         * restart, a terminated backend): not the statement's error, send
         * it again on the next connection */
        q_push_front(&c->fly, r);
        c->n_fly++;
        c->res = res;
        conn_break(c, res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg));
        return;
    }
    if (r->kind == DREQ_PREPARE) {
        if (!ok) {
            copy_msg(c, res ? PQresultErrorMessage(res) : "no result");
            dispatch_log(c->d, "connection %u: prepare %s failed: %s", c->id, dsql[r->stmt].name, c->msg);
        } else if (r->stmt == DSQL_N - 1) {
            c->connects++;
            if (c->connects > 1)
                atomic_fetch_add_explicit(&c->d->ctr.reconnects, 1, memory_order_relaxed);
            if (c->ops && c->ops->ready)
                c->ops->ready(c);
        }
    } else if (ok) {
        complete(r, res, 0, "");
    } else {
        copy_msg(c, res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg));
        complete(r, NULL, -EIO, c->msg);
    }
    PQclear(res);
}

static void drain_notifies(struct dconn *c)
{
    PGnotify *n;
    while ((n = PQnotifies(c->pg))) {
        if (c->ops && c->ops->notify)
            c->ops->notify(c, n->relname, n->extra);
        PQfreemem(n);
    }
}

/* Input arrived (or the read poll saw an error): read it, hand over every
 * complete result, send what waits. */
static void read_step(struct dconn *c)
{
    if (!PQconsumeInput(c->pg)) {
        conn_break(c, PQerrorMessage(c->pg));
        return;
    }
    if (c->flushing)
        flush_step(c);
    /* per statement: its results, then NULL; in pipeline mode then its
     * Sync's PGRES_PIPELINE_SYNC. The statement's transaction commits at
     * that Sync, so in pipeline mode its result is handed over only then: a
     * backend killed between the two rolled the statement back (a take
     * acted on there would run a strand without its lease). Outside
     * pipeline mode the NULL comes after ReadyForQuery: committed. */
    while (c->state == DC_READY && c->fly.head && !PQisBusy(c->pg)) {
        PGresult *res = PQgetResult(c->pg);
        if (!res) {
            if (c->pipelined && !c->head_ended) {
                c->head_ended = true; /* wait for its Sync */
                continue;
            }
            c->head_ended = false;
            finish_head(c); /* outside pipeline mode; or the Sync failed (c->res: the error) */
            continue;
        }
        if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
            PQclear(res);
            if (c->head_ended) {
                c->head_ended = false;
                finish_head(c);
            }
            continue;
        }
        PQclear(c->res);
        c->res = res;
    }
    send_next(c);
    if (c->state == DC_READY)
        drain_notifies(c);
    if (c->state == DC_READY && PQstatus(c->pg) == CONNECTION_BAD)
        conn_break(c, PQerrorMessage(c->pg));
}

/* ---- breaking, backing off, closing ------------------------------------- */

static uint64_t next_backoff(struct dconn *c)
{
    const struct urt_dispatch_options *o = &c->d->opt;
    uint64_t b = c->backoff_ns ? c->backoff_ns * 2 : o->reconnect_min_ns;
    if (b > o->reconnect_max_ns)
        b = o->reconnect_max_ns;
    c->backoff_ns = b;
    c->rng = c->rng * 1664525u + 1013904223u; /* jitter: 50..100 % of b */
    return b / 2 + (b / 2) * (c->rng >> 16) / 65536;
}

/* Both polls are back: the socket may be closed. */
static void settle(struct dconn *c)
{
    if (c->rio_busy || c->wio_busy || c->sio_busy)
        return;
    if (c->pg) {
        PQfinish(c->pg);
        c->pg = NULL;
        c->fd = -1;
    }
    if (c->closing) {
        struct dreq *r;
        while ((r = q_pop(&c->wait)))
            complete(r, NULL, -ESHUTDOWN, "the dispatcher is stopping");
        for (int k = 0; k < DB_N; k++)
            while ((r = q_pop(&c->pend[k])))
                complete(r, NULL, -ESHUTDOWN, "the dispatcher is stopping");
        if (c->state != DC_CLOSED) {
            c->state = DC_CLOSED;
            atomic_store_explicit(&c->closed, true, memory_order_release); /* pairs with dconn_closed's acquire */
        }
        return;
    }
    if (c->state == DC_BROKEN) {
        c->state = DC_BACKOFF;
        urt_io_init(&c->sio, on_sio, c);
        if (urt_io_sleep(&c->sio, next_backoff(c)) == 0)
            c->sio_busy = true;
        else
            c->state = DC_DOWN; /* the runtime refuses timers (shutting down): retry at the next pump */
    }
}

static void cancel_io(struct dconn *c)
{
    if (c->rio_busy)
        urt_io_cancel(&c->rio);
    if (c->wio_busy)
        urt_io_cancel(&c->wio);
    if (c->sio_busy)
        urt_io_cancel(&c->sio);
}

static void conn_break(struct dconn *c, const char *why)
{
    if (c->state == DC_BROKEN || c->state == DC_CLOSED)
        return;
    copy_msg(c, why);
    if (!c->closing)
        dispatch_log(c->d, "connection %u lost: %s", c->id, c->msg);
    c->state = DC_BROKEN;
    c->flushing = false;
    PQclear(c->res);
    c->res = NULL;
    c->head_ended = false;
    /* the statements are prepared again on the next connection */
    while (c->wait.head && c->wait.head->kind == DREQ_PREPARE)
        q_pop(&c->wait);
    /* what was in flight: the resendable ones go back to the head of the
     * queue, in their order; the others fail (they may or may not have run) */
    struct dreq_q again = {0};
    struct dreq *r;
    while ((r = fly_pop(c))) {
        if (r->kind == DREQ_PREPARE)
            continue;
        if (r->fn == batch_done) {
            batch_break(c, r->arg, c->closing ? -ESHUTDOWN : -ECONNRESET, c->msg);
            continue;
        }
        if (r->resend && !c->closing) {
            r->resent = true;
            q_push(&again, r);
        } else {
            complete(r, NULL, -ECONNRESET, c->msg);
        }
    }
    q_prepend(&c->wait, &again);
    cancel_io(c);
    settle(c);
}

/* ---- continuations ------------------------------------------------------ */

static void on_rio(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct dconn *c = arg;
    c->rio_busy = false;
    if (c->state == DC_BROKEN || c->closing) {
        settle(c);
        return;
    }
    if (res < 0) {
        conn_break(c, strerror(-res));
        return;
    }
    if (c->state == DC_CONNECTING)
        connect_step(c);
    else if (c->state == DC_READY)
        read_step(c);
    conn_pump(c);
}

static void on_wio(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct dconn *c = arg;
    c->wio_busy = false;
    if (c->state == DC_BROKEN || c->closing) {
        settle(c);
        return;
    }
    if (res < 0) {
        conn_break(c, strerror(-res));
        return;
    }
    if (c->state == DC_CONNECTING)
        connect_step(c);
    else if (c->state == DC_READY && c->flushing)
        flush_step(c);
    conn_pump(c);
}

static void on_sio(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    (void)res;
    struct dconn *c = arg;
    c->sio_busy = false;
    if (c->closing) {
        settle(c);
        return;
    }
    if (c->state == DC_BACKOFF)
        c->state = DC_DOWN;
    conn_pump(c);
}

/* Moves the state machine as far as it goes without waiting. */
static void conn_pump(struct dconn *c)
{
    if (c->closing)
        return;
    if (c->state == DC_DOWN)
        connect_begin(c);
    if (c->state == DC_READY) {
        send_next(c);
        arm_read(c);
    }
}

/* ---- lane tasks and the entry points ------------------------------------ */

static enum urt_task_result accept_req(struct urt_task *t, void *arg)
{
    (void)t;
    struct dreq *r = arg;
    struct dconn *c = r->conn;
    if (c->closing || c->state == DC_CLOSED) {
        complete(r, NULL, -ESHUTDOWN, "the dispatcher is stopping");
        return URT_TASK_DONE;
    }
    int k = batch_kind(r);
    r->row = -1;
    q_push(k >= 0 ? &c->pend[k] : &c->wait, r);
    conn_pump(c);
    return URT_TASK_DONE;
}

static enum urt_task_result start_task(struct urt_task *t, void *arg)
{
    (void)t;
    conn_pump(arg);
    return URT_TASK_DONE;
}

static enum urt_task_result close_task(struct urt_task *t, void *arg)
{
    (void)t;
    struct dconn *c = arg;
    c->closing = true;
    struct dreq *r;
    while ((r = fly_pop(c)))
        complete(r, NULL, -ESHUTDOWN, "the dispatcher is stopping");
    PQclear(c->res);
    c->res = NULL;
    cancel_io(c);
    settle(c);
    return URT_TASK_DONE;
}

int dconn_init(struct dconn *c, struct urt_dispatch *d, uint32_t id, const struct dconn_ops *ops, void *owner)
{
    memset(c, 0, sizeof(*c));
    c->d = d;
    c->id = id;
    c->ops = ops;
    c->owner = owner;
    c->fd = -1;
    c->depth = d->opt.pipeline;
    c->rng = 0x9e3779b9u ^ (id * 2654435761u) ^ (uint32_t)urt_now_ns();
    dresolve_init(&c->names, d->conninfo);
    return urt_lane_create(d->rt, &c->lane);
}

/* URT_SUBMIT_BLOCK: at the runtime's pending-task limit a thread that is
 * not a worker waits for a slot; a worker gets -EAGAIN (its callers retry). */
int dconn_start(struct dconn *c)
{
    return urt_lane_spawn(c->lane, start_task, NULL, c, URT_SUBMIT_BLOCK);
}

int dconn_submit(struct dconn *c, struct dreq *r)
{
    r->conn = c;
    r->resent = false;
    r->alone = false;
    urt_task_init(&r->task, accept_req, r);
    return urt_lane_submit(c->lane, &r->task, URT_SUBMIT_BLOCK);
}

int dconn_close(struct dconn *c)
{
    urt_task_init(&c->close_req.task, close_task, c);
    return urt_lane_submit(c->lane, &c->close_req.task, URT_SUBMIT_BLOCK);
}

void dconn_fini(struct dconn *c)
{
    if (c->lane)
        urt_lane_destroy(c->lane);
    c->lane = NULL;
    if (c->pg)
        PQfinish(c->pg);
    c->pg = NULL;
    for (int k = 0; k < DB_N; k++) {
        free(c->batch[k].members);
        for (int i = 0; i < 3; i++)
            free(c->batch[k].text[i]);
    }
    dresolve_fini(&c->names);
}
