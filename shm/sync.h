// Barriers and work counters for the ranks of one worker set, in shared
// memory (the region's control section), across processes.
//
// Barrier: a generation counter; waiters spin with `pause` for a bounded time
// and then sleep on a futex (the shared, not the private, variant: ranks are
// processes).  The coordinator can abort it: every waiter returns
// ST_BARRIER_ABORTED at once and so does every later arrival, until the
// coordinator resets it, so a dead rank never hangs the others.  A deadline
// (absolute CLOCK_MONOTONIC nanoseconds) bounds every wait.
//
// Work counters: each op's rows are claimed in chunks with one fetch_add, so
// a descheduled rank's chunks are taken by the others.  The ops of one phase
// (between two barriers) use distinct counters, indexed by the op's number
// within the phase; the last rank to arrive at the barrier zeroes them before
// it releases the others, so no extra barrier is needed between ops.
#ifndef ST_SHM_SYNC_H
#define ST_SHM_SYNC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define ST_BARRIER_WORK_COUNTERS 16
#define ST_BARRIER_DEFAULT_SPIN_NS 50000 // spin 50 us, then sleep

enum st_barrier_result {
    ST_BARRIER_OK = 0,
    ST_BARRIER_ABORTED = -1, // the coordinator aborted the barrier
    ST_BARRIER_TIMEOUT = -2, // the deadline passed; the barrier needs a reset
};

struct st_work_counter {
    _Alignas(64) _Atomic uint64_t next; // first unclaimed row of the op
};

struct st_barrier {
    // Written by every arrival.
    _Alignas(64) _Atomic uint32_t arrived; // ranks in the current generation
    // Polled by waiters; written once per generation and on abort.
    _Alignas(64) _Atomic uint32_t generation;
    _Atomic uint32_t wake;        // futex word: bumped at every release and abort
    _Atomic uint32_t sleepers;    // waiters inside FUTEX_WAIT (the releaser skips the
                                  // wake syscall when there are none)
    _Atomic uint32_t abort_epoch; // bumped by st_barrier_abort
    _Atomic uint32_t reset_epoch; // abort_epoch at the last reset: aborted while different
    // Read-only between resets.
    _Alignas(64) uint32_t n_ranks;
    uint32_t pad;
    uint64_t spin_ns; // spin this long before sleeping
    struct st_work_counter work[ST_BARRIER_WORK_COUNTERS];
};

// Formats a barrier for `n_ranks` ranks (the coordinator, before forking).
void st_barrier_init(struct st_barrier *b, uint32_t n_ranks, uint64_t spin_ns);

// Waits until all n_ranks ranks arrived.  deadline_ns: absolute
// CLOCK_MONOTONIC time, 0 for none.  Returns an enum st_barrier_result and
// fills e on error.  After ST_BARRIER_TIMEOUT this rank's arrival is still
// counted: the coordinator must abort and reset before the next use.
int st_barrier_wait(struct st_barrier *b, uint64_t deadline_ns, struct st_error *e);

// Makes every waiter and every later arrival return ST_BARRIER_ABORTED until
// the next reset.  Returns the new abort epoch.
uint32_t st_barrier_abort(struct st_barrier *b);

// True while aborted: ranks may poll it between chunks of a long op.
bool st_barrier_aborted(const struct st_barrier *b);

// Makes an aborted (or timed-out) barrier usable again for n_ranks ranks.
// Only when no rank is inside st_barrier_wait: the survivors have reported
// the abort and the dead rank is gone.
void st_barrier_reset(struct st_barrier *b, uint32_t n_ranks);

// Counter for op `index` of the current phase.
static inline struct st_work_counter *st_barrier_work(struct st_barrier *b, uint32_t index)
{
    return &b->work[index % ST_BARRIER_WORK_COUNTERS];
}

// Claims the next chunk of an op of `total` rows: [*begin, *end).  Returns
// false when every row is taken.  One fetch_add; ordering between the rows'
// data comes from the barriers around the op.
static inline bool st_work_claim(struct st_work_counter *c, uint64_t chunk, uint64_t total,
                                 uint64_t *begin, uint64_t *end)
{
    uint64_t b = atomic_fetch_add_explicit(&c->next, chunk, memory_order_relaxed);
    if (b >= total) return false;
    *begin = b;
    *end = total - b < chunk ? total : b + chunk;
    return true;
}

// Monotonic clock in nanoseconds (for deadlines).
uint64_t st_shm_now_ns(void);

#endif
