// Attention and the row ops at every kernel level against naive double
// implementations: attention (grouped heads, causal, arbitrary positions,
// head ranges, rows independent of M), RoPE with and without frequency
// factors, RMSNorm, SiLU gate, residual add, argmax, max, softmax with
// temperature (and its split over ranges).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/kernels.h"

static uint64_t rng = 0x2545f4914f6cdd1du;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) // uniform in [-1, 1)
{
    return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

#define FOR_LEVELS(ops)                                                                     \
    for (int lvl_ = 0; lvl_ < ST_KERN_LEVEL_COUNT; lvl_++)                                 \
        for (const struct st_kern_ops *ops = st_kern_ops_get((enum st_kern_level)lvl_); ops; \
             ops = NULL)

// --- attention -------------------------------------------------------------------

struct attn_case {
    int n_heads, n_kv, hd, n_ctx, M;
    int pos[8];
};

static void naive_attention(const struct st_kern_attn *a, double *out)
{
    int group = a->n_heads / a->n_kv_heads, hd = a->head_dim;
    double *s = xmalloc(sizeof(double) * a->n_ctx);
    for (int m = 0; m < a->M; m++)
        for (int h = 0; h < a->n_heads; h++) {
            const float *q = a->q + ((size_t)m * a->n_heads + h) * hd;
            int kvh = h / group;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= a->pos[m]; j++) {
                s[j] = -INFINITY; // left out: weight exp(-inf) = 0
                if (j / ST_KERN_ATTN_SEG >= a->skip_begin && j / ST_KERN_ATTN_SEG < a->skip_end) continue;
                const uint16_t *k = a->k + ((size_t)j * a->n_kv_heads + kvh) * hd;
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)q[i] * st_f16_to_f32(k[i]);
                s[j] = d * a->scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j <= a->pos[m]; j++) sum += (s[j] = exp(s[j] - mx));
            double *o = out + ((size_t)m * a->n_heads + h) * hd;
            for (int i = 0; i < hd; i++) o[i] = 0;
            for (int j = 0; j <= a->pos[m]; j++) {
                const uint16_t *v = a->v + ((size_t)j * a->n_kv_heads + kvh) * hd;
                for (int i = 0; i < hd; i++) o[i] += s[j] / sum * st_f16_to_f32(v[i]);
            }
        }
    free(s);
}

// One case at every level against naive_attention, with segments
// [skip_begin, skip_end) left out (a draft's window; none when equal).
static void check_attention(size_t c, const struct attn_case *k, int skip_begin, int skip_end);

static void test_attention(void **state)
{
    (void)state;
    static const struct attn_case cases[] = {
        {4, 2, 64, 40, 5, {0, 7, 8, 39, 17}},
        {8, 2, 128, 300, 3, {299, 0, 150}},
        {6, 3, 20, 13, 4, {12, 1, 2, 3}}, // head_dim not a multiple of 8
        {2, 2, 40, 9, 2, {4, 8}},         // no grouping
        {5, 1, 8, 33, 1, {32}},
        {4, 1, 32, 200, 8, {199, 63, 64, 65, 0, 127, 128, 5}}, // tiles and chunk edges
        {24, 8, 128, 300, 5, {299, 298, 64, 63, 130}},          // a 3B model's heads: full and partial tiles
        {4, 2, 80, 70, 3, {69, 10, 64}},                       // V in blocks with a remainder
        {6, 2, 48, 21, 2, {20, 6}},
        // Several segments: rows ending in different ones, at their edges.
        {24, 8, 128, 1300, 5, {1299, 1024, 1023, 511, 512}},
        {8, 2, 64, 1100, 3, {1099, 0, 700}},
        {6, 2, 48, 600, 2, {599, 513}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) check_attention(c, &cases[c], 0, 0);
    // A window: segments left out between the first and the rows' own.
    static const struct {
        struct attn_case k;
        int skip_begin, skip_end;
    } windows[] = {
        {{24, 8, 128, 2100, 3, {2099, 2048, 1600}}, 1, 3},
        {{8, 2, 64, 1600, 1, {1599}}, 1, 2},
        {{6, 3, 20, 1300, 2, {1299, 1100}}, 1, 2}, // the reference's path
    };
    for (size_t c = 0; c < sizeof windows / sizeof windows[0]; c++)
        check_attention(100 + c, &windows[c].k, windows[c].skip_begin, windows[c].skip_end);
}

static void check_attention(size_t c, const struct attn_case *k, int skip_begin, int skip_end)
{
    size_t qn = (size_t)k->M * k->n_heads * k->hd, kvn = (size_t)k->n_ctx * k->n_kv * k->hd;
    float *q = xmalloc(qn * 4), *out = xmalloc(qn * 4), *out2 = xmalloc(qn * 4);
    float *scratch = xmalloc((size_t)k->n_ctx * 4);
    uint16_t *K = xmalloc(kvn * 2), *V = xmalloc(kvn * 2);
    double *ref = xmalloc(qn * 8);
    for (size_t i = 0; i < qn; i++) q[i] = rndf() * 2.0f;
    for (size_t i = 0; i < kvn; i++) {
        K[i] = st_f32_to_f16(rndf() * 2.0f);
        V[i] = st_f32_to_f16(rndf());
    }
    struct st_kern_attn a = {.q = q, .k = K, .v = V, .out = out, .pos = k->pos, .M = k->M,
                             .n_heads = k->n_heads, .n_kv_heads = k->n_kv, .head_dim = k->hd,
                             .n_ctx = k->n_ctx, .scale = 1.0f / sqrtf((float)k->hd),
                             .skip_begin = skip_begin, .skip_end = skip_end};
    naive_attention(&a, ref);
    FOR_LEVELS(ops)
    {
        a.out = out;
        ops->attention(&a, 0, k->n_kv, scratch);
        for (size_t i = 0; i < qn; i++)
            if (fabs(out[i] - ref[i]) > 2e-5 * (1 + fabs(ref[i])))
                fail_msg("attention case %zu level %s elem %zu: %.9g vs %.9g", c,
                         st_kern_level_name(ops->level), i, out[i], ref[i]);
        // Head ranges one KV head at a time, and each row alone: same bits.
        a.out = out2;
        memset(out2, 0, qn * 4);
        for (int h = k->n_kv - 1; h >= 0; h--) ops->attention(&a, h, h + 1, scratch);
        assert_memory_equal(out, out2, qn * 4);
        size_t row = (size_t)k->n_heads * k->hd;
        for (int m = 0; m < k->M; m++) {
            struct st_kern_attn one = a;
            one.q = q + m * row;
            one.out = out2;
            one.pos = &k->pos[m];
            one.M = 1;
            ops->attention(&one, 0, k->n_kv, scratch);
            assert_memory_equal(out + m * row, out2, row * 4);
        }
        // Segments computed apart (one call per segment and KV head, in
        // reverse) and folded after: same bits as one call.
        if (ops->attention_part && k->hd % 8 == 0) {
            int n_seg = ST_KERN_ATTN_SEGS(k->n_ctx) + 1; // one to spare
            size_t pn = (size_t)k->M * k->n_heads * n_seg * ST_KERN_ATTN_PART_FLOATS(k->hd);
            float *part = xmalloc(pn * 4);
            for (size_t i = 0; i < pn; i++) part[i] = NAN; // a partial read but never written shows
            for (int s = n_seg - 1; s >= 0; s--)
                for (int h = k->n_kv - 1; h >= 0; h--) ops->attention_part(&a, h, h + 1, s, s + 1, part, n_seg);
            memset(out2, 0, qn * 4);
            int pairs = k->M * k->n_heads;
            ops->attention_merge(&a, pairs / 2, pairs, part, n_seg);
            ops->attention_merge(&a, 0, pairs / 2, part, n_seg);
            assert_memory_equal(out, out2, qn * 4);
            // All segments and heads in one part call: the same partials.
            float *part2 = xmalloc(pn * 4);
            memcpy(part2, part, pn * 4);
            ops->attention_part(&a, 0, k->n_kv, 0, n_seg, part2, n_seg);
            ops->attention_merge(&a, 0, pairs, part2, n_seg);
            assert_memory_equal(out, out2, qn * 4);
            free(part);
            free(part2);
        }
    }
    // Through the public entry point.
    a.out = out2;
    st_kern_attention(&a, 0, k->n_kv, scratch);
    for (size_t i = 0; i < qn; i++) assert_true(fabs(out2[i] - ref[i]) <= 2e-5 * (1 + fabs(ref[i])));
    free(q);
    free(out);
    free(out2);
    free(scratch);
    free(K);
    free(V);
    free(ref);
}

// --- RoPE ------------------------------------------------------------------------

static void test_rope(void **state)
{
    (void)state;
    static const struct {
        int n_heads, hd, n_rot, pos;
        bool ff;
    } cases[] = {{4, 64, 64, 0, false}, {4, 64, 64, 5000, false}, {3, 128, 128, 123, true},
                 {2, 40, 32, 77, false}, {5, 6, 6, 9, true}, {2, 128, 128, 131071, true}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nh = cases[c].n_heads, hd = cases[c].hd, nr = cases[c].n_rot, pos = cases[c].pos;
        float base = c % 2 ? 500000.0f : 10000.0f;
        size_t n = (size_t)nh * hd;
        float *x = xmalloc(n * 4), *y = xmalloc(n * 4), *ff = xmalloc((size_t)nr / 2 * 4);
        double *ref = xmalloc(n * 8);
        for (int i = 0; i < nr / 2; i++) ff[i] = 1.0f + (float)(rnd() % 32);
        for (size_t i = 0; i < n; i++) x[i] = rndf() * 3.0f;
        const float *ffp = cases[c].ff ? ff : NULL;
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < hd; i++) {
                size_t e = (size_t)h * hd + i;
                if (i >= nr) {
                    ref[e] = x[e];
                    continue;
                }
                int p = i / 2;
                double theta = pos * pow(base, -2.0 * p / nr) / (ffp ? ffp[p] : 1.0);
                double x0 = x[h * hd + 2 * p], x1 = x[h * hd + 2 * p + 1];
                ref[e] = i % 2 ? x0 * sin(theta) + x1 * cos(theta) : x0 * cos(theta) - x1 * sin(theta);
            }
        float cs[256];
        st_kern_rope_cache(cs, nr, pos, base, ffp);
        FOR_LEVELS(ops)
        {
            memcpy(y, x, n * 4);
            ops->rope_apply(y, 0, 1, hd, nr, cs); // head 0 first, the rest after
            ops->rope_apply(y, 1, nh, hd, nr, cs);
            for (size_t i = 0; i < n; i++)
                if (fabs(y[i] - ref[i]) > 1e-5 * 3 + 1e-6 * fabs(ref[i]))
                    fail_msg("rope case %zu level %s elem %zu: %.9g vs %.9g", c,
                             st_kern_level_name(ops->level), i, y[i], ref[i]);
        }
        memcpy(y, x, n * 4);
        st_kern_rope(y, 0, nh, hd, nr, pos, base, ffp);
        for (size_t i = 0; i < n; i++) assert_true(fabs(y[i] - ref[i]) <= 1e-5 * 3 + 1e-6 * fabs(ref[i]));
        free(x);
        free(y);
        free(ff);
        free(ref);
    }
}

// --- row and element-wise ops ----------------------------------------------------------

static const int64_t LENS[] = {1, 2, 3, 7, 8, 9, 31, 33, 255, 257, 3072, 32003};
#define NLENS (int)(sizeof LENS / sizeof LENS[0])

static void test_rmsnorm(void **state)
{
    (void)state;
    for (int li = 0; li < NLENS; li++) {
        int64_t n = LENS[li];
        float *x = xmalloc(n * 4), *w = xmalloc(n * 4), *y = xmalloc(n * 4);
        for (int64_t i = 0; i < n; i++) {
            x[i] = rndf() * 10.0f;
            w[i] = rndf();
        }
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        double sc = 1.0 / sqrt(ss / n + 1e-5);
        FOR_LEVELS(ops)
        {
            ops->rmsnorm(x, w, y, n, 1e-5f);
            for (int64_t i = 0; i < n; i++) {
                double r = x[i] * sc * w[i];
                if (fabs(y[i] - r) > 1e-5 * (fabs(r) + 1e-3))
                    fail_msg("rmsnorm n=%lld level %s: %.9g vs %.9g", (long long)n,
                             st_kern_level_name(ops->level), y[i], r);
            }
            memcpy(y, x, n * 4); // in place
            ops->rmsnorm(y, w, y, n, 1e-5f);
            assert_true(fabs(y[0] - x[0] * sc * w[0]) <= 1e-5 * (fabs(x[0] * sc * w[0]) + 1e-3));
        }
        free(x);
        free(w);
        free(y);
    }
}

static void test_silu_add(void **state)
{
    (void)state;
    for (int li = 0; li < NLENS; li++) {
        int64_t n = LENS[li];
        float *g = xmalloc(n * 4), *u = xmalloc(n * 4), *o = xmalloc(n * 4), *o2 = xmalloc(n * 4);
        for (int64_t i = 0; i < n; i++) {
            g[i] = rndf() * (i % 5 == 0 ? 100.0f : 6.0f);
            u[i] = rndf();
        }
        FOR_LEVELS(ops)
        {
            ops->silu_gate(o, g, u, n);
            for (int64_t i = 0; i < n; i++) {
                double r = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
                if (fabs(o[i] - r) > 2e-6 * fabs(r) + 1e-30)
                    fail_msg("silu n=%lld level %s elem %lld (g=%g): %.9g vs %.9g", (long long)n,
                             st_kern_level_name(ops->level), (long long)i, g[i], o[i], r);
            }
            // Any split gives the same elements.
            if (n > 3) {
                ops->silu_gate(o2, g, u, 3);
                ops->silu_gate(o2 + 3, g + 3, u + 3, n - 3);
                assert_memory_equal(o, o2, n * 4);
            }
            memcpy(o, u, n * 4);
            ops->add(o, g, n);
            for (int64_t i = 0; i < n; i++) assert_true(o[i] == u[i] + g[i]);
        }
        free(g);
        free(u);
        free(o);
        free(o2);
    }
}

static void test_argmax_max(void **state)
{
    (void)state;
    for (int li = 0; li < NLENS; li++) {
        int64_t n = LENS[li];
        float *x = xmalloc(n * 4);
        for (int rep = 0; rep < 3; rep++) {
            for (int64_t i = 0; i < n; i++) x[i] = rep == 2 ? (float)(rnd() % 4) : rndf() * 20.0f - 30.0f;
            int64_t best = 0;
            for (int64_t i = 1; i < n; i++)
                if (x[i] > x[best]) best = i;
            FOR_LEVELS(ops)
            {
                float mv;
                assert_int_equal(ops->argmax(x, n, &mv), best); // the first of ties
                assert_true(mv == x[best]);
                assert_true(ops->max(x, n) == x[best]);
            }
            assert_int_equal(st_kern_argmax(x, n, NULL), best);
        }
        free(x);
    }
}

static void test_softmax(void **state)
{
    (void)state;
    for (int li = 0; li < NLENS; li++) {
        int64_t n = LENS[li];
        float *x = xmalloc(n * 4), *p = xmalloc(n * 4), *p2 = xmalloc(n * 4);
        for (int64_t i = 0; i < n; i++) x[i] = rndf() * 15.0f;
        x[n / 2] = -1e30f; // underflows to zero
        static const float temps[] = {1.0f, 0.7f, 2.5f};
        for (int t = 0; t < 3; t++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
            for (int64_t i = 0; i < n; i++) sum += exp((x[i] - mx) / temps[t]);
            FOR_LEVELS(ops)
            {
                assert_int_equal(st_kern_set_level(ops->level), 0);
                st_kern_softmax(x, p, n, temps[t]);
                double tot = 0;
                for (int64_t i = 0; i < n; i++) {
                    double r = exp((x[i] - mx) / temps[t]) / sum;
                    tot += p[i];
                    // exp's argument carries float rounding of up to 2 ulp.
                    double arg = fabs((x[i] - mx) / temps[t]);
                    if (fabs(p[i] - r) > (2e-6 + 3e-7 * arg) * r + 1e-30)
                        fail_msg("softmax n=%lld T=%g level %s elem %lld: %.9g vs %.9g", (long long)n,
                                 temps[t], st_kern_level_name(ops->level), (long long)i, p[i], r);
                }
                assert_true(fabs(tot - 1.0) < 1e-5);
                // Split over two ranges as ranks do: same p before scaling.
                float m0 = ops->max(x, n / 3), m1 = ops->max(x + n / 3, n - n / 3);
                float m = m0 > m1 ? m0 : m1;
                ops->exp_sum(x, p, n, m, 1.0f / temps[t]);
                ops->exp_sum(x, p2, n / 3, m, 1.0f / temps[t]);
                ops->exp_sum(x + n / 3, p2 + n / 3, n - n / 3, m, 1.0f / temps[t]);
                assert_memory_equal(p, p2, n * 4);
            }
        }
        free(x);
        free(p);
        free(p2);
    }
    st_kern_set_level(st_kern_cpu.best);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention), cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rmsnorm),   cmocka_unit_test(test_silu_add),
        cmocka_unit_test(test_argmax_max), cmocka_unit_test(test_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
