/*
 * tx/durability.c — an engine's own durability source (SPEC C13, jogasaki's
 * durability callback): the engine, not urt's log, makes records durable.
 *
 * The engine registers a source (urt_durability_source) instead of giving
 * the runtime a log_dir. Each commit (urt_log_commit, or urt_tx_commit after
 * its pre-commit) asks the source for its marker (src.assign, on the
 * committing thread: the engine writes the record in its own log and returns
 * the marker that will cover it, >= 1). Then:
 *   ACCEPTED / AVAILABLE: answered at once (one task; or here with
 *     direct_commit_callback);
 *   STORED: waits in the delivery heap (tx/delivery.c) until the engine calls
 *     urt_durability_notify(rt, m) with m >= its marker, from any thread.
 * notify raises `persisted` (CAS max), tells on_durable (serialized,
 * increasing markers), then releases every covered commit in marker order
 * as one task on a worker (urgent placement), exactly once. A marker that
 * was notified already, or a lower one, changes nothing. At destroy, every
 * stored commit still waiting is answered -ECANCELED, once.
 *
 * Ordering: delivery.c (O2): a commit inserted after a notify re-reads
 * `announced` under the heap lock, so it is released by whoever comes last.
 * Counters: relaxed atomics (readers get a snapshot).
 */
#include "tx/durability.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "tx/commit_hook.h"
#include "tx/delivery.h"

struct durability {
    struct delivery dl;
    struct urt_durability_source src;
    struct tx_log txlog;
    _Atomic uint64_t commits;
};


struct durability *durability_create(struct sched *s, const struct urt_durability_source *src, bool direct)
{
    struct durability *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    delivery_init(&d->dl, s, 0, direct);
    d->src = *src;
    return d;
}

void durability_destroy(struct durability *d)
{
    if (!d)
        return;
    delivery_close(&d->dl, NULL);
    delivery_destroy(&d->dl);
    free(d);
}

int durability_commit(struct durability *d, struct urt_commit *c)
{
    uint64_t m = d->src.assign(d->src.arg, c->priv.tx_id, c->priv.rec, c->priv.len);
    if (m == 0)
        return -ERANGE; /* the engine gave no marker: markers start at 1 */
    c->priv.marker = m;
    c->priv.status = 0;
    c->priv.next = NULL;
    atomic_fetch_add_explicit(&d->commits, 1, memory_order_relaxed);
    struct worker *w = sched_current(d->dl.s);
    if (c->priv.response == URT_COMMIT_STORED) {
        c->priv.state = CS_BATCH;
        delivery_waiters(&d->dl, w, c);
    } else {
        c->priv.state = CS_RELEASE;
        delivery_list(&d->dl, w, c);
    }
    return 0;
}

/* persisted only grows (CAS max, seq_cst: the O2 store that delivery's
 * announce() reads before it takes cb_lock); a notify that does not raise it
 * releases nothing (an earlier or concurrent notify covers its commits). */
void durability_notify(struct durability *d, uint64_t marker)
{
    uint64_t cur = atomic_load_explicit(&d->dl.persisted, memory_order_relaxed);
    while (cur < marker && !atomic_compare_exchange_weak_explicit(&d->dl.persisted, &cur, marker,
                                                                  memory_order_seq_cst, memory_order_relaxed))
        ;
    if (cur >= marker)
        return; /* already known */
    delivery_durable(&d->dl, sched_current(d->dl.s));
}

int durability_on_durable(struct durability *d, urt_durable_fn *fn, void *arg)
{
    return delivery_set_on_durable(&d->dl, fn, arg);
}

void durability_stats(const struct durability *d, struct urt_log_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->commits = atomic_load_explicit(&((struct durability *)d)->commits, memory_order_relaxed);
    out->durable = atomic_load_explicit(&((struct durability *)d)->dl.persisted, memory_order_relaxed);
    out->epoch = out->durable;
    snprintf(out->fs, sizeof(out->fs), "%s", "external");
}

/* ---- transactions (tx/commit_hook.h) -------------------------------------------------- */

/* log->commit: the transaction's embedded commit asks the engine for its marker. */
static int dur_tx_commit(struct tx_log *log, urt_tx *tx, enum urt_commit_response response)
{
    struct durability *d = (struct durability *)((char *)log - offsetof(struct durability, txlog));
    return durability_commit(d, tx_log_commit(tx, response));
}

struct tx_log *durability_tx_log(struct durability *d)
{
    d->txlog.commit = dur_tx_commit;
    return &d->txlog;
}
