/*
 * tx/durability.h — an engine's own durability source in place of urt's log
 * (urt/log.h, "An engine with its own log"; design in durability.c).
 */
#ifndef URT_TX_DURABILITY_H
#define URT_TX_DURABILITY_H

#include <urt/log.h>

#include "sched/core/sched.h"

struct durability;
struct tx_log;

/* Creates the source; NULL on ENOMEM. Any thread, before the first commit. */
struct durability *durability_create(struct sched *s, const struct urt_durability_source *src, bool direct);
/* After the workers stopped: every waiting commit answered once (covered:
 * 0, else -ECANCELED), then freed. NULL is a no-op. */
void durability_destroy(struct durability *d);
/* A commit of urt_log_commit (fields set by the caller): 0 or -errno. Any thread. */
int durability_commit(struct durability *d, struct urt_commit *c);
/* The engine made everything up to marker durable. Any thread. */
void durability_notify(struct durability *d, uint64_t marker);
int durability_on_durable(struct durability *d, urt_durable_fn *fn, void *arg);
void durability_stats(const struct durability *d, struct urt_log_stats *out);
/* The struct tx_log that urt_tx_commit goes through (tx/commit_hook.h). */
struct tx_log *durability_tx_log(struct durability *d);

#endif
