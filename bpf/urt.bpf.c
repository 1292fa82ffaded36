/*
 * bpf/urt.bpf.c — BPF programs for urt's USDT probes (SPEC C18), CO-RE,
 * loaded by bpf/loader.c through the skeleton `bpftool gen skeleton` makes.
 *
 * One program per probe; no pairing of events in maps: the runtime's done
 * probe carries its own CLOCK_MONOTONIC enqueue/start/end stamps (why:
 * docs/design.md, "Observability": pairing events in BPF maps costs about
 * three times as much per task), so each event is one array lookup per map
 * and a few adds. Histograms are log2 in nanoseconds (runqlat layout).
 *
 * Concurrency: the entries of a worker are written by programs running on
 * that worker's thread, so one writer per entry; counts still use atomic adds
 * (cheap, and correct if a worker index were ever shared); max is a plain
 * compare-and-store (single writer).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/usdt.bpf.h>

#include "urt_trace.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define HIST_MAP(name)                                                                                     \
    struct {                                                                                               \
        __uint(type, BPF_MAP_TYPE_ARRAY);                                                                  \
        __uint(max_entries, URT_TRACE_MAX_WORKERS);                                                        \
        __type(key, __u32);                                                                                \
        __type(value, struct urt_log2_hist);                                                               \
    } name SEC(".maps")

HIST_MAP(queue_lat);
HIST_MAP(run_time);
HIST_MAP(wake_lat);

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, URT_TRACE_MAX_WORKERS);
    __type(key, __u32);
    __type(value, struct urt_counters);
} counters SEC(".maps");

static __always_inline __u32 log2_u64(__u64 v)
{
    __u32 r = 0;
    /* Binary search, bounded: the verifier sees a fixed number of steps. */
    if (v >> 32) { v >>= 32; r += 32; }
    if (v >> 16) { v >>= 16; r += 16; }
    if (v >> 8) { v >>= 8; r += 8; }
    if (v >> 4) { v >>= 4; r += 4; }
    if (v >> 2) { v >>= 2; r += 2; }
    if (v >> 1) { r += 1; }
    return r;
}

static __always_inline void hist_add(void *map, __u32 worker, __u64 v)
{
    struct urt_log2_hist *h = bpf_map_lookup_elem(map, &worker);
    if (!h)
        return;
    __u32 slot = log2_u64(v);
    if (slot >= URT_TRACE_SLOTS)
        slot = URT_TRACE_SLOTS - 1;
    __sync_fetch_and_add(&h->slots[slot], 1);
    __sync_fetch_and_add(&h->count, 1);
    __sync_fetch_and_add(&h->total_ns, v);
    if (v > h->max_ns)
        h->max_ns = v;
}

static __always_inline struct urt_counters *counters_of(__u32 worker)
{
    return bpf_map_lookup_elem(&counters, &worker);
}

SEC("usdt")
int BPF_USDT(urt_done, long worker, __u64 id, __u64 enqueue_ns, __u64 start_ns, __u64 end_ns)
{
    if (worker < 0 || worker >= URT_TRACE_MAX_WORKERS)
        return 0;
    __u32 w = (__u32)worker;
    struct urt_counters *c = counters_of(w);
    if (c) {
        __sync_fetch_and_add(&c->tasks_done, 1);
        if (enqueue_ns == 0 || start_ns < enqueue_ns)
            __sync_fetch_and_add(&c->unstamped, 1);
    }
    if (enqueue_ns != 0 && start_ns >= enqueue_ns)
        hist_add(&queue_lat, w, start_ns - enqueue_ns);
    if (end_ns >= start_ns)
        hist_add(&run_time, w, end_ns - start_ns);
    return 0;
}

SEC("usdt")
int BPF_USDT(urt_wake_received, long worker, __u64 sent_ns, __u64 received_ns)
{
    if (worker < 0 || worker >= URT_TRACE_MAX_WORKERS)
        return 0;
    __u32 w = (__u32)worker;
    struct urt_counters *c = counters_of(w);
    if (c)
        __sync_fetch_and_add(&c->wakes_received, 1);
    if (sent_ns != 0 && received_ns >= sent_ns)
        hist_add(&wake_lat, w, received_ns - sent_ns);
    return 0;
}

SEC("usdt")
int BPF_USDT(urt_steal, long worker, long victim, __u64 id)
{
    if (worker < 0 || worker >= URT_TRACE_MAX_WORKERS)
        return 0;
    struct urt_counters *c = counters_of((__u32)worker);
    if (c)
        __sync_fetch_and_add(&c->steals, 1);
    return 0;
}

SEC("usdt")
int BPF_USDT(urt_suspend, long worker, __u64 timeout_ns)
{
    if (worker < 0 || worker >= URT_TRACE_MAX_WORKERS)
        return 0;
    struct urt_counters *c = counters_of((__u32)worker);
    if (c)
        __sync_fetch_and_add(&c->suspends, 1);
    return 0;
}
