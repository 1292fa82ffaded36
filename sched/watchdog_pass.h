/*
 * sched/watchdog_pass.h — the watchdog's passes (sched/watchdog.c), a client
 * of the core: they run on the watcher thread, as a timer of its queue, and
 * read the slots the workers publish (sched/core/watchdog_slot.h).
 */
#ifndef URT_SCHED_WATCHDOG_PASS_H
#define URT_SCHED_WATCHDOG_PASS_H

#include <stdint.h>

struct sched;
struct watchdog;

/* NULL on ENOMEM. Off (no passes) when task_runtime_limit_us is 0. */
struct watchdog *watchdog_create(struct sched *s);
void watchdog_free(struct watchdog *wd);
/* When the next pass is due (UINT64_MAX: never). Watcher thread. */
uint64_t watchdog_next_pass(const struct watchdog *wd);
/* A pass if one is due: every worker's running task; a run seen longer than
 * the limit is reported once (callback; watchdog_abort: dump and abort). */
void watchdog_pass(struct watchdog *wd, uint64_t now);
uint64_t watchdog_reports(const struct watchdog *wd);

#endif
