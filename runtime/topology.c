/*
 * runtime/topology.c — NUMA topology (SPEC C1) and where each worker goes.
 *
 * The topology is a list of nodes, each with the CPUs this process may use
 * there. It comes from libnuma (numa_node_to_cpus, intersected with the
 * process's affinity mask), or from config.topology ("0-3;4-7"), which lets
 * multi-node placement be tested on a one-node machine. Without libnuma
 * support (numa_available() < 0) the machine is one node with every allowed CPU.
 *
 * Placement:
 *   none — no binding;
 *   numa — worker i goes to node i mod n_nodes, bound to all its CPUs, its
 *          structures allocated on that node when it is a real node;
 *   core — worker i is bound to the (i mod n)-th allowed CPU, taking CPUs
 *          round robin over the nodes (node 0's first CPU, node 1's first, …).
 */
#include <errno.h>
#include <numa.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"

static int from_string(const char *s, struct topology *t)
{
    uint32_t n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ';';
    t->nodes = calloc(n, sizeof(*t->nodes));
    if (!t->nodes)
        return -ENOMEM;
    t->n_nodes = n;
    const char *p = s;
    for (uint32_t i = 0; i < n; i++) {
        struct topo_node *node = &t->nodes[i];
        node->id = (int)i;
        node->real = numa_available() >= 0 && (int)i <= numa_max_node();
        CPU_ZERO(&node->cpus);
        for (;;) {
            char *end;
            unsigned long a = strtoul(p, &end, 10), b = a;
            p = end;
            if (*p == '-')
                b = strtoul(p + 1, &end, 10), p = end;
            for (unsigned long c = a; c <= b && c < CPU_SETSIZE; c++)
                CPU_SET(c, &node->cpus);
            if (*p != ',')
                break;
            p++;
        }
        node->n_cpus = (uint32_t)CPU_COUNT(&node->cpus);
        if (*p == ';')
            p++;
    }
    return 0;
}

static int discover(struct topology *t)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
        return -errno;
    if (numa_available() < 0) {
        t->nodes = calloc(1, sizeof(*t->nodes));
        if (!t->nodes)
            return -ENOMEM;
        t->n_nodes = 1;
        t->nodes[0].id = 0;
        t->nodes[0].real = false;
        t->nodes[0].cpus = allowed;
        t->nodes[0].n_cpus = (uint32_t)CPU_COUNT(&allowed);
        return 0;
    }
    int max = numa_max_node();
    t->nodes = calloc((size_t)max + 1, sizeof(*t->nodes));
    if (!t->nodes)
        return -ENOMEM;
    struct bitmask *bm = numa_allocate_cpumask();
    if (!bm)
        return -ENOMEM;
    for (int node = 0; node <= max; node++) {
        if (numa_node_to_cpus(node, bm) != 0)
            continue;
        struct topo_node *n = &t->nodes[t->n_nodes];
        CPU_ZERO(&n->cpus);
        for (unsigned c = 0; c < bm->size && c < CPU_SETSIZE; c++)
            if (numa_bitmask_isbitset(bm, c) && CPU_ISSET(c, &allowed))
                CPU_SET(c, &n->cpus);
        n->n_cpus = (uint32_t)CPU_COUNT(&n->cpus);
        if (n->n_cpus == 0)
            continue; /* memory-only node, or none of its CPUs allowed */
        n->id = node;
        n->real = true;
        t->n_nodes++;
    }
    numa_free_cpumask(bm);
    if (t->n_nodes == 0) { /* should not happen: fall back to one node */
        t->n_nodes = 1;
        t->nodes[0].id = 0;
        t->nodes[0].real = false;
        t->nodes[0].cpus = allowed;
        t->nodes[0].n_cpus = (uint32_t)CPU_COUNT(&allowed);
    }
    return 0;
}

/* An override may name only CPUs this process may run on (its affinity
 * mask): binding to any other would fail, and silently. */
static int check_allowed(const struct topology *t)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
        return -errno;
    for (uint32_t n = 0; n < t->n_nodes; n++)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &t->nodes[n].cpus) && !CPU_ISSET(c, &allowed))
                return urt__error(-EINVAL, "topology: CPU %d (node %u) is not available to this process "
                                           "(see its affinity mask: taskset -p %d)",
                                  c, n, (int)getpid());
    return 0;
}

int topology_build(const struct urt_config *cfg, struct topology *out)
{
    memset(out, 0, sizeof(*out));
    int err = cfg->topology ? from_string(cfg->topology, out) : discover(out);
    if (!err && cfg->topology)
        err = check_allowed(out);
    if (err)
        topology_free(out);
    return err;
}

void topology_free(struct topology *t)
{
    free(t->nodes);
    memset(t, 0, sizeof(*t));
}

/* The k-th CPU of node n (k < n_cpus). */
static int nth_cpu(const struct topo_node *n, uint32_t k)
{
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &n->cpus) && k-- == 0)
            return c;
    return -1;
}

void topology_place(const struct topology *t, const struct urt_config *cfg, struct worker_placement *place)
{
    uint32_t total_cpus = 0, max_cpus = 0;
    for (uint32_t n = 0; n < t->n_nodes; n++) {
        total_cpus += t->nodes[n].n_cpus;
        if (t->nodes[n].n_cpus > max_cpus)
            max_cpus = t->nodes[n].n_cpus;
    }
    for (uint32_t i = 0; i < cfg->workers; i++) {
        struct worker_placement *p = &place[i];
        memset(p, 0, sizeof(*p));
        p->node = -1;
        p->mem_node = -1;
        p->cpu = -1;
        CPU_ZERO(&p->cpus);
        switch (cfg->placement) {
        case URT_PLACEMENT_NONE:
            break;
        case URT_PLACEMENT_NUMA: {
            const struct topo_node *n = &t->nodes[i % t->n_nodes];
            p->node = n->id;
            p->mem_node = n->real ? n->id : -1;
            p->cpus = n->cpus;
            p->bind = true;
            break;
        }
        case URT_PLACEMENT_CORE: {
            /* Round robin over nodes, then over each node's CPUs. */
            uint32_t k = i % total_cpus, seen = 0;
            for (uint32_t round = 0; round < max_cpus && p->cpu < 0; round++) {
                for (uint32_t n = 0; n < t->n_nodes; n++) {
                    if (round >= t->nodes[n].n_cpus)
                        continue;
                    if (seen++ == k) {
                        p->cpu = nth_cpu(&t->nodes[n], round);
                        p->node = t->nodes[n].id;
                        p->mem_node = t->nodes[n].real ? t->nodes[n].id : -1;
                        break;
                    }
                }
            }
            if (p->cpu >= 0) {
                CPU_SET(p->cpu, &p->cpus);
                p->bind = true;
            }
            break;
        }
        }
    }
}
