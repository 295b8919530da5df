// The round cost model of adaptive K (coordinator/round_cost.h): rounds of a
// known cost with noise, at the few K a session explores, predict every K;
// the fit follows the host when it slows down and a cost that is not a line
// in K; with one K only, the slope comes from the prior; rounds without a
// draft figure are ignored.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "coordinator/round_cost.h"

static uint64_t rng_state = 0x243f6a8885a308d3u;
static double noise(double amp) // uniform in [-amp, amp]
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return amp * (2.0 * (double)(rng_state >> 11) / 9007199254740992.0 - 1.0);
}

// A round with K drafts on a host `speed` times slower than the base:
// 40 ms per draft forward, verify 200 ms + 30 ms per extra row, +-10% noise.
static void add_round(struct st_round_cost *c, uint32_t K, double speed)
{
    double draft = K * 0.040 * speed * (1 + noise(0.1));
    double rest = (0.200 + 0.030 * K) * speed * (1 + noise(0.1));
    st_round_cost_add(c, K, draft, draft + rest);
}

static double truth(uint32_t K, double speed) { return (K * 0.070 + 0.200) * speed; }

static void test_predicts_every_k(void **state)
{
    (void)state;
    struct st_round_cost c = {0};
    assert_true(st_round_cost_predict(&c, 3, 0.01) == 0);
    // Mostly K = 3, a neighbour every few rounds, as choose_k explores.
    static const uint32_t ks[] = {3, 3, 4, 3, 3, 2, 3, 3};
    for (int i = 0; i < 200; i++) add_round(&c, ks[i % 8], 1.0);
    for (uint32_t K = 1; K <= 8; K++) {
        double p = st_round_cost_predict(&c, K, 0.010);
        assert_true(fabs(p / truth(K, 1.0) - 1) < 0.06);
    }
    // Predictions grow with K.
    for (uint32_t K = 2; K <= 16; K++)
        assert_true(st_round_cost_predict(&c, K, 0.010) > st_round_cost_predict(&c, K - 1, 0.010));
}

static void test_follows_the_host(void **state)
{
    (void)state;
    struct st_round_cost c = {0};
    static const uint32_t ks[] = {2, 3, 4, 3};
    for (int i = 0; i < 100; i++) add_round(&c, ks[i % 4], 1.0);
    // The host slows by half: within 60 rounds every K's prediction has
    // moved, though K = 5 was never run at either speed.
    for (int i = 0; i < 60; i++) add_round(&c, ks[i % 4], 1.5);
    for (uint32_t K = 1; K <= 5; K++)
        assert_true(fabs(st_round_cost_predict(&c, K, 0.010) / truth(K, 1.5) - 1) < 0.08);
}

// The verify of 3 and 4 rows costs the same and 5 rows a quarter more (the
// kernels change their loop past 4 rows), +-5% noise: the K explored get
// their own cost, which a line through them misses by 7% at K = 2.
static void test_follows_a_step_in_cost(void **state)
{
    (void)state;
    struct st_round_cost c = {0};
    static const uint32_t ks[] = {3, 3, 4, 3, 3, 2, 3, 3};
    for (int i = 0; i < 200; i++) {
        uint32_t K = ks[i % 8];
        double draft = K * 0.040 * (1 + noise(0.05));
        double rest = (K <= 3 ? 0.200 : 0.250) * (1 + noise(0.05));
        st_round_cost_add(&c, K, draft, draft + rest);
    }
    for (uint32_t K = 2; K <= 4; K++) {
        double truth_k = K * 0.040 + (K <= 3 ? 0.200 : 0.250);
        assert_true(fabs(st_round_cost_predict(&c, K, 0.010) / truth_k - 1) < 0.04);
    }
}

static void test_one_k_uses_the_prior(void **state)
{
    (void)state;
    struct st_round_cost c = {0};
    for (int i = 0; i < 50; i++) st_round_cost_add(&c, 4, 0.160, 0.160 + 0.248);
    // rest(4) = 0.248 measured; one more row costs the prior's 0.02.
    assert_true(fabs(st_round_cost_predict(&c, 4, 0.020) - 0.408) < 1e-9);
    assert_true(fabs(st_round_cost_predict(&c, 5, 0.020) - (0.200 + 0.248 + 0.020)) < 1e-9);
    assert_true(fabs(st_round_cost_predict(&c, 2, 0.020) - (0.080 + 0.248 - 0.040)) < 1e-9);
}

static void test_ignores_rounds_without_figures(void **state)
{
    (void)state;
    struct st_round_cost c = {0};
    st_round_cost_add(&c, 3, 0, 0.5);     // no draft figure
    st_round_cost_add(&c, 0, 0.1, 0.5);   // not a speculative round
    st_round_cost_add(&c, 3, 0.6, 0.5);   // draft longer than the round
    assert_true(st_round_cost_predict(&c, 3, 0.01) == 0);
    st_round_cost_add(&c, 3, 0.12, 0.35);
    assert_true(fabs(st_round_cost_predict(&c, 3, 0.01) - 0.35) < 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_predicts_every_k),
        cmocka_unit_test(test_follows_the_host),
        cmocka_unit_test(test_follows_a_step_in_cost),
        cmocka_unit_test(test_one_k_uses_the_prior),
        cmocka_unit_test(test_ignores_rounds_without_figures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
