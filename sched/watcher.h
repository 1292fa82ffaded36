/*
 * sched/watcher.h — the watcher thread: conditional tasks (SPEC C9) and the
 * watchdog (C10). Design and ordering contract in sched/watcher.c.
 *
 * Lifecycle (called by runtime/runtime.c, and sched_stop()):
 *  1. watcher_start() after sched_start() and admission_create(): creates
 *     the thread, which creates its own ring; returns once the ring exists.
 *  2. watcher_close() first in destroy (after admission_shutdown()): new adds
 *     and cancels fail with -ESHUTDOWN from now on; the thread is told to
 *     stop, and on its way out calls the cancel callback of every watched
 *     task, removes its timer and closes its ring — while the workers drain
 *     or stop (it does not delay them).
 *  3. watcher_stop() joins the thread: sched_stop() calls it after the
 *     workers stopped and before their queues are cancelled and they and the
 *     task pool are freed (the watchdog reads the workers; a cancel callback
 *     may spawn). Idempotent; closes first if nobody did.
 *  4. watcher_free() after sched_stop(): bodies handed to workers may touch
 *     the watcher's statistics until the workers are gone.
 */
#ifndef URT_SCHED_WATCHER_H
#define URT_SCHED_WATCHER_H

#include <stdbool.h>
#include <stdint.h>

struct sched;

int watcher_start(struct sched *s);
void watcher_close(struct sched *s);
void watcher_stop(struct sched *s);
void watcher_free(struct sched *s);

/* Conditional tasks watched right now (a snapshot). Any thread. */
uint64_t watcher_watching(const struct sched *s);

#endif
