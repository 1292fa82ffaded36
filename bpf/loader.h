/*
 * bpf/loader.h — loads urt's BPF programs into the kernel, attaches them to
 * one process's USDT probes and pins their maps under /sys/fs/bpf/urt/<pid>/
 * (internal library of urt-trace, bpf/urt-trace.c, and the BPF test suite).
 *
 * Lifecycle (numbered rules):
 *  1. tracer_attach() checks the environment (root, bpffs, uprobes, the pid
 *     and its liburt), loads the programs, pins the maps and attaches; on
 *     failure nothing is left loaded or pinned and msg says why.
 *  2. While attached, the maps are readable through tracer_read_*() and by
 *     anyone through the pins (`bpftool map dump pinned ...`).
 *  3. tracer_detach() detaches, unpins, removes the pid's directory and frees
 *     the tracer. USDT links cannot be pinned (libbpf 1.1), so the pins live
 *     only as long as the process that attached. Detaching NULL is a no-op.
 * Threads: a tracer is used by one thread at a time (no internal locking).
 */
#ifndef URT_BPF_LOADER_H
#define URT_BPF_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "bpf/urt_trace.h"

#define TRACER_PIN_ROOT "/sys/fs/bpf/urt"

enum tracer_hist {
    TRACER_QUEUE = 0, /* map queue_lat */
    TRACER_RUN = 1,   /* map run_time */
    TRACER_WAKE = 2,  /* map wake_lat */
    TRACER_HISTS = 3
};

struct tracer;

/* The checks of rule 1 without loading anything: 0, or -errno with a message
 * for the user in msg (not root: -EPERM; bpffs not mounted: -ENOENT with the
 * mount command; no uprobes: -EOPNOTSUPP; no such pid: -ESRCH; no liburt in
 * the pid: -ENOEXEC; its liburt.so was deleted or replaced on disk: -ESTALE). lib receives liburt's path as mapped by the pid. */
int tracer_check(pid_t pid, char *lib, size_t lib_len, char *msg, size_t msg_len);

/* Rule 1. Returns 0 and *out, or -errno with msg filled. */
int tracer_attach(pid_t pid, struct tracer **out, char *msg, size_t msg_len);

/* Rule 3. */
void tracer_detach(struct tracer *t);

/* "/sys/fs/bpf/urt/<pid>" and the liburt path the probes were found in. */
const char *tracer_pin_dir(const struct tracer *t);
const char *tracer_library(const struct tracer *t);

/* Worker w's entry of a histogram map / of the counters map. 0 or -errno. */
int tracer_read_hist(struct tracer *t, enum tracer_hist which, uint32_t w, struct urt_log2_hist *out);
int tracer_read_counters(struct tracer *t, uint32_t w, struct urt_counters *out);

/* Map name of a histogram ("queue_lat", ...). */
const char *tracer_hist_map_name(enum tracer_hist which);

/* Prints h like bcc's print_log2_hist (runqlat): "unit : count distribution". */
void tracer_print_log2_hist(FILE *f, const struct urt_log2_hist *h, const char *unit);

/* Log libbpf's warnings and debug output to stderr (default: only the last
 * warning is kept and put into msg on failure). */
void tracer_set_verbose(bool verbose);

#endif
