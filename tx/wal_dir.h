/*
 * tx/wal_dir.h — the log directory's helpers (tx/wal_dir.c), private to the
 * log: recovery (tx/wal_recover.c) uses them; wal_check_dir and wal_lock_dir
 * are declared in tx/wal.h for the runtime.
 */
#ifndef URT_TX_WAL_DIR_H
#define URT_TX_WAL_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Formats the message into err (when err_len > 0) and returns rc. */
int wal_fail(char *err, size_t len, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* "ch-<gen>-<worker>.wal" or "ch-<gen>-<worker>-<seg>.wal" (seg 0 for the first). */
bool wal_parse_channel_name(const char *s, uint64_t *gen, uint32_t *worker, uint32_t *seg);
/* The whole file dir/name read into malloc'd memory (*out, *size): 0, -ENOENT or -errno. */
int wal_read_whole(int dirfd, const char *name, uint8_t **out, size_t *size);
/* The whole file mapped read-only (*out NULL for an empty file): 0 or -errno. */
int wal_map_whole(int dirfd, const char *name, uint8_t **out, size_t *size);

#endif
