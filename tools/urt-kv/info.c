/*
 * tools/urt-kv/info.c — the INFO command's text: Redis's sections (server,
 * clients, memory, persistence, stats, keyspace) with the fields clients
 * and dashboards read, plus a section "urt" with the runtime's own
 * statistics (urt/stats.h: workers, tasks run, steals, suspensions, I/O
 * submissions, commit latencies) and the log's (urt/log.h).
 *
 * Reads relaxed counters and a statistics snapshot: a consistent-enough view,
 * not a cut. Any worker (runs on the asking connection's lane).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kv.h"

static int addf(struct kv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int addf(struct kv_buf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    return buf_put(b, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static uint64_t ld(_Atomic uint64_t *x)
{
    return atomic_load_explicit(x, memory_order_relaxed);
}

static const char *durability_name(enum kv_durability d)
{
    return d == KV_DUR_STORED ? "stored" : d == KV_DUR_AVAILABLE ? "available" : "none";
}

static void info_server(struct kv_server *s, struct kv_buf *b)
{
    uint64_t up = (urt_now_ns() - s->start_ns) / 1000000000u;
    addf(b, "# Server\r\nredis_version:7.0.0\r\nurt_kv_version:%s\r\nredis_mode:standalone\r\n", KV_VERSION);
    addf(b, "process_id:%ld\r\ntcp_port:%d\r\nuptime_in_seconds:%" PRIu64 "\r\n", (long)getpid(), s->opt.port, up);
    addf(b, "urt_features:%s\r\n\r\n", s->features); /* begins with backend=io_uring or backend=portable */
}

static void info_clients(struct kv_server *s, struct kv_buf *b)
{
    addf(b, "# Clients\r\nconnected_clients:%" PRIu64 "\r\nmaxclients:%u\r\n", ld(&s->connections),
         s->opt.maxclients);
    /* urt-kv's own: where the connections' lanes are (the worker with the
     * fewest takes the next connection) */
    if (s->lanes) {
        addf(b, "connected_clients_per_worker:");
        for (uint32_t w = 0; w < s->n_lanes; w++)
            addf(b, "%s%u", w ? "," : "", atomic_load_explicit(&s->lanes[w].live, memory_order_relaxed));
        addf(b, "\r\n");
    }
    addf(b, "\r\n");
}

static void info_memory(struct kv_server *s, struct kv_buf *b)
{
    int64_t mem = atomic_load_explicit(&s->table.mem, memory_order_relaxed);
    addf(b, "# Memory\r\nused_memory:%" PRId64 "\r\nmaxmemory:%" PRIu64 "\r\n\r\n", mem, s->opt.maxmemory);
}

static const char *log_sync_name(uint32_t mode)
{
    switch (mode) {
    case URT_LOG_SYNC_SINGLE_WRITE:
        return "single_write";
    case URT_LOG_SYNC_SINGLE_FLUSH:
        return "single_flush";
    default:
        return "strict";
    }
}

/* The log's counters: how many writes (log_flushes) and device flushes
 * (log_fsyncs) its commits cost, and how the durable marker got to disk
 * (log_claims: riding in a log write; log_epoch_writes: an epoch-file write
 * of its own; docs/durability.md). */
static void info_log(struct kv_server *s, struct kv_buf *b)
{
    struct urt_log_stats ls;
    if (s->opt.durability == KV_DUR_NONE || urt_log_stats(s->rt, &ls))
        return;
    addf(b, "log_commits:%" PRIu64 "\r\nlog_fsyncs:%" PRIu64 "\r\nlog_flushes:%" PRIu64 "\r\nlog_bytes:%" PRIu64
         "\r\nlog_io_errors:%" PRIu64 "\r\n",
         ls.commits, ls.fsyncs, ls.flushes, ls.bytes, ls.io_errors);
    addf(b, "log_epoch:%" PRIu64 "\r\nlog_durable_marker:%" PRIu64 "\r\nlog_claims:%" PRIu64
         "\r\nlog_epoch_writes:%" PRIu64 "\r\nlog_sync_mode:%s\r\nlog_fs:%s\r\n",
         ls.epoch, ls.durable, ls.claims, ls.epoch_writes, log_sync_name(ls.sync_mode), ls.fs);
}

static void info_persistence(struct kv_server *s, struct kv_buf *b)
{
    addf(b, "# Persistence\r\naof_enabled:%d\r\nurt_durability:%s\r\n", s->opt.durability != KV_DUR_NONE,
         durability_name(s->opt.durability));
    addf(b, "log_failed:%d\r\ncheckpoints:%" PRIu64 "\r\nlast_checkpoint_marker:%" PRIu64 "\r\n",
         atomic_load_explicit(&s->log_failed, memory_order_relaxed), ld(&s->checkpoints), ld(&s->last_checkpoint));
    info_log(s, b);
    addf(b, "\r\n");
}

static void info_stats(struct kv_server *s, struct kv_buf *b)
{
    addf(b, "# Stats\r\ntotal_connections_received:%" PRIu64 "\r\ntotal_commands_processed:%" PRIu64 "\r\n",
         ld(&s->total_connections), ld(&s->commands));
    addf(b, "rejected_connections:%" PRIu64 "\r\nexpired_keys:%" PRIu64 "\r\nprotocol_errors:%" PRIu64 "\r\n",
         ld(&s->rejected_connections), ld(&s->table.expired), ld(&s->protocol_errors));
    addf(b, "client_output_limit_disconnections:%" PRIu64 "\r\n\r\n", ld(&s->output_disconnects));
}

static void latency_line(struct kv_buf *b, const char *name, const struct urt_latency *l)
{
    addf(b, "%s:count=%" PRIu64 ",p50_us=%.1f,p99_us=%.1f,max_us=%.1f\r\n", name, l->count, l->p50_ns / 1e3,
         l->p99_ns / 1e3, l->max_ns / 1e3);
}

static void info_urt(struct kv_server *s, struct kv_buf *b)
{
    struct urt_stats *st = urt_stats_snapshot(s->rt);
    if (!st)
        return;
    const struct urt_worker_stats *t = &st->total;
    addf(b, "# urt\r\nworkers:%u\r\ntasks_run:%" PRIu64 "\r\ntasks_stolen:%" PRIu64 "\r\nsteal_attempts:%" PRIu64
         "\r\n", st->n_workers, t->tasks_run, t->tasks_stolen, t->steal_attempts);
    addf(b, "suspends:%" PRIu64 "\r\nwakes_sent:%" PRIu64 "\r\nio_submitted:%" PRIu64 "\r\nsticky_runs:%" PRIu64
         "\r\n", t->suspends, t->wakes_sent, t->io_submitted, t->sticky_runs);
    for (uint32_t w = 0; w < st->n_workers; w++)
        addf(b, "worker%u:tasks_run=%" PRIu64 ",stolen=%" PRIu64 ",suspends=%" PRIu64 ",sleeping=%d\r\n", w,
             st->workers[w].tasks_run, st->workers[w].tasks_stolen, st->workers[w].suspends,
             st->workers[w].sleeping);
    addf(b, "latency_timing:%d\r\n", st->timing); /* 0: the latency lines stay empty (URT_STATS_TIMING=true) */
    latency_line(b, "commit_available_latency", &t->latency[URT_LAT_COMMIT_AVAILABLE]);
    latency_line(b, "commit_stored_latency", &t->latency[URT_LAT_COMMIT_STORED]);
    latency_line(b, "task_queue_latency", &t->latency[URT_LAT_QUEUE]);
    addf(b, "\r\n");
    urt_stats_free(st);
}

static void info_keyspace(struct kv_server *s, struct kv_buf *b)
{
    uint64_t keys = kv_count(&s->table);
    addf(b, "# Keyspace\r\n");
    if (keys)
        addf(b, "db0:keys=%" PRIu64 ",expires=%" PRIu64 ",avg_ttl=0\r\n", keys, kv_count_expires(&s->table));
    addf(b, "\r\n");
}

int kv_info(struct kv_server *s, const char *section, struct kv_buf *out)
{
    static const struct {
        const char *name;
        void (*fn)(struct kv_server *, struct kv_buf *);
    } sections[] = {
        {"server", info_server},         {"clients", info_clients}, {"memory", info_memory},
        {"persistence", info_persistence}, {"stats", info_stats},   {"urt", info_urt},
        {"keyspace", info_keyspace},
    };
    bool all = !section[0] || !strcasecmp(section, "all") || !strcasecmp(section, "default") ||
               !strcasecmp(section, "everything");
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
        if (all || !strcasecmp(section, sections[i].name))
            sections[i].fn(s, out);
    if (out->len >= 2)
        out->len -= 2; /* Redis ends without the last blank line */
    return out->p || out->len == 0 ? 0 : -ENOMEM;
}
