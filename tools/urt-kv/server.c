/*
 * tools/urt-kv/server.c — listeners and connections of urt-kv on the worker
 * rings (urt/io.h), one lane per connection (urt/lane.h).
 *
 * A connection is a small state machine whose every step runs as a task of
 * its lane, so its requests execute one at a time, in order, and its buffers
 * need no lock:
 *
 *   recv ──▶ parse + execute (cmd.c) until the input ends inside a request,
 *     ▲      or the batch's replies/records passed BATCH_BYTES
 *     │           │ writes in the batch and a log?  ──▶ urt_log_commit(record)
 *     │           │                                         │ callback (a worker)
 *     │           ▼                                         ▼ back on the lane
 *     └──── send the batch's replies ◀───────────────────────┘
 *           (short sends continued; then parse what is left, else recv)
 *
 * One operation is in flight per connection at a time (its one struct
 * urt_io is reused), which gives the per-connection order and backpressure:
 * a client that sends without reading stops being read once its replies are
 * waiting. Replies of a batch are sent only after the batch's record reached
 * the response of the durability mode (stored: durable; available: logged),
 * so a client never sees an OK for a write that the mode does not cover;
 * group commit across connections is the log's.
 *
 * Limits, each closing only the offending connection (as Redis does): a
 * protocol error is answered, then the connection closed; an input buffer
 * above query_limit; replies above output_limit; a send that the client does
 * not take within send_timeout_ms (a linked timeout, -ETIME). Accept: past
 * maxclients the new connection gets "-ERR max number of clients reached";
 * past the descriptor limit (EMFILE, ENFILE) the listener pauses 100 ms
 * (the pending connections wait in the backlog) and says so on stderr once
 * a second.
 *
 * Lanes are recycled: a closed connection's lane goes to a free list (a
 * mutex; taken once per connect and close), since a lane cannot be
 * destroyed from its own task; they are destroyed after the runtime.
 *
 * Memory-ordering contract: a connection's fields are touched only by tasks
 * of its lane (the lane orders them), except by the commit callback, which
 * only reads the connection pointer and submits a lane task. Counters of
 * struct kv_server are relaxed atomics (statistics). `stopping` is a relaxed
 * flag; the runtime's destroy orders everything else.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <urt/io.h>

#include "kv.h"

#define READ_CHUNK (16u * 1024)
#define READ_MAX_CHUNK (1u << 20)
#define BATCH_BYTES (1u << 20)
#define ACCEPT_PAUSE_NS (100u * 1000 * 1000)
#define BIND_RETRY_MS 10000

struct conn {
    struct urt_io io;            /* the one operation in flight: recv, send */
    struct urt_commit commit;
    struct kv_server *srv;
    urt_lane *lane;
    int fd;
    int commit_status;
    uint64_t id;
    struct kv_buf in, out, rec;
    size_t sent;
    struct resp_parser parser;
    char *name;
    bool closing;                /* close once the replies are sent */
};

static void conn_process(struct conn *c);
static void conn_recv(struct conn *c);

/* ---- lanes ---------------------------------------------------------------------- */

static pthread_mutex_t lanes_lock = PTHREAD_MUTEX_INITIALIZER;
static urt_lane **free_lanes;
static size_t n_free_lanes, cap_free_lanes;
static _Atomic uint32_t next_worker;

static urt_lane *lane_get(struct kv_server *s)
{
    urt_lane *l = NULL;
    pthread_mutex_lock(&lanes_lock);
    if (n_free_lanes)
        l = free_lanes[--n_free_lanes];
    pthread_mutex_unlock(&lanes_lock);
    if (l)
        return l;
    uint32_t w = atomic_fetch_add_explicit(&next_worker, 1, memory_order_relaxed);
    if (urt_lane_create_on(s->rt, w % urt_runtime_config(s->rt)->workers, &l))
        return NULL;
    return l;
}

static void lane_put(urt_lane *l)
{
    pthread_mutex_lock(&lanes_lock);
    if (n_free_lanes == cap_free_lanes) {
        size_t cap = cap_free_lanes ? cap_free_lanes * 2 : 64;
        urt_lane **a = realloc(free_lanes, cap * sizeof(*a));
        if (a) {
            free_lanes = a;
            cap_free_lanes = cap;
        }
    }
    if (n_free_lanes < cap_free_lanes)
        free_lanes[n_free_lanes++] = l;
    pthread_mutex_unlock(&lanes_lock);
}

static void lanes_destroy(void)
{
    pthread_mutex_lock(&lanes_lock);
    for (size_t i = 0; i < n_free_lanes; i++)
        urt_lane_destroy(free_lanes[i]);
    free(free_lanes);
    free_lanes = NULL;
    n_free_lanes = cap_free_lanes = 0;
    pthread_mutex_unlock(&lanes_lock);
}

/* ---- a connection's life ---------------------------------------------------------- */

static void conn_close(struct conn *c)
{
    close(c->fd);
    buf_free(&c->in);
    buf_free(&c->out);
    buf_free(&c->rec);
    resp_free(&c->parser);
    free(c->name);
    lane_put(c->lane);
    atomic_fetch_sub_explicit(&c->srv->connections, 1, memory_order_relaxed);
    free(c);
}

static void on_task_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    conn_close(arg);
}

/* Runs fn on the connection's lane; at shutdown (the lane refuses) closes it. */
static void conn_hop(struct conn *c, urt_task_fn *fn)
{
    if (urt_lane_spawn(c->lane, fn, on_task_cancel, c, 0))
        conn_close(c);
}

static void on_send(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct conn *c = arg;
    if (res < 0) {
        if (res == -ETIME)
            atomic_fetch_add_explicit(&c->srv->output_disconnects, 1, memory_order_relaxed);
        conn_close(c);
        return;
    }
    c->sent += (size_t)res;
    if (c->sent < c->out.len) { /* a short send: the rest, with a fresh deadline */
        if (c->srv->opt.send_timeout_ms)
            urt_io_set_timeout(&c->io, c->srv->opt.send_timeout_ms * 1000000u);
        if (urt_io_send(&c->io, c->fd, c->out.p + c->sent, c->out.len - c->sent, MSG_NOSIGNAL, 0))
            conn_close(c);
        return;
    }
    c->out.len = c->sent = 0;
    if (c->closing) {
        conn_close(c);
        return;
    }
    conn_process(c);
}

static void conn_send(struct conn *c)
{
    c->sent = 0;
    urt_io_init(&c->io, on_send, c);
    if (c->srv->opt.send_timeout_ms)
        urt_io_set_timeout(&c->io, c->srv->opt.send_timeout_ms * 1000000u);
    if (urt_io_send(&c->io, c->fd, c->out.p, c->out.len, MSG_NOSIGNAL, 0))
        conn_close(c);
}

static enum urt_task_result after_commit(struct urt_task *t, void *arg)
{
    (void)t;
    struct conn *c = arg;
    c->rec.len = 0;
    if (c->commit_status) {
        if (c->commit_status != -ECANCELED && !atomic_exchange(&c->srv->log_failed, 1))
            fprintf(stderr, "urt-kv: a log commit failed (%s): writes are refused from now on\n",
                    strerror(-c->commit_status));
        conn_close(c); /* its replies claimed writes the log does not hold */
        return URT_TASK_DONE;
    }
    atomic_fetch_add_explicit(&c->srv->commits, 1, memory_order_relaxed);
    conn_send(c);
    return URT_TASK_DONE;
}

static void on_commit(struct urt_commit *cm, int status, void *arg)
{
    (void)cm;
    struct conn *c = arg;
    c->commit_status = status;
    conn_hop(c, after_commit);
}

static void conn_commit(struct conn *c)
{
    enum urt_commit_response r =
        c->srv->opt.durability == KV_DUR_STORED ? URT_COMMIT_STORED : URT_COMMIT_AVAILABLE;
    int rc = urt_log_commit(c->srv->rt, &c->commit, c->id, c->rec.p, (uint32_t)c->rec.len, r, on_commit, c);
    if (rc) {
        if (rc != -ESHUTDOWN && !atomic_exchange(&c->srv->log_failed, 1))
            fprintf(stderr, "urt-kv: urt_log_commit: %s\n", urt_last_error());
        conn_close(c);
    }
}

/* Bytes the parsed request would add to the batch record, at most. */
static uint64_t request_bytes(const struct resp_parser *p)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < p->argc; i++)
        n += p->argv[i].len + KV_OP_HDR;
    return n;
}

/* Parses and runs requests until the input ends inside one or the batch is
 * full. false: the connection was closed (out of memory). */
static bool run_batch(struct conn *c)
{
    struct kv_ctx ctx = {.srv = c->srv, .out = &c->out, .name = &c->name, .id = c->id,
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
        if (kv_exec(&ctx, c->in.p, c->parser.argv, c->parser.argc))
            return false;
        resp_next(&c->parser);
        c->closing |= ctx.close_after;
    }
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

static void conn_process(struct conn *c)
{
    if (!run_batch(c)) {
        conn_close(c);
        return;
    }
    compact_input(c);
    if (c->out.len > c->srv->opt.output_limit) {
        atomic_fetch_add_explicit(&c->srv->output_disconnects, 1, memory_order_relaxed);
        conn_close(c);
    } else if (c->rec.len) {
        conn_commit(c);
    } else if (c->out.len) {
        conn_send(c);
    } else if (c->closing) {
        conn_close(c);
    } else {
        conn_recv(c);
    }
}

static void on_recv(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct conn *c = arg;
    if (res <= 0) { /* the peer closed (a request cut in the middle is dropped), or an error */
        conn_close(c);
        return;
    }
    c->in.len += (size_t)res;
    conn_process(c);
}

static void conn_recv(struct conn *c)
{
    if (c->in.len - c->parser.start > c->srv->opt.query_limit) {
        fprintf(stderr, "urt-kv: closing client %llu that reached the query buffer limit\n",
                (unsigned long long)c->id);
        conn_close(c);
        return;
    }
    uint64_t want = c->parser.need > READ_CHUNK ? c->parser.need : READ_CHUNK;
    if (want > READ_MAX_CHUNK)
        want = READ_MAX_CHUNK;
    if (buf_reserve(&c->in, (size_t)want)) {
        conn_close(c);
        return;
    }
    urt_io_init(&c->io, on_recv, c);
    if (urt_io_recv(&c->io, c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0))
        conn_close(c);
}

static enum urt_task_result conn_start(struct urt_task *t, void *arg)
{
    (void)t;
    conn_recv(arg);
    return URT_TASK_DONE;
}

/* ---- listeners -------------------------------------------------------------------- */

struct listener {
    struct urt_io io;
    struct kv_server *srv;
    int fd;
    bool tcp;
    uint64_t last_warn_ns;
};

static void listener_arm(struct listener *l);

static void reject(struct kv_server *s, int fd)
{
    static const char msg[] = "-ERR max number of clients reached\r\n";
    ssize_t w = send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    close(fd);
    atomic_fetch_add_explicit(&s->rejected_connections, 1, memory_order_relaxed);
}

static void conn_new(struct listener *l, int fd)
{
    struct kv_server *s = l->srv;
    if (atomic_load_explicit(&s->connections, memory_order_relaxed) >= s->opt.maxclients) {
        reject(s, fd);
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    urt_lane *lane = c ? lane_get(s) : NULL;
    if (!lane) {
        free(c);
        close(fd);
        return;
    }
    if (l->tcp) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    struct resp_limits lim = {s->opt.max_bulk, s->opt.max_args, RESP_MAX_INLINE_DEFAULT};
    resp_init(&c->parser, &lim);
    c->srv = s;
    c->fd = fd;
    c->lane = lane;
    c->id = atomic_fetch_add_explicit(&s->total_connections, 1, memory_order_relaxed) + 1;
    atomic_fetch_add_explicit(&s->connections, 1, memory_order_relaxed);
    conn_hop(c, conn_start);
}

static void on_pause(struct urt_io *io, int32_t res, void *arg)
{
    (void)io, (void)res;
    listener_arm(arg);
}

static void on_accept(struct urt_io *io, int32_t res, void *arg)
{
    (void)io;
    struct listener *l = arg;
    if (res >= 0) {
        conn_new(l, res);
    } else if (res == -ECANCELED || atomic_load_explicit(&l->srv->stopping, memory_order_relaxed)) {
        return; /* shutting down */
    } else if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM) {
        uint64_t now = urt_now_ns();
        if (now - l->last_warn_ns > 1000000000u) {
            fprintf(stderr, "urt-kv: accept: %s (connections wait in the backlog)\n", strerror(-res));
            l->last_warn_ns = now;
        }
        urt_io_init(&l->io, on_pause, l);
        if (urt_io_sleep(&l->io, ACCEPT_PAUSE_NS) == 0)
            return;
    }
    listener_arm(l);
}

static void listener_arm(struct listener *l)
{
    if (atomic_load_explicit(&l->srv->stopping, memory_order_relaxed))
        return;
    urt_io_init(&l->io, on_accept, l);
    int rc = urt_io_accept(&l->io, l->fd, NULL, NULL, 0);
    if (rc)
        fprintf(stderr, "urt-kv: urt_io_accept: %s\n", urt_last_error());
}

static enum urt_task_result listener_start(struct urt_task *t, void *arg)
{
    (void)t;
    listener_arm(arg);
    return URT_TASK_DONE;
}

static enum urt_task_result listener_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    struct listener *l = arg;
    urt_io_cancel(&l->io);
    return URT_TASK_DONE;
}

/* ---- expiry timers ------------------------------------------------------------------ */

struct expiry {
    struct kv_server *srv;
    uint32_t shard;
    int64_t due_ms;
};

static enum urt_task_result expiry_fire(struct urt_task *t, void *arg)
{
    (void)t;
    struct expiry *e = arg;
    kv_expire_due(&e->srv->table, e->shard, e->due_ms, kv_now_ms());
    free(e);
    return URT_TASK_DONE;
}

static void expiry_cancel(struct urt_task *t, void *arg)
{
    (void)t;
    free(arg);
}

void kv_arm_expiry(void *arg, uint32_t shard, int64_t due_ms)
{
    struct kv_server *s = arg;
    struct expiry *e = malloc(sizeof(*e));
    if (!e || !s->rt) {
        free(e);
        return;
    }
    *e = (struct expiry){s, shard, due_ms};
    int64_t in_ms = due_ms - kv_now_ms();
    uint64_t due_ns = urt_now_ns() + (in_ms > 0 ? (uint64_t)in_ms * 1000000u : 0);
    if (urt_spawn_at(s->rt, due_ns, expiry_fire, expiry_cancel, e, 0))
        free(e); /* shutting down */
}

/* ---- start and stop ------------------------------------------------------------------ */

static int listen_on(struct kv_server *s, int fd, const struct sockaddr *sa, socklen_t len, bool tcp,
                     const char *what)
{
    int one = 1;
    if (fd < 0) {
        fprintf(stderr, "urt-kv: socket for %s: %s\n", what, strerror(errno));
        return -errno;
    }
    if (tcp)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* A killed predecessor's listening socket outlives it until the kernel has
     * torn down its rings (asynchronously: their accepts hold the socket):
     * wait for it, up to BIND_RETRY_MS. */
    int rc, tries = 0;
    while ((rc = bind(fd, sa, len)) && errno == EADDRINUSE && tries++ < BIND_RETRY_MS / 50) {
        if (tries == 1)
            fprintf(stderr, "urt-kv: %s is in use; waiting up to %d s for it\n", what, BIND_RETRY_MS / 1000);
        usleep(50 * 1000);
    }
    if (rc || listen(fd, 511)) { /* Redis's tcp-backlog */
        int e = errno;
        fprintf(stderr, "urt-kv: listening on %s: %s\n", what, strerror(e));
        close(fd);
        return -e;
    }
    s->listen_fds[s->n_listeners] = fd;
    s->listen_tcp[s->n_listeners++] = tcp;
    return 0;
}

static int listen_tcp(struct kv_server *s)
{
    char what[300];
    snprintf(what, sizeof(what), "%s:%d", s->opt.bind, s->opt.port);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)s->opt.port)};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->opt.port)};
    if (inet_pton(AF_INET, s->opt.bind, &a4.sin_addr) == 1)
        return listen_on(s, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), (struct sockaddr *)&a4, sizeof(a4),
                         true, what);
    if (inet_pton(AF_INET6, s->opt.bind, &a6.sin6_addr) == 1)
        return listen_on(s, socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), (struct sockaddr *)&a6, sizeof(a6),
                         true, what);
    fprintf(stderr, "urt-kv: --bind %s: not an IPv4 or IPv6 address\n", s->opt.bind);
    return -EINVAL;
}

static int listen_unix(struct kv_server *s)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(s->opt.unix_path) >= sizeof(a.sun_path)) {
        fprintf(stderr, "urt-kv: --unixsocket %s: path too long\n", s->opt.unix_path);
        return -ENAMETOOLONG;
    }
    strcpy(a.sun_path, s->opt.unix_path);
    unlink(s->opt.unix_path); /* a stale socket of an earlier run (as Redis does) */
    return listen_on(s, socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), (struct sockaddr *)&a, sizeof(a), false,
                     s->opt.unix_path);
}

int kv_listen(struct kv_server *s)
{
    int rc = 0;
    if (s->opt.port > 0 && s->opt.bind && s->opt.bind[0])
        rc = listen_tcp(s);
    if (rc == 0 && s->opt.unix_path)
        rc = listen_unix(s);
    if (rc == 0 && s->n_listeners == 0) {
        fprintf(stderr, "urt-kv: nothing to listen on (--port 0 and no --unixsocket)\n");
        rc = -EINVAL;
    }
    return rc;
}

int kv_server_start(struct kv_server *s)
{
    uint32_t workers = urt_runtime_config(s->rt)->workers;
    for (uint32_t i = 0; i < s->n_listeners; i++) {
        struct listener *l = calloc(1, sizeof(*l));
        if (!l)
            return -ENOMEM;
        l->srv = s;
        l->fd = s->listen_fds[i];
        l->tcp = s->listen_tcp[i];
        s->listeners[i] = l;
        int rc = urt_spawn_to(s->rt, i % workers, listener_start, NULL, l, 0);
        if (rc)
            return rc;
    }
    return 0;
}

struct barrier {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int status;
};

static void barrier_done(struct urt_commit *c, int status, void *arg)
{
    (void)c;
    struct barrier *b = arg;
    pthread_mutex_lock(&b->lock);
    b->done = true;
    b->status = status;
    pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* A stored commit of a no-op record, waited for: the durable marker then
 * covers every record committed before it on every channel, so the
 * `available` writes already answered survive a clean stop (urt does not
 * flush the log at destroy). */
static void log_barrier(struct kv_server *s)
{
    static struct urt_commit commit;
    struct barrier b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};
    struct kv_buf rec = {0};
    if (s->opt.durability == KV_DUR_NONE || rec_nop(&rec) ||
        urt_log_commit(s->rt, &commit, 0, rec.p, (uint32_t)rec.len, URT_COMMIT_STORED, barrier_done, &b)) {
        buf_free(&rec);
        return;
    }
    pthread_mutex_lock(&b.lock);
    while (!b.done)
        pthread_cond_wait(&b.cond, &b.lock);
    pthread_mutex_unlock(&b.lock);
    if (b.status)
        fprintf(stderr, "urt-kv: the log's final flush failed: %s\n", strerror(-b.status));
    buf_free(&rec);
}

void kv_server_stop(struct kv_server *s)
{
    atomic_store_explicit(&s->stopping, 1, memory_order_relaxed);
    uint32_t workers = urt_runtime_config(s->rt)->workers;
    for (uint32_t i = 0; i < s->n_listeners; i++)
        urt_spawn_to(s->rt, i % workers, listener_cancel, NULL, s->listeners[i], 0);
    log_barrier(s);
    urt_runtime_destroy(s->rt, URT_SHUTDOWN_CANCEL);
    s->rt = NULL;
    lanes_destroy();
    for (uint32_t i = 0; i < s->n_listeners; i++) {
        close(s->listen_fds[i]);
        free(s->listeners[i]);
    }
}
