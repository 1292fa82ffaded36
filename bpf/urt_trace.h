/*
 * bpf/urt_trace.h — layouts shared by the BPF programs (bpf/urt.bpf.c) and
 * their loader (bpf/loader.c): the values of the pinned maps. Plain __u64
 * fields so `bpftool map dump` prints them by name (the maps carry BTF).
 *
 * Maps (pinned under /sys/fs/bpf/urt/<pid>/, one entry per worker index):
 *   queue_lat  struct urt_log2_hist  submit -> start, from the done probe
 *   run_time   struct urt_log2_hist  start -> end, from the done probe
 *   wake_lat   struct urt_log2_hist  wake sent -> received
 *   counters   struct urt_counters   events seen per worker
 */
#ifndef URT_BPF_URT_TRACE_H
#define URT_BPF_URT_TRACE_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define URT_TRACE_MAX_WORKERS 1024 /* = the config's largest worker count */
#define URT_TRACE_SLOTS 40         /* slot i counts values in [2^i, 2^(i+1)) ns; slot 0 also 0 */

struct urt_log2_hist {
    __u64 slots[URT_TRACE_SLOTS];
    __u64 count;
    __u64 total_ns;
    __u64 max_ns;
};

struct urt_counters {
    __u64 tasks_done;     /* done events (task function calls) */
    __u64 unstamped;      /* done events without an enqueue stamp (submitted before attach) */
    __u64 steals;         /* steal events (this worker was the thief) */
    __u64 suspends;       /* suspend events */
    __u64 wakes_received; /* wake_received events */
};

#endif
