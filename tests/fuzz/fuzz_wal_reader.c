/*
 * tests/fuzz/fuzz_wal_reader.c — libFuzzer target for the log record reader
 * (tx/wal_format.c: wal_scan, wal_epoch_slot_valid), the code that reads
 * whatever a crash or bit rot left on disk.
 *
 * Two modes, chosen by the first input byte:
 *   raw        — the rest of the input is a channel file: scan it. Must not
 *                read out of bounds (ASan) nor crash; every record reported
 *                must lie inside the buffer, with epochs non-decreasing and
 *                lsns increasing.
 *   structured — the input is cut into payloads of a valid channel file
 *                (header + records with correct CRCs), then damaged at a few
 *                offsets taken from the input (flip, or truncation). The scan
 *                must report every record that lies wholly before the first
 *                damaged byte, and nothing beyond the buffer. Without this
 *                mode the fuzzer would rarely get past the checksum.
 * Violations call __builtin_trap() (libFuzzer reports a crash).
 *
 * Built with clang -fsanitize=fuzzer,address when clang is available
 * (tests/meson.build) and run for a few seconds as a test.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tx/wal_format.h"

struct check {
    const uint8_t *buf;
    size_t n;
    uint64_t last_epoch, last_lsn, count;
};

static int on_rec(void *arg, const struct wal_rec *r)
{
    struct check *c = arg;
    if (r->off + wal_rec_size(r->len) > c->n || r->payload < c->buf || r->payload + r->len > c->buf + c->n)
        __builtin_trap();
    if (r->epoch < c->last_epoch || r->lsn <= c->last_lsn)
        __builtin_trap();
    volatile uint8_t sink = 0;
    for (uint32_t i = 0; i < r->len; i++)
        sink ^= r->payload[i];
    (void)sink;
    c->last_epoch = r->epoch;
    c->last_lsn = r->lsn;
    c->count++;
    return 0;
}

static void scan_checked(const uint8_t *buf, size_t n, struct wal_scan_result *res, struct check *c)
{
    memset(c, 0, sizeof(*c));
    c->buf = buf;
    c->n = n;
    wal_scan(buf, n, on_rec, c, res);
    if (res->valid_end > n)
        __builtin_trap();
    struct wal_epoch_slot m;
    if (n >= EPOCH_SLOT_SIZE)
        (void)wal_epoch_slot_valid(buf, &m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct wal_scan_result res;
    struct check c;
    if ((data[0] & 1) == 0) {
        uint8_t *copy = malloc(size - 1 ? size - 1 : 1); /* exact size: ASan sees overreads */
        memcpy(copy, data + 1, size - 1);
        scan_checked(copy, size - 1, &res, &c);
        free(copy);
        return 0;
    }
    /* structured: payload lengths from the input, then damage */
    const uint8_t *p = data + 1;
    size_t left = size - 1;
    size_t cap = 64 + left * 2 + 64 * 64;
    uint8_t *buf = calloc(1, cap);
    struct wal_header_payload h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, WAL_MAGIC, 8);
    h.version = WAL_VERSION;
    size_t off = 0, ends[64];
    int nrec = 0;
    wal_rec_encode(buf, WAL_REC_HEADER, 1, 0, 1, &h, sizeof(h));
    off = wal_rec_size(sizeof(h));
    uint64_t epoch = 1;
    size_t damage = left >= 4 ? 4 : left; /* the last bytes choose the damage */
    left -= damage;
    while (left && nrec < 64) {
        uint32_t len = p[0] % 48;
        p++, left--;
        if (len > left)
            len = (uint32_t)left;
        epoch += p[0] & 1;
        wal_rec_encode(buf + off, WAL_REC_COMMIT, epoch, (uint64_t)nrec, (uint64_t)nrec + 2, p, len);
        p += len, left -= len;
        off += wal_rec_size(len);
        ends[nrec++] = off;
    }
    size_t n = off + WAL_TERMINATOR;
    size_t first_bad = n;
    const uint8_t *d = data + size - damage;
    for (size_t i = 0; i + 1 < damage; i += 2) {
        size_t at = ((size_t)d[i] << 8 | d[i + 1]) % (n + 1);
        if (d[i] & 0x80) {
            n = at; /* truncation */
        } else if (at < n) {
            buf[at] ^= (uint8_t)(1u << (d[i + 1] & 7));
        }
        if (at < first_bad)
            first_bad = at;
    }
    uint8_t *img = malloc(n ? n : 1);
    memcpy(img, buf, n);
    scan_checked(img, n, &res, &c);
    /* every record wholly before the first damaged byte is reported */
    uint64_t expect = 0;
    for (int i = 0; i < nrec; i++)
        if (ends[i] <= first_bad && ends[i] <= n)
            expect++;
    if (first_bad >= wal_rec_size(sizeof(h)) && c.count < expect)
        __builtin_trap();
    free(img);
    free(buf);
    return 0;
}
