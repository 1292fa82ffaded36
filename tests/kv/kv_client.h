/*
 * tests/kv/kv_client.h — a small RESP2 client and a urt-kv process for the
 * server suites: start urt-kv (URT_KV, built by meson) on a free port and a
 * Unix socket in a scratch directory, wait until it answers, stop it
 * (SIGTERM, or SIGKILL for the crash tests); connect, send raw bytes or a
 * command, read one reply as text:
 *   +OK  -ERR ...  :5  $value  $nil  *2[$a,$nil]
 * Reads time out after 10 s (a hung server fails the test, never hangs it).
 * Header-only: each suite includes it once.
 */
#ifndef URT_TESTS_KV_CLIENT_H
#define URT_TESTS_KV_CLIENT_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

struct kvc {
    int fd;
    size_t len, off;
    char buf[1 << 16];
};

struct kvs {
    pid_t pid;
    int port;
    bool new_port;      /* the next start takes a new port (after a kill -9) */
    char dir[256];      /* scratch directory: data in dir/data, socket dir/sock */
    char sock[300];
    char data[300];
    char log[300];      /* the server's stderr */
    const char *workers; /* --workers of the next start: NULL "2", "" none (urt-kv's default) */
};

static inline int kv_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static inline int kvc_connect_fd(const struct kvs *s, bool unix_socket)
{
    int fd;
    if (unix_socket) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        if (strlen(s->sock) >= sizeof(a.sun_path))
            return -1;
        memcpy(a.sun_path, s->sock, strlen(s->sock) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
            close(fd);
            return -1;
        }
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
            close(fd);
            return -1;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

static inline struct kvc *kvc_open(const struct kvs *s, bool unix_socket)
{
    struct kvc *c = calloc(1, sizeof(*c));
    c->fd = kvc_connect_fd(s, unix_socket);
    cr_assert_geq(c->fd, 0, "connect to urt-kv: %s", strerror(errno));
    return c;
}

static inline void kvc_close(struct kvc *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static inline int kvc_send(struct kvc *c, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Sends a command as a multibulk (argv with lengths; len -1: strlen). */
static inline void kvc_cmdv(struct kvc *c, int argc, const char **argv, const size_t *lens)
{
    char hdr[32];
    int n = snprintf(hdr, sizeof(hdr), "*%d\r\n", argc);
    cr_assert_eq(kvc_send(c, hdr, (size_t)n), 0);
    for (int i = 0; i < argc; i++) {
        size_t len = lens ? lens[i] : strlen(argv[i]);
        n = snprintf(hdr, sizeof(hdr), "$%zu\r\n", len);
        cr_assert_eq(kvc_send(c, hdr, (size_t)n), 0);
        cr_assert_eq(kvc_send(c, argv[i], len), 0);
        cr_assert_eq(kvc_send(c, "\r\n", 2), 0);
    }
}

/* -1: the connection closed (or timed out) before a byte arrived. */
static inline int kvc_byte(struct kvc *c)
{
    if (c->off == c->len) {
        ssize_t r;
        do
            r = recv(c->fd, c->buf, sizeof(c->buf), 0);
        while (r < 0 && errno == EINTR);
        if (r <= 0)
            return -1;
        c->len = (size_t)r;
        c->off = 0;
    }
    return (unsigned char)c->buf[c->off++];
}

static inline int kvc_line(struct kvc *c, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        int ch = kvc_byte(c);
        if (ch < 0)
            return -1;
        if (ch == '\r') {
            if (kvc_byte(c) != '\n')
                return -1;
            out[n] = 0;
            return 0;
        }
        if (n + 1 < cap)
            out[n++] = (char)ch;
    }
}

/* One reply as text (see the file comment); bulk bytes are copied as they
 * are (binary). Returns its length, or -1 when the connection closed. */
static inline int kvc_reply_into(struct kvc *c, char *out, size_t cap)
{
    char line[512];
    if (kvc_line(c, line, sizeof(line)))
        return -1;
    if (line[0] == '$') {
        long n = atol(line + 1);
        if (n < 0)
            return snprintf(out, cap, "$nil");
        size_t used = 1;
        out[0] = '$';
        for (long i = 0; i < n + 2; i++) {
            int ch = kvc_byte(c);
            if (ch < 0)
                return -1;
            if (i < n && used + 1 < cap)
                out[used++] = (char)ch;
        }
        out[used] = 0;
        return (int)used;
    }
    if (line[0] == '*') {
        long n = atol(line + 1);
        int used = snprintf(out, cap, "*%ld[", n);
        for (long i = 0; i < n; i++) {
            int r = kvc_reply_into(c, out + used, cap - (size_t)used);
            if (r < 0)
                return -1;
            used += r;
            if (i + 1 < n)
                used += snprintf(out + used, cap - (size_t)used, ",");
        }
        used += snprintf(out + used, cap - (size_t)used, "]");
        return used;
    }
    return snprintf(out, cap, "%s", line);
}

static inline const char *kvc_reply(struct kvc *c)
{
    static _Thread_local char out[1 << 16]; /* per thread: the stress test reads from several */
    if (kvc_reply_into(c, out, sizeof(out)) < 0)
        return "(closed)";
    return out;
}

/* Sends a command given as words (no binary) and returns its reply. */
static inline const char *kvc_cmd(struct kvc *c, const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    const char *argv[64];
    int argc = 0;
    for (char *tok = strtok(line, " "); tok && argc < 64; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    kvc_cmdv(c, argc, argv, NULL);
    return kvc_reply(c);
}

/* ---- the server process -------------------------------------------------------------- */

static inline void kvs_paths(struct kvs *s, const char *tag)
{
    snprintf(s->dir, sizeof(s->dir), "%s/urt-kv-%s-%d-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", tag,
             (int)getpid());
    cr_assert_not_null(mkdtemp(s->dir));
    snprintf(s->sock, sizeof(s->sock), "%s/sock", s->dir);
    snprintf(s->data, sizeof(s->data), "%s/data", s->dir);
    snprintf(s->log, sizeof(s->log), "%s/stderr", s->dir);
}

/* Starts urt-kv with extra arguments (NULL-terminated); waits until it
 * answers PING (30 s: sanitizer builds start slowly). fd_limit > 0 sets
 * its RLIMIT_NOFILE. */
static inline void kvs_start_limited(struct kvs *s, long fd_limit, const char *const *extra)
{
    if (!s->port || s->new_port)
        s->port = kv_free_port();
    s->new_port = false;
    char port[16];
    snprintf(port, sizeof(port), "%d", s->port);
    const char *argv[40] = {URT_KV, "--port", port, "--unixsocket", s->sock, "--quiet"};
    int argc = 6;
    if (!s->workers || s->workers[0]) {
        argv[argc++] = "--workers";
        argv[argc++] = s->workers ? s->workers : "2";
    }
    for (int i = 0; extra && extra[i] && argc < 39; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    s->pid = fork();
    cr_assert_geq(s->pid, 0);
    if (s->pid == 0) {
        /* the server dies with the test (a failed assertion must not leave it
         * running), and holds none of the test's pipes (meson waits for them) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        dup2(fd, 1);
        if (fd_limit > 0) {
            struct rlimit rl = {(rlim_t)fd_limit, (rlim_t)fd_limit};
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        execv(URT_KV, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 3000; i++) {
        int fd = kvc_connect_fd(s, false);
        if (fd >= 0) {
            close(fd);
            return;
        }
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid)
            cr_assert_fail("urt-kv exited at start (status %d); see %s", st, s->log);
        usleep(10000);
    }
    cr_assert_fail("urt-kv did not start listening in 30 s");
}

static inline void kvs_start(struct kvs *s, const char *const *extra)
{
    kvs_start_limited(s, 0, extra);
}

/* Stops it: SIGTERM (expects exit 0) or SIGKILL. */
static inline void kvs_stop(struct kvs *s, bool kill9)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, kill9 ? SIGKILL : SIGTERM);
    int st;
    cr_assert_eq(waitpid(s->pid, &st, 0), s->pid);
    if (!kill9)
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "urt-kv exited with status %d (see %s)", st, s->log);
    s->pid = 0;
    /* After SIGKILL the listening socket lives on until the kernel has torn
     * down the dead process's rings (a connect could still reach it): the
     * next start takes a new port. */
    if (kill9)
        s->new_port = true; /* not the port itself: client threads may still read it */
}

static inline void kvs_cleanup(struct kvs *s)
{
    kvs_stop(s, true);
    if (getenv("KV_TEST_KEEP")) /* keep the server's stderr for a look */
        return;
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s->dir);
}

#endif
