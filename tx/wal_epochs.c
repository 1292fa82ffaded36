/*
 * tx/wal_epochs.c — recovery's rewrite of the epoch file, in place (SPEC
 * C14; the file's format: wal_format.h, what recovery writes: wal_recover.c
 * step 8).
 *
 * Recovery makes the epoch file an image: slot 0 the durable marker D
 * without a condition, slots 1.. the windows of lost epochs (limit slots),
 * every other slot zero. The file has its full size from the first session
 * on (the runtime writes it with zeros before any channel file exists,
 * wal_marker.c), so the image is written over it, slot by slot, into blocks
 * the file already has: no new block, and recovery works on a full disk. (It
 * was replaced by a new file, epochs.tmp + rename: 128 KiB a full disk did
 * not have.) A file that is absent or short is still replaced that way
 * (wal_epochs_replace), and so is one where no slot is free for the copies
 * below (4096 slots all needed: not seen in practice).
 *
 * The slots before the rewrite are of five kinds, judged by recovery against
 * the channels as they are before any cut: free (zero), junk (failing its
 * checksum), limit (a window an earlier recovery found), holding (valid, its
 * condition holds) and failing (its log bytes are gone). D is the largest
 * marker reached before the first failing slot (step 4), so no failing slot
 * is below D, and a holding slot above the first failing one is not
 * believed. The new windows cover every earlier one that still matters
 * (step 5 merges them). A slot "takes" new content when losing what it
 * holds changes nothing: it is free or junk, or holding with a marker other
 * than D (one below D leaves the entry that reaches D; one above lies past
 * the first failing slot). Four phases, each ended by an fdatasync; a crash
 * may leave any subset of a phase's writes on disk, each slot old, new or
 * torn (then junk: its checksum fails), and every such state yields the
 * same D and windows, because the cuts come only after the last phase:
 *   1. The image's slots that take their content get it; each other one
 *      (it holds a window, a failing slot, or D's own slot in another form)
 *      gets a copy of its content in a slot outside the image that takes it.
 *      Nothing needed is lost; what is added is what this recovery found.
 *   2. With D and every window durable (in place or as a copy): the image's
 *      remaining slots but the failing ones get their content, and every
 *      other holding, limit or junk slot is zeroed. The failing slots all
 *      stay, so nothing above them becomes believed.
 *   3. The failing slots: overwritten by the image, or zeroed.
 *   4. The copies: zeroed. The file is the image.
 * Phases with nothing to write are skipped; a file that is the image costs
 * nothing (and recovery does not call this then). The file's format is
 * unchanged: any earlier epoch file is read as before.
 *
 * Threading: the recovering thread, plain blocking I/O, no shared state.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tx/wal_dir.h"
#include "tx/wal_format.h"

#define SIZE ((size_t)EPOCH_SLOTS * EPOCH_SLOT_SIZE)

enum slot_kind { SK_FREE = 0, SK_JUNK, SK_LIMIT, SK_HOLD, SK_FAIL };

#if URT_FAULT_INJECTION
_Atomic uint64_t wal_epochs_crash;
#endif

struct rewrite {
    int fd;
    int phase;                     /* 1..4 */
    int crash_phase;               /* test builds: the phase a power loss ends (0: none) */
    uint64_t rng;
    const uint8_t *img;            /* what the file becomes */
    uint8_t *b;                    /* what it holds (kept up to date with our writes) */
    uint64_t d;
    uint8_t kind[EPOCH_SLOTS];     /* before the rewrite */
    uint64_t marker[EPOCH_SLOTS];
    bool deferred[EPOCH_SLOTS];    /* an image slot whose old content must outlive phase 1 */
    bool copy[EPOCH_SLOTS];        /* a phase-1 copy of a deferred image slot */
};

static const uint8_t zero_slot[EPOCH_SLOT_SIZE];

static const uint8_t *cur(const struct rewrite *w, uint32_t i)
{
    return w->b + (size_t)i * EPOCH_SLOT_SIZE;
}

static const uint8_t *want(const struct rewrite *w, uint32_t i)
{
    return w->img + (size_t)i * EPOCH_SLOT_SIZE;
}

static bool in_image(const struct rewrite *w, uint32_t i)
{
    return memcmp(want(w, i), zero_slot, EPOCH_SLOT_SIZE) != 0;
}

static void classify(struct rewrite *w, wal_slot_holds_fn *holds, void *arg)
{
    for (uint32_t i = 0; i < EPOCH_SLOTS; i++) {
        struct wal_epoch_slot e;
        if (!wal_epoch_slot_valid(cur(w, i), &e))
            w->kind[i] = memcmp(cur(w, i), zero_slot, EPOCH_SLOT_SIZE) ? SK_JUNK : SK_FREE;
        else if (e.gen == WAL_SLOT_LIMIT)
            w->kind[i] = SK_LIMIT;
        else
            w->kind[i] = holds(arg, &e) ? SK_HOLD : SK_FAIL;
        w->marker[i] = e.marker;
    }
}

/* Losing what slot i holds changes nothing (header). */
static bool takes(const struct rewrite *w, uint32_t i)
{
    return w->kind[i] == SK_FREE || w->kind[i] == SK_JUNK || (w->kind[i] == SK_HOLD && w->marker[i] != w->d);
}

static int pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t r = pwrite(fd, b, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        b += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

/* Test builds: a power loss during this phase keeps any subset of its
 * writes, some of them torn (wal_epochs_crash): what reaches the file. */
static const uint8_t *crash_filter(struct rewrite *w, const uint8_t *s, uint8_t *torn)
{
    if (w->phase != w->crash_phase)
        return s;
    w->rng ^= w->rng << 13, w->rng ^= w->rng >> 7, w->rng ^= w->rng << 17;
    switch (w->rng % 3) {
    case 0:
        return NULL; /* lost */
    case 1:
        return s;
    default:
        memcpy(torn, s, EPOCH_SLOT_SIZE);
        torn[w->rng % EPOCH_SLOT_SIZE] ^= 0x5a; /* torn: fails its checksum */
        return torn;
    }
}

/* Slot i := s (unless it holds s already); *wrote counts the writes. */
static int put(struct rewrite *w, uint32_t i, const uint8_t *s, int *wrote)
{
    if (!memcmp(cur(w, i), s, EPOCH_SLOT_SIZE))
        return 0;
    uint8_t torn[EPOCH_SLOT_SIZE];
    const uint8_t *out = crash_filter(w, s, torn);
    if (!out)
        return 0;
    int rc = pwrite_all(w->fd, out, EPOCH_SLOT_SIZE, (uint64_t)i * EPOCH_SLOT_SIZE);
    if (!rc) {
        memcpy(w->b + (size_t)i * EPOCH_SLOT_SIZE, s, EPOCH_SLOT_SIZE);
        (*wrote)++;
    }
    return rc;
}

static int end_phase(struct rewrite *w, int rc, int wrote)
{
    if (w->phase++ == w->crash_phase)
        return -EIO; /* test builds: the power went before the fdatasync */
    if (!rc && wrote && fdatasync(w->fd))
        rc = -errno;
    return rc;
}

/* Phase 1: the image's slots that take their content; a copy of each other
 * one in a slot outside the image that takes it (*next: where to look). */
static int phase_place(struct rewrite *w)
{
    int wrote = 0, rc = 0;
    uint32_t next = 0;
    for (uint32_t i = 0; !rc && i < EPOCH_SLOTS; i++) {
        if (!in_image(w, i) || !memcmp(cur(w, i), want(w, i), EPOCH_SLOT_SIZE))
            continue;
        if (takes(w, i)) {
            rc = put(w, i, want(w, i), &wrote);
            continue;
        }
        w->deferred[i] = true;
        while (next < EPOCH_SLOTS && (in_image(w, next) || w->copy[next] || !takes(w, next)))
            next++;
        if (next == EPOCH_SLOTS)
            return end_phase(w, -EFBIG, wrote); /* no room for a copy: the caller replaces the file */
        w->copy[next] = true;
        rc = put(w, next, want(w, i), &wrote);
    }
    return end_phase(w, rc, wrote);
}

/* Phases 2 and 3: the deferred image slots and the rest, of the given kinds. */
static int phase_settle(struct rewrite *w, unsigned kinds)
{
    int wrote = 0, rc = 0;
    for (uint32_t i = 0; !rc && i < EPOCH_SLOTS; i++) {
        if (w->copy[i] || !(kinds & (1u << w->kind[i])))
            continue;
        if (in_image(w, i))
            rc = w->deferred[i] ? put(w, i, want(w, i), &wrote) : 0;
        else
            rc = put(w, i, zero_slot, &wrote);
    }
    return end_phase(w, rc, wrote);
}

/* Phase 4: the copies go. */
static int phase_unplace(struct rewrite *w)
{
    int wrote = 0, rc = 0;
    for (uint32_t i = 0; !rc && i < EPOCH_SLOTS; i++)
        if (w->copy[i])
            rc = put(w, i, zero_slot, &wrote);
    return end_phase(w, rc, wrote);
}

/* The file's SIZE bytes into w->b: 0, -EFBIG when it is absent or not of
 * its full size (the caller replaces it), or -errno. */
static int load(struct rewrite *w, int dirfd)
{
    w->fd = openat(dirfd, "epochs", O_RDWR | O_CLOEXEC);
    if (w->fd < 0)
        return errno == ENOENT ? -EFBIG : -errno;
    struct stat st;
    if (fstat(w->fd, &st))
        return -errno;
    if ((size_t)st.st_size != SIZE)
        return -EFBIG;
    if (!(w->b = malloc(SIZE)))
        return -ENOMEM;
    for (size_t got = 0; got < SIZE;) {
        ssize_t n = pread(w->fd, w->b + got, SIZE - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        got += (size_t)n;
    }
    return 0;
}

int wal_epochs_rewrite(int dirfd, const uint8_t *img, uint64_t marker, wal_slot_holds_fn *holds, void *arg)
{
    struct rewrite *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->img = img;
    w->d = marker;
    w->phase = 1;
#if URT_FAULT_INJECTION
    uint64_t crash = atomic_load_explicit(&wal_epochs_crash, memory_order_relaxed);
    w->crash_phase = (int)(crash >> 32);
    w->rng = (crash & 0xffffffffu) * 0x9E3779B97F4A7C15ull + 1;
#endif
    int rc = load(w, dirfd);
    if (!rc) {
        classify(w, holds, arg);
        rc = phase_place(w);
    }
    if (!rc)
        rc = phase_settle(w, 1u << SK_FREE | 1u << SK_JUNK | 1u << SK_LIMIT | 1u << SK_HOLD);
    if (!rc)
        rc = phase_settle(w, 1u << SK_FAIL);
    if (!rc)
        rc = phase_unplace(w);
    if (!rc && w->crash_phase == 5)
        rc = -EIO; /* test builds: the power went after the rewrite, before the cuts */
    if (w->fd >= 0)
        close(w->fd);
    free(w->b);
    free(w);
    return rc;
}

int wal_epochs_replace(int dirfd, const uint8_t *img)
{
    int rc = 0;
    int fd = openat(dirfd, "epochs.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || (rc = pwrite_all(fd, img, SIZE, 0)) || fdatasync(fd))
        rc = rc ? rc : -errno;
    if (fd >= 0)
        close(fd);
    if (rc)
        unlinkat(dirfd, "epochs.tmp", 0); /* a full disk: give back what it took */
    if (!rc && renameat(dirfd, "epochs.tmp", dirfd, "epochs"))
        rc = -errno;
    if (!rc && fsync(dirfd))
        rc = -errno;
    return rc;
}
