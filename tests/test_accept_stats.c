// The acceptance estimates of adaptive K (coordinator/accept_stats.h):
// rounds drawn from a known acceptance process give back its expected
// tokens per round (a little low, by design), per-depth counts capture
// acceptance that comes in runs (where one per-token rate would mislead),
// and a session's start from its node's figures keeps their rates but
// weighs only a few rounds.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "coordinator/accept_stats.h"

static uint64_t rng_state = 0x13198a2e03707344u;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

// A round of K drafts: draft 1 is accepted with probability first, each
// later one (given its predecessors) with probability later.
static uint32_t draw_round(uint32_t K, double first, double later)
{
    uint32_t m = 0;
    while (m < K && uniform() < (m == 0 ? first : later)) m++;
    return m;
}

static double true_tokens(uint32_t K, double first, double later)
{
    double tokens = 1, surv = 1;
    for (uint32_t i = 1; i <= K; i++) surv *= i == 1 ? first : later, tokens += surv;
    return tokens;
}

static void test_empty(void **state)
{
    (void)state;
    struct st_accept_stats a = {0};
    assert_true(st_accept_expected_tokens(&a, 8) == 1);
}

// The counts decay (about the last 20 rounds count), so one reading is
// noisy: the mean of the readings after every round from the 100th on is
// what must match, with the mean per-token estimate.
static void mean_estimates(double first, double later, double *tokens, double *ema)
{
    struct st_accept_stats a = {0};
    for (uint32_t K = 0; K <= 8; K++) tokens[K] = 0;
    *ema = 0;
    for (int i = 0; i < 600; i++) {
        st_accept_add(&a, 8, draw_round(8, first, later));
        if (i < 100) continue;
        for (uint32_t K = 1; K <= 8; K++) tokens[K] += st_accept_expected_tokens(&a, K) / 500;
        *ema += a.ema / 500;
    }
}

// The estimate is on the low side by design (accept_stats.h): within 15%
// below the truth, never much above it.
static bool close_below(double est, double truth) { return est / truth > 0.85 && est / truth < 1.05; }

static void test_independent_acceptance(void **state)
{
    (void)state;
    double tokens[9], ema;
    mean_estimates(0.8, 0.8, tokens, &ema);
    assert_true(ema > 0.5 && ema < 0.7); // each round's share, averaged: low
    for (uint32_t K = 1; K <= 8; K++) {
        assert_true(close_below(tokens[K], true_tokens(K, 0.8, 0.8)));
        if (K > 1) assert_true(tokens[K] > tokens[K - 1]);
    }
}

// Acceptance in runs: the first draft is mostly rejected, but once one is
// accepted the next ones nearly always are.  The per-token estimate alone
// (about 0.3) would predict under half the tokens K 8 brings.
static void test_runs_of_acceptance(void **state)
{
    (void)state;
    double tokens[9], ema;
    mean_estimates(0.3, 0.98, tokens, &ema);
    double want = true_tokens(8, 0.3, 0.98);
    assert_true(fabs(tokens[1] / true_tokens(1, 0.3, 0.98) - 1) < 0.1);
    assert_true(tokens[8] / want > 0.8 && tokens[8] / want < 1.05);
    assert_true(true_tokens(8, ema, ema) / want < 0.6);
}

// Only depths a round reached are counted: the first m + 1 of K.
static void test_counts(void **state)
{
    (void)state;
    struct st_accept_stats a = {0};
    st_accept_add(&a, 4, 2); // drafts 1, 2 accepted, 3 rejected, 4 never examined
    assert_true(a.tried[1] == 1 && a.tried[2] == 1 && a.tried[3] == 1 && a.tried[4] == 0);
    assert_true(a.passed[1] == 1 && a.passed[2] == 1 && a.passed[3] == 0);
    assert_true(fabs(a.ema - 2.0 / 3.0) < 1e-9); // the first round sets the estimate
    st_accept_add(&a, 2, 2); // all accepted: both examined
    assert_true(fabs(a.tried[1] - 1.95) < 1e-9 && fabs(a.tried[3] - 0.95) < 1e-9);
    assert_true(fabs(a.ema - (0.8 * 2.0 / 3.0 + 0.2)) < 1e-9);
    for (uint32_t i = 1; i <= ST_ACCEPT_MAX_K; i++) assert_true(a.passed[i] <= a.tried[i]);
    st_accept_add(&a, ST_ACCEPT_MAX_K + 4, ST_ACCEPT_MAX_K + 4); // past the table: no overrun
    assert_true(a.tried[ST_ACCEPT_MAX_K] > 0);
}

static void test_start_from_node(void **state)
{
    (void)state;
    struct st_accept_stats node = {0}, s;
    st_accept_start(&s, &node, 4, 0.7); // a node without rounds: the fallback
    assert_true(s.ema == 0.7 && s.tried[1] == 0);
    for (int i = 0; i < 100; i++) st_accept_add(&node, 8, draw_round(8, 0.9, 0.9));
    st_accept_start(&s, &node, 4, 0.7);
    assert_true(s.ema == node.ema);
    assert_true(fabs(s.tried[1] - 4) < 1e-9);
    for (uint32_t i = 1; i <= 8; i++)
        if (node.tried[i] > 0) assert_true(fabs(s.passed[i] / s.tried[i] - node.passed[i] / node.tried[i]) < 1e-9);
    // The session's own rounds soon outweigh the start: a draft that stopped agreeing.
    for (int i = 0; i < 12; i++) st_accept_add(&s, 8, 0);
    assert_true(st_accept_expected_tokens(&s, 1) < 1.3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_independent_acceptance),
        cmocka_unit_test(test_runs_of_acceptance),
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_start_from_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
