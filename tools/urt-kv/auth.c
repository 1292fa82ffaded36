/*
 * tools/urt-kv/auth.c — who may talk to urt-kv: a password (Redis's
 * requirepass and AUTH) and protected mode.
 *
 * Rules (Redis 7's, with its reply texts):
 *  1. With a password set, a connection starts unauthenticated. Before AUTH
 *     succeeds every command is answered "-NOAUTH Authentication required."
 *     except AUTH and QUIT; an unknown command and a wrong argument count are
 *     still answered as such (Redis checks them first).
 *  2. AUTH password, or AUTH default password: +OK and the connection is
 *     authenticated, or -WRONGPASS (any other user name is a wrong pair).
 *     A failed AUTH leaves an authenticated connection authenticated (as
 *     Redis does). Without a password AUTH password is an error that says
 *     none is configured; AUTH default <anything> is +OK (the default user
 *     has no password).
 *  3. The comparison takes a time that depends on the configured password's
 *     length only: every byte of it is compared with the given byte at that
 *     place (or a zero past the given one's end), the differences ORed, and
 *     the length difference ORed in last.
 *  4. The password is never printed: not in the start line, INFO, CONFIG GET
 *     (which answers requirepass with an empty value when none is set and
 *     with "(set)" when one is, so a client can tell but not read it), nor in
 *     error messages.
 *  5. Protected mode (default on): with no password, a TCP connection whose
 *     peer is not a loopback address (127.0.0.0/8, ::1, an IPv4-mapped
 *     127.x) gets Redis's DENIED text and is closed before anything it sent
 *     is read. Unix-socket clients are always accepted. --protected-mode no
 *     turns it off; a password turns it off too (Redis's rule).
 *
 * Threading: the password and the flag are written by main before the
 * runtime starts and only read afterwards; a connection's authenticated flag
 * belongs to its lane.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv.h"

const char kv_denied_reply[] =
    "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the "
    "default user. In this mode connections are only accepted from the loopback interface. If you want to connect "
    "from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode "
    "sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the "
    "same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do "
    "so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode "
    "by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting "
    "the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' "
    "option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the "
    "above things in order for the server to start accepting connections from the outside.\r\n";

bool kv_password_matches(const struct kv_server *s, const char *given, size_t len)
{
    const volatile unsigned char *want = (const unsigned char *)s->opt.requirepass;
    size_t n = s->opt.requirepass_len;
    unsigned diff = 0;
    for (size_t i = 0; i < n; i++) { /* rule 3: n steps whatever was given */
        unsigned char g = i < len ? (unsigned char)given[i] : 0;
        diff |= (unsigned)(want[i] ^ g);
    }
    diff |= (unsigned)(len != n);
    return diff == 0;
}

static bool arg_equals(const char *buf, const struct resp_arg *a, const char *word)
{
    size_t n = strlen(word);
    return a->len == n && strncasecmp(buf + a->off, word, n) == 0;
}

int kv_auth(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    const struct kv_server *s = c->srv;
    if (argc > 3)
        return reply_error(c->out, "ERR syntax error");
    const struct resp_arg *pw = &argv[argc - 1];
    bool user_ok = argc == 2 || arg_equals(buf, &argv[1], "default");
    if (!s->opt.requirepass) {
        if (argc == 2)
            return reply_error(c->out, "ERR AUTH <password> called without any password configured for the default "
                                       "user. Are you sure your configuration is correct?");
        if (!user_ok)
            return reply_error(c->out, "WRONGPASS invalid username-password pair or user is disabled.");
        *c->authenticated = true;
        return reply_ok(c->out);
    }
    bool ok = kv_password_matches(s, buf + pw->off, pw->len); /* compared even for a wrong user (rule 3) */
    if (!ok || !user_ok)
        return reply_error(c->out, "WRONGPASS invalid username-password pair or user is disabled.");
    *c->authenticated = true;
    return reply_ok(c->out);
}

static bool is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return ss->ss_family == AF_UNIX;
}

bool kv_protected_refuses(const struct kv_server *s, int fd, bool tcp)
{
    if (!s->opt.protected_mode || s->opt.requirepass || !tcp)
        return false;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
        return true; /* cannot tell where it comes from: refuse, as an outside client */
    return !is_loopback(&ss);
}

int kv_read_password_file(const char *path, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        fprintf(stderr, "urt-kv: --requirepass-file %s: %s\n", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 4096) {
        fprintf(stderr, "urt-kv: --requirepass-file %s: not a regular file of at most 4096 bytes\n", path);
        close(fd);
        return -EINVAL;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        fprintf(stderr, "urt-kv: --requirepass-file %s: group or others may read it (mode %03o); chmod 600 it\n",
                path, (unsigned)(st.st_mode & 0777));
        close(fd);
        return -EPERM;
    }
    char buf[4097];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0) {
        int e = errno;
        fprintf(stderr, "urt-kv: --requirepass-file %s: %s\n", path, strerror(e));
        return -e;
    }
    size_t l = strcspn(buf, "\r\n") < (size_t)n ? strcspn(buf, "\r\n") : (size_t)n;
    if (l == 0) {
        fprintf(stderr, "urt-kv: --requirepass-file %s: the first line is empty\n", path);
        return -EINVAL;
    }
    char *p = malloc(l + 1);
    if (!p)
        return -ENOMEM;
    memcpy(p, buf, l);
    p[l] = '\0';
    explicit_bzero(buf, sizeof(buf));
    *out = p;
    *len = l;
    return 0;
}
