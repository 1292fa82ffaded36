/* examples/echo.c — a small TCP echo server on tasks' I/O (urt/io.h): one
 * multishot accept, then per connection a receive whose continuation sends
 * the bytes back, whose continuation receives again. No worker blocks; each
 * continuation runs on the worker that submitted the operation. A client
 * (main, with blocking sockets) talks to it. docs/io.md walks through it.
 *   cc echo.c $(pkg-config --cflags --libs urt) && ./a.out */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* usleep, SOCK_CLOEXEC */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <urt/urt.h>

struct conn {
    struct urt_io io; /* one operation at a time: receive, then send, then receive ... */
    int fd;
    char buf[4096];
    size_t len, sent;
};

static atomic_int closed, accept_ended;
static int accept_result;

static void on_received(struct urt_io *io, int32_t res, void *arg);

static void conn_close(struct conn *c)
{
    close(c->fd);
    free(c);
    atomic_fetch_add(&closed, 1);
}

static void receive(struct conn *c)
{
    urt_io_init(&c->io, on_received, c);
    if (urt_io_recv(&c->io, c->fd, c->buf, sizeof(c->buf), 0) != 0)
        conn_close(c);
}

static void on_sent(struct urt_io *io, int32_t res, void *arg)
{
    struct conn *c = arg;
    if (res <= 0) { /* the peer went away */
        conn_close(c);
        return;
    }
    c->sent += (size_t)res;
    if (c->sent < c->len) { /* a short send: the rest, from the same io */
        if (urt_io_send(io, c->fd, c->buf + c->sent, c->len - c->sent, MSG_NOSIGNAL, 0) != 0)
            conn_close(c);
        return;
    }
    receive(c);
}

static void on_received(struct urt_io *io, int32_t res, void *arg)
{
    struct conn *c = arg;
    if (res <= 0) { /* 0: the peer closed; < 0: -errno */
        conn_close(c);
        return;
    }
    c->len = (size_t)res;
    c->sent = 0;
    urt_io_init(io, on_sent, c); /* the io is ours again: reuse it for the send */
    if (urt_io_send(io, c->fd, c->buf, c->len, MSG_NOSIGNAL, 0) != 0)
        conn_close(c);
}

static struct urt_io accept_io;
static int listen_fd;

static void on_accepted(struct urt_io *io, int32_t res, void *arg)
{
    (void)arg;
    if (!(urt_io_flags(io) & URT_IO_F_MORE)) { /* the last call: cancelled, or an error */
        accept_result = res;
        atomic_store(&accept_ended, 1);
        return;
    }
    if (res < 0)
        return; /* one failed accept; more will come */
    struct conn *c = calloc(1, sizeof(*c));
    if (!c) {
        close(res);
        return;
    }
    c->fd = res;
    receive(c);
}

/* Operations are submitted from tasks: a thread that is not a worker gets
 * -EPERM, so main() spawns these. */
static enum urt_task_result start_accept(struct urt_task *t, void *arg)
{
    (void)t, (void)arg;
    urt_io_init(&accept_io, on_accepted, NULL);
    if (urt_io_accept(&accept_io, listen_fd, NULL, NULL, URT_IO_MULTISHOT) != 0) {
        accept_result = -1;
        atomic_store(&accept_ended, 1);
    }
    return URT_TASK_DONE;
}

static enum urt_task_result stop_accept(struct urt_task *t, void *arg)
{
    (void)t, (void)arg;
    urt_io_cancel(&accept_io);
    return URT_TASK_DONE;
}

int main(void)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    cfg.workers = 2;
    urt_runtime *rt;
    if (urt_runtime_create(&cfg, &rt)) {
        fprintf(stderr, "urt: %s\n", urt_last_error());
        return 1;
    }
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    if (bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) || listen(listen_fd, 64) ||
        getsockname(listen_fd, (struct sockaddr *)&a, &alen)) {
        perror("listen");
        return 1;
    }
    urt_spawn(rt, start_accept, NULL, 0);
    printf("listening on 127.0.0.1 (an ephemeral port)\n");

    for (int i = 0; i < 3; i++) { /* the client side: plain blocking sockets */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        char msg[64], back[64] = "";
        int n = snprintf(msg, sizeof(msg), "hello from client %d", i);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) || write(fd, msg, (size_t)n) != n)
            return 1;
        ssize_t got = 0;
        while (got < n) {
            ssize_t r = read(fd, back + got, (size_t)(n - got));
            if (r <= 0)
                return 1;
            got += r;
        }
        printf("client %d: sent \"%s\", echoed \"%s\"\n", i, msg, back);
        close(fd);
    }
    while (atomic_load(&closed) < 3) /* the server sees each end of file */
        usleep(1000);
    printf("server closed %d connections\n", atomic_load(&closed));
    urt_spawn(rt, stop_accept, NULL, 0);
    while (!atomic_load(&accept_ended))
        usleep(1000);
    printf("accept ended: %s\n", accept_result == -ECANCELED ? "-ECANCELED (cancelled)" : "unexpected");
    urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN);
    close(listen_fd);
    return 0;
}
