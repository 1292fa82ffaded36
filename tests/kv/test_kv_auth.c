/*
 * tests/kv/test_kv_auth.c — who may talk to urt-kv (tools/urt-kv/auth.c,
 * rules 1-5): the password (--requirepass, --requirepass-file, AUTH with
 * Redis's replies, NOAUTH before it, never printed) and protected mode (no
 * password: a TCP client that is not on loopback gets Redis's DENIED text;
 * Unix-socket and loopback clients are served; --protected-mode no or a
 * password lift it). The server is the binary, started per test; the
 * outside client connects to this machine's first non-loopback IPv4
 * address, so the server sees a non-loopback peer (skipped with the reason
 * when the machine has none). redis-cli is used where installed.
 */
#include <criterion/criterion.h>
#include <ifaddrs.h>
#include <net/if.h>

#include "helpers.h"
#include "kv_client.h"

static struct kvs srv;

static void stop_srv(void)
{
    kvs_stop(&srv, false);
    kvs_cleanup(&srv);
}

static void start_with(const char *const *extra)
{
    memset(&srv, 0, sizeof(srv));
    kvs_paths(&srv, "auth");
    kvs_start(&srv, extra);
}

/* A file holding the password, mode 600. */
static void write_pwfile(const char *path, const char *content, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    fchmod(fd, mode);
    close(fd);
}

static bool file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    bool hit = false;
    while (f && fgets(line, sizeof(line), f))
        hit |= strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return hit;
}

/* Rules 1-2 and 4 over TCP and the Unix socket. */
static void check_password_rules(const char *pw)
{
    for (int unix_socket = 0; unix_socket < 2; unix_socket++) {
        struct kvc *c = kvc_open(&srv, unix_socket);
        cr_assert_str_eq(kvc_cmd(c, "PING"), "-NOAUTH Authentication required.");
        cr_assert_str_eq(kvc_cmd(c, "SET a 1"), "-NOAUTH Authentication required.");
        cr_assert_str_eq(kvc_cmd(c, "CONFIG GET requirepass"), "-NOAUTH Authentication required.");
        cr_assert_str_eq(kvc_cmd(c, "INFO"), "-NOAUTH Authentication required.");
        /* Redis answers these before the password check */
        cr_assert_str_eq(kvc_cmd(c, "NOSUCH x"), "-ERR unknown command 'NOSUCH', with args beginning with: 'x' ");
        cr_assert_str_eq(kvc_cmd(c, "GET"), "-ERR wrong number of arguments for 'get' command");
        cr_assert_str_eq(kvc_cmd(c, "AUTH"), "-ERR wrong number of arguments for 'auth' command");
        cr_assert_str_eq(kvc_cmd(c, "AUTH wrong"), "-WRONGPASS invalid username-password pair or user is disabled.");
        cr_assert_str_eq(kvc_cmd(c, "AUTH %s%s", pw, "x"),
                         "-WRONGPASS invalid username-password pair or user is disabled.");
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "%.*s", (int)strlen(pw) - 1, pw);
        cr_assert_str_eq(kvc_cmd(c, "AUTH %s", prefix), "-WRONGPASS invalid username-password pair or user is disabled.");
        cr_assert_str_eq(kvc_cmd(c, "AUTH someone %s", pw),
                         "-WRONGPASS invalid username-password pair or user is disabled.");
        cr_assert_str_eq(kvc_cmd(c, "PING"), "-NOAUTH Authentication required.");
        cr_assert_str_eq(kvc_cmd(c, unix_socket ? "AUTH default %s" : "AUTH %s", pw), "+OK");
        cr_assert_str_eq(kvc_cmd(c, "PING"), "+PONG");
        cr_assert_str_eq(kvc_cmd(c, "SET a 1"), "+OK");
        cr_assert_str_eq(kvc_cmd(c, "AUTH wrong"), "-WRONGPASS invalid username-password pair or user is disabled.");
        cr_assert_str_eq(kvc_cmd(c, "GET a"), "$1"); /* a failed AUTH does not log out (as Redis) */
        cr_assert_str_eq(kvc_cmd(c, "CONFIG GET requirepass"), "*2[$requirepass,$(set)]");
        const char *info = kvc_cmd(c, "INFO");
        cr_assert(strstr(info, "# Server") && !strstr(info, pw), "INFO shows the password: %s", info);
        cr_assert_str_eq(kvc_cmd(c, "QUIT"), "+OK");
        kvc_close(c);
    }
    /* QUIT needs no password */
    struct kvc *c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "QUIT"), "+OK");
    cr_assert_str_eq(kvc_reply(c), "(closed)");
    kvc_close(c);
    cr_assert(!file_has(srv.log, pw), "the server's output shows the password");
}

Test(kv_auth, requirepass_on_the_command_line, .fini = stop_srv, .timeout = 120)
{
    const char *extra[] = {"--requirepass", "s3cret-pw", NULL};
    start_with(extra);
    check_password_rules("s3cret-pw");
}

Test(kv_auth, requirepass_from_a_file, .fini = stop_srv, .timeout = 120)
{
    char path[] = "/tmp/urt-kv-pw-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    write_pwfile(path, "from-a-file\nsecond line is ignored\n", 0600);
    const char *extra[] = {"--requirepass-file", path, NULL};
    start_with(extra);
    check_password_rules("from-a-file");
    unlink(path);
}

static int run_kv(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s --port 0 --quiet %s >/dev/null 2>/tmp/urt-kv-auth-err.txt", URT_KV, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(kv_auth, a_password_file_others_may_read_or_an_empty_one_is_refused, .timeout = 60)
{
    char path[] = "/tmp/urt-kv-pw-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    char args[256];
    snprintf(args, sizeof(args), "--requirepass-file %s", path);
    write_pwfile(path, "pw\n", 0644);
    cr_assert_eq(run_kv(args), 2);
    cr_assert(file_has("/tmp/urt-kv-auth-err.txt", "group or others may read it"));
    write_pwfile(path, "\n", 0600);
    cr_assert_eq(run_kv(args), 2);
    cr_assert(file_has("/tmp/urt-kv-auth-err.txt", "the first line is empty"));
    unlink(path);
    cr_assert_eq(run_kv(args), 2);
    cr_assert(file_has("/tmp/urt-kv-auth-err.txt", "No such file"));
    cr_assert_eq(run_kv("--requirepass ''"), 2);
    cr_assert_eq(run_kv("--protected-mode maybe"), 2);
    cr_assert(file_has("/tmp/urt-kv-auth-err.txt", "--protected-mode maybe: yes or no"));
}

Test(kv_auth, without_a_password_auth_says_none_is_configured, .fini = stop_srv, .timeout = 120)
{
    start_with(NULL);
    struct kvc *c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "AUTH pw"), "-ERR AUTH <password> called without any password configured for the "
                                            "default user. Are you sure your configuration is correct?");
    cr_assert_str_eq(kvc_cmd(c, "AUTH default anything"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "AUTH someone anything"),
                     "-WRONGPASS invalid username-password pair or user is disabled.");
    cr_assert_str_eq(kvc_cmd(c, "CONFIG GET requirepass"), "*2[$requirepass,$]");
    cr_assert_str_eq(kvc_cmd(c, "CONFIG GET protected-mode"), "*2[$protected-mode,$yes]");
    cr_assert_str_eq(kvc_cmd(c, "PING"), "+PONG");
    kvc_close(c);
}

/* ---- protected mode --------------------------------------------------------------- */

/* This machine's first non-loopback IPv4 address that is up, or false. */
static bool outside_address(struct in_addr *out)
{
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs))
        return false;
    bool found = false;
    for (i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK)) {
            *out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
            found = (ntohl(out->s_addr) >> 24) != 127;
        }
    freeifaddrs(ifs);
    return found;
}

/* Connects to the server's port on addr (the server sees addr as the peer). */
static struct kvc *open_at(struct in_addr addr)
{
    struct kvc *c = calloc(1, sizeof(*c));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv.port), .sin_addr = addr};
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_eq(connect(c->fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s", strerror(errno));
    struct timeval tv = {.tv_sec = 10};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return c;
}

static const char denied_start[] = "-DENIED Redis is running in protected mode because protected mode is enabled and "
                                   "no password is set for the default user.";

Test(kv_auth, protected_mode_refuses_outside_clients_without_a_password, .fini = stop_srv, .timeout = 120)
{
    struct in_addr out;
    if (!outside_address(&out))
        cr_skip_test("this machine has no non-loopback IPv4 address up");
    const char *extra[] = {"--bind", "0.0.0.0", NULL};
    start_with(extra);
    struct kvc *c = open_at(out);
    char r[2048];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof(r) - 1 && (got = recv(c->fd, r + n, sizeof(r) - 1 - n, 0)) > 0) /* sent at accept; then EOF */
        n += (size_t)got;
    r[n] = '\0';
    cr_assert(strncmp(r, denied_start, strlen(denied_start)) == 0, "reply: %s", r);
    cr_assert(strstr(r, "4) Setup a an authentication password for the default user. NOTE: You only need to do one "
                        "of the above things in order for the server to start accepting connections from the "
                        "outside.\r\n"), "reply: %s", r);
    cr_assert_eq(r[n - 1], '\n', "one whole line, then the close");
    kvc_close(c);
    /* loopback and the Unix socket are served */
    c = kvc_open(&srv, false);
    cr_assert_str_eq(kvc_cmd(c, "PING"), "+PONG");
    kvc_close(c);
    c = kvc_open(&srv, true);
    cr_assert_str_eq(kvc_cmd(c, "PING"), "+PONG");
    cr_assert(strstr(kvc_cmd(c, "INFO stats"), "rejected_connections:1"), "one rejection counted");
    kvc_close(c);
}

Test(kv_auth, protected_mode_off_serves_outside_clients, .fini = stop_srv, .timeout = 120)
{
    struct in_addr out;
    if (!outside_address(&out))
        cr_skip_test("this machine has no non-loopback IPv4 address up");
    const char *extra[] = {"--bind", "0.0.0.0", "--protected-mode", "no", NULL};
    start_with(extra);
    struct kvc *c = open_at(out);
    cr_assert_str_eq(kvc_cmd(c, "PING"), "+PONG");
    cr_assert_str_eq(kvc_cmd(c, "CONFIG GET protected-mode"), "*2[$protected-mode,$no]");
    kvc_close(c);
}

Test(kv_auth, a_password_lifts_protected_mode_and_asks_for_auth, .fini = stop_srv, .timeout = 120)
{
    struct in_addr out;
    if (!outside_address(&out))
        cr_skip_test("this machine has no non-loopback IPv4 address up");
    const char *extra[] = {"--bind", "0.0.0.0", "--requirepass", "outside-pw", NULL};
    start_with(extra);
    struct kvc *c = open_at(out);
    cr_assert_str_eq(kvc_cmd(c, "PING"), "-NOAUTH Authentication required.");
    cr_assert_str_eq(kvc_cmd(c, "AUTH outside-pw"), "+OK");
    cr_assert_str_eq(kvc_cmd(c, "PING"), "+PONG");
    kvc_close(c);
}

/* ---- redis-cli ------------------------------------------------------------------------ */

static void cli(const char *args, const char *want)
{
    char cmd[512], out[1024] = "";
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d %s 2>&1", srv.port, args);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = 0;
    pclose(p);
    cr_assert_str_eq(out, want, "redis-cli %s", args);
}

Test(kv_auth, redis_cli_with_a_password, .fini = stop_srv, .timeout = 120)
{
    if (system("command -v redis-cli >/dev/null 2>&1") != 0)
        cr_skip_test("redis-cli not installed (Debian redis-tools; scripts/deps.sh installs it)");
    const char *extra[] = {"--requirepass", "cli-pw", NULL};
    start_with(extra);
    cli("PING", "NOAUTH Authentication required.\n\n");
    cli("--no-auth-warning -a wrong PING",
        "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.\nNOAUTH Authentication "
        "required.\n\n");
    cli("--no-auth-warning -a cli-pw SET k v", "OK\n");
    cli("--no-auth-warning --user default --pass cli-pw GET k", "v\n");
}
