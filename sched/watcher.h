/*
 * sched/watcher.h — the watcher thread: conditional tasks (SPEC C9) and the
 * watchdog (C10). Design and ordering contract in sched/watcher.c.
 *
 * Lifecycle (called by runtime/runtime.c):
 *  1. watcher_start() after sched_start() and admission_create(): creates
 *     the thread, which creates its own ring; returns once the ring exists.
 *  2. watcher_stop() first in destroy (after admission_shutdown()): new adds
 *     and cancels fail with -ESHUTDOWN, the thread calls the cancel callback
 *     of every watched task, removes its timer, closes its ring and exits.
 *  3. watcher_free() after sched_stop(): bodies handed to workers may touch
 *     the watcher's statistics until the workers are gone.
 */
#ifndef URT_SCHED_WATCHER_H
#define URT_SCHED_WATCHER_H

#include <stdbool.h>

struct sched;

int watcher_start(struct sched *s);
/* True on s's watcher thread (in a check or a cancel callback): it must
 * not block (admission) nor destroy the runtime. */
bool watcher_current(const struct sched *s);
void watcher_stop(struct sched *s);
void watcher_free(struct sched *s);

#endif
