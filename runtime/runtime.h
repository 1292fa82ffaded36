/*
 * runtime/runtime.h — the runtime object (private).
 *
 * struct urt_runtime owns the scheduler (first member: sched/ casts a
 * urt_runtime * to struct sched *), a validated copy of the configuration and
 * the topology the workers were placed with.
 */
#ifndef URT_RUNTIME_RUNTIME_H
#define URT_RUNTIME_RUNTIME_H

#include <stdarg.h>

#include <urt/runtime.h>

#include "base/error.h"
#include "sched/core/sched.h"

struct wal;
struct durability;

struct topology {
    uint32_t n_nodes;
    struct topo_node {
        int id;        /* node id (real, or the position in an override) */
        bool real;     /* a node of this machine (memory can be placed there) */
        cpu_set_t cpus;
        uint32_t n_cpus;
    } *nodes;
};

struct urt_runtime {
    struct sched sched; /* must stay first */
    struct urt_config cfg;
    char *topology_copy;
    struct topology topo;
    struct be_caps caps;
    char *log_dir_copy;
    struct wal *wal;    /* write-ahead log (tx/wal.h), NULL without log_dir */
    /* An engine's durability source (tx/durability.h), or NULL. Set once by
     * urt_durability_source (under dur_lock, a seq_cst store after the object
     * is built); read with plain (seq_cst) _Atomic loads from any thread: a
     * reader that sees the pointer sees the object (store release, load
     * acquire). Cleared only after the workers stopped. */
    struct durability *_Atomic dur;
    pthread_mutex_t dur_lock; /* registering dur */
};

/* log.c: opens the log (recovery, channel files) and installs its worker
 * hooks before the workers start; closes it after they stopped. */
int runtime_log_open(struct urt_runtime *rt);
void runtime_log_close(struct urt_runtime *rt);

/* topology.c */
int topology_build(const struct urt_config *cfg, struct topology *out);
void topology_free(struct topology *t);
void topology_place(const struct topology *t, const struct urt_config *cfg, struct worker_placement *place);

#endif
