/*
 * tools/urt-kv/conn.c — a connection of urt-kv on its worker's ring
 * (urt/io.h), one lane per connection (urt/lane.h).
 *
 * Every step of a connection runs as a task of its lane (pinned to one
 * worker), so its requests execute one at a time, in order, and its state
 * needs no lock. Two operations may be in flight: the receive and a send.
 *
 *   receive: one multishot receive into the worker's buffer ring
 *            (urt_io_recv_bufring): each completion's bytes are appended to
 *            the connection's input and the buffer goes straight back; one
 *            submission for the connection's life (re-armed when the kernel
 *            ends it with data, or -EAGAIN from a full submission queue).
 *   a batch: parse + execute (cmd.c) until the input ends inside a request or
 *            the batch's replies or records passed BATCH_BYTES; with writes
 *            and a log: urt_log_commit(one record for the batch) and, from
 *            its callback, back on the lane; then send the batch's replies:
 *            one send(2) with MSG_DONTWAIT on the lane (the socket takes
 *            them at once but for a client that does not read: no SQE, no
 *            completion); what the socket did not take (-EAGAIN, a short
 *            count) goes on the ring, waiting for room, with a linked
 *            timeout. `busy` is set from the batch's commit or ring send
 *            until its replies are all sent: input that arrives meanwhile
 *            waits in the buffer, so replies leave in request order. When the
 *            send is done, the next batch starts from what is buffered.
 *
 * Replies of a batch leave only after the batch's record reached the
 * response of the durability mode (stored: durable; available: logged): a
 * client never sees OK for a write the mode does not cover. Group commit
 * across connections is the log's.
 *
 * Closing (kill): the connection is marked dead, its receive cancelled; it is
 * freed by the last of its operations to come back (the receive's last call,
 * the send's continuation, the commit's lane task), never while one is in
 * flight: `rx_live` and `busy` say what is out.
 *
 * Limits, each closing only this connection (as Redis does): a protocol error
 * is answered, then the connection closed; unparsed input above query_limit;
 * replies of one batch above output_limit; a send the client does not take
 * within send_timeout_ms (-ETIME).
 *
 * A connection goes to the worker with the fewest live connections; lanes
 * are recycled through per-worker free lists (a mutex, once per connect and
 * close): a lane cannot be destroyed from its own task; they are destroyed
 * after the runtime. Each worker's buffer ring is created by the first
 * connection started on it and used only there (the lane is pinned).
 *
 * Memory-ordering contract: a connection's fields are touched only by tasks
 * of its lane (the lane orders them) — and at destroy by the destroying
 * thread, after the workers stopped (urt/io.h rule 9). The commit callback
 * only reads the connection pointer and queues a lane task. Counters of
 * struct kv_server are relaxed atomics (statistics).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <urt/io.h>

#include "kv.h"

#define BATCH_BYTES (1u << 20)
#define RING_BUFFERS 256u       /* per worker */
#define RING_BUFFER_SIZE (16u * 1024)

struct conn {
    struct urt_io rio;           /* the multishot receive */
    struct urt_io wio;           /* a send */
    struct urt_commit commit;
    struct kv_server *srv;
    urt_lane *lane;
    uint32_t worker;             /* the lane's (pinned) worker */
    struct urt_bufring *ring;    /* the worker's */
    int fd;
    int commit_status;
    uint64_t id;
    struct kv_buf in, out, rec;
    size_t sent;
    struct resp_parser parser;
    char *name;
    bool authenticated;          /* AUTH passed, or no password is set (auth.c) */
    bool rx_live;                /* the receive is in flight */
    bool busy;                   /* a batch's commit or send is out */
    bool closing;                /* QUIT or a protocol error: close once the replies are sent */
    bool peer_gone;              /* end of file or a receive error */
    bool dead;                   /* being closed: freed when nothing is out */
};

static void conn_process(struct conn *c);
static void rx_arm(struct conn *c);

/* ---- lanes and buffer rings ------------------------------------------------------ */

/* Lanes are pinned, so a connection's worker is chosen when it connects:
 * the worker with the fewest live connections (ties: round robin), and a
 * free lane of that worker is reused. (Taking any free lane, as before,
 * let the spread follow the order of the previous connections' closes:
 * after a few rounds of 50 connections one worker could serve 30 of them,
 * and its connections' p99 doubled.) s->lanes_lock guards the lists, the
 * counts' writes and the cursor; INFO reads the counts relaxed. */
static uint32_t live_on(const struct kv_server *s, uint32_t w)
{
    return atomic_load_explicit(&s->lanes[w].live, memory_order_relaxed);
}

/* Under lanes_lock: moves worker w's live count by d. */
static void live_add(struct kv_server *s, uint32_t w, int d)
{
    atomic_store_explicit(&s->lanes[w].live, live_on(s, w) + (uint32_t)d, memory_order_relaxed);
}

/* Under lanes_lock: the worker with the fewest live connections. */
static uint32_t least_loaded(struct kv_server *s)
{
    uint32_t n = s->n_lanes;
    uint32_t start = s->next_worker++ % n, best = start;
    for (uint32_t k = 1; k < n; k++) {
        uint32_t w = (start + k) % n;
        if (live_on(s, w) < live_on(s, best))
            best = w;
    }
    return best;
}

/* A lane for a new connection (*worker: the worker it is pinned to), or NULL. */
static urt_lane *lane_get(struct kv_server *s, uint32_t *worker)
{
    urt_lane *l = NULL;
    pthread_mutex_lock(&s->lanes_lock);
    uint32_t w = least_loaded(s);
    struct kv_worker_lanes *p = &s->lanes[w];
    live_add(s, w, 1);
    if (p->n_free)
        l = p->free[--p->n_free];
    pthread_mutex_unlock(&s->lanes_lock);
    if (!l && urt_lane_create_on(s->rt, w, &l)) {
        pthread_mutex_lock(&s->lanes_lock);
        live_add(s, w, -1);
        pthread_mutex_unlock(&s->lanes_lock);
        return NULL;
    }
    *worker = w;
    return l;
}

/* The connection on worker w closed: its lane goes back to w's list. */
static void lane_put(struct kv_server *s, urt_lane *l, uint32_t w)
{
    pthread_mutex_lock(&s->lanes_lock);
    struct kv_worker_lanes *p = &s->lanes[w];
    live_add(s, w, -1);
    if (p->n_free == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        urt_lane **a = realloc(p->free, cap * sizeof(*a));
        if (a) {
            p->free = a;
            p->cap = cap;
        }
    }
    /* Out of memory: the lane is not reused (it cannot be destroyed from its
     * own task, and the runtime frees nothing of it until it is). */
    if (p->n_free < p->cap)
        p->free[p->n_free++] = l;
    pthread_mutex_unlock(&s->lanes_lock);
}

void kv_conns_destroy(struct kv_server *s)
{
    if (!s->lanes)
        return;
    for (uint32_t w = 0; w < s->n_lanes; w++) {
        for (size_t i = 0; i < s->lanes[w].n_free; i++)
            urt_lane_destroy(s->lanes[w].free[i]);
        free(s->lanes[w].free);
    }
    free(s->lanes);
    s->lanes = NULL;
    pthread_mutex_destroy(&s->lanes_lock);
}

/* The calling worker's buffer ring, created on first use (worker only: the
 * slot of worker w is touched only by tasks running on w). NULL: none could
 * be made (the connection then receives without a ring). */
static struct urt_bufring *worker_ring(struct kv_server *s)
{
    int w = urt_current_worker(s->rt);
    if (w < 0 || !s->rings)
        return NULL;
    if (!s->rings[w] && urt_bufring_create(RING_BUFFERS, RING_BUFFER_SIZE, &s->rings[w]))
        s->rings[w] = NULL;
    return s->rings[w];
}

/* ---- life and death ----------------------------------------------------------------- */

static void conn_free(struct conn *c)
{
    close(c->fd);
    buf_free(&c->in);
    buf_free(&c->out);
    buf_free(&c->rec);
    resp_free(&c->parser);
    free(c->name);
    lane_put(c->srv, c->lane, c->worker);
    atomic_fetch_sub_explicit(&c->srv->connections, 1, memory_order_relaxed);
    free(c);
}

/* Frees a dead connection once nothing of it is out. true: it is gone. */
static bool reap(struct conn *c)
{
    if (!c->dead)
        return false;
    if (!c->rx_live && !c->busy)
        conn_free(c);
    return true;
}

/* Closes the connection: cancels its receive; the last operation back frees it. */
static void kill_conn(struct conn *c)
{
    c->dead = true;
    if (c->rx_live)
        urt_io_cancel(&c->rio); /* its last call comes back with -ECANCELED */
    if (c->busy)
        urt_io_cancel(&c->wio); /* a send to a client that reads nothing; -EALREADY if none is out */
    reap(c);
}

static void on_task_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    struct conn *c = arg; /* destroy cancelled a lane task: its step never comes */
    c->busy = false;
    kill_conn(c);
}

/* Runs fn on the connection's lane; if the lane refuses (destroy), closes. */
static void conn_hop(struct conn *c, urt_task_fn *fn)
{
    if (urt_lane_spawn(c->lane, fn, on_task_cancel, c, 0)) {
        c->busy = false;
        kill_conn(c);
    }
}

/* ---- a batch's replies --------------------------------------------------------------- */

/* The batch's replies are all sent: what arrived meanwhile is next. */
static void batch_done(struct conn *c)
{
    c->busy = false;
    c->out.len = c->sent = 0;
    if (reap(c))
        return;
    if (c->closing || c->peer_gone) {
        kill_conn(c);
        return;
    }
    conn_process(c); /* what arrived meanwhile */
}

static void send_rest(struct conn *c);

static void on_send(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct conn *c = arg;
    if (res < 0 || c->dead) {
        if (res == -ETIME)
            atomic_fetch_add_explicit(&c->srv->output_disconnects, 1, memory_order_relaxed);
        c->busy = false;
        kill_conn(c);
        return;
    }
    c->sent += (size_t)res;
    if (c->sent < c->out.len)
        send_rest(c); /* a short send: the rest, with a fresh deadline */
    else
        batch_done(c);
}

static enum urt_task_result send_retry(struct urt_task *t, void *arg)
{
    (void)t;
    send_rest(arg);
    return URT_TASK_DONE;
}

/* Sends out[sent..len) on the ring: waits for room, with the send timeout's
 * linked deadline. */
static void send_rest(struct conn *c)
{
    urt_io_init(&c->wio, on_send, c);
    if (c->srv->opt.send_timeout_ms)
        urt_io_set_timeout(&c->wio, c->srv->opt.send_timeout_ms * 1000000u);
    int rc = urt_io_send(&c->wio, c->fd, c->out.p + c->sent, c->out.len - c->sent, MSG_NOSIGNAL, 0);
    if (rc == -EAGAIN) { /* the submission queue is full: from a later task */
        conn_hop(c, send_retry);
    } else if (rc) {
        c->busy = false;
        kill_conn(c);
    }
}

/* A batch's replies: first one send(2) that does not wait (MSG_DONTWAIT),
 * right here on the lane — what the socket takes at once (all of it, but for
 * a client that does not read) needs no SQE, no completion and no task to
 * continue it; only what it did not take (-EAGAIN, a short count) goes on
 * the ring, waiting for room, with the send timeout's deadline. (A send on
 * the ring for every batch, with a linked timeout, cost two SQEs, a timer
 * armed and cancelled, a clock read and the completion's task.) true: all
 * sent (the caller goes on with the next batch); false: the rest is out, or
 * the connection was closed. */
static bool send_batch(struct conn *c)
{
    c->sent = 0;
    ssize_t n;
    do
        n = send(c->fd, c->out.p, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)c->out.len)
        return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        c->busy = false;
        kill_conn(c); /* the peer is gone (EPIPE, ECONNRESET) */
        return false;
    }
    c->sent = n > 0 ? (size_t)n : 0;
    send_rest(c);
    return false;
}

/* ---- a batch's commit ------------------------------------------------------------------ */

static enum urt_task_result after_commit(struct urt_task *t, void *arg)
{
    (void)t;
    struct conn *c = arg;
    c->rec.len = 0;
    if (c->commit_status && !c->dead) {
        if (c->commit_status != -ECANCELED && !atomic_exchange(&c->srv->log_failed, 1))
            fprintf(stderr, "urt-kv: a log commit failed (%s): writes are refused from now on\n",
                    strerror(-c->commit_status));
        c->dead = true; /* its replies claimed writes the log does not hold */
    }
    if (c->dead) {
        c->busy = false;
        kill_conn(c);
        return URT_TASK_DONE;
    }
    atomic_fetch_add_explicit(&c->srv->commits, 1, memory_order_relaxed);
    if (send_batch(c))
        batch_done(c);
    return URT_TASK_DONE;
}

static void on_commit(struct urt_commit *cm, int status, void *arg)
{
    (void)cm;
    struct conn *c = arg; /* where the response was reached: only queue the next step */
    c->commit_status = status;
    conn_hop(c, after_commit);
}

static void conn_commit(struct conn *c)
{
    enum urt_commit_response r = c->srv->opt.durability == KV_DUR_STORED ? URT_COMMIT_STORED : URT_COMMIT_AVAILABLE;
    int rc = urt_log_commit(c->srv->rt, &c->commit, c->id, c->rec.p, (uint32_t)c->rec.len, r, on_commit, c);
    if (rc) {
        if (rc != -ESHUTDOWN && !atomic_exchange(&c->srv->log_failed, 1))
            fprintf(stderr, "urt-kv: urt_log_commit: %s\n", urt_last_error());
        c->busy = false;
        kill_conn(c);
    }
}

/* ---- parsing and running a batch ------------------------------------------------------- */

/* Bytes the parsed request would add to the batch record, at most. */
static uint64_t request_bytes(const struct resp_parser *p)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < p->argc; i++)
        n += p->argv[i].len + KV_OP_HDR;
    return n;
}

/* Parses and runs requests until the input ends inside one or the batch is
 * full. false: out of memory (the connection is closed). */
static bool run_batch(struct conn *c)
{
    struct kv_ctx ctx = {.srv = c->srv, .out = &c->out, .name = &c->name, .id = c->id,
                         .authenticated = &c->authenticated,
                         .rec = c->srv->opt.durability == KV_DUR_NONE ? NULL : &c->rec};
    while (!c->closing && c->out.len < BATCH_BYTES && c->rec.len < BATCH_BYTES) {
        enum resp_status st = resp_parse(&c->parser, c->in.p, c->in.len);
        if (st == RESP_NEED_MORE)
            break;
        if (st == RESP_ERROR) {
            atomic_fetch_add_explicit(&c->srv->protocol_errors, 1, memory_order_relaxed);
            reply_error(&c->out, c->parser.error);
            c->closing = true;
            break;
        }
        if (c->rec.len && c->rec.len + request_bytes(&c->parser) > KV_REC_LIMIT)
            break; /* commit what we have first; this request starts the next batch */
        if (kv_exec(&ctx, c->in.p, c->parser.argv, c->parser.argc)) {
            kv_ctx_count(&ctx);
            return false;
        }
        resp_next(&c->parser);
        c->closing |= ctx.close_after;
    }
    kv_ctx_count(&ctx);
    return true;
}

/* Drops the consumed prefix of the input (everything before the current request). */
static void compact_input(struct conn *c)
{
    size_t by = c->parser.start;
    if (by == 0)
        return;
    memmove(c->in.p, c->in.p + by, c->in.len - by);
    c->in.len -= by;
    resp_rebase(&c->parser, by);
}

/* Runs the batches the input holds: while each one's replies leave at once
 * (send_batch), the next follows here, in a loop; a batch that commits, or
 * whose replies wait for room, continues from its completion. */
static void conn_process(struct conn *c)
{
    for (;;) {
        if (!run_batch(c)) {
            kill_conn(c);
            return;
        }
        compact_input(c);
        if (c->out.len > c->srv->opt.output_limit) {
            atomic_fetch_add_explicit(&c->srv->output_disconnects, 1, memory_order_relaxed);
            kill_conn(c);
            return;
        }
        if (c->rec.len) {
            c->busy = true;
            conn_commit(c);
            return;
        }
        if (!c->out.len) {
            if (c->closing || c->peer_gone)
                kill_conn(c);
            return; /* else: the receive is armed; the next bytes bring the next batch */
        }
        c->busy = true;
        if (!send_batch(c))
            return;
        c->busy = false;
        c->out.len = c->sent = 0;
        if (c->closing || c->peer_gone) {
            kill_conn(c);
            return;
        }
        if (c->in.len == 0)
            return; /* nothing buffered (compact_input left the current request at 0) */
    }
}

/* ---- the receive --------------------------------------------------------------------- */

static enum urt_task_result rx_retry(struct urt_task *t, void *arg)
{
    (void)t;
    struct conn *c = arg;
    c->rx_live = false; /* the retry task stood for the receive */
    if (!reap(c))
        rx_arm(c);
    return URT_TASK_DONE;
}

static void rx_retry_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    struct conn *c = arg;
    c->rx_live = false;
    kill_conn(c);
}

/* Arms the receive again from a later task (the submission queue was full);
 * rx_live stays set meanwhile, so the connection is not freed under it. */
static void rx_later(struct conn *c)
{
    c->rx_live = true;
    if (urt_lane_spawn(c->lane, rx_retry, rx_retry_cancel, c, 0)) {
        c->rx_live = false;
        kill_conn(c);
    }
}

/* Appends one completion's bytes to the input; false: out of memory. */
static bool rx_take(struct conn *c, int32_t res)
{
    if (urt_current_worker(c->srv->rt) < 0)
        return true; /* destroy delivers the last completions on its own thread: the bytes
                        are dropped with the connection (the buffer ring goes with the
                        runtime) */
    uint16_t bid;
    void *data = (urt_io_flags(&c->rio) & URT_IO_F_BUFFER) ? urt_io_buffer(&c->rio, &bid) : NULL;
    if (!data)
        return true;
    int rc = res > 0 ? buf_put(&c->in, data, (size_t)res) : 0;
    urt_bufring_put(c->ring, bid);
    return rc == 0;
}

/* One completion of the receive. rx_live stays set until the end of the
 * last call, so nothing frees the connection while this runs. */
static void on_rx(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct conn *c = arg;
    bool more = urt_io_flags(&c->rio) & URT_IO_F_MORE;
    if (!rx_take(c, res))
        c->dead = true;
    if (c->in.len > c->srv->opt.query_limit && !c->dead) { /* also while a batch is out */
        fprintf(stderr, "urt-kv: closing client %llu that reached the query buffer limit\n",
                (unsigned long long)c->id);
        c->dead = true;
    }
    if (!more && res <= 0 && res != -EAGAIN)
        c->peer_gone = true; /* end of file (a request cut in the middle is dropped), or an error */
    if (!c->dead && !c->busy && res > 0)
        conn_process(c);
    if (c->dead) {
        if (!more)
            c->rx_live = false;
        kill_conn(c); /* with more to come: cancels; the last call frees */
        return;
    }
    if (more)
        return;
    c->rx_live = false;
    if (c->peer_gone) {
        if (!c->busy)
            kill_conn(c); /* else the batch's end closes it */
    } else if (res == -EAGAIN) {
        rx_later(c); /* the runtime could not re-arm it */
    } else {
        rx_arm(c); /* the kernel ended it with data */
    }
}

static void rx_arm(struct conn *c)
{
    urt_io_init(&c->rio, on_rx, c);
    int rc = urt_io_recv_bufring(&c->rio, c->fd, c->ring, 0);
    if (rc == 0) {
        c->rx_live = true;
    } else if (rc == -EAGAIN) {
        rx_later(c);
    } else {
        if (rc != -ESHUTDOWN)
            fprintf(stderr, "urt-kv: urt_io_recv_bufring: %s\n", urt_last_error());
        kill_conn(c);
    }
}

static enum urt_task_result conn_start(struct urt_task *t, void *arg)
{
    (void)t;
    struct conn *c = arg;
    c->ring = worker_ring(c->srv);
    if (!c->ring) {
        fprintf(stderr, "urt-kv: no buffer ring on worker %d: %s\n", urt_current_worker(c->srv->rt),
                urt_last_error());
        kill_conn(c);
        return URT_TASK_DONE;
    }
    rx_arm(c);
    return URT_TASK_DONE;
}

static void reject(struct kv_server *s, int fd, const char *msg)
{
    ssize_t w = send(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    close(fd);
    atomic_fetch_add_explicit(&s->rejected_connections, 1, memory_order_relaxed);
}

void kv_conn_new(struct kv_server *s, int fd, bool tcp)
{
    if (kv_protected_refuses(s, fd, tcp)) {
        reject(s, fd, kv_denied_reply); /* auth.c rule 5 */
        return;
    }
    if (atomic_load_explicit(&s->connections, memory_order_relaxed) >= s->opt.maxclients) {
        reject(s, fd, "-ERR max number of clients reached\r\n");
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    uint32_t worker = 0;
    urt_lane *lane = c ? lane_get(s, &worker) : NULL;
    if (!lane) {
        free(c);
        close(fd);
        return;
    }
    if (tcp) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    struct resp_limits lim = {s->opt.max_bulk, s->opt.max_args, RESP_MAX_INLINE_DEFAULT};
    resp_init(&c->parser, &lim);
    c->srv = s;
    c->fd = fd;
    c->authenticated = s->opt.requirepass == NULL;
    c->lane = lane;
    c->worker = worker;
    c->id = atomic_fetch_add_explicit(&s->total_connections, 1, memory_order_relaxed) + 1;
    atomic_fetch_add_explicit(&s->connections, 1, memory_order_relaxed);
    conn_hop(c, conn_start);
}
