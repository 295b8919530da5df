// The acceptance governor (coordinator/governor.h): a good draft at a long K
// is not suspended for the drafts after a rejection; a draft that never
// agrees is suspended within two rounds and probed with a doubling wait; a
// weak one within four; a passing probe resumes drafting; off means off.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "coordinator/governor.h"

// Rounds (K, accepted) of the 3B pair's Q4_0 draft under adaptive K (68%
// acceptance over the run).  Accepted / drafted over rounds 3-10 is 6 / 22,
// under 0.30; accepted / examined is 6 / 11.
static const uint32_t trace[][2] = {{2, 2}, {3, 3}, {6, 0}, {3, 1}, {2, 0}, {1, 1}, {1, 1}, {3, 3}, {3, 0}, {3, 0},
                                    {2, 2}, {3, 3}, {3, 3}, {3, 1}, {3, 3}, {2, 1}, {3, 1}, {3, 3}, {3, 3}, {4, 4},
                                    {4, 4}, {5, 0}, {4, 1}, {2, 2}, {4, 2}, {3, 3}, {4, 4}, {5, 5}, {5, 5}, {5, 5}};

static void test_good_draft_at_long_k_keeps_drafting(void **state)
{
    (void)state;
    struct st_governor g;
    st_governor_reset(&g, true, 0.30f);
    for (size_t i = 0; i < sizeof trace / sizeof trace[0]; i++) {
        assert_false(st_governor_probe_due(&g));
        st_governor_update(&g, trace[i][0], trace[i][1], false);
        assert_true(g.drafting);
    }
    // K = 8 with the first two accepted every round: 25% of the drafts, 67% of those examined.
    for (int i = 0; i < 20; i++) {
        st_governor_update(&g, 8, 2, false);
        assert_true(g.drafting);
    }
}

// Target-only steps until a probe is due.
static uint32_t steps_to_probe(struct st_governor *g)
{
    uint32_t n = 1;
    while (!st_governor_probe_due(g)) n++;
    return n;
}

static void test_collapse_suspends_and_probes_back_off(void **state)
{
    (void)state;
    struct st_governor g;
    st_governor_reset(&g, true, 0.30f);
    st_governor_update(&g, 4, 0, false);
    assert_true(g.drafting); // one round is not enough
    st_governor_update(&g, 4, 0, false);
    assert_false(g.drafting);
    const uint32_t waits[] = {32, 64, 128, 256, 256};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(steps_to_probe(&g), waits[i]);
        st_governor_update(&g, 2, 0, true); // the probe fails
        assert_false(g.drafting);
    }
    assert_int_equal(steps_to_probe(&g), 256);
    st_governor_update(&g, 2, 1, true); // 1 of 2 examined: passes
    assert_true(g.drafting);
    assert_false(st_governor_probe_due(&g));
    // A later collapse (the probe's accepted draft still in the window:
    // four rounds) waits 32 steps again.
    for (int i = 0; i < 3; i++) {
        assert_true(g.drafting);
        st_governor_update(&g, 4, 0, false);
    }
    assert_false(g.drafting);
    assert_int_equal(steps_to_probe(&g), 32);
}

static void test_weak_draft_suspends_after_four_rounds(void **state)
{
    (void)state;
    struct st_governor g;
    st_governor_reset(&g, true, 0.30f);
    // One accepted in 4 rounds of K = 4: 1 of 5 examined, 20%.
    const uint32_t m[] = {1, 0, 0, 0};
    for (int i = 0; i < 3; i++) {
        st_governor_update(&g, 4, m[i], false);
        assert_true(g.drafting);
    }
    st_governor_update(&g, 4, m[3], false);
    assert_false(g.drafting);
}

static void test_off_never_suspends(void **state)
{
    (void)state;
    struct st_governor g;
    st_governor_reset(&g, false, 0.30f);
    for (int i = 0; i < 100; i++) {
        st_governor_update(&g, 4, 0, false);
        assert_true(g.drafting);
        assert_false(st_governor_probe_due(&g));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_draft_at_long_k_keeps_drafting),
        cmocka_unit_test(test_collapse_suspends_and_probes_back_off),
        cmocka_unit_test(test_weak_draft_suspends_after_four_rounds),
        cmocka_unit_test(test_off_never_suspends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
