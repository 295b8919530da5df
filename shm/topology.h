// Which CPUs belong to which memory node, and splitting one node's CPUs into
// several virtual nodes so that the multi-node code paths (one worker set and
// one region per node) run on a one-node machine.
#ifndef ST_SHM_TOPOLOGY_H
#define ST_SHM_TOPOLOGY_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define ST_TOPO_MAX_NODES 64

struct st_topo_node {
    int32_t mem_node; // NUMA node its memory is bound to, -1 without NUMA
    uint32_t n_cpus;
    cpu_set_t cpus;   // CPUs of this (virtual) node that this process may use
};

struct st_topology {
    bool numa;        // numa_available() >= 0
    uint32_t n_nodes;
    struct st_topo_node node[ST_TOPO_MAX_NODES];
};

// Nodes that have CPUs this process may run on (sched_getaffinity), from
// libnuma; one node with mem_node -1 when NUMA is unavailable.
int st_topology_detect(struct st_topology *t, struct st_error *e);

// Splits each node of `in` into `parts` virtual nodes with contiguous,
// nearly equal CPU lists (the first ones get one more CPU when it does not
// divide) and the same mem_node.  Fails when a node has fewer CPUs than parts.
int st_topology_split(const struct st_topology *in, uint32_t parts, struct st_topology *out,
                      struct st_error *e);

// The same split on a plain list: CPUs [*begin, *begin + *count) of `n_cpus`
// go to virtual node `part` of `parts`.
void st_cpu_list_split(uint32_t n_cpus, uint32_t parts, uint32_t part, uint32_t *begin,
                       uint32_t *count);

#endif
