/*
 * batch/parse.h — the record formats of the batch executor: RFC 4180 CSV and
 * urt's length-prefixed binary format (urt/batch.h, docs/batch.md), parsed in
 * place in a block's window of a file.
 *
 * A window is the bytes a block holds: base[0 .. len) are the file's bytes
 * [off, off + len); the buffer has one spare byte after them (base[len] is
 * writable) so the last field of a file can be NUL-terminated. Positions are
 * file offsets.
 *
 * Every function returns
 *   PARSE_OK    done (the outputs are set);
 *   PARSE_MORE  the window ends before the answer and the file goes on: read
 *               more (up to the position + max_rec) and call again — nothing
 *               was written to the window;
 *   PARSE_ERR   bad input or no memory: *e says where (a file offset), what,
 *               and the errno (-EBADMSG, -EMSGSIZE, -ENOMEM).
 * Single-threaded: a window belongs to one block at a time; no memory
 * ordering here.
 *
 * Record boundaries (what makes blocks of one file independent):
 *   CSV     a record starts at 0 and after every LF that is outside quotes;
 *           inside/outside is the parity of the '"' bytes before it (a
 *           doubled quote "" keeps the parity), so from a known record start
 *           the next start after any byte is found by counting quotes up to
 *           that byte and then looking for the first unquoted LF.
 *   binary  a record starts after the magic and at r + 4 + body_len after a
 *           record at r: the length chain.
 */
#ifndef URT_BATCH_PARSE_H
#define URT_BATCH_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urt/batch.h>

enum { PARSE_OK = 0, PARSE_MORE = 1, PARSE_ERR = 2 };

#define PARSE_BIN_MAGIC "URTBIN1\n"
#define PARSE_BIN_MAGIC_LEN 8u

struct parse_win {
    char *base;    /* file byte `off` */
    uint64_t off;
    uint64_t len;  /* valid bytes; base[len] is a spare byte */
    uint64_t size; /* the file's size */
};

struct parse_err {
    uint64_t at;      /* file offset of the problem */
    int err;          /* -EBADMSG, -EMSGSIZE, -ENOMEM */
    char what[160];   /* one phrase, e.g. "unterminated quoted field (opened at byte 17)" */
};

struct parse_fields {
    struct urt_batch_field *v;
    uint32_t n, cap;
    uint32_t lf; /* CSV: the record's LF bytes (its line breaks, the terminator's too); binary: 0 */
};

/* First record start at or after `limit`, scanning from the record start
 * `from` (<= limit); the file's size if none. The record that crosses limit
 * must end within max_rec bytes after limit - 1 (else -EMSGSIZE). */
int parse_next_start(enum urt_batch_format f, const struct parse_win *w, uint64_t from, uint64_t limit,
                     uint64_t max_rec, uint64_t *out, struct parse_err *e);

/* Looks at the record starting at `at` without changing the window: its
 * field count and the start of the next record. */
int parse_peek(enum urt_batch_format f, const struct parse_win *w, uint64_t at, uint64_t max_rec, uint32_t *n_fields,
               uint64_t *next, struct parse_err *e);

/* Parses the record at `at` into fv (fields point into the window, each
 * NUL-terminated: CSV quotes are removed and "" becomes " in place) and sets
 * *next to the following record's start. On PARSE_MORE / PARSE_ERR the window
 * is unchanged and fv is not meaningful. */
int parse_record(enum urt_batch_format f, struct parse_win *w, uint64_t at, uint64_t max_rec, struct parse_fields *fv,
                 uint64_t *next, struct parse_err *e);

/* The binary format's magic at the start of the window (off must be 0):
 * PARSE_OK, PARSE_MORE (fewer than 8 bytes read of a longer file) or
 * PARSE_ERR. */
int parse_bin_magic(const struct parse_win *w, struct parse_err *e);

void parse_fields_free(struct parse_fields *fv);

/* The LF bytes in the window's file bytes [from, to) (clamped to the window):
 * line numbers are 1 + the LF bytes before a position. Only on bytes the
 * writing pass of parse_record has not touched (it overwrites separators). */
uint64_t parse_count_lf(const struct parse_win *w, uint64_t from, uint64_t to);

#endif
