/*
 * tools/urt-kv/server.c — urt-kv's listeners, expiry timers, start and stop
 * (the connections are conn.c).
 *
 * Listeners: one multishot accept per listening socket (TCP, Unix), on
 * worker i for listener i (urt_io_accept with URT_IO_MULTISHOT: one
 * submission, a continuation per connection; re-armed when it ends). Past
 * maxclients a new connection gets "-ERR max number of clients reached";
 * past the descriptor limit (EMFILE, ENFILE) the listener pauses 100 ms (the
 * pending connections wait in the backlog) and says so on stderr once a
 * second. A listening port still held by a killed predecessor (its rings are
 * torn down asynchronously) is waited for at bind, up to 10 s.
 *
 * Expiry: the table asks for a timer (kv_arm_expiry); it is a task run at
 * the due time on a worker's timer facility (urt_spawn_at).
 *
 * Stop: the listeners are cancelled, then the runtime is destroyed (CANCEL:
 * timers far in the future must not hold it up); destroy writes and syncs
 * what the log's channels hold, so every answered write (`available` ones
 * included) survives a clean stop (include/urt/log.h, "Destroy:"); every
 * connection is closed by its operations' last continuations.
 *
 * Memory-ordering contract: a listener is touched only by its own tasks (on
 * one worker); `stopping` is a relaxed flag (a listener that misses it is
 * cancelled by destroy anyway); the runtime's destroy orders the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <urt/io.h>

#include "kv.h"

#define ACCEPT_PAUSE_NS (100u * 1000 * 1000)
#define BIND_RETRY_MS 10000

/* ---- listeners -------------------------------------------------------------------- */

struct listener {
    struct urt_io io;
    struct kv_server *srv;
    int fd;
    bool tcp;
    uint64_t last_warn_ns;
};

static void listener_arm(struct listener *l);
static enum urt_task_result listener_start(struct urt_task *t, void *arg);

static void on_pause(struct urt_io *io, int32_t res, void *arg)
{
    (void)io, (void)res;
    listener_arm(arg);
}

/* Pauses the listener for ACCEPT_PAUSE_NS (descriptors exhausted, or the
 * submission queue full), then arms it again. */
static void listener_pause(struct listener *l, int err)
{
    uint64_t now = urt_now_ns();
    if (err != -EAGAIN && now - l->last_warn_ns > 1000000000u) {
        fprintf(stderr, "urt-kv: accept: %s (connections wait in the backlog)\n", strerror(-err));
        l->last_warn_ns = now;
    }
    urt_io_init(&l->io, on_pause, l);
    if (urt_io_sleep(&l->io, ACCEPT_PAUSE_NS))
        urt_spawn_at(l->srv->rt, now + ACCEPT_PAUSE_NS, listener_start, NULL, l, 0);
}

/* One multishot accept: a continuation per connection; when it ends (an
 * error, or the kernel or the runtime ended it) the listener arms it again. */
static void on_accept(struct urt_io *io, int32_t res, void *arg)
{
    struct listener *l = arg;
    bool more = urt_io_flags(io) & URT_IO_F_MORE;
    if (res >= 0)
        kv_conn_new(l->srv, res, l->tcp);
    if (more)
        return;
    if (res == -ECANCELED || atomic_load_explicit(&l->srv->stopping, memory_order_relaxed))
        return; /* shutting down */
    if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM || res == -EAGAIN)
        listener_pause(l, res);
    else
        listener_arm(l);
}

static void listener_arm(struct listener *l)
{
    if (atomic_load_explicit(&l->srv->stopping, memory_order_relaxed))
        return;
    urt_io_init(&l->io, on_accept, l);
    int rc = urt_io_accept(&l->io, l->fd, NULL, NULL, URT_IO_MULTISHOT);
    if (rc == -EAGAIN)
        listener_pause(l, rc);
    else if (rc && rc != -ESHUTDOWN)
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
    int rc = 0; /* the Unix socket first: a client that found the TCP port open finds it too */
    if (s->opt.unix_path)
        rc = listen_unix(s);
    if (rc == 0 && s->opt.port > 0 && s->opt.bind && s->opt.bind[0])
        rc = listen_tcp(s);
    if (rc == 0 && s->n_listeners == 0) {
        fprintf(stderr, "urt-kv: nothing to listen on (--port 0 and no --unixsocket)\n");
        rc = -EINVAL;
    }
    return rc;
}

int kv_server_start(struct kv_server *s)
{
    uint32_t workers = urt_runtime_config(s->rt)->workers;
    pthread_mutex_init(&s->lanes_lock, NULL);
    s->rings = calloc(workers, sizeof(*s->rings));
    s->lanes = calloc(workers, sizeof(*s->lanes));
    s->n_lanes = s->lanes ? workers : 0;
    if (!s->rings || !s->lanes)
        return -ENOMEM;
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

void kv_server_stop(struct kv_server *s)
{
    atomic_store_explicit(&s->stopping, 1, memory_order_relaxed);
    uint32_t workers = urt_runtime_config(s->rt)->workers;
    for (uint32_t i = 0; i < s->n_listeners; i++)
        urt_spawn_to(s->rt, i % workers, listener_cancel, NULL, s->listeners[i], 0);
    urt_runtime_destroy(s->rt, URT_SHUTDOWN_CANCEL);
    s->rt = NULL;
    kv_conns_destroy(s);
    free(s->rings); /* the rings themselves went with the runtime */
    s->rings = NULL;
    for (uint32_t i = 0; i < s->n_listeners; i++) {
        close(s->listen_fds[i]);
        free(s->listeners[i]);
    }
}
