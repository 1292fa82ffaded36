/*
 * tools/urt-kv/kv.h — what the parts of urt-kv share: the server's settings
 * and state (struct kv_server), a connection's command context (struct
 * kv_ctx), and the entry points of each part.
 *
 *   resp.c     the RESP2 parser and reply encoders
 *   table.c    the striped hash table with versions and expiry heaps
 *   cmd.c      the command table: each command on the table, its reply, and
 *              its log operations
 *   persist.c  the log record format, recovery (snapshot + log replay) and
 *              checkpoints (snapshot, then urt_log_checkpoint)
 *   conn.c     a connection on its worker's ring (urt/io.h): multishot
 *              receive into the worker's buffer ring, a lane per
 *              connection, batches, commits, sends, limits
 *   server.c   listeners (multishot accept), expiry timers, start and stop
 *   auth.c     the password (AUTH, constant-time comparison) and protected
 *              mode (Redis's rules and texts)
 *   main.c     options, the runtime, the start log line, signals
 *
 * Threading: the server struct is written by main before the runtime starts
 * and read by every worker after; its counters are relaxed atomics
 * (statistics); `log_failed` is a flag read relaxed (a write after a failed
 * commit is refused, see server.c).
 */
#ifndef URT_KV_H
#define URT_KV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urt/urt.h>

#include "resp.h"
#include "table.h"

#define KV_VERSION "0.1.0"

enum kv_durability {
    KV_DUR_NONE = 0,      /* no log */
    KV_DUR_AVAILABLE = 1, /* answered once logged (URT_COMMIT_AVAILABLE): like appendfsync everysec */
    KV_DUR_STORED = 2,    /* answered once durable (URT_COMMIT_STORED): like appendfsync always */
};

struct kv_options {
    const char *bind;           /* TCP address (default 127.0.0.1), "" or NULL: no TCP */
    int port;                   /* default 6379; 0: no TCP */
    const char *unix_path;      /* Unix socket path, NULL: none */
    uint32_t workers;           /* 0: the runtime's default (online CPUs) */
    const char *dir;            /* data directory (log/ and snapshot), NULL: none */
    enum kv_durability durability;
    uint64_t maxmemory;         /* bytes, 0: no limit */
    uint32_t maxclients;        /* default 10000 */
    uint64_t max_bulk;          /* proto-max-bulk-len, default 512 MB */
    uint32_t max_args;          /* default 1024 * 1024 */
    uint64_t query_limit;       /* client-query-buffer-limit, default 1 GB */
    uint64_t output_limit;      /* replies of one batch, default 1 GB: then disconnect */
    uint64_t send_timeout_ms;   /* a reply not taken by the client in this time: disconnect (60000) */
    uint64_t checkpoint_bytes;  /* snapshot + checkpoint after this many log bytes (64 MB), 0: never */
    uint64_t epoch_us;          /* the log's epoch (group commit) period, 0: the runtime's default */
    int64_t log_channels;       /* urt's log_channels; -1: 1 with stored, one per worker otherwise */
    char *requirepass;          /* the default user's password (AUTH), NULL: none; never printed */
    size_t requirepass_len;
    bool protected_mode;        /* no password: refuse clients that are not on loopback or the Unix socket */
    bool quiet;
};

/* Per worker: the connections placed there and the lanes (pinned to it) of
 * closed ones, for reuse (conn.c placement). */
struct kv_worker_lanes {
    urt_lane **free;
    size_t n_free, cap;
    _Atomic uint32_t live; /* connections on this worker: written under lanes_lock, read relaxed by INFO */
};

struct kv_server {
    struct kv_options opt;
    urt_runtime *rt;
    struct kv_table table;
    uint64_t start_ns;
    char log_dir[4096];         /* dir/log: urt's log directory */
    char features[256];         /* urt_features_describe: the backend and what it found (start line, INFO) */
    _Atomic uint64_t connections, total_connections, rejected_connections;
    _Atomic uint64_t commands, protocol_errors, output_disconnects, commits;
    _Atomic uint64_t expired_keys;
    _Atomic int log_failed;     /* a commit failed: writes are refused (MISCONF) */
    _Atomic uint64_t checkpoints, last_checkpoint;
    _Atomic int stopping;
    uint32_t n_listeners;
    int listen_fds[2];
    bool listen_tcp[2];
    struct listener *listeners[2];
    struct urt_bufring **rings; /* per worker, created by its first connection (conn.c) */
    struct kv_worker_lanes *lanes; /* per worker (conn.c placement) */
    uint32_t n_lanes;              /* the workers: lanes[0..n_lanes) */
    pthread_mutex_t lanes_lock;    /* lanes[*] lists and counts, next_worker: once per connect and close */
    uint32_t next_worker;          /* round robin among the least loaded */
};

/* A connection's execution context for one command. */
struct kv_ctx {
    struct kv_server *srv;
    struct kv_buf *out;         /* replies */
    struct kv_buf *rec;         /* log operations of the current batch; NULL: no log */
    char **name;                /* CLIENT SETNAME (malloc'd, owned by the connection) */
    uint64_t id;                /* connection id */
    uint64_t commands;          /* run and not yet added to srv->commands (kv_ctx_count) */
    bool *authenticated;        /* the connection's: AUTH passed, or no password is set */
    bool close_after;           /* QUIT: send the replies, then close */
    int64_t now_ms;             /* the batch's clock (kv_ctx_now), 0: not read yet */
};

/* The time the batch's commands see (CLOCK_REALTIME in ms), read once per
 * batch: the commands of one pipeline run as at one instant, as Redis runs a
 * command (and a script) on one cached clock. At -P 16 a read per command
 * was 3 % of urt-kv's CPU. */
static inline int64_t kv_ctx_now(struct kv_ctx *c)
{
    if (!c->now_ms)
        c->now_ms = kv_now_ms();
    return c->now_ms;
}

/* cmd.c: runs one request (argv offsets into buf). 0, or -ENOMEM when a
 * reply could not be built (the connection is closed). */
int kv_exec(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc);
/* Adds the commands c ran to the server's count: once per batch (conn.c), not
 * a shared write per command; INFO adds its batch's earlier ones first. */
void kv_ctx_count(struct kv_ctx *c);

/* persist.c: log operations appended to a batch record. */
#define KV_REC_LIMIT (16u * 1024 * 1024 - 4096) /* urt_log_commit takes <= 16 MiB */
#define KV_OP_HDR 32u
int rec_set(struct kv_buf *rec, const char *key, size_t klen, const char *val, size_t vlen, int64_t expire_ms,
            uint64_t version);
int rec_del(struct kv_buf *rec, const char *key, size_t klen, uint64_t version);
int rec_flush(struct kv_buf *rec, const uint64_t versions[KV_SHARDS]);
/* Applies every operation of one record to the table (recovery). -EINVAL
 * for a malformed record (nothing after the bad operation is applied). */
int rec_replay(struct kv_table *t, const void *rec, size_t len);

/* Recovery before the runtime starts: the snapshot, then the log above it.
 * Fills *replayed. 0 or -errno with a message on stderr. */
int kv_recover(struct kv_server *s, uint64_t *replayed, uint64_t *snapshot_keys);
/* Writes a snapshot covering every record up to the durable marker, then
 * checkpoints the log there. Not from a worker (blocks). 0 or -errno. */
int kv_checkpoint(struct kv_server *s);

/* server.c: the listening sockets (before the runtime starts: -errno with a
 * message on stderr), then the listeners on the workers. */
int kv_listen(struct kv_server *s);
int kv_server_start(struct kv_server *s);
void kv_server_stop(struct kv_server *s);

/* conn.c: a new connection (from a listener's accept); after the runtime is
 * destroyed, the recycled lanes. */
void kv_conn_new(struct kv_server *s, int fd, bool tcp);
/* After the runtime is destroyed: destroys the recycled lanes, frees the
 * per-worker placement state. */
void kv_conns_destroy(struct kv_server *s);
/* The expiry hook of the table (urt_spawn_at on the runtime). */
void kv_arm_expiry(void *arg, uint32_t shard, int64_t due_ms);

/* auth.c: the password and protected mode. */
/* True when a password of len bytes is the configured one: the time taken
 * depends on the configured password's length only, never on where the
 * given one differs (nor on its length). */
bool kv_password_matches(const struct kv_server *s, const char *given, size_t len);
/* AUTH [username] password: the reply (OK, WRONGPASS, or Redis's error
 * without a configured password); sets *c->authenticated. */
int kv_auth(struct kv_ctx *c, const char *buf, const struct resp_arg *argv, uint32_t argc);
/* Protected mode's check of a new connection (before any byte is read):
 * true when it must be refused with Redis's DENIED text (no password, a TCP
 * client that is not on a loopback address). */
bool kv_protected_refuses(const struct kv_server *s, int fd, bool tcp);
/* Redis's DENIED reply (the whole line, with \r\n). */
extern const char kv_denied_reply[];
/* --requirepass-file FILE: the first line of FILE (without its line end).
 * 0, or -errno with a message on stderr (a missing file, an empty one, a
 * file others may read: refused). */
int kv_read_password_file(const char *path, char **out, size_t *len);

/* The Redis INFO text (cmd.c). */
int kv_info(struct kv_server *s, const char *section, struct kv_buf *out);

#endif
