// Abortable cross-process barrier (see shm/sync.h).
//
// Lost wake-ups: a waiter reads the futex word `wake` before it checks the
// generation and the abort epoch, and every event that ends a wait (release,
// abort) changes `wake` after changing what the waiter checks, so FUTEX_WAIT
// on a stale value returns at once.  The releaser skips FUTEX_WAKE when
// `sleepers` is 0: waiter (sleepers++, then FUTEX_WAIT) and releaser (wake++,
// then read sleepers) use sequentially consistent operations, so at least one
// of them sees the other.
#include "shm/sync.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

uint64_t st_shm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Shared (not FUTEX_PRIVATE_FLAG) futex operations: the word lives in a
// MAP_SHARED mapping used by several processes.
static void futex_wait(_Atomic uint32_t *word, uint32_t expect, uint64_t deadline_ns)
{
    struct timespec ts, *tp = NULL;
    if (deadline_ns) {
        ts.tv_sec = (time_t)(deadline_ns / 1000000000u);
        ts.tv_nsec = (long)(deadline_ns % 1000000000u);
        tp = &ts;
    }
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time.  EAGAIN
    // (word changed), EINTR and ETIMEDOUT all send the caller back to its checks.
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET, expect, tp, NULL,
            FUTEX_BITSET_MATCH_ANY);
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void st_barrier_init(struct st_barrier *b, uint32_t n_ranks, uint64_t spin_ns)
{
    ST_ASSERT(n_ranks > 0);
    atomic_init(&b->arrived, 0);
    atomic_init(&b->generation, 0);
    atomic_init(&b->wake, 0);
    atomic_init(&b->sleepers, 0);
    atomic_init(&b->abort_epoch, 0);
    atomic_init(&b->reset_epoch, 0);
    b->n_ranks = n_ranks;
    b->pad = 0;
    b->spin_ns = spin_ns;
    for (int i = 0; i < ST_BARRIER_WORK_COUNTERS; i++) atomic_init(&b->work[i].next, 0);
}

bool st_barrier_aborted(const struct st_barrier *b)
{
    return atomic_load_explicit(&b->abort_epoch, memory_order_acquire) !=
           atomic_load_explicit(&b->reset_epoch, memory_order_acquire);
}

static int aborted_error(const struct st_barrier *b, struct st_error *e)
{
    st_error_set(e, "barrier of %" PRIu32 " ranks aborted by the coordinator (abort epoch %"
                    PRIu32 ")", b->n_ranks, atomic_load(&b->abort_epoch));
    return ST_BARRIER_ABORTED;
}

// The last arrival: zero the phase's work counters, then open the barrier.
static void release(struct st_barrier *b, uint32_t gen)
{
    for (int i = 0; i < ST_BARRIER_WORK_COUNTERS; i++)
        if (atomic_load_explicit(&b->work[i].next, memory_order_relaxed))
            atomic_store_explicit(&b->work[i].next, 0, memory_order_relaxed);
    atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
    atomic_store_explicit(&b->generation, gen + 1, memory_order_release);
    atomic_fetch_add_explicit(&b->wake, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst)) futex_wake_all(&b->wake);
}

int st_barrier_wait(struct st_barrier *b, uint64_t deadline_ns, struct st_error *e)
{
    // The generation cannot move before this rank arrives, so `gen` is the
    // one this arrival belongs to.
    uint32_t gen = atomic_load_explicit(&b->generation, memory_order_acquire);
    if (st_barrier_aborted(b)) return aborted_error(b, e);
    uint32_t n = b->n_ranks;
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) + 1 == n) {
        release(b, gen);
        return ST_BARRIER_OK;
    }
    uint64_t now = st_shm_now_ns(), spin_end = now + b->spin_ns;
    for (unsigned iter = 1;; iter++) {
        uint32_t w = atomic_load_explicit(&b->wake, memory_order_seq_cst);
        if (atomic_load_explicit(&b->generation, memory_order_acquire) != gen)
            return ST_BARRIER_OK;
        if (st_barrier_aborted(b)) return aborted_error(b, e);
        if ((iter & 63) == 0) now = st_shm_now_ns();
        if (deadline_ns && now >= deadline_ns) {
            st_error_set(e, "barrier deadline passed with %" PRIu32 " of %" PRIu32
                            " ranks arrived", atomic_load(&b->arrived), n);
            return ST_BARRIER_TIMEOUT;
        }
        if (now < spin_end) {
            cpu_relax();
            continue;
        }
        atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
        futex_wait(&b->wake, w, deadline_ns);
        atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
        now = st_shm_now_ns();
    }
}

uint32_t st_barrier_abort(struct st_barrier *b)
{
    uint32_t epoch = atomic_fetch_add_explicit(&b->abort_epoch, 1, memory_order_seq_cst) + 1;
    atomic_fetch_add_explicit(&b->wake, 1, memory_order_seq_cst);
    futex_wake_all(&b->wake);
    return epoch;
}

void st_barrier_reset(struct st_barrier *b, uint32_t n_ranks)
{
    ST_ASSERT(n_ranks > 0);
    atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
    b->n_ranks = n_ranks;
    for (int i = 0; i < ST_BARRIER_WORK_COUNTERS; i++)
        atomic_store_explicit(&b->work[i].next, 0, memory_order_relaxed);
    atomic_store_explicit(&b->reset_epoch, atomic_load(&b->abort_epoch), memory_order_release);
}
