/*
 * tx/wal_poll.c — how the log waits for its own writes, adaptively:
 *
 *   polling (log_poll_us): a worker whose channel's write is in flight and
 *     that has nothing else to run polls its ring for the completion instead
 *     of suspending, for about twice the channel's recent write time, at
 *     most log_poll_us, and not at all while recent writes took longer than
 *     that or while the CPU is contended (a sched_yield that took long);
 *   single_write's form: RWF_DSYNC or the O_DIRECT write linked with
 *     fdatasync, whichever the channel found faster lately.
 *
 * Both run on the channel's worker and touch only its owner-only fields
 * (rule 2 of wal.c); no memory ordering of their own.
 */
#include <sched.h>

#include "tx/wal_int.h"

/* single_write: RWF_DSYNC, or the O_DIRECT write linked with fdatasync
 * (PLAIN). Both make the write durable by the file's own fdatasync; they
 * differ in who waits for the device. With RWF_DSYNC the flush is issued and
 * awaited by the block layer's completion worker, bound to the CPU that took
 * the interrupt: one hop fewer, fastest on a quiet machine (about 80 µs here
 * against about 105); when that CPU is busy with other threads it waits for
 * its turn there (ms under load). The fdatasync runs in io_uring's unbound
 * worker, which the kernel places on any CPU. So the channel keeps an EWMA
 * of each form's time and uses the faster, trying the other on every 32nd
 * write (the EWMAs follow the machine's load). */
#define DSYNC_PROBE_EVERY 32

enum flush_form chan_dsync_form(struct chan *ch)
{
    uint64_t d = ch->form_ewma_ns[0], p = ch->form_ewma_ns[1];
    bool dsync = d <= p; /* unknown (0) first: each form gets measured */
    if (++ch->form_writes % DSYNC_PROBE_EVERY == 0)
        dsync = !dsync;
    return dsync ? FLUSH_DSYNC : FLUSH_PLAIN;
}

/* ---- polling for the channel's own write (log_poll_us) --------------------------------- */

#define POLL_YIELD_LONG_NS 50000 /* a sched_yield that took this long: the CPU is contended */
#define POLL_SKIP_WRITES 16      /* ... then no polling for this write and the next ones */

/* How long a worker whose log write is in flight keeps polling its ring
 * instead of suspending: about twice what this channel's recent writes
 * took (an EWMA, 1/8 weight), at most log_poll_us; none while recent
 * writes took longer than that (the wait would rarely end in time), so a
 * slow device costs no CPU. The first write of a channel polls the cap. */
static uint64_t poll_budget_ns(const struct chan *ch)
{
    uint64_t cap = ch->wal->poll_cap_ns, avg = ch->io_ewma_ns;
    if (!cap || avg > cap)
        return 0;
    if (!avg)
        return cap;
    uint64_t b = 2 * avg + 20000;
    return b < cap ? b : cap;
}

static inline void ewma_add(uint64_t *avg, uint64_t t)
{
    *avg = *avg ? *avg - *avg / 8 + t / 8 : t;
}

void wal_poll_done(struct chan *ch, enum flush_form form)
{
    uint64_t t = ch->io_start_ns ? urt_clock_ns() - ch->io_start_ns : 0;
    ch->io_start_ns = 0;
    if (ch->poll_skip)
        ch->poll_skip--;
    if (!t)
        return;
    ewma_add(&ch->io_ewma_ns, t);
    if (ch->wal->dsync && (form == FLUSH_DSYNC || form == FLUSH_PLAIN))
        ewma_add(&ch->form_ewma_ns[form == FLUSH_PLAIN], t);
}

/* The worker would suspend: while this channel's flush is in flight and
 * within its budget, poll instead. A suspended vCPU halts, and waking it
 * for the completion costs tens of µs on a VM; sched_yield lets the kernel
 * threads that complete the write (and anything else) have this CPU. */
bool chan_poll_own_write(struct chan *ch, struct worker *w)
{
    if (!ch->flight || !ch->io_start_ns || ch->poll_skip)
        return false;
    uint64_t budget = poll_budget_ns(ch);
    uint64_t now = urt_clock_ns();
    if (!budget || now - ch->io_start_ns >= budget)
        return false;
    sched_yield();
    if (urt_clock_ns() - now > POLL_YIELD_LONG_NS) {
        /* Another thread had this CPU: the machine is busy, polling only
         * delays us (a worker woken by its completion is scheduled sooner
         * than one that yields). Sleep through this write and the next few. */
        ch->poll_skip = POLL_SKIP_WRITES;
        return false;
    }
    be_poll(&w->be); /* DEFER_TASKRUN: completions are posted when we ask */
    return true;
}

