/*
 * dispatch/partition.h — the partition arithmetic and map of the dispatcher
 * (SPEC C21, Ubicloud's dispatcher's strand_id_range and repartition_check).
 *
 * The uuid space is cut by its first 32 bits: with n partitions, partition p
 * (1..n) starts at floor((p - 1) * 2^32 / n) and ends before floor(p * 2^32 /
 * n); the last one ends at ffffffff-ffff-ffff-ffff-ffffffffffff. The bounds
 * are given inclusive (the scan's BETWEEN), so the end of a range is the next
 * range's start minus one, written with every lower bit set. uuids compare
 * bytewise in PostgreSQL, so ranges of the text form and of the uuid order
 * agree.
 *
 * The map (struct partition_map) records when each partition was last heard
 * of. n grows at once when a higher number is heard; it shrinks, at a
 * heartbeat, to the highest number heard within `stale` — never below the
 * process's own number (its own heartbeats may be missing while its
 * connection is down). Pure data: one owner (the control lane) updates it;
 * readers on other threads get copies (dispatch.c publishes them).
 */
#ifndef URT_DISPATCH_PARTITION_H
#define URT_DISPATCH_PARTITION_H

#include <stdbool.h>
#include <stdint.h>

#define PARTITION_MAX 256
#define UUID_TEXT 37 /* 36 characters and the terminator */

/* Inclusive uuid bounds of partition p of n (1 <= p <= n <= 256; p = 0 is
 * the whole space). */
void partition_range(uint32_t p, uint32_t n, char lo[UUID_TEXT], char hi[UUID_TEXT]);

/* Parses a heartbeat payload: a decimal number 1..256 and nothing else.
 * Returns it, or 0 for anything else. */
uint32_t partition_parse(const char *payload);

struct partition_map {
    uint32_t self;                       /* own number (1..256) */
    uint32_t n;                          /* the count in force */
    uint64_t seen[PARTITION_MAX + 1];    /* last heartbeat (ns, urt_now_ns), 0 = not heard */
};

void partition_map_init(struct partition_map *m, uint32_t self);
/* A heartbeat of partition p (1..256) at now. True when n grew (repartition). */
bool partition_heard(struct partition_map *m, uint32_t p, uint64_t now);
/* At a heartbeat: forgets partitions not heard since now - stale; true when
 * n shrank to the highest one left (never below self). */
bool partition_check(struct partition_map *m, uint64_t now, uint64_t stale);

/* True when s is a uuid in text form (8-4-4-4-12 hexadecimal digits). */
bool uuid_text_valid(const char *s);

#endif
