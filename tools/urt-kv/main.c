/*
 * tools/urt-kv/main.c — urt-kv, a Redis-protocol key-value server built on
 * urt's public API only: command line and config file, recovery, the
 * runtime, the start line, signals, the checkpoint thread.
 *
 * Start, in named phases: options (flags, then --config FILE lines "name
 * value" with the same names) → descriptor limit (maxclients + 64, as Redis's
 * adjustOpenFilesLimit) → listening sockets → recovery (snapshot, then the
 * log: before the runtime opens the log) → runtime (log_dir = DIR/log when
 * the durability mode logs) → the table's expiry timers → listeners on the
 * workers → one line on stderr saying where it listens, what it recovered and
 * what the io_uring probe found. SIGINT/SIGTERM stop it (the signals are
 * blocked in every thread and taken by sigwait on the main thread).
 *
 * The checkpoint thread (--checkpoint-mb > 0 with a log) looks at the log's
 * byte count every 250 ms and writes a snapshot + checkpoint after that many
 * new megabytes (persist.c), so the log stays bounded.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kv.h"

#define EXIT_USAGE 2

static void usage(FILE *f)
{
    fprintf(f,
            "usage: urt-kv [options]\n"
            "A Redis-protocol (RESP2) key-value server on urt. Options (also as 'name value' lines of --config):\n"
            "  --port N                    TCP port (default 6379; 0: no TCP)\n"
            "  --bind ADDR                 TCP address (default 127.0.0.1)\n"
            "  --unixsocket PATH           also listen on a Unix socket\n"
            "  --workers N                 worker threads (default: 1 with stored and one log channel,\n"
            "                              else online CPUs)\n"
            "  --dir DIR                   data directory: DIR/log (urt's log) and DIR/snapshot\n"
            "  --durability MODE           stored (answer writes once durable), available (once logged),\n"
            "                              none (no log); default stored with --dir, none without\n"
            "  --maxmemory BYTES           refuse growing writes above this (k/m/g suffixes; 0: no limit)\n"
            "  --maxclients N              connections (default 10000)\n"
            "  --proto-max-bulk-len BYTES  longest argument (default 512m)\n"
            "  --max-args N                most arguments of a request (default 1048576)\n"
            "  --client-query-buffer-limit BYTES   unparsed input per client (default 1g)\n"
            "  --client-output-limit BYTES replies of one batch before the client is dropped (default 1g)\n"
            "  --send-timeout-ms MS        drop a client that takes no reply for this long (default 60000; 0: never)\n"
            "  --checkpoint-mb MB          snapshot + log checkpoint after MB of log (default 64; 0: never)\n"
            "  --epoch-us US               group-commit period of the log (default: the runtime's, 1000)\n"
            "  --log-channels N            log channels (0: one per worker; default 1 with stored,\n"
            "                              0 otherwise)\n"
            "  --requirepass PASSWORD      clients must AUTH with it (visible in ps: prefer the file or --config)\n"
            "  --requirepass-file FILE     the password is FILE's first line (FILE must be mode 600 or stricter)\n"
            "  --protected-mode yes|no     without a password, refuse TCP clients that are not on loopback\n"
            "                              (default yes)\n"
            "  --config FILE               read options from FILE\n"
            "  --quiet                     no start line\n"
            "  --help, --version\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("urt-kv: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (try --help)\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* "123", "64k", "512m", "1g" (powers of 1024, as Redis's memtoull). */
static int parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    uint64_t mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024, end++;
    else if (*end == 'm' || *end == 'M') mul = 1024 * 1024, end++;
    else if (*end == 'g' || *end == 'G') mul = 1024ull * 1024 * 1024, end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end || v > UINT64_MAX / mul)
        return -1;
    *out = v * mul;
    return 0;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Sets option `name` (without dashes) to value. 0, or a usage error's exit code. */
static int set_option(struct kv_options *o, const char *name, const char *v)
{
    uint64_t x;
    if (!strcmp(name, "port")) {
        if (parse_u64(v, 0, 65535, &x))
            return usage_error("--port %s: not a port (0..65535)", v);
        o->port = (int)x;
    } else if (!strcmp(name, "bind")) {
        o->bind = strdup(v);
    } else if (!strcmp(name, "unixsocket")) {
        o->unix_path = strdup(v);
    } else if (!strcmp(name, "workers")) {
        if (parse_u64(v, 1, 1024, &x))
            return usage_error("--workers %s: not a count 1..1024", v);
        o->workers = (uint32_t)x;
    } else if (!strcmp(name, "dir")) {
        o->dir = strdup(v);
    } else if (!strcmp(name, "durability")) {
        if (!strcmp(v, "stored")) o->durability = KV_DUR_STORED;
        else if (!strcmp(v, "available")) o->durability = KV_DUR_AVAILABLE;
        else if (!strcmp(v, "none")) o->durability = KV_DUR_NONE;
        else return usage_error("--durability %s: stored, available or none", v);
    } else if (!strcmp(name, "maxmemory")) {
        if (parse_bytes(v, &o->maxmemory))
            return usage_error("--maxmemory %s: not a size", v);
    } else if (!strcmp(name, "maxclients")) {
        if (parse_u64(v, 1, 1000000, &x))
            return usage_error("--maxclients %s: not a count 1..1000000", v);
        o->maxclients = (uint32_t)x;
    } else if (!strcmp(name, "proto-max-bulk-len")) {
        if (parse_bytes(v, &o->max_bulk) || o->max_bulk < 1024 || o->max_bulk > 4096ull * 1024 * 1024)
            return usage_error("--proto-max-bulk-len %s: a size from 1k to 4g", v);
    } else if (!strcmp(name, "max-args")) {
        if (parse_u64(v, 1, 64u * 1024 * 1024, &x))
            return usage_error("--max-args %s: a count 1..67108864", v);
        o->max_args = (uint32_t)x;
    } else if (!strcmp(name, "client-query-buffer-limit")) {
        if (parse_bytes(v, &o->query_limit) || o->query_limit < 1024 * 1024)
            return usage_error("--client-query-buffer-limit %s: a size of at least 1m", v);
    } else if (!strcmp(name, "client-output-limit")) {
        if (parse_bytes(v, &o->output_limit) || o->output_limit < 1024)
            return usage_error("--client-output-limit %s: a size of at least 1k", v);
    } else if (!strcmp(name, "send-timeout-ms")) {
        if (parse_u64(v, 0, 86400000, &o->send_timeout_ms))
            return usage_error("--send-timeout-ms %s: milliseconds 0..86400000", v);
    } else if (!strcmp(name, "checkpoint-mb")) {
        if (parse_u64(v, 0, 1u << 20, &o->checkpoint_bytes))
            return usage_error("--checkpoint-mb %s: megabytes 0..1048576", v);
        o->checkpoint_bytes <<= 20;
    } else if (!strcmp(name, "epoch-us")) {
        if (parse_u64(v, 1, 10000000, &o->epoch_us))
            return usage_error("--epoch-us %s: microseconds 1..10000000", v);
    } else if (!strcmp(name, "log-channels")) {
        uint64_t x;
        if (parse_u64(v, 0, 1024, &x))
            return usage_error("--log-channels %s: a count 0..1024", v);
        o->log_channels = (int64_t)x;
    } else if (!strcmp(name, "requirepass")) {
        if (!v[0] || strlen(v) > 4096)
            return usage_error("--requirepass: the password must have 1 to 4096 bytes");
        free(o->requirepass);
        o->requirepass = strdup(v);
        o->requirepass_len = strlen(v);
    } else if (!strcmp(name, "requirepass-file")) {
        free(o->requirepass);
        o->requirepass = NULL;
        if (kv_read_password_file(v, &o->requirepass, &o->requirepass_len))
            return EXIT_USAGE; /* the reason is on stderr */
    } else if (!strcmp(name, "protected-mode")) {
        if (strcmp(v, "yes") && strcmp(v, "no"))
            return usage_error("--protected-mode %s: yes or no", v);
        o->protected_mode = !strcmp(v, "yes");
    } else {
        return usage_error("unknown option '%s'", name);
    }
    return 0;
}

/* --config FILE: lines "name value"; '#' starts a comment. */
static int read_config(struct kv_options *o, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return usage_error("--config %s: %s", path, strerror(errno));
    char line[4096];
    int rc = 0, n = 0;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        n++;
        char *p = line + strspn(line, " \t"), *name = strtok(p, " \t\r\n");
        if (!name || name[0] == '#')
            continue;
        char *value = strtok(NULL, "\r\n");
        if (!value)
            rc = usage_error("%s:%d: '%s' has no value", path, n, name);
        else if (!strcmp(name, "quiet"))
            o->quiet = !strcmp(value, "yes");
        else
            rc = set_option(o, name, value + strspn(value, " \t"));
    }
    fclose(f);
    return rc;
}

static void options_default(struct kv_options *o)
{
    *o = (struct kv_options){
        .bind = "127.0.0.1", .port = 6379, .durability = (enum kv_durability) - 1, .maxclients = 10000,
        .max_bulk = RESP_MAX_BULK_DEFAULT, .max_args = RESP_MAX_ARGS_DEFAULT, .query_limit = 1ull << 30,
        .output_limit = 1ull << 30, .send_timeout_ms = 60000, .checkpoint_bytes = 64ull << 20,
        .log_channels = -1, .protected_mode = true,
    };
}

/* 0 to go on, 1 to exit 0 (--help, --version), else the exit code. */
static int parse_args(int argc, char **argv, struct kv_options *o)
{
    static const struct option longopts[] = {
        {"port", 1, 0, 0}, {"bind", 1, 0, 0}, {"unixsocket", 1, 0, 0}, {"workers", 1, 0, 0}, {"dir", 1, 0, 0},
        {"durability", 1, 0, 0}, {"maxmemory", 1, 0, 0}, {"maxclients", 1, 0, 0}, {"proto-max-bulk-len", 1, 0, 0},
        {"max-args", 1, 0, 0}, {"client-query-buffer-limit", 1, 0, 0}, {"client-output-limit", 1, 0, 0},
        {"send-timeout-ms", 1, 0, 0}, {"checkpoint-mb", 1, 0, 0}, {"epoch-us", 1, 0, 0}, {"log-channels", 1, 0, 0},
        {"requirepass", 1, 0, 0}, {"requirepass-file", 1, 0, 0}, {"protected-mode", 1, 0, 0},
        {"config", 1, 0, 'c'},
        {"quiet", 0, 0, 'q'}, {"help", 0, 0, 'h'}, {"version", 0, 0, 'V'}, {0, 0, 0, 0},
    };
    opterr = 0;
    int idx, ch, rc = 0;
    while (rc == 0 && (ch = getopt_long(argc, argv, ":hV", longopts, &idx)) != -1) {
        if (ch == 'h') { usage(stdout); return 1; }
        if (ch == 'V') { printf("urt-kv %s\n", KV_VERSION); return 1; }
        if (ch == 'q') o->quiet = true;
        else if (ch == 'c') rc = read_config(o, optarg);
        else if (ch == 0) rc = set_option(o, longopts[idx].name, optarg);
        else if (ch == ':') return usage_error("%s needs a value", argv[optind - 1]);
        else return usage_error("unknown option '%s'", argv[optind - 1]);
    }
    if (rc == 0 && optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (rc == 0 && (int)o->durability == -1)
        o->durability = o->dir ? KV_DUR_STORED : KV_DUR_NONE;
    if (rc == 0 && o->durability != KV_DUR_NONE && !o->dir)
        return usage_error("--durability %s needs --dir", o->durability == KV_DUR_STORED ? "stored" : "available");
    if (rc == 0 && o->durability == KV_DUR_NONE && o->dir)
        return usage_error("--durability none keeps nothing on disk: drop --dir %s", o->dir);
    return rc;
}

/* ---- phases ------------------------------------------------------------------------ */

static void raise_fd_limit(uint32_t maxclients)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)maxclients + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int make_dirs(struct kv_server *s)
{
    if (mkdir(s->opt.dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "urt-kv: --dir %s: %s\n", s->opt.dir, strerror(errno));
        return -errno;
    }
    if (snprintf(s->log_dir, sizeof(s->log_dir), "%s/log", s->opt.dir) >= (int)sizeof(s->log_dir))
        return -ENAMETOOLONG;
    if (mkdir(s->log_dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "urt-kv: %s: %s\n", s->log_dir, strerror(errno));
        return -errno;
    }
    return 0;
}

static int start_runtime(struct kv_server *s)
{
    struct urt_config cfg;
    urt_config_init(&cfg);
    /* the commit callback only queues a task on the connection's lane: run it
     * where the response is reached, one task hop fewer per batch
     * (URT_DIRECT_COMMIT_CALLBACK=false in the environment turns it off) */
    cfg.direct_commit_callback = true;
    /* stored: one log channel. The durable marker is global: with a channel
     * per worker a commit waits for every channel's write holding its epoch
     * and then for a write carrying the marker, about two device round trips
     * where one channel needs one (docs/kv.md, "Durable writes and log
     * channels"); the other worker's batches hop to it. available/none wait
     * for no marker: a channel per worker, no hop. (URT_LOG_CHANNELS in the
     * environment or --log-channels decide otherwise.) */
    if (s->opt.durability == KV_DUR_STORED)
        cfg.log_channels = 1;
    /* CPU per request (docs/kv.md "CPU per request"): a server shares its
     * CPUs with its clients, and a worker that spins for the next request
     * or polls for its log write takes the CPU the client needs to send it.
     * A worker suspends after 32 empty polls (the adaptive spin's floor)
     * instead of up to 1000, and waits for its log write suspended (the
     * ring wakes it at the completion) instead of polling: -20 % server CPU
     * per durable SET at -P 1 on 2 vCPUs. (URT_WORKER_TRY_COUNT and
     * URT_LOG_POLL_US in the environment decide otherwise.) */
    cfg.worker_try_count = 32;
    cfg.log_poll_us = 0;
    urt_config_from_env(&cfg);
    if (s->opt.log_channels >= 0)
        cfg.log_channels = (uint32_t)s->opt.log_channels;
    /* stored with one log channel: one worker unless --workers or
     * URT_WORKERS say otherwise. Every durable batch is committed on the
     * channel's worker, so a second worker only adds a hop there and a hop
     * back (a wake message each way when the target sleeps): per durable
     * SET at -P 1 it ran 2.5 tasks, 0.44 suspends and 0.15 wake messages
     * where one worker runs 2, 0.25 and none, and spent more CPU per request
     * (docs/kv.md "CPU per request"). More workers pay off when one core
     * cannot parse and send for all the clients: --workers N. */
    if (s->opt.durability == KV_DUR_STORED && cfg.log_channels == 1 && !getenv("URT_WORKERS"))
        cfg.workers = 1;
    if (s->opt.workers)
        cfg.workers = s->opt.workers;
    if (s->opt.durability != KV_DUR_NONE)
        cfg.log_dir = s->log_dir;
    if (s->opt.epoch_us)
        cfg.epoch_duration_us = s->opt.epoch_us;
    int rc = urt_runtime_create(&cfg, &s->rt);
    if (rc) {
        fprintf(stderr, "urt-kv: urt_runtime_create: %s\n", urt_last_error());
        return rc;
    }
    struct urt_features f;
    urt_runtime_features(s->rt, &f);
    urt_features_describe(&f, s->features, sizeof(s->features));
    return 0;
}

/* Who may connect, for the start line (never the password itself). */
static const char *access_mode(const struct kv_options *o)
{
    if (o->requirepass)
        return "password required";
    return o->protected_mode ? "no password, protected mode: loopback and Unix socket clients only"
                             : "no password, protected mode off: anyone who reaches the port";
}

static void start_line(struct kv_server *s, uint64_t keys, uint64_t snap, uint64_t replayed, uint64_t ms)
{
    if (s->opt.quiet)
        return;
    const char *dur[] = {"none", "available", "stored"};
    char where[512] = "";
    if (s->opt.port > 0 && s->opt.bind && s->opt.bind[0])
        snprintf(where, sizeof(where), "%s:%d", s->opt.bind, s->opt.port);
    if (s->opt.unix_path)
        snprintf(where + strlen(where), sizeof(where) - strlen(where), "%sunix:%s", where[0] ? " " : "",
                 s->opt.unix_path);
    const char *why = "";
    fprintf(stderr,
            "urt-kv %s pid %ld: listening on %s (%s), %u workers, durability %s%s%s, recovered %" PRIu64
            " keys (snapshot %" PRIu64 ", log records %" PRIu64 ") in %" PRIu64 " ms; backend %s (%s); features: %s\n",
            KV_VERSION, (long)getpid(), where, access_mode(&s->opt), urt_runtime_config(s->rt)->workers,
            dur[s->opt.durability], s->opt.dir ? ", dir " : "", s->opt.dir ? s->opt.dir : "", keys, snap, replayed, ms,
            urt_runtime_backend(s->rt, &why) == URT_BACKEND_PORTABLE ? "portable" : "io_uring", why, s->features);
}

/* ---- checkpoints --------------------------------------------------------------------- */

static pthread_mutex_t cp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cp_cond = PTHREAD_COND_INITIALIZER;
static bool cp_stop;

static void *checkpoint_thread(void *arg)
{
    struct kv_server *s = arg;
    uint64_t base = 0;
    pthread_mutex_lock(&cp_lock);
    while (!cp_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cp_cond, &cp_lock, &ts);
        struct urt_log_stats ls;
        if (cp_stop || urt_log_stats(s->rt, &ls) || ls.bytes - base < s->opt.checkpoint_bytes)
            continue;
        pthread_mutex_unlock(&cp_lock);
        if (kv_checkpoint(s) == 0)
            base = ls.bytes;
        pthread_mutex_lock(&cp_lock);
    }
    pthread_mutex_unlock(&cp_lock);
    return NULL;
}

int main(int argc, char **argv)
{
    static struct kv_server srv; /* large (the shards): not on the stack */
    struct kv_server *s = &srv;
    options_default(&s->opt);
    int rc = parse_args(argc, argv, &s->opt);
    if (rc)
        return rc == 1 ? 0 : rc;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* every thread inherits it; main takes them */
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(s->opt.maxclients);
    uint64_t t0 = urt_now_ns(), replayed = 0, snap = 0;
    if (kv_table_init(&s->table, kv_arm_expiry, s) || kv_listen(s))
        return 1;
    if (s->opt.dir && (make_dirs(s) || kv_recover(s, &replayed, &snap)))
        return 1;
    if (start_runtime(s))
        return 1;
    s->start_ns = urt_now_ns();
    kv_recovery_end(&s->table, kv_now_ms());
    if (kv_server_start(s)) {
        fprintf(stderr, "urt-kv: starting the listeners: %s\n", urt_last_error());
        return 1;
    }
    start_line(s, kv_count(&s->table), snap, replayed, (urt_now_ns() - t0) / 1000000u);
    pthread_t cp;
    bool cp_on = s->opt.durability != KV_DUR_NONE && s->opt.checkpoint_bytes > 0 &&
                 pthread_create(&cp, NULL, checkpoint_thread, s) == 0;
    int sig;
    sigwait(&sigs, &sig);
    if (cp_on) {
        pthread_mutex_lock(&cp_lock);
        cp_stop = true;
        pthread_cond_signal(&cp_cond);
        pthread_mutex_unlock(&cp_lock);
        pthread_join(cp, NULL);
    }
    kv_server_stop(s);
    if (s->opt.unix_path)
        unlink(s->opt.unix_path);
    kv_table_destroy(&s->table);
    return 0;
}
