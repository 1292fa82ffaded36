/*
 * tests/unit/test_dispatch_parts.c — the dispatcher's pure parts, without a
 * database (SPEC C21): the partition arithmetic against a brute-force model
 * (every sampled uuid prefix lies in exactly one range, ranges tile the
 * space in order), heartbeat payload parsing, the partition map's grow /
 * shrink rules (Ubicloud's repartition_check), the metrics window's order
 * statistics and percentages, the idle sleep and the takeover delay, the
 * host names a connection string makes resolve off the workers
 * (dispatch/resolve.h). The scenarios with PostgreSQL are in tests/dispatch/.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/metrics.h"
#include "dispatch/partition.h"
#include "dispatch/resolve.h"

static uint32_t prefix(const char *uuid)
{
    char head[9];
    memcpy(head, uuid, 8);
    head[8] = '\0';
    return (uint32_t)strtoul(head, NULL, 16);
}

Test(dispatch_parts, ranges_tile_the_uuid_space)
{
    char lo[UUID_TEXT], hi[UUID_TEXT];
    for (uint32_t n = 1; n <= PARTITION_MAX; n++) {
        uint64_t next = 0;
        for (uint32_t p = 1; p <= n; p++) {
            partition_range(p, n, lo, hi);
            cr_assert(uuid_text_valid(lo) && uuid_text_valid(hi), "%s %s", lo, hi);
            cr_assert_eq(prefix(lo), next, "partition %u of %u starts at %s, expected %08llx", p, n, lo,
                         (unsigned long long)next);
            cr_assert_str_eq(lo + 8, "-0000-0000-0000-000000000000");
            cr_assert_str_eq(hi + 8, "-ffff-ffff-ffff-ffffffffffff");
            cr_assert_geq(prefix(hi), prefix(lo), "partition %u of %u is empty", p, n);
            next = (uint64_t)prefix(hi) + 1;
        }
        cr_assert_eq(next, 1ull << 32, "the last of %u partitions ends at %s", n, hi);
    }
    partition_range(0, 0, lo, hi);
    cr_assert_str_eq(lo, "00000000-0000-0000-0000-000000000000");
    cr_assert_str_eq(hi, "ffffffff-ffff-ffff-ffff-ffffffffffff");
}

Test(dispatch_parts, each_uuid_is_in_exactly_one_partition)
{
    char lo[UUID_TEXT], hi[UUID_TEXT];
    uint64_t x = 88172645463325252ull;
    for (int round = 0; round < 2000; round++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t n = 1 + (uint32_t)(x % PARTITION_MAX), id = (uint32_t)(x >> 32), found = 0, hits = 0;
        for (uint32_t p = 1; p <= n; p++) {
            partition_range(p, n, lo, hi);
            if (id >= prefix(lo) && id <= prefix(hi))
                found = p, hits++;
        }
        cr_assert_eq(hits, 1, "prefix %08x in %u of %u partitions", id, hits, n);
        /* the model: floor((p-1) * 2^32 / n) <= id < floor(p * 2^32 / n) */
        cr_assert(((uint64_t)(found - 1) << 32) / n <= id && id < (((uint64_t)found << 32) / n),
                  "prefix %08x: partition %u of %u disagrees with the formula", id, found, n);
    }
}

Test(dispatch_parts, heartbeat_payloads)
{
    cr_assert_eq(partition_parse("1"), 1);
    cr_assert_eq(partition_parse("256"), 256);
    cr_assert_eq(partition_parse("17"), 17);
    const char *bad[] = {"", "0", "257", "1000", "-1", " 1", "1 ", "01", "1.0", "0x10", "abc", "12a", NULL};
    for (int i = 0; bad[i]; i++)
        cr_assert_eq(partition_parse(bad[i]), 0, "\"%s\" was accepted", bad[i]);
    cr_assert_eq(partition_parse(NULL), 0);
    cr_assert(uuid_text_valid("0123abcd-ef01-2345-6789-abcdefABCDEF"));
    cr_assert_not(uuid_text_valid("0123abcd-ef01-2345-6789-abcdefABCDE"));
    cr_assert_not(uuid_text_valid("0123abcd_ef01-2345-6789-abcdefABCDEF"));
    cr_assert_not(uuid_text_valid("0123abcg-ef01-2345-6789-abcdefABCDEF"));
}

Test(dispatch_parts, map_grows_at_once_and_shrinks_after_silence)
{
    struct partition_map m;
    partition_map_init(&m, 2);
    cr_assert_eq(m.n, 2, "a process assumes it is the highest");
    uint64_t t = 1000, stale = 400;
    cr_assert_not(partition_heard(&m, 2, t));
    cr_assert_not(partition_heard(&m, 1, t));
    cr_assert(partition_heard(&m, 3, t), "a higher number repartitions at once");
    cr_assert_eq(m.n, 3);
    cr_assert_not(partition_check(&m, t + 100, stale), "nobody is stale yet");
    partition_heard(&m, 2, t + 300);
    partition_heard(&m, 1, t + 300);
    cr_assert(partition_check(&m, t + 500, stale), "3 silent for longer than stale: shrink");
    cr_assert_eq(m.n, 2);
    cr_assert_eq(m.seen[3], 0);
    partition_heard(&m, 5, t + 600);
    cr_assert_eq(m.n, 5);
    partition_map_init(&m, 3);
    partition_heard(&m, 1, t);
    cr_assert_not(partition_check(&m, t + 100, stale), "never below self, even when self was not heard");
    cr_assert_eq(m.n, 3);
    cr_assert_not(partition_check(&m, t + 10000, stale), "heard nobody: keep the count");
    cr_assert_eq(m.n, 3);
    cr_assert_not(partition_heard(&m, 0, t));
    cr_assert_not(partition_heard(&m, 257, t));
}

Test(dispatch_parts, window_order_statistics_and_percentages)
{
    enum { N = 200 };
    struct dsample s[N];
    uint64_t scratch[N];
    for (uint32_t i = 0; i < N; i++) {
        uint32_t j = (i * 37) % N; /* a permutation: the order of arrival must not matter */
        s[i] = (struct dsample){.scan_delay_ns = j, .queue_delay_ns = 2 * j, .lease_delay_ns = 3,
                                .queue_size = j % 10, .free_slots = 1,
                                .acquired = j % 4 != 0, .old_strand = j >= 150, .lease_expired = j < 10};
    }
    struct urt_dispatch_metrics m;
    memset(&m, 0, sizeof(m));
    dmetrics_window(s, N, 2000000000ull, scratch, &m);
    cr_assert_eq(m.window_runs, N);
    cr_assert_eq(m.scan_delay_ns.avg, 99); /* 19900 / 200, truncated */
    cr_assert_eq(m.scan_delay_ns.p50, 100);
    cr_assert_eq(m.scan_delay_ns.p75, 150);
    cr_assert_eq(m.scan_delay_ns.p85, 170);
    cr_assert_eq(m.scan_delay_ns.p95, 190);
    cr_assert_eq(m.scan_delay_ns.p99, 198);
    cr_assert_eq(m.scan_delay_ns.max, 199);
    cr_assert_eq(m.queue_delay_ns.p50, 200);
    cr_assert_eq(m.total_delay_ns.p50, 3 * 100 + 3, "total = scan + queue + lease");
    cr_assert_eq(m.total_delay_ns.max, 3 * 199 + 3);
    cr_assert_eq(m.free_slots.avg, 1);
    cr_assert_eq(m.queue_size.max, 9);
    cr_assert(fabs((m.lease_acquire_percent) - (75.0)) < 1e-9);
    cr_assert(fabs((m.old_strand_percent) - (25.0)) < 1e-9);
    cr_assert(fabs((m.lease_expired_percent) - (5.0)) < 1e-9);
    cr_assert(fabs((m.strands_per_second) - (100.0)) < 1e-9);
    /* own strands are j < 150: totals 3j+3, their p95 is at floor(150 * .95) = 142 */
    cr_assert_eq(m.current_strand_delay_ns, 3 * 142 + 3);
}

Test(dispatch_parts, idle_sleep_and_takeover_delay)
{
    const uint64_t MS = 1000000, S = 1000000000;
    cr_assert_eq(dispatch_sleep_ns(0, 100, 8, 8, 200 * MS, S), S, "idle pool: the longest sleep");
    cr_assert_eq(dispatch_sleep_ns(0, 100, 2, 8, 200 * MS, S), 250 * MS, "a quarter free: 0.25 s");
    cr_assert_eq(dispatch_sleep_ns(100, 100, 0, 8, 200 * MS, S), 750 * MS, "100 queued at 100/s: 0.75 s");
    cr_assert_eq(dispatch_sleep_ns(1, 1000, 0, 8, 200 * MS, S), 200 * MS, "clamped to the minimum");
    cr_assert_eq(dispatch_sleep_ns(1000, 10, 0, 8, 200 * MS, S), S, "clamped to the maximum");
    cr_assert_eq(dispatch_sleep_ns(3, 0, 0, 8, 1 * MS, 10 * S), 2250 * MS, "no rate yet: 1 strand/s");
    cr_assert_eq(dispatch_old_delay_ns(5 * S, 0), 5 * S);
    cr_assert_eq(dispatch_old_delay_ns(5 * S, 10 * S), 17 * S, "5 s + 1.2 x 10 s");
}

/* Which connection strings need a resolution, and what it gives: names to
 * addresses, socket directories kept with an empty address, a name that does
 * not resolve left out with its port. */
Test(dispatch_parts, host_names_to_resolve)
{
    struct dresolve r;
    const char *none[] = {"dbname=x", "host=/var/run/postgresql dbname=x", "host=localhost hostaddr=127.0.0.1",
                          "host=/tmp,@abstract port=5432", "postgresql:///x?host=/tmp"};
    for (unsigned i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        dresolve_init(&r, none[i]);
        cr_assert_null(r.hosts, "\"%s\" needs no resolution", none[i]);
        dresolve_fini(&r);
    }
    dresolve_init(&r, "host=/tmp,no-such-host.invalid,localhost port=5432,5433,5434 dbname=x");
    cr_assert_str_eq(r.hosts, "/tmp,no-such-host.invalid,localhost");
    cr_assert_str_eq(r.ports, "5432,5433,5434");
    cr_assert_eq(dresolve_run(&r), 0);
    cr_assert_str_eq(r.hostlist, "/tmp,localhost", "the name that does not resolve is left out");
    cr_assert_str_eq(r.portlist, "5432,5434", "and its port");
    cr_assert(!strcmp(r.hostaddr, ",127.0.0.1") || !strcmp(r.hostaddr, ",::1"), "addresses \"%s\"", r.hostaddr);
    cr_assert(strstr(r.err, "no-such-host.invalid"), "%s", r.err);
    const char *keys[6], *vals[6];
    dresolve_params(&r, true, "dbname=x", keys, vals);
    cr_assert_str_eq(keys[2], "host");
    cr_assert_str_eq(vals[3], r.hostaddr);
    cr_assert_str_eq(keys[4], "port");
    cr_assert_null(keys[5]);
    dresolve_params(&r, false, "dbname=x", keys, vals);
    cr_assert_null(keys[2], "unresolved: the conninfo alone");
    dresolve_fini(&r);
    dresolve_init(&r, "host=no-such-host.invalid port=5432");
    cr_assert_null(r.ports, "one port for every host: not filtered");
    cr_assert_eq(dresolve_run(&r), -1, "no host left");
    cr_assert(strstr(r.err, "could not resolve host \"no-such-host.invalid\""), "%s", r.err);
    dresolve_fini(&r);
}
