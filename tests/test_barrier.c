// Barriers and work counters across real processes: 10^5 barriers with no
// rank running ahead; SIGKILL of one rank, then abort: every survivor back
// within 10 ms, and the barrier reusable after a reset; a SIGSTOPped rank
// does not keep the others from finishing a dynamically claimed op, and the
// counters are zeroed by the barrier for the next op; deadlines.
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"

#define MAX_RANKS 4
#define ITEMS 3000
#define ITEMS2 777
#define SEC UINT64_C(1000000000)

// Test state in the region's control section, shared by all ranks.
struct shared {
    struct st_barrier bar;
    _Alignas(64) _Atomic uint64_t arrivals; // bumped by every rank before every barrier
    _Atomic uint32_t go;                    // parent -> ranks: start the next phase
    _Atomic uint32_t done_items;
    _Atomic int32_t ret_code[MAX_RANKS];
    _Atomic uint64_t ret_ns[MAX_RANKS];
    _Atomic uint32_t returned;
    _Atomic uint32_t claimed[MAX_RANKS];     // items claimed per rank, op 1
    _Atomic uint8_t owner1[ITEMS];           // rank + 1 that computed each item, op 1
    _Atomic uint8_t count1[ITEMS];           // times each item was computed, op 1
    _Atomic uint8_t count2[ITEMS2];          // op 2
};

static struct st_region *region;
static struct shared *sh;

static int setup(void **state)
{
    (void)state;
    struct st_region_config cfg = {.name = "test_barrier", .mem_node = 0,
                                   .huge = ST_REGION_HUGE_OFF,
                                   .section_bytes = {[ST_REGION_CONTROL] = sizeof(struct shared)}};
    struct st_error e;
    if (st_region_create(&cfg, &region, &e) < 0) fail_msg("%s", e.msg);
    uint64_t off;
    if (st_region_alloc(region, ST_REGION_CONTROL, sizeof *sh, 64, &off, &e) < 0)
        fail_msg("%s", e.msg);
    sh = (struct shared *)((uint8_t *)st_region_section(region, ST_REGION_CONTROL, NULL) + off);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    st_region_close(&region);
    return 0;
}

static void reset_shared(uint32_t n_ranks, uint64_t spin_ns)
{
    memset(sh, 0, sizeof *sh);
    st_barrier_init(&sh->bar, n_ranks, spin_ns);
}

static pid_t spawn(int (*fn)(int rank, int arg), int rank, int arg)
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive a failed test
        _exit(fn(rank, arg));
    }
    return pid;
}

static void expect_exit0(pid_t pid)
{
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("rank pid %d: %s %d", (int)pid, WIFEXITED(status) ? "exit" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

// `iters` barriers; after barrier i every rank has arrived i+1 times and no
// rank has arrived more than i+2 times.
static int rank_rounds(int rank, int iters)
{
    (void)rank;
    struct st_error e;
    uint64_t n = sh->bar.n_ranks, deadline = st_shm_now_ns() + 60 * SEC;
    for (uint64_t i = 0; i < (uint64_t)iters; i++) {
        atomic_fetch_add(&sh->arrivals, 1);
        if (st_barrier_wait(&sh->bar, deadline, &e) != ST_BARRIER_OK) {
            fprintf(stderr, "rank %d round %" PRIu64 ": %s\n", rank, i, e.msg);
            return 1;
        }
        uint64_t a = atomic_load(&sh->arrivals);
        if (a < n * (i + 1) || a > n * (i + 1) + n - 1) {
            fprintf(stderr, "rank %d round %" PRIu64 ": %" PRIu64 " arrivals\n", rank, i, a);
            return 2;
        }
    }
    return 0;
}

static void run_rounds(uint32_t n, int iters, uint64_t spin_ns)
{
    reset_shared(n, spin_ns);
    pid_t pids[MAX_RANKS];
    uint64_t t0 = st_shm_now_ns();
    for (uint32_t r = 0; r < n; r++) pids[r] = spawn(rank_rounds, (int)r, iters);
    for (uint32_t r = 0; r < n; r++) expect_exit0(pids[r]);
    double us = (double)(st_shm_now_ns() - t0) / iters / 1e3;
    printf("  %u ranks, spin %" PRIu64 " us: %d barriers, %.2f us each\n", n, spin_ns / 1000,
           iters, us);
    assert_int_equal(atomic_load(&sh->arrivals), (uint64_t)n * (uint64_t)iters);
}

static void test_many_barriers(void **state)
{
    (void)state;
    run_rounds(2, 100000, ST_BARRIER_DEFAULT_SPIN_NS);
    run_rounds(3, 100000, 0); // more ranks than cores here: sleep at once
    // Spinning ranks take the core from the one the others wait for, so each
    // barrier costs about one spin period when ranks outnumber cores.
    run_rounds(3, 10000, ST_BARRIER_DEFAULT_SPIN_NS);
}

// Survivors wait at the barrier a dead rank never reaches; after the
// abort they record the time and the result, then wait for `go` and run
// 1000 rounds with the replacement rank.
static int rank_survivor(int rank, int arg)
{
    (void)arg;
    struct st_error e;
    int rc = st_barrier_wait(&sh->bar, st_shm_now_ns() + 30 * SEC, &e);
    atomic_store(&sh->ret_ns[rank], st_shm_now_ns());
    atomic_store(&sh->ret_code[rank], rc);
    atomic_fetch_add(&sh->returned, 1);
    if (rc != ST_BARRIER_ABORTED) return 3;
    if (!strstr(e.msg, "aborted by the coordinator")) return 4;
    while (!atomic_load(&sh->go)) usleep(200);
    return rank_rounds(rank, 1000);
}

static int rank_doomed(int rank, int arg)
{
    (void)rank;
    (void)arg;
    pause(); // killed before it reaches the barrier
    return 9;
}

static void test_kill_abort_reset(void **state)
{
    (void)state;
    reset_shared(3, ST_BARRIER_DEFAULT_SPIN_NS);
    pid_t a = spawn(rank_survivor, 0, 0), b = spawn(rank_survivor, 1, 0);
    pid_t doomed = spawn(rank_doomed, 2, 0);
    uint64_t until = st_shm_now_ns() + 10 * SEC;
    while (atomic_load(&sh->bar.arrived) < 2 && st_shm_now_ns() < until) usleep(500);
    assert_int_equal(atomic_load(&sh->bar.arrived), 2);
    assert_int_equal(kill(doomed, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(doomed, &status, 0), doomed);
    assert_true(WIFSIGNALED(status));
    usleep(20000); // the survivors are asleep in FUTEX_WAIT by now
    assert_int_equal(atomic_load(&sh->returned), 0);

    uint64_t t0 = st_shm_now_ns();
    uint32_t epoch = st_barrier_abort(&sh->bar);
    assert_int_equal(epoch, 1);
    while (atomic_load(&sh->returned) < 2 && st_shm_now_ns() < t0 + 5 * SEC) usleep(100);
    assert_int_equal(atomic_load(&sh->returned), 2);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(atomic_load(&sh->ret_code[r]), ST_BARRIER_ABORTED);
        double ms = (double)(atomic_load(&sh->ret_ns[r]) - t0) / 1e6;
        printf("  survivor %d back %.3f ms after the abort\n", r, ms);
        assert_true(ms < 10.0);
    }
    // A late arrival after the abort returns at once, without counting.
    struct st_error e;
    assert_true(st_barrier_aborted(&sh->bar));
    assert_int_equal(st_barrier_wait(&sh->bar, 0, &e), ST_BARRIER_ABORTED);

    // Reset, replace the dead rank, and meet again.
    st_barrier_reset(&sh->bar, 3);
    assert_false(st_barrier_aborted(&sh->bar));
    atomic_store(&sh->arrivals, 0);
    pid_t c = spawn(rank_rounds, 2, 1000);
    atomic_store(&sh->go, 1);
    expect_exit0(a);
    expect_exit0(b);
    expect_exit0(c);
    assert_int_equal(atomic_load(&sh->arrivals), 3000);
}

static void busy_ns(uint64_t ns)
{
    uint64_t end = st_shm_now_ns() + ns;
    while (st_shm_now_ns() < end) {
    }
}

// Op 1: ITEMS items claimed 8 at a time from counter 0; barrier (the last
// arrival zeroes the counters); op 2: ITEMS2 items, 5 at a time, from the
// same counter; barrier.
static int rank_claimer(int rank, int arg)
{
    (void)arg;
    struct st_error e;
    while (!atomic_load(&sh->go)) usleep(100);
    uint64_t begin, end;
    struct st_work_counter *c = st_barrier_work(&sh->bar, 0);
    while (st_work_claim(c, 8, ITEMS, &begin, &end)) {
        for (uint64_t i = begin; i < end; i++) {
            busy_ns(2000); // a row's worth of work
            atomic_store(&sh->owner1[i], (uint8_t)(rank + 1));
            atomic_fetch_add(&sh->count1[i], 1);
            atomic_fetch_add(&sh->claimed[rank], 1);
            atomic_fetch_add(&sh->done_items, 1);
        }
    }
    uint64_t deadline = st_shm_now_ns() + 60 * SEC;
    if (st_barrier_wait(&sh->bar, deadline, &e) != ST_BARRIER_OK) return 5;
    while (st_work_claim(c, 5, ITEMS2, &begin, &end))
        for (uint64_t i = begin; i < end; i++) atomic_fetch_add(&sh->count2[i], 1);
    if (st_barrier_wait(&sh->bar, deadline, &e) != ST_BARRIER_OK) return 6;
    return 0;
}

static void test_stopped_rank(void **state)
{
    (void)state;
    reset_shared(3, ST_BARRIER_DEFAULT_SPIN_NS);
    pid_t pids[3];
    for (int r = 0; r < 3; r++) pids[r] = spawn(rank_claimer, r, 0);
    assert_int_equal(kill(pids[1], SIGSTOP), 0);
    int status;
    assert_int_equal(waitpid(pids[1], &status, WUNTRACED), pids[1]);
    assert_true(WIFSTOPPED(status));
    atomic_store(&sh->go, 1);
    uint64_t t0 = st_shm_now_ns();
    while (atomic_load(&sh->done_items) < ITEMS && st_shm_now_ns() < t0 + 20 * SEC) usleep(500);
    printf("  op of %d items finished by 2 of 3 ranks in %.1f ms (rank 1 stopped)\n", ITEMS,
           (double)(st_shm_now_ns() - t0) / 1e6);
    assert_int_equal(atomic_load(&sh->done_items), ITEMS);
    assert_int_equal(atomic_load(&sh->claimed[1]), 0);
    assert_int_equal(kill(pids[1], SIGCONT), 0);
    for (int r = 0; r < 3; r++) expect_exit0(pids[r]);
    assert_int_equal(atomic_load(&sh->claimed[0]) + atomic_load(&sh->claimed[2]), ITEMS);
    assert_int_equal(atomic_load(&sh->claimed[1]), 0);
    for (int i = 0; i < ITEMS; i++) {
        assert_int_equal(atomic_load(&sh->count1[i]), 1);
        assert_true(atomic_load(&sh->owner1[i]) == 1 || atomic_load(&sh->owner1[i]) == 3);
    }
    for (int i = 0; i < ITEMS2; i++) assert_int_equal(atomic_load(&sh->count2[i]), 1);
}

static void test_deadline(void **state)
{
    (void)state;
    struct st_error e;
    const uint64_t spins[] = {0, ST_BARRIER_DEFAULT_SPIN_NS, 200 * 1000000ull};
    for (int i = 0; i < 3; i++) {
        reset_shared(2, spins[i]); // the other rank never comes
        uint64_t t0 = st_shm_now_ns();
        int rc = st_barrier_wait(&sh->bar, t0 + 30 * 1000000ull, &e);
        double ms = (double)(st_shm_now_ns() - t0) / 1e6;
        printf("  spin %" PRIu64 " us: deadline 30 ms, back after %.2f ms: %s\n",
               spins[i] / 1000, ms, e.msg);
        assert_int_equal(rc, ST_BARRIER_TIMEOUT);
        assert_non_null(strstr(e.msg, "1 of 2 ranks arrived"));
        assert_true(ms >= 30.0 && ms < 250.0); // upper bound: scheduling on a busy machine
        // Unusable until reset; then two ranks meet again.
        st_barrier_reset(&sh->bar, 2);
        pid_t a = spawn(rank_rounds, 0, 200), b = spawn(rank_rounds, 1, 200);
        expect_exit0(a);
        expect_exit0(b);
    }
    // A deadline already past returns at once.
    reset_shared(2, ST_BARRIER_DEFAULT_SPIN_NS);
    assert_int_equal(st_barrier_wait(&sh->bar, 1, &e), ST_BARRIER_TIMEOUT);
}

static void test_claim_single(void **state)
{
    (void)state;
    reset_shared(1, 0);
    struct st_work_counter *c = st_barrier_work(&sh->bar, 3);
    uint64_t begin, end, next = 0;
    while (st_work_claim(c, 7, 100, &begin, &end)) {
        assert_int_equal(begin, next);
        assert_true(end - begin == 7 || (end == 100 && begin == 98));
        next = end;
    }
    assert_int_equal(next, 100);
    assert_false(st_work_claim(c, 7, 100, &begin, &end));
    // One rank: every barrier completes at once and zeroes the counters.
    struct st_error e;
    assert_int_equal(st_barrier_wait(&sh->bar, 0, &e), ST_BARRIER_OK);
    assert_true(st_work_claim(c, 7, 100, &begin, &end));
    assert_int_equal(begin, 0);
    // Abort is sticky until reset.
    st_barrier_abort(&sh->bar);
    assert_int_equal(st_barrier_wait(&sh->bar, 0, &e), ST_BARRIER_ABORTED);
    assert_int_equal(st_barrier_wait(&sh->bar, 0, &e), ST_BARRIER_ABORTED);
    st_barrier_reset(&sh->bar, 1);
    assert_int_equal(st_barrier_wait(&sh->bar, 0, &e), ST_BARRIER_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_single),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_kill_abort_reset),
        cmocka_unit_test(test_stopped_rank),
        cmocka_unit_test(test_many_barriers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
