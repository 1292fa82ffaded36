/*
 * tools/urt-kv/persist.c — what urt-kv writes to disk and how it comes back.
 *
 * Layout of the data directory (--dir DIR):
 *   DIR/log/       urt's write-ahead log (urt/log.h): one channel per worker
 *   DIR/snapshot   the table as of a checkpoint (written to snapshot.tmp,
 *                  fsync'd, renamed, directory fsync'd)
 *
 * Log records: record.c (one record per batch of a connection's writes).
 *
 * Snapshot and checkpoint (fuzzy, like ARIES's fuzzy checkpoint, Mohan et al.
 * 1992, made exact by the versions): read the durable marker C first — every
 * record of an epoch <= C was appended, hence applied to the table (a write
 * is applied before its commit), before the scan starts. Then each shard is
 * copied under its lock, noting S_s, the shard's next version at that moment:
 * the copy holds the effect of every write of that shard with a version
 * < S_s and none of the others. Recovery loads the snapshot, sets each
 * shard's floor to S_s, and replays the log's records of epochs > C,
 * ignoring operations below the floor. Then urt_log_checkpoint(C) lets urt
 * delete the closed segments at or below C: the log stays bounded by the
 * checkpoint interval (--checkpoint-mb).
 *
 * Snapshot file: header "URTKVSN1", u32 shards, u32 0, u64 C, u64 entries,
 * u64 S[shards]; entries (u32 klen, u32 vlen, u64 version, i64 expire_ms,
 * key, value); trailer "URTKVEND", u32 CRC32C (Castagnoli) of the header,
 * u32 CRC32C of the entries. A snapshot whose trailer does not check is refused (urt-kv does
 * not start: it never replaces data it cannot read).
 *
 * Threading: recovery runs before the runtime starts (one thread); the
 * checkpoint runs on its own thread (it blocks on fsyncs), never on a worker;
 * the table does its own locking.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv.h"

#define SNAP_MAGIC "URTKVSN1"
#define SNAP_END "URTKVEND"
#define SNAP_ENTRY_HDR 24u

/* ---- CRC32C, table-driven (the Castagnoli polynomial, reflected 0x82f63b78) ---- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32c(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = data;
    pthread_once(&crc_once, crc_init);
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- snapshot: load ------------------------------------------------------------- */

static int path_in(char *out, size_t n, const char *dir, const char *name)
{
    return snprintf(out, n, "%s/%s", dir, name) < (int)n ? 0 : -ENAMETOOLONG;
}

static int read_file(const char *path, char **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = fstat(fd, &st) ? -errno : 0;
    char *p = rc ? NULL : malloc((size_t)st.st_size + 1);
    if (!rc && !p)
        rc = -ENOMEM;
    size_t got = 0;
    while (!rc && got < (size_t)st.st_size) {
        ssize_t r = read(fd, p + got, (size_t)st.st_size - got);
        if (r <= 0)
            rc = r < 0 ? -errno : -EIO;
        else
            got += (size_t)r;
    }
    close(fd);
    if (rc) {
        free(p);
        return rc;
    }
    *data = p;
    *len = got;
    return 0;
}

struct snap_head {
    uint64_t marker, entries;
    uint64_t floor[KV_SHARDS];
};

static int snapshot_parse(struct kv_table *t, const char *p, size_t n, struct snap_head *h)
{
    size_t head = 32 + 8 * KV_SHARDS, tail = 16;
    uint32_t shards, crc_head, crc_body;
    if (n < head + tail || memcmp(p, SNAP_MAGIC, 8) || memcmp(p + n - tail, SNAP_END, 8))
        return -EINVAL;
    memcpy(&crc_head, p + n - 8, 4);
    memcpy(&crc_body, p + n - 4, 4);
    if (crc32c(0, p, head) != crc_head || crc32c(0, p + head, n - tail - head) != crc_body)
        return -EINVAL;
    memcpy(&shards, p + 8, 4);
    if (shards != KV_SHARDS)
        return -EINVAL;
    memcpy(&h->marker, p + 16, 8);
    memcpy(&h->entries, p + 24, 8);
    memcpy(h->floor, p + 32, sizeof(h->floor));
    size_t off = head;
    for (uint64_t i = 0; i < h->entries; i++) {
        uint32_t klen, vlen;
        uint64_t version;
        int64_t expire;
        if (n - tail - off < SNAP_ENTRY_HDR)
            return -EINVAL;
        memcpy(&klen, p + off, 4);
        memcpy(&vlen, p + off + 4, 4);
        memcpy(&version, p + off + 8, 8);
        memcpy(&expire, p + off + 16, 8);
        off += SNAP_ENTRY_HDR;
        if ((uint64_t)klen + vlen > n - tail - off)
            return -EINVAL;
        kv_apply_set(t, p + off, klen, p + off + klen, vlen, expire, version);
        off += (size_t)klen + vlen;
    }
    return off == n - tail ? 0 : -EINVAL;
}

/* Loads DIR/snapshot if there is one: *marker is its checkpoint (0: none). */
static int snapshot_load(struct kv_server *s, uint64_t *marker, uint64_t *keys)
{
    char path[4200];
    char *data = NULL;
    size_t len = 0;
    *marker = 0;
    *keys = 0;
    if (path_in(path, sizeof(path), s->opt.dir, "snapshot"))
        return -ENAMETOOLONG;
    int rc = read_file(path, &data, &len);
    if (rc == -ENOENT)
        return 0;
    if (rc) {
        fprintf(stderr, "urt-kv: cannot read %s: %s\n", path, strerror(-rc));
        return rc;
    }
    struct snap_head *h = calloc(1, sizeof(*h));
    rc = h ? snapshot_parse(&s->table, data, len, h) : -ENOMEM;
    if (rc == 0) {
        for (uint32_t i = 0; i < KV_SHARDS; i++) {
            struct kv_shard *sh = &s->table.shards[i];
            if (h->floor[i] > sh->floor)
                sh->floor = h->floor[i];
            if (h->floor[i] > sh->next_version)
                sh->next_version = h->floor[i];
        }
        *marker = h->marker;
        *keys = h->entries;
    } else {
        fprintf(stderr, "urt-kv: %s is damaged (%s): refusing to start on it\n", path, strerror(-rc));
    }
    free(h);
    free(data);
    return rc;
}

/* ---- recovery ------------------------------------------------------------------- */

struct replay {
    struct kv_table *t;
    uint64_t above;     /* the snapshot's marker: records at or below are in it */
    uint64_t records, bad;
};

static int on_record(void *arg, const struct urt_log_record *r)
{
    struct replay *rp = arg;
    if (r->epoch <= rp->above)
        return 0;
    if (rec_replay(rp->t, r->payload, r->len))
        rp->bad++;
    rp->records++;
    return 0;
}

int kv_recover(struct kv_server *s, uint64_t *replayed, uint64_t *snapshot_keys)
{
    *replayed = 0;
    *snapshot_keys = 0;
    s->table.recovering = true;
    uint64_t marker;
    int rc = snapshot_load(s, &marker, snapshot_keys);
    if (rc)
        return rc;
    struct replay rp = {.t = &s->table, .above = marker};
    struct urt_log_recover_ops ops = {.record = on_record};
    struct urt_log_recovery out;
    rc = urt_log_recover(s->log_dir, 0, &ops, &rp, &out);
    if (rc == -ENOENT)
        rc = 0; /* a new directory */
    if (rc) {
        fprintf(stderr, "urt-kv: recovering %s: %s\n", s->log_dir, urt_last_error());
        return rc;
    }
    if (rp.bad)
        fprintf(stderr, "urt-kv: %" PRIu64 " log records did not parse (skipped)\n", rp.bad);
    *replayed = rp.records;
    return 0;
}

/* ---- snapshot: write, then checkpoint ---------------------------------------------- */

struct snap_out {
    struct kv_buf buf;
    uint32_t crc;
    uint64_t entries;
    int fd;
};

static int visit_entry(void *arg, const struct kv_entry *e)
{
    struct snap_out *o = arg;
    uint32_t klen = e->klen, vlen = e->vlen;
    char h[SNAP_ENTRY_HDR];
    memcpy(h, &klen, 4);
    memcpy(h + 4, &vlen, 4);
    memcpy(h + 8, &e->version, 8);
    memcpy(h + 16, &e->expire_ms, 8);
    if (buf_put(&o->buf, h, sizeof(h)) || buf_put(&o->buf, e->data, (size_t)klen + vlen))
        return -ENOMEM;
    o->entries++;
    return 0;
}

static int write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes the entries shard by shard (each copied under its lock, written
 * outside it), noting each shard's floor. */
static int snapshot_body(struct kv_server *s, struct snap_out *o, uint64_t floor[KV_SHARDS])
{
    for (uint32_t i = 0; i < KV_SHARDS; i++) {
        o->buf.len = 0;
        int rc = kv_shard_visit(&s->table, i, visit_entry, o, &floor[i]);
        if (rc == 0)
            rc = write_all(o->fd, o->buf.p, o->buf.len);
        if (rc)
            return rc;
        o->crc = crc32c(o->crc, o->buf.p, o->buf.len);
    }
    return 0;
}

static int snapshot_write(struct kv_server *s, const char *tmp, uint64_t marker)
{
    size_t head_len = 32 + 8 * KV_SHARDS;
    char *head = calloc(1, head_len);
    uint64_t *floor = calloc(KV_SHARDS, sizeof(uint64_t));
    struct snap_out o = {.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    int rc = !head || !floor ? -ENOMEM : o.fd < 0 ? -errno : 0;
    if (rc == 0 && lseek(o.fd, (off_t)head_len, SEEK_SET) < 0)
        rc = -errno;
    if (rc == 0)
        rc = snapshot_body(s, &o, floor);
    if (rc == 0) { /* the header last: it holds the floors and the count */
        uint32_t shards = KV_SHARDS;
        memcpy(head, SNAP_MAGIC, 8);
        memcpy(head + 8, &shards, 4);
        memcpy(head + 16, &marker, 8);
        memcpy(head + 24, &o.entries, 8);
        memcpy(head + 32, floor, 8 * KV_SHARDS);
        uint32_t crc_head = crc32c(0, head, head_len);
        char tail[16];
        memcpy(tail, SNAP_END, 8);
        memcpy(tail + 8, &crc_head, 4);
        memcpy(tail + 12, &o.crc, 4);
        rc = write_all(o.fd, tail, sizeof(tail));
        if (rc == 0)
            rc = pwrite(o.fd, head, head_len, 0) == (ssize_t)head_len ? 0 : -EIO;
    }
    if (rc == 0 && fsync(o.fd))
        rc = -errno;
    if (o.fd >= 0)
        close(o.fd);
    buf_free(&o.buf);
    free(head);
    free(floor);
    return rc;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

int kv_checkpoint(struct kv_server *s)
{
    struct urt_log_stats ls;
    if (!s->opt.dir || urt_log_stats(s->rt, &ls))
        return -ENOTSUP;
    uint64_t marker = ls.durable; /* read before the scan: see the file comment */
    char tmp[4200], path[4200];
    if (path_in(tmp, sizeof(tmp), s->opt.dir, "snapshot.tmp") || path_in(path, sizeof(path), s->opt.dir, "snapshot"))
        return -ENAMETOOLONG;
    int rc = snapshot_write(s, tmp, marker);
    if (rc == 0 && rename(tmp, path))
        rc = -errno;
    if (rc == 0)
        rc = fsync_dir(s->opt.dir);
    if (rc == 0 && marker > 0) {
        int del = urt_log_checkpoint(s->rt, marker);
        rc = del < 0 ? del : 0;
    }
    if (rc == 0) {
        atomic_fetch_add_explicit(&s->checkpoints, 1, memory_order_relaxed);
        atomic_store_explicit(&s->last_checkpoint, marker, memory_order_relaxed);
    } else {
        fprintf(stderr, "urt-kv: checkpoint failed: %s\n", strerror(-rc));
    }
    return rc;
}
