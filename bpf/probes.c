/*
 * bpf/probes.c — the probe gate (semaphores + stats users, see bpf/probes.h),
 * the probe-fired counter, task ids, and the out-of-line slow paths where
 * the timed events record into the histograms and fire their USDT probes
 * (one site per probe in liburt.so). The USDT semaphores are defined here
 * and nowhere else: each urt_<probe>_semaphore is an assembler alias of one
 * 16-bit lane of urt__probe_gate, placed in section .probes as sys/sdt.h
 * expects. Memory-ordering contract: bpf/probes.h.
 */
#include "bpf/probes.h"

struct probe_gate urt__probe_gate __attribute__((section(".probes"), aligned(64))) = {0};
_Atomic uint64_t urt__probes_fired = 0;

#if URT_PROBES
/* name, byte offset in urt__probe_gate (word * 8 + lane * 2) */
#define URT__SEMAPHORE(name, off)                                                                          \
    __asm__(".globl " #name "\n\t.hidden " #name "\n\t.type " #name ", @object\n\t.size " #name            \
            ", 2\n\t.set " #name ", urt__probe_gate + " #off "\n");
URT__SEMAPHORE(urt_submit_semaphore, 2)
URT__SEMAPHORE(urt_start_semaphore, 4)
URT__SEMAPHORE(urt_done_semaphore, 6)
URT__SEMAPHORE(urt_wake_sent_semaphore, 8)
URT__SEMAPHORE(urt_wake_received_semaphore, 10)
URT__SEMAPHORE(urt_steal_semaphore, 12)
URT__SEMAPHORE(urt_suspend_semaphore, 14)
URT__SEMAPHORE(urt_flush_semaphore, 16)
URT__SEMAPHORE(urt_durable_semaphore, 18)
URT__SEMAPHORE(urt_commit_done_semaphore, 20)
URT__SEMAPHORE(urt_blocking_submit_semaphore, 24)
URT__SEMAPHORE(urt_blocking_start_semaphore, 26)
URT__SEMAPHORE(urt_blocking_done_semaphore, 28)
#endif

void probe_stats_users_add(int delta)
{
    /* Lane 0 of word 0 (little endian); see the contract in probes.h. */
    if (delta > 0)
        atomic_fetch_add_explicit(&urt__probe_gate.word[PROBE_W_TASK], (uint64_t)delta, memory_order_relaxed);
    else if (delta < 0)
        atomic_fetch_sub_explicit(&urt__probe_gate.word[PROBE_W_TASK], (uint64_t)-delta, memory_order_relaxed);
}

static _Atomic uint64_t next_thread_base = 1;
static _Thread_local uint64_t tls_next_id;

uint64_t probe_next_task_id(void)
{
    /* 24 bits of thread, 40 bits of sequence per thread. */
    if (__builtin_expect((tls_next_id & ((1ull << 40) - 1)) == 0, 0))
        tls_next_id = atomic_fetch_add_explicit(&next_thread_base, 1, memory_order_relaxed) << 40 | 1;
    return tls_next_id++;
}

/* ---- slow paths (see probes.h) ----------------------------------------------------- */

void probe_task_submit_timed(struct urt_task *t, int worker)
{
    t->priv.id = probe_next_task_id();
    t->priv.enqueue_ns = urt_clock_ns();
    URT_PROBE_SUBMIT(worker, t->priv.id, t->priv.enqueue_ns);
}

void probe_task_start_timed(uint32_t worker, const struct urt_task *t, struct probe_run *pr)
{
    pr->id = t->priv.id;
    pr->enqueue_ns = t->priv.enqueue_ns;
    pr->start_ns = urt_clock_ns();
    URT_PROBE_START(worker, pr->id, pr->enqueue_ns, pr->start_ns);
}

void probe_task_done(struct probe_hists *h, uint32_t worker, struct probe_run *pr)
{
    pr->end_ns = urt_clock_ns();
    if (pr->enqueue_ns != 0 && pr->start_ns >= pr->enqueue_ns)
        hist_record(&h->kind[URT_LAT_QUEUE], pr->start_ns - pr->enqueue_ns);
    hist_record(&h->kind[URT_LAT_RUN], pr->end_ns - pr->start_ns);
    URT_PROBE_DONE(worker, pr->id, pr->enqueue_ns, pr->start_ns, pr->end_ns);
}

void probe_wake_received_timed(struct probe_hists *h, uint32_t worker, uint64_t sent_ns)
{
    uint64_t now = urt_clock_ns();
    if (sent_ns != 0 && now >= sent_ns)
        hist_record(&h->kind[URT_LAT_WAKE], now - sent_ns);
    URT_PROBE_WAKE_RECEIVED(worker, sent_ns, now);
}

void probe_flush(int worker, uint64_t lsn, uint64_t bytes)
{
    URT_PROBE_FLUSH(worker, lsn, bytes);
}

void probe_durable(int worker, uint64_t lsn, uint64_t flush_start_ns, uint64_t durable_ns)
{
    URT_PROBE_DURABLE(worker, lsn, flush_start_ns, durable_ns);
}

void probe_commit_done(struct probe_hists *h, uint32_t worker, enum urt_latency_kind kind, uint64_t submit_ns,
                       uint64_t done_ns)
{
    if (submit_ns != 0 && done_ns >= submit_ns && kind >= URT_LAT_COMMIT_ACCEPTED && kind < URT_LAT_KINDS)
        hist_record(&h->kind[kind], done_ns - submit_ns);
    URT_PROBE_COMMIT_DONE(worker, kind, submit_ns, done_ns);
}
