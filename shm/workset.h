// The control block of one worker set, in its region's control section: the
// ranks' barrier and work counters, and one slot per rank.  The coordinator
// reserves a rank's slot before it forks the worker; the worker marks it
// active once it has attached and built its plans, so a worker that exits
// while active has crashed.  The coordinator only stores to these words; it
// never takes a lock here.
#ifndef ST_SHM_WORKSET_H
#define ST_SHM_WORKSET_H

#include <stdatomic.h>
#include <stdint.h>

#include "shm/sync.h"

#define ST_SET_MAGIC UINT64_C(0x3154455357545324) // "$STWSET1"
#define ST_SET_MAX_RANKS 128

enum st_rank_state {
    ST_RANK_FREE = 0,
    ST_RANK_RESERVED = 1, // slot taken by the coordinator, process starting
    ST_RANK_ACTIVE = 2,   // attached, plans built, serving steps
    ST_RANK_EXITED = 3,   // left cleanly (shutdown)
};

struct st_rank_slot {
    _Alignas(64) _Atomic int32_t pid;
    _Atomic uint32_t state;       // enum st_rank_state
    _Atomic uint32_t cpu;
    _Atomic uint32_t generation;  // bumped at each (re)start of this rank
    _Atomic uint64_t steps_done;
    // Liveness inside a step: the step being run and the barriers passed in
    // it.  Stored by the rank at every barrier; a rank whose pair stays
    // behind the others' while nothing moves is the one that hangs.
    _Atomic uint64_t step_id;
    _Atomic uint32_t step_barriers;
};

struct st_set_control {
    uint64_t magic;   // ST_SET_MAGIC
    uint32_t n_ranks;
    uint32_t node;
    struct st_barrier barrier;
    struct st_rank_slot ranks[ST_SET_MAX_RANKS];
};

#endif
