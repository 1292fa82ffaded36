/*
 * tools/urt-kv/cmd.c — the command table of urt-kv: each Redis command on
 * the table (table.h), its RESP2 reply, and the log operations of its writes
 * (persist.c's rec_* into the connection's batch record).
 *
 * Replies and error texts are Redis 7.0's (src/server.c, src/t_string.c,
 * src/expire.c, src/networking.c), so clients written for Redis parse them:
 * an unknown command is "-ERR unknown command 'x', with args beginning with:
 * ...", a wrong argument count "-ERR wrong number of arguments for 'get'
 * command". Arity is Redis's convention: n exactly n arguments (the name
 * included), -n at least n.
 *
 * A write is applied to the table first, then its operation is appended to
 * the batch record; the server answers the whole batch once the record's
 * commit reached the response the durability mode asks for (server.c). A
 * write that cannot be logged (one operation over KV_REC_LIMIT) is refused
 * before it touches the table. Runs on the connection's lane: one command at
 * a time per connection; the table does its own locking.
 */
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kv.h"

#define A(i) (buf + argv[(i)].off)
#define L(i) (argv[(i)].len)

typedef int cmd_fn(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc);

struct cmd {
    const char *name;
    int arity;
    cmd_fn *fn;
    bool write;    /* refused after a failed commit (MISCONF) */
    bool grows;    /* refused above maxmemory (OOM) */
};

static bool arg_is(const char *buf, const struct resp_arg *a, const char *word)
{
    size_t n = strlen(word);
    return a->len == n && strncasecmp(buf + a->off, word, n) == 0;
}

static int not_integer(struct kv_ctx *c)
{
    return reply_error(c->out, "ERR value is not an integer or out of range");
}

static int syntax_error(struct kv_ctx *c)
{
    return reply_error(c->out, "ERR syntax error");
}

static int too_large_for_log(struct kv_ctx *c, uint64_t bytes)
{
    if (!c->rec || bytes <= KV_REC_LIMIT)
        return 0;
    reply_error(c->out, "ERR value too large for the log: urt-kv logs at most 16 MB per write");
    return 1;
}

/* ---- connection and server commands ---------------------------------------- */

static int cmd_ping(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    if (argc > 2)
        return reply_error(c->out, "ERR wrong number of arguments for 'ping' command");
    return argc == 2 ? reply_bulk(c->out, A(1), L(1)) : reply_simple(c->out, "PONG");
}

static int cmd_echo(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    return reply_bulk(c->out, A(1), L(1));
}

static int cmd_quit(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)buf, (void)argv, (void)argc;
    c->close_after = true;
    return reply_ok(c->out);
}

static int cmd_select(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    int64_t db;
    if (resp_to_i64(A(1), L(1), &db))
        return not_integer(c);
    return db == 0 ? reply_ok(c->out) : reply_error(c->out, "ERR DB index is out of range");
}

static int cmd_dbsize(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)buf, (void)argv, (void)argc;
    return reply_int(c->out, (int64_t)kv_count(&c->srv->table));
}

static int cmd_info(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    char section[32] = "";
    if (argc >= 2)
        snprintf(section, sizeof(section), "%.*s", (int)(L(1) < 31 ? L(1) : 31), A(1));
    struct kv_buf text = {0};
    kv_ctx_count(c);
    int rc = kv_info(c->srv, section, &text);
    if (rc == 0)
        rc = reply_bulk(c->out, text.p, text.len);
    buf_free(&text);
    return rc;
}

static int cmd_command(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc);

static bool valid_client_name(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '!' || s[i] > '~') /* Redis: no spaces, newlines or special characters */
            return false;
    return true;
}

static int cmd_client(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    if (arg_is(buf, &argv[1], "setname") && argc == 3) {
        if (!valid_client_name(A(2), L(2)))
            return reply_error(c->out, "ERR Client names cannot contain spaces, newlines or special characters.");
        char *name = L(2) ? strndup(A(2), L(2)) : NULL;
        if (L(2) && !name)
            return -ENOMEM;
        free(*c->name);
        *c->name = name;
        return reply_ok(c->out);
    }
    if (arg_is(buf, &argv[1], "getname") && argc == 2)
        return *c->name ? reply_bulk(c->out, *c->name, strlen(*c->name)) : reply_nil(c->out);
    if (arg_is(buf, &argv[1], "id") && argc == 2)
        return reply_int(c->out, (int64_t)c->id);
    if (arg_is(buf, &argv[1], "setinfo") && argc == 4)
        return reply_ok(c->out); /* redis-cli 7.2 sends it; names are not kept */
    return reply_errorf(c->out, "ERR unknown subcommand or wrong number of arguments for '%.*s'. Try CLIENT HELP.",
                        (int)(L(1) > 128 ? 128 : L(1)), A(1));
}

/* CONFIG GET: the parameters clients ask for, answered as Redis does. */
static int config_value(struct kv_server *s, const char *name, char *v, size_t n)
{
    const struct kv_options *o = &s->opt;
    const char *aof = o->durability == KV_DUR_NONE ? "no" : "yes";
    const char *fsync = o->durability == KV_DUR_STORED ? "always" : o->durability == KV_DUR_AVAILABLE ? "everysec" : "no";
    if (!strcmp(name, "save")) snprintf(v, n, "%s", "");
    else if (!strcmp(name, "appendonly")) snprintf(v, n, "%s", aof);
    else if (!strcmp(name, "appendfsync")) snprintf(v, n, "%s", fsync);
    else if (!strcmp(name, "maxmemory")) snprintf(v, n, "%" PRIu64, o->maxmemory);
    else if (!strcmp(name, "maxclients")) snprintf(v, n, "%u", o->maxclients);
    else if (!strcmp(name, "port")) snprintf(v, n, "%d", o->port);
    else if (!strcmp(name, "bind")) snprintf(v, n, "%s", o->bind ? o->bind : "");
    else if (!strcmp(name, "unixsocket")) snprintf(v, n, "%s", o->unix_path ? o->unix_path : "");
    else if (!strcmp(name, "databases")) snprintf(v, n, "1");
    else if (!strcmp(name, "dir")) snprintf(v, n, "%s", o->dir ? o->dir : "");
    else if (!strcmp(name, "proto-max-bulk-len")) snprintf(v, n, "%" PRIu64, o->max_bulk);
    else if (!strcmp(name, "client-query-buffer-limit")) snprintf(v, n, "%" PRIu64, o->query_limit);
    else if (!strcmp(name, "io-threads")) snprintf(v, n, "%u", urt_runtime_config(s->rt)->workers);
    else if (!strcmp(name, "timeout")) snprintf(v, n, "0");
    else if (!strcmp(name, "requirepass")) snprintf(v, n, "%s", o->requirepass ? "(set)" : ""); /* auth.c rule 4 */
    else if (!strcmp(name, "protected-mode")) snprintf(v, n, "%s", o->protected_mode ? "yes" : "no");
    else return -1;
    return 0;
}

static const char *const config_names[] = {
    "save", "appendonly", "appendfsync", "maxmemory", "maxclients", "port", "bind", "unixsocket", "databases",
    "dir", "proto-max-bulk-len", "client-query-buffer-limit", "io-threads", "timeout", "requirepass",
    "protected-mode",
};
#define N_CONFIG (sizeof(config_names) / sizeof(config_names[0]))

static int cmd_config(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    if (!arg_is(buf, &argv[1], "get"))
        return reply_errorf(c->out, "ERR CONFIG %.*s is not supported by urt-kv (settings are command-line options)",
                            (int)(L(1) > 64 ? 64 : L(1)), A(1));
    if (argc < 3)
        return reply_error(c->out, "ERR wrong number of arguments for 'config|get' command");
    bool hit[N_CONFIG] = {false};
    uint32_t n = 0;
    for (uint32_t i = 2; i < argc; i++) {
        char pat[128];
        snprintf(pat, sizeof(pat), "%.*s", (int)(L(i) > 127 ? 127 : L(i)), A(i));
        for (char *p = pat; *p; p++)
            *p = (char)tolower((unsigned char)*p);
        for (uint32_t k = 0; k < N_CONFIG; k++)
            if (!hit[k] && fnmatch(pat, config_names[k], 0) == 0) {
                hit[k] = true;
                n++;
            }
    }
    int rc = reply_array(c->out, 2 * (int64_t)n);
    for (uint32_t k = 0; k < N_CONFIG && rc == 0; k++) {
        char v[4200];
        if (!hit[k] || config_value(c->srv, config_names[k], v, sizeof(v)))
            continue;
        rc = reply_bulk(c->out, config_names[k], strlen(config_names[k]));
        if (rc == 0)
            rc = reply_bulk(c->out, v, strlen(v));
    }
    return rc;
}

/* ---- strings -------------------------------------------------------------------- */

static int cmd_get(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    return kv_get(&c->srv->table, A(1), L(1), kv_ctx_now(c), c->out);
}

static int cmd_mget(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    int64_t now = kv_ctx_now(c);
    int rc = reply_array(c->out, argc - 1);
    for (uint32_t i = 1; i < argc && rc == 0; i++)
        rc = kv_get(&c->srv->table, A(i), L(i), now, c->out);
    return rc;
}

struct set_args {
    unsigned flags;
    int64_t expire_ms; /* absolute Unix ms, KV_NO_EXPIRY */
};

/* An expiry option's value: ms from now (EX, PX) or absolute (EXAT, PXAT). */
static int set_expiry(struct kv_ctx *c, const char *opt, const char *v, size_t n, int64_t now, struct set_args *sa)
{
    int64_t x;
    if (resp_to_i64(v, n, &x))
        return not_integer(c), -1;
    bool secs = !strcasecmp(opt, "ex") || !strcasecmp(opt, "exat");
    bool abs = !strcasecmp(opt, "exat") || !strcasecmp(opt, "pxat");
    if (x <= 0 || (secs && x > INT64_MAX / 1000) || (!abs && (secs ? x * 1000 : x) > INT64_MAX - now))
        return reply_error(c->out, "ERR invalid expire time in 'set' command"), -1;
    int64_t ms = secs ? x * 1000 : x;
    sa->expire_ms = abs ? ms : now + ms;
    return 0;
}

/* SET's options: [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL]. */
static int set_options(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc, int64_t now,
                       struct set_args *sa)
{
    bool have_exp = false;
    for (uint32_t i = 3; i < argc; i++) {
        char opt[8] = "";
        if (L(i) < sizeof(opt))
            memcpy(opt, A(i), L(i));
        if (!strcasecmp(opt, "nx") && !(sa->flags & KV_SET_XX)) {
            sa->flags |= KV_SET_NX;
        } else if (!strcasecmp(opt, "xx") && !(sa->flags & KV_SET_NX)) {
            sa->flags |= KV_SET_XX;
        } else if (!strcasecmp(opt, "get")) {
            sa->flags |= KV_SET_GET;
        } else if (!strcasecmp(opt, "keepttl") && !have_exp) {
            sa->flags |= KV_SET_KEEPTTL;
            have_exp = true;
        } else if ((!strcasecmp(opt, "ex") || !strcasecmp(opt, "px") || !strcasecmp(opt, "exat") ||
                    !strcasecmp(opt, "pxat")) && !have_exp && i + 1 < argc) {
            if (set_expiry(c, opt, A(i + 1), L(i + 1), now, sa))
                return -1;
            have_exp = true;
            i++;
        } else {
            syntax_error(c);
            return -1;
        }
    }
    return 0;
}

static bool over_maxmemory(struct kv_server *s)
{
    return s->opt.maxmemory && (uint64_t)atomic_load_explicit(&s->table.mem, memory_order_relaxed) > s->opt.maxmemory;
}

static int cmd_set(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    int64_t now = kv_ctx_now(c);
    struct set_args sa = {0, KV_NO_EXPIRY};
    if (set_options(c, buf, argv, argc, now, &sa))
        return 0;
    if (too_large_for_log(c, KV_OP_HDR + L(1) + L(2)))
        return 0;
    struct kv_buf old = {0};
    struct kv_write w;
    int rc = kv_set(&c->srv->table, A(1), L(1), A(2), L(2), sa.expire_ms, sa.flags, now, &old, &w);
    if (rc == 0 && w.done && c->rec)
        rc = rec_set(c->rec, A(1), L(1), A(2), L(2), w.expire_ms, w.version);
    if (rc == 0)
        rc = (sa.flags & KV_SET_GET) ? buf_put(c->out, old.p, old.len) : w.done ? reply_ok(c->out) : reply_nil(c->out);
    buf_free(&old);
    return rc;
}

static int cmd_mset(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    if (argc % 2 == 0)
        return reply_error(c->out, "ERR wrong number of arguments for 'mset' command");
    uint64_t bytes = 0;
    for (uint32_t i = 1; i < argc; i += 2)
        bytes += KV_OP_HDR + L(i) + L(i + 1);
    if (too_large_for_log(c, bytes))
        return 0;
    int64_t now = kv_ctx_now(c);
    for (uint32_t i = 1; i < argc; i += 2) {
        struct kv_write w;
        int rc = kv_set(&c->srv->table, A(i), L(i), A(i + 1), L(i + 1), KV_NO_EXPIRY, 0, now, NULL, &w);
        if (rc == 0 && c->rec)
            rc = rec_set(c->rec, A(i), L(i), A(i + 1), L(i + 1), KV_NO_EXPIRY, w.version);
        if (rc)
            return rc;
    }
    return reply_ok(c->out);
}

static int cmd_del(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    int64_t now = kv_ctx_now(c), n = 0;
    for (uint32_t i = 1; i < argc; i++) {
        struct kv_write w;
        if (kv_del(&c->srv->table, A(i), L(i), now, &w) <= 0)
            continue;
        n++;
        if (c->rec && rec_del(c->rec, A(i), L(i), w.version))
            return -ENOMEM;
    }
    return reply_int(c->out, n);
}

static int cmd_exists(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    int64_t now = kv_ctx_now(c), n = 0;
    for (uint32_t i = 1; i < argc; i++)
        n += kv_exists(&c->srv->table, A(i), L(i), now);
    return reply_int(c->out, n);
}

static int incr_by(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, int64_t delta)
{
    int64_t result;
    char digits[24];
    size_t nd;
    struct kv_write w;
    int rc = kv_incr(&c->srv->table, A(1), L(1), delta, kv_ctx_now(c), &result, digits, &nd, &w);
    if (rc == -EINVAL)
        return not_integer(c);
    if (rc == -ERANGE)
        return reply_error(c->out, "ERR increment or decrement would overflow");
    if (rc == 0 && c->rec)
        rc = rec_set(c->rec, A(1), L(1), digits, nd, w.expire_ms, w.version);
    return rc ? rc : reply_int(c->out, result);
}

static int cmd_incr(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    return incr_by(c, buf, argv, 1);
}

static int cmd_decr(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    return incr_by(c, buf, argv, -1);
}

static int cmd_incrby(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    int64_t d;
    if (resp_to_i64(A(2), L(2), &d))
        return not_integer(c);
    return incr_by(c, buf, argv, d);
}

static int cmd_decrby(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    int64_t d;
    if (resp_to_i64(A(2), L(2), &d))
        return not_integer(c);
    if (d == INT64_MIN)
        return reply_error(c->out, "ERR decrement would overflow");
    return incr_by(c, buf, argv, -d);
}

/* Sets the key's expiry to `at` (KV_NO_EXPIRY: none) and logs the key's new
 * state: a DEL when `at` is past, else a SET of its value with the expiry. */
static int expire_and_log(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, int64_t at, int64_t now)
{
    struct kv_buf val = {0};
    struct kv_write w;
    int done = kv_expire_at(&c->srv->table, A(1), L(1), at, now, c->rec ? &val : NULL, &w);
    int rc = 0;
    if (done && c->rec)
        rc = w.deleted ? rec_del(c->rec, A(1), L(1), w.version)
                       : rec_set(c->rec, A(1), L(1), val.p, val.len, at, w.version);
    else if (!done && w.version) /* applied, but the value could not be copied for the log */
        rc = -ENOMEM;
    buf_free(&val);
    return rc ? rc : reply_int(c->out, done);
}

/* EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: unit 1000 or 1, absolute or not. */
static int expire_generic(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc,
                          const char *name, int64_t unit, bool absolute)
{
    if (argc > 3)
        return reply_errorf(c->out, "ERR Unsupported option %.*s", (int)(L(3) > 32 ? 32 : L(3)), A(3));
    int64_t x, now = kv_ctx_now(c);
    if (resp_to_i64(A(2), L(2), &x))
        return not_integer(c);
    int64_t base = absolute ? 0 : now;
    if ((x > 0 && x > (INT64_MAX - base) / unit) || (x < 0 && x < (INT64_MIN + 1000000) / unit))
        return reply_errorf(c->out, "ERR invalid expire time in '%s' command", name);
    int64_t at = base + x * unit;
    return expire_and_log(c, buf, argv, at, now);
}

static int cmd_expire(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    return expire_generic(c, buf, argv, argc, "expire", 1000, false);
}

static int cmd_pexpire(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    return expire_generic(c, buf, argv, argc, "pexpire", 1, false);
}

static int cmd_expireat(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    return expire_generic(c, buf, argv, argc, "expireat", 1000, true);
}

static int cmd_pexpireat(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    return expire_generic(c, buf, argv, argc, "pexpireat", 1, true);
}

static int ttl_generic(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, bool ms)
{
    int64_t t = kv_ttl_ms(&c->srv->table, A(1), L(1), kv_ctx_now(c));
    if (t >= 0 && !ms)
        t = (t + 500) / 1000; /* Redis rounds */
    return reply_int(c->out, t);
}

static int cmd_ttl(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    return ttl_generic(c, buf, argv, false);
}

static int cmd_pttl(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    return ttl_generic(c, buf, argv, true);
}

static int cmd_persist(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    (void)argc;
    int64_t now = kv_ctx_now(c);
    if (kv_ttl_ms(&c->srv->table, A(1), L(1), now) < 0)
        return reply_int(c->out, 0);
    return expire_and_log(c, buf, argv, KV_NO_EXPIRY, INT64_MIN);
}

static int cmd_flushall(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    if (argc == 2 && !arg_is(buf, &argv[1], "sync") && !arg_is(buf, &argv[1], "async"))
        return syntax_error(c);
    uint64_t versions[KV_SHARDS];
    kv_flush(&c->srv->table, versions);
    if (c->rec && rec_flush(c->rec, versions))
        return -ENOMEM;
    return reply_ok(c->out);
}

/* ---- the table ---------------------------------------------------------------- */

static const struct cmd commands[] = {
    {"get", 2, cmd_get, false, false},
    {"set", -3, cmd_set, true, true},
    {"incr", 2, cmd_incr, true, true},
    {"ping", -1, cmd_ping, false, false},
    {"mget", -2, cmd_mget, false, false},
    {"mset", -3, cmd_mset, true, true},
    {"del", -2, cmd_del, true, false},
    {"unlink", -2, cmd_del, true, false},
    {"exists", -2, cmd_exists, false, false},
    {"incrby", 3, cmd_incrby, true, true},
    {"decr", 2, cmd_decr, true, true},
    {"decrby", 3, cmd_decrby, true, true},
    {"expire", -3, cmd_expire, true, false},
    {"pexpire", -3, cmd_pexpire, true, false},
    {"expireat", -3, cmd_expireat, true, false},
    {"pexpireat", -3, cmd_pexpireat, true, false},
    {"persist", 2, cmd_persist, true, false},
    {"ttl", 2, cmd_ttl, false, false},
    {"pttl", 2, cmd_pttl, false, false},
    {"echo", 2, cmd_echo, false, false},
    {"dbsize", 1, cmd_dbsize, false, false},
    {"flushall", -1, cmd_flushall, true, false},
    {"flushdb", -1, cmd_flushall, true, false},
    {"info", -1, cmd_info, false, false},
    {"client", -2, cmd_client, false, false},
    {"config", -2, cmd_config, false, false},
    {"command", -1, cmd_command, false, false},
    {"select", 2, cmd_select, false, false},
    {"quit", -1, cmd_quit, false, false},
    {"auth", -2, kv_auth, false, false},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static int cmd_command(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    if (argc >= 2 && arg_is(buf, &argv[1], "count"))
        return reply_int(c->out, (int64_t)N_COMMANDS);
    return reply_array(c->out, 0); /* COMMAND and COMMAND DOCS (redis-cli's hints): nothing to tell */
}

static const struct cmd *lookup_command(const char *name, size_t n)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strlen(commands[i].name) == n && strncasecmp(commands[i].name, name, n) == 0)
            return &commands[i];
    return NULL;
}

/* Redis's rejectCommandFormat for an unknown command (src/server.c). */
static int unknown_command(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    char args[300] = "";
    size_t used = 0;
    for (uint32_t i = 1; i < argc && used < 128; i++) {
        int room = 128 - (int)used;
        int n = snprintf(args + used, sizeof(args) - used, "'%.*s' ", (int)(L(i) < (size_t)room ? L(i) : (size_t)room),
                         A(i));
        used += (size_t)n < sizeof(args) - used ? (size_t)n : sizeof(args) - used - 1;
    }
    return reply_errorf(c->out, "ERR unknown command '%.*s', with args beginning with: %s",
                        (int)(L(0) > 128 ? 128 : L(0)), A(0), args);
}

void kv_ctx_count(struct kv_ctx *c)
{
    if (c->commands)
        atomic_fetch_add_explicit(&c->srv->commands, c->commands, memory_order_relaxed);
    c->commands = 0;
}

int kv_exec(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc)
{
    c->commands++;
    const struct cmd *cmd = lookup_command(A(0), L(0));
    if (!cmd)
        return unknown_command(c, buf, argv, argc);
    if ((cmd->arity > 0 && argc != (uint32_t)cmd->arity) || (cmd->arity < 0 && argc < (uint32_t)-cmd->arity))
        return reply_errorf(c->out, "ERR wrong number of arguments for '%s' command", cmd->name);
    if (c->authenticated && !*c->authenticated && cmd->fn != kv_auth && cmd->fn != cmd_quit)
        return reply_error(c->out, "NOAUTH Authentication required."); /* auth.c rule 1 */
    if (cmd->write && atomic_load_explicit(&c->srv->log_failed, memory_order_relaxed))
        return reply_error(c->out, "MISCONF Errors writing to the log: urt-kv refuses writes (see its standard error)");
    if (cmd->grows && over_maxmemory(c->srv))
        return reply_error(c->out, "OOM command not allowed when used memory > 'maxmemory'.");
    return cmd->fn(c, buf, argv, argc);
}
