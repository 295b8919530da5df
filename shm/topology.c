// NUMA topology detection and virtual node splitting (see shm/topology.h).
#include "shm/topology.h"

#include <errno.h>
#include <numa.h>
#include <string.h>

void st_cpu_list_split(uint32_t n_cpus, uint32_t parts, uint32_t part, uint32_t *begin,
                       uint32_t *count)
{
    ST_ASSERT(parts > 0 && part < parts);
    uint32_t base = n_cpus / parts, extra = n_cpus % parts;
    *begin = part * base + (part < extra ? part : extra);
    *count = base + (part < extra ? 1 : 0);
}

int st_topology_detect(struct st_topology *t, struct st_error *e)
{
    cpu_set_t allowed;
    memset(t, 0, sizeof *t);
    if (sched_getaffinity(0, sizeof allowed, &allowed) < 0)
        return st_error_set(e, "sched_getaffinity: %s", strerror(errno));
    t->numa = numa_available() >= 0;
    if (!t->numa) {
        t->n_nodes = 1;
        t->node[0].mem_node = -1;
        t->node[0].cpus = allowed;
        t->node[0].n_cpus = (uint32_t)CPU_COUNT(&allowed);
        return 0;
    }
    struct bitmask *bm = numa_allocate_cpumask();
    if (!bm) return st_error_set(e, "numa_allocate_cpumask: out of memory");
    for (int node = 0; node <= numa_max_node() && t->n_nodes < ST_TOPO_MAX_NODES; node++) {
        if (numa_node_to_cpus(node, bm) < 0) continue; // a hole in the node numbering
        struct st_topo_node *n = &t->node[t->n_nodes];
        CPU_ZERO(&n->cpus);
        for (unsigned cpu = 0; cpu < bm->size && cpu < CPU_SETSIZE; cpu++)
            if (numa_bitmask_isbitset(bm, cpu) && CPU_ISSET(cpu, &allowed)) CPU_SET(cpu, &n->cpus);
        n->n_cpus = (uint32_t)CPU_COUNT(&n->cpus);
        if (n->n_cpus == 0) continue; // memory-only node, or none of its CPUs allowed
        n->mem_node = node;
        t->n_nodes++;
    }
    numa_free_cpumask(bm);
    if (t->n_nodes == 0)
        return st_error_set(e, "no NUMA node has a CPU this process may run on");
    return 0;
}

int st_topology_split(const struct st_topology *in, uint32_t parts, struct st_topology *out,
                      struct st_error *e)
{
    if (parts == 0) return st_error_set(e, "st_topology_split: 0 virtual nodes per node");
    if ((uint64_t)in->n_nodes * parts > ST_TOPO_MAX_NODES)
        return st_error_set(e, "st_topology_split(%u parts): %u nodes x %u is more than %d", parts,
                            in->n_nodes, parts, ST_TOPO_MAX_NODES);
    struct st_topology t;
    memset(&t, 0, sizeof t);
    t.numa = in->numa;
    for (uint32_t i = 0; i < in->n_nodes; i++) {
        const struct st_topo_node *src = &in->node[i];
        if (src->n_cpus < parts)
            return st_error_set(e, "st_topology_split(%u parts): node %u (memory node %d) has "
                                   "only %u CPUs", parts, i, src->mem_node, src->n_cpus);
        int cpus[CPU_SETSIZE];
        uint32_t n = 0;
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
            if (CPU_ISSET(cpu, &src->cpus)) cpus[n++] = cpu;
        for (uint32_t p = 0; p < parts; p++) {
            uint32_t begin, count;
            st_cpu_list_split(n, parts, p, &begin, &count);
            struct st_topo_node *dst = &t.node[t.n_nodes++];
            dst->mem_node = src->mem_node;
            CPU_ZERO(&dst->cpus);
            for (uint32_t c = begin; c < begin + count; c++) CPU_SET(cpus[c], &dst->cpus);
            dst->n_cpus = count;
        }
    }
    *out = t;
    return 0;
}
