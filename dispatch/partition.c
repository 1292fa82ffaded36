/*
 * dispatch/partition.c — partition ranges and the partition map (design in
 * dispatch/partition.h). No shared state: the caller owns the map.
 */
#include "dispatch/partition.h"

#include <stdio.h>
#include <string.h>

static uint64_t boundary(uint32_t p, uint32_t n)
{
    return ((uint64_t)p << 32) / n; /* floor(p * 2^32 / n), exact in 64 bits */
}

void partition_range(uint32_t p, uint32_t n, char lo[UUID_TEXT], char hi[UUID_TEXT])
{
    if (p == 0 || n == 0 || p > n) {
        strcpy(lo, "00000000-0000-0000-0000-000000000000");
        strcpy(hi, "ffffffff-ffff-ffff-ffff-ffffffffffff");
        return;
    }
    snprintf(lo, UUID_TEXT, "%08x-0000-0000-0000-000000000000", (unsigned)boundary(p - 1, n));
    if (p == n)
        strcpy(hi, "ffffffff-ffff-ffff-ffff-ffffffffffff");
    else
        snprintf(hi, UUID_TEXT, "%08x-ffff-ffff-ffff-ffffffffffff", (unsigned)(boundary(p, n) - 1));
}

uint32_t partition_parse(const char *payload)
{
    if (!payload || !payload[0] || strlen(payload) > 3)
        return 0;
    uint32_t v = 0;
    for (const char *c = payload; *c; c++) {
        if (*c < '0' || *c > '9')
            return 0;
        v = v * 10 + (uint32_t)(*c - '0');
    }
    if (payload[0] == '0') /* no leading zeros: one spelling per number */
        return 0;
    return v >= 1 && v <= PARTITION_MAX ? v : 0;
}

void partition_map_init(struct partition_map *m, uint32_t self)
{
    memset(m, 0, sizeof(*m));
    m->self = self;
    m->n = self; /* assume the highest until told otherwise (as Ubicloud's dispatcher) */
}

bool partition_heard(struct partition_map *m, uint32_t p, uint64_t now)
{
    if (p == 0 || p > PARTITION_MAX)
        return false;
    m->seen[p] = now ? now : 1;
    if (p > m->n) {
        m->n = p;
        return true;
    }
    return false;
}

bool partition_check(struct partition_map *m, uint64_t now, uint64_t stale)
{
    uint32_t highest = 0;
    for (uint32_t p = 1; p <= PARTITION_MAX; p++) {
        if (m->seen[p] && now > stale && m->seen[p] < now - stale)
            m->seen[p] = 0;
        if (m->seen[p])
            highest = p;
    }
    if (highest == 0)
        return false; /* heard nobody (own connection down): keep the count */
    if (highest < m->self)
        highest = m->self;
    if (highest < m->n) {
        m->n = highest;
        return true;
    }
    return false;
}

bool uuid_text_valid(const char *s)
{
    if (!s || strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        char c = s[i];
        if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return true;
}
