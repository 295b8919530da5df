// Distribution exactness of speculative sampling through real workers: the
// first generated token over 20000 seeded runs fits the target's own
// (transformed) distribution by a chi-square test, and the first 4 tokens
// jointly match autoregressive sampling by a two-sample chi-square test.  A
// deliberately broken acceptance rule must fail the same test.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sampling/sampling.h"
#include "tests/support/engine_support.h"
#include "tests/support/test_support.h"

#define N_FIRST 20000 // plain temperature configurations
#define N_FIRST_FILTERED 10000 // with top-k / top-p, and the negative control
#define N_JOINT 4000

static struct st_golden_row *rows;
static int n_rows;
static struct st_test_engine T;
static struct st_session *S;
static const struct st_golden_row *R;

// Upper quantile of chi-square with df degrees of freedom at z (Wilson-Hilferty).
static double chi2_crit(double df, double z)
{
    double a = 2.0 / (9.0 * df);
    return df * pow(1 - a + z * sqrt(a), 3);
}

// Chi-square statistic of counts against expected probabilities, bins with
// expected count < 5 merged; returns the statistic, *df the degrees.
static double chi2_fit(const uint32_t *count, const double *p, uint32_t n, uint32_t total, double *df)
{
    double stat = 0, rest_o = 0, rest_e = 0;
    int bins = 0;
    for (uint32_t i = 0; i < n; i++) {
        double e = p[i] * total;
        if (e < 5) {
            rest_o += count[i];
            rest_e += e;
            continue;
        }
        stat += (count[i] - e) * (count[i] - e) / e;
        bins++;
    }
    if (rest_e >= 5) {
        stat += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        bins++;
    } else if (rest_o > 0 && rest_e < 1e-9) {
        stat += 1e9; // mass where the law has none
    }
    *df = bins - 1;
    return stat;
}

static uint32_t first_token(const struct st_gen_params *gp)
{
    struct st_error e;
    if (st_session_rewind(S, gp, &e)) fail_msg("%s", e.msg);
    int32_t out[64];
    enum st_finish fin;
    int n = st_session_round(S, out, 64, &fin, &e);
    if (n < 1) fail_msg("round: %s", e.msg);
    return (uint32_t)out[0];
}

// Samples N_FIRST first tokens and tests them against the exact law p0.
static double first_token_test(const struct st_sampling *smp, bool broken, uint32_t N, double *kl)
{
    uint32_t V = T.eng->n_vocab;
    float *logits = malloc((size_t)R->n_prompt * V * sizeof(float)), *p0 = malloc(V * sizeof(float));
    struct st_error e;
    if (st_engine_logits(T.eng, 0, R->prompt_ids, R->n_prompt, logits, &e)) fail_msg("%s", e.msg);
    st_sample_probs(logits + (size_t)(R->n_prompt - 1) * V, V, smp, p0);
    uint32_t *count = calloc(V, sizeof *count);
    double *p = malloc(V * sizeof *p);
    for (uint32_t i = 0; i < V; i++) p[i] = p0[i];
    struct st_gen_params gp = {.max_tokens = 1, .speculate = true, .k = 3, .sampling = *smp,
                               .test_broken_acceptance = broken};
    for (uint32_t i = 0; i < N; i++) {
        gp.seed = 1000003ull * i + 17;
        count[first_token(&gp)]++;
    }
    double df, stat = chi2_fit(count, p, V, N, &df);
    *kl = 0;
    for (uint32_t i = 0; i < V; i++)
        if (count[i]) *kl += (double)count[i] / N * log((double)count[i] / N / (p[i] > 0 ? p[i] : 1e-300));
    double crit = chi2_crit(df, 3.09); // alpha = 0.001
    printf("  %u runs, T=%.1f top-k %u top-p %.2f%s: chi2 %.1f on %.0f df (critical %.1f), KL(sample || target) %.5f\n",
           N, smp->temperature, smp->top_k, smp->top_p, broken ? " [broken rule]" : "", stat, df, crit, *kl);
    free(logits);
    free(p0);
    free(count);
    free(p);
    return stat / crit; // < 1: passes
}

// ST_DIST_SCALE (0 < s <= 1) shrinks every sample count, for quick local runs.
static uint32_t scaled(uint32_t n)
{
    const char *v = getenv("ST_DIST_SCALE");
    double s = v ? atof(v) : 1.0;
    return s > 0 && s < 1 ? (uint32_t)(n * s) : n;
}

static void test_first_token(void **state)
{
    (void)state;
    struct st_sampling cfg[4] = {{0.7f, 0, 0, 0}, {1.5f, 0, 0, 0}, {0.7f, 40, 0, 0}, {1.5f, 0, 0.9f, 0}};
    double kl;
    for (int i = 0; i < 4; i++) assert_true(first_token_test(&cfg[i], false, scaled(i < 2 ? N_FIRST : N_FIRST_FILTERED), &kl) < 1.0);
    // Negative control: keeping every draft token is not speculative sampling.
    assert_true(first_token_test(&cfg[1], true, scaled(N_FIRST_FILTERED), &kl) > 1.0);
}

// Joint law of the first 4 tokens: speculative vs autoregressive samples.
struct seq {
    uint32_t t[4];
    uint32_t a, b;
};

static int cmp_seq(const void *x, const void *y) { return memcmp(((const struct seq *)x)->t, ((const struct seq *)y)->t, 16); }

static double k_sum, spec_rounds; // drafts and speculative rounds of the last sample4

static void sample4(const struct st_gen_params *gp0, struct seq *out, uint32_t n, uint64_t seed_base, bool a)
{
    k_sum = spec_rounds = 0;
    struct st_gen_params gp = *gp0;
    struct st_error e;
    for (uint32_t i = 0; i < n; i++) {
        gp.seed = seed_base + 7919ull * i;
        if (st_session_rewind(S, &gp, &e)) fail_msg("%s", e.msg);
        int32_t buf[64];
        enum st_finish fin = ST_FINISH_NONE;
        while (fin == ST_FINISH_NONE)
            if (st_session_round(S, buf, 64, &fin, &e) < 0) fail_msg("%s", e.msg);
        const struct st_session_stats *st = st_session_stats(S);
        k_sum += st->k_sum;
        spec_rounds += st->rounds - st->suspended_rounds;
        uint32_t k;
        const int32_t *o = st_session_output(S, &k);
        assert_int_equal(k, 4);
        memset(&out[i], 0, sizeof out[i]);
        for (int j = 0; j < 4; j++) out[i].t[j] = (uint32_t)o[j];
        out[i].a = a;
        out[i].b = !a;
    }
}

static void test_joint4(void **state)
{
    (void)state;
    // The third runs K <= 5 with drafting stopped below 0.6 confidence.
    struct st_sampling cfg[3] = {{0.7f, 0, 0, 0}, {1.5f, 40, 0, 0}, {1.5f, 0, 0, 0}};
    float p_min[3] = {0, 0, 0.6f};
    for (int c = 0; c < 3; c++) {
        uint32_t nj = scaled(N_JOINT);
        struct seq *all = malloc(2 * nj * sizeof *all);
        struct st_gen_params gp = {.max_tokens = 4, .sampling = cfg[c], .k = p_min[c] ? 5 : 3, .draft_p_min = p_min[c]};
        gp.speculate = false;
        sample4(&gp, all, nj, 11, true);
        gp.speculate = true;
        sample4(&gp, all + nj, nj, 99991, false);
        // With draft_p_min, rounds must really have stopped early.
        if (p_min[c]) assert_true(k_sum < 5 * spec_rounds);
        qsort(all, 2 * nj, sizeof *all, cmp_seq);
        // Two-sample chi-square over sequences seen >= 10 times in all; the rest pooled.
        double stat = 0, ra = 0, rb = 0;
        int bins = 0;
        for (uint32_t i = 0; i < 2 * nj;) {
            uint32_t j = i, a = 0, b = 0;
            while (j < 2 * nj && !cmp_seq(&all[i], &all[j])) a += all[j].a, b += all[j].b, j++;
            if (a + b >= 10) {
                stat += ((double)a - b) * ((double)a - b) / (a + b);
                bins++;
            } else {
                ra += a, rb += b;
            }
            i = j;
        }
        if (ra + rb > 0) stat += (ra - rb) * (ra - rb) / (ra + rb), bins++;
        double df = bins - 1, crit = chi2_crit(df, 3.09);
        printf("  joint 4 tokens, T=%.1f top-k %u%s: chi2 %.1f on %.0f df (critical %.1f)\n", cfg[c].temperature,
               cfg[c].top_k, p_min[c] ? ", K <= 5 stopped below confidence 0.6" : "", stat, df, crit);
        if (p_min[c]) printf("    mean K %.2f over %.0f speculative rounds\n", k_sum / spec_rounds, spec_rounds);
        assert_true(stat < crit);
        free(all);
    }
}

static int setup(void **state)
{
    (void)state;
    n_rows = st_golden_load(&rows);
    for (int i = 0; i < n_rows; i++)
        if (!strcmp(rows[i].prompt, "p101")) R = &rows[i];
    if (!R || st_test_engine_open(&T, "models/pico-target.f16.gguf", "models/pico-draft.q4_0.gguf", 2, 1, 2)) return -1;
    struct st_gen_params gp = {.max_tokens = 1, .speculate = true};
    struct st_error e;
    return st_session_start(T.eng, &gp, R->prompt_ids, R->n_prompt, ++T.eng->next_session, &S, &e);
}

static int teardown(void **state)
{
    (void)state;
    st_session_end(&S);
    st_test_engine_close(&T);
    free(rows);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_token),
        cmocka_unit_test(test_joint4),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
