// Weight kernels: run-format repacking is exact; activation quantisation
// gives the same bytes at every level; every level's matrix product matches
// the scalar reference within an explicit bound on odd and boundary sizes;
// small-M and prefill rows are bit-identical to the M = 1 rows, for any row
// range; quantised products stay within the activation-rounding bound of
// the float product; ternary mask, code and the GGUF rows agree exactly.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/kern_internal.h"
#include "kernels/kernels.h"

#define MMAX 17 // activation rows tested (M = 1..17)

static uint64_t rng = 0x9e3779b97f4a7c15u;
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
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    assert_non_null(p);
    return p;
}

// A random GGUF tensor of `type`, rows x cols, of plausible values.
static void *gen_tensor(uint32_t type, int64_t rows, int64_t cols)
{
    size_t rb = st_type_row_bytes(type, cols), n = rb * (size_t)rows;
    uint8_t *p = xmalloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
    int64_t nel = rows * cols;
    switch (type) {
    case ST_TYPE_F32:
        for (int64_t i = 0; i < nel; i++) ((float *)p)[i] = rndf();
        break;
    case ST_TYPE_F16:
        for (int64_t i = 0; i < nel; i++) ((uint16_t *)p)[i] = st_f32_to_f16(rndf());
        break;
    case ST_TYPE_BF16:
        for (int64_t i = 0; i < nel; i++) ((uint16_t *)p)[i] = st_f32_to_bf16(rndf());
        break;
    case ST_TYPE_Q8_0:
        for (int64_t i = 0; i < nel / 32; i++) {
            struct st_block_q8_0 *b = (struct st_block_q8_0 *)p + i;
            b->d = st_f32_to_f16(rndf() * 0.01f);
            for (int j = 0; j < 32; j++) b->qs[j] = (int8_t)((int)(rnd() % 255) - 127);
            if (i % 7 == 3) b->qs[5] = -128; // legal byte, never produced by llama.cpp
        }
        break;
    case ST_TYPE_Q4_0:
        for (int64_t i = 0; i < nel / 32; i++) ((struct st_block_q4_0 *)p)[i].d = st_f32_to_f16(rndf() * 0.1f);
        break;
    case ST_TYPE_Q4_K:
        for (int64_t i = 0; i < nel / 256; i++) {
            ((struct st_block_q4_k *)p)[i].d = st_f32_to_f16(rndf() * 0.01f);
            ((struct st_block_q4_k *)p)[i].dmin = st_f32_to_f16(rndf() * 0.01f);
        }
        break;
    case ST_TYPE_Q6_K:
        for (int64_t i = 0; i < nel / 256; i++) ((struct st_block_q6_k *)p)[i].d = st_f32_to_f16(rndf() * 0.01f);
        break;
    case ST_TYPE_TQ1_0:
        for (int64_t i = 0; i < nel / 256; i++) ((struct st_block_tq1_0 *)p)[i].d = st_f32_to_f16(rndf());
        break;
    case ST_TYPE_TQ2_0:
        for (int64_t i = 0; i < nel / 256; i++) {
            struct st_block_tq2_0 *b = (struct st_block_tq2_0 *)p + i;
            for (int j = 0; j < 64; j++) { // codes 0..2 only
                uint8_t v = 0;
                for (int k = 0; k < 4; k++) v |= (uint8_t)((rnd() % 3) << (2 * k));
                b->qs[j] = v;
            }
            b->d = st_f32_to_f16(rndf());
        }
        break;
    }
    return p;
}

static const int SIZES[] = {1, 2, 3, 31, 32, 33, 255, 256, 257};
#define NSIZES (int)(sizeof SIZES / sizeof SIZES[0])

// Column counts to test for a format: every size its block allows.
static int col_sizes(uint32_t src_type, int64_t *out)
{
    int be = (int)st_type_get(src_type)->block_elems, n = 0;
    static const int extra32[] = {64, 288};
    static const int extra256[] = {512, 768};
    for (int i = 0; i < NSIZES; i++)
        if (SIZES[i] % be == 0) out[n++] = SIZES[i];
    if (be == 32)
        for (int i = 0; i < 2; i++) out[n++] = extra32[i];
    if (be == 256)
        for (int i = 0; i < 2; i++) out[n++] = extra256[i];
    return n;
}

struct fmt {
    uint32_t src, run;
};
static const struct fmt FORMATS[] = {
    {ST_TYPE_F32, ST_TYPE_F32},
    {ST_TYPE_F16, ST_TYPE_F16},
    {ST_TYPE_BF16, ST_TYPE_BF16},
    {ST_TYPE_Q8_0, ST_TYPE_Q8_0},
    {ST_TYPE_Q4_0, ST_TYPE_Q4_0},
    {ST_TYPE_Q4_K, ST_TYPE_Q4_K},
    {ST_TYPE_Q6_K, ST_TYPE_Q6_K},
    {ST_TYPE_TQ1_0, ST_TYPE_TQ1_0},
    {ST_TYPE_TQ2_0, ST_TYPE_TQ2_0},
    {ST_TYPE_Q8_0, ST_KERN_RUN_Q8_0X8},
    {ST_TYPE_Q4_0, ST_KERN_RUN_Q4_0X8},
    {ST_TYPE_TQ1_0, ST_KERN_RUN_TERNARY_MASK},
    {ST_TYPE_TQ2_0, ST_KERN_RUN_TERNARY_MASK},
    {ST_TYPE_TQ1_0, ST_KERN_RUN_TERNARY_CODE},
    {ST_TYPE_TQ2_0, ST_KERN_RUN_TERNARY_CODE},
};
#define NFORMATS (int)(sizeof FORMATS / sizeof FORMATS[0])

// A weight in its run format, built from a GGUF source.
struct wt {
    struct st_kern_weight w;
    void *src, *run;
};

static void wt_make(struct wt *t, const struct fmt *f, int64_t rows, int64_t cols)
{
    struct st_error e;
    t->src = gen_tensor(f->src, rows, cols);
    size_t sz = st_kern_run_size(f->run, rows, cols);
    assert_true(sz > 0);
    t->run = xmalloc(sz);
    memset(t->run, 0xa5, sz); // repack must overwrite padding too
    if (st_kern_repack(f->src, rows, cols, f->run, t->src, 0, rows, t->run, sz, &e))
        fail_msg("%s", e.msg);
    if (st_kern_weight_init(&t->w, f->run, rows, cols, t->run, &e)) fail_msg("%s", e.msg);
}

static void wt_free(struct wt *t)
{
    free(t->src);
    free(t->run);
}

// M random float rows and their activations in the format of run, made by
// the scalar quantiser.
static void *make_act(uint32_t run, const float *x, int M, int64_t cols)
{
    void *xq = xmalloc(st_kern_act_row_bytes(run, cols) * (size_t)M + 64);
    assert_int_equal(st_kern_set_level(ST_KERN_LEVEL_SCALAR), 0);
    st_kern_quantize_act(run, x, xq, M, cols);
    st_kern_set_level(st_kern_cpu.best);
    return xq;
}

// Activation row m, element c, as the float it stands for, and the rounding
// bound of that block (|x - value| <= bound).
static double act_value(uint32_t run, const void *xq, const float *x, int64_t cols, int m, int64_t c,
                        double *bound)
{
    const uint8_t *row = (const uint8_t *)xq + st_kern_act_row_bytes(run, cols) * (size_t)m;
    switch (st_kern_act_type(run)) {
    case ST_KERN_ACT_Q8_32: {
        const struct st_kern_q8_32 *b = (const struct st_kern_q8_32 *)row + c / 32;
        *bound = b->d * 0.57; // half a step, plus the f16 rounding of d (127 * 2^-11)
        return (double)b->qs[c % 32] * b->d;
    }
    case ST_KERN_ACT_Q8_K: {
        const struct st_block_q8_k *b = (const struct st_block_q8_k *)row + c / 256;
        *bound = b->d * 0.501;
        return (double)b->qs[c % 256] * b->d;
    }
    default:
        *bound = 0.0;
        return x[(size_t)m * cols + c];
    }
}

// --- repacking ---------------------------------------------------------------

static void test_repack_exact(void **state)
{
    (void)state;
    for (int f = 0; f < NFORMATS; f++) {
        int64_t cs[16];
        int ncs = col_sizes(FORMATS[f].src, cs);
        for (int ri = 0; ri < NSIZES; ri++)
            for (int ci = 0; ci < ncs; ci++) {
                int64_t rows = SIZES[ri], cols = cs[ci];
                struct wt t;
                wt_make(&t, &FORMATS[f], rows, cols);
                float *a = xmalloc(cols * 4), *b = xmalloc(cols * 4);
                size_t rb = st_type_row_bytes(FORMATS[f].src, cols);
                for (int64_t r = 0; r < rows; r++) {
                    st_dequant_row(FORMATS[f].src, (uint8_t *)t.src + r * rb, a, cols);
                    st_kern_weight_row(&t.w, r, b);
                    if (memcmp(a, b, cols * 4))
                        fail_msg("%s from %s %lldx%lld: row %lld differs",
                                 st_kern_run_name(FORMATS[f].run), st_type_name(FORMATS[f].src),
                                 (long long)rows, (long long)cols, (long long)r);
                }
                // Repacking in ranges of 8k rows, last first, gives the same bytes.
                size_t sz = st_kern_run_size(FORMATS[f].run, rows, cols);
                uint8_t *p = xmalloc(sz);
                memset(p, 0x5a, sz);
                struct st_error e;
                for (int64_t r1 = rows; r1 > 0;) {
                    int64_t r0 = r1 > 16 ? (r1 - 1) / 16 * 16 : 0;
                    if (r0 == r1) r0 -= 16;
                    if (st_kern_repack(FORMATS[f].src, rows, cols, FORMATS[f].run,
                                       (uint8_t *)t.src + r0 * rb, r0, r1, p, sz, &e))
                        fail_msg("%s", e.msg);
                    r1 = r0;
                }
                assert_memory_equal(p, t.run, sz);
                // Each range repacked on its own into a buffer is the tensor's
                // bytes at the range's span (the loader writes it there).
                for (int64_t r0 = 0; r0 < rows; r0 += 16) {
                    int64_t r1 = r0 + 16 < rows ? r0 + 16 : rows;
                    size_t off, len;
                    st_kern_repack_span(FORMATS[f].run, cols, r0, r1, &off, &len);
                    assert_true(off + len <= sz && len > 0);
                    uint8_t *part = xmalloc(len);
                    memset(part, 0x5a, len);
                    if (st_kern_repack_part(FORMATS[f].src, rows, cols, FORMATS[f].run, (uint8_t *)t.src + r0 * rb,
                                            r0, r1, part, len, &e))
                        fail_msg("%s", e.msg);
                    assert_memory_equal(part, (uint8_t *)t.run + off, len);
                    assert_int_equal(st_kern_repack_part(FORMATS[f].src, rows, cols, FORMATS[f].run,
                                                         (uint8_t *)t.src + r0 * rb, r0, r1, part, len - 1, &e),
                                     -1);
                    free(part);
                }
                // The scalar reference writes the same bytes as the SIMD repack.
                assert_int_equal(st_kern_set_level(ST_KERN_LEVEL_SCALAR), 0);
                memset(p, 0x5a, sz);
                if (st_kern_repack(FORMATS[f].src, rows, cols, FORMATS[f].run, t.src, 0, rows, p, sz, &e))
                    fail_msg("%s", e.msg);
                st_kern_set_level(st_kern_cpu.best);
                assert_memory_equal(p, t.run, sz);
                free(p);
                free(a);
                free(b);
                wt_free(&t);
            }
    }
}

static void test_repack_errors(void **state)
{
    (void)state;
    struct st_error e;
    struct st_block_tq2_0 blk[8];
    memset(blk, 0x55, sizeof blk); // all codes 1 (zero)
    blk[5].qs[9] = 0xff;           // code 3: not ternary
    size_t sz = st_kern_run_size(ST_KERN_RUN_TERNARY_CODE, 8, 256);
    void *dst = xmalloc(sz);
    assert_int_equal(st_kern_repack(ST_TYPE_TQ2_0, 8, 256, ST_KERN_RUN_TERNARY_CODE, blk, 0, 8, dst, sz, &e), -1);
    assert_non_null(strstr(e.msg, "row 5"));
    // Wrong source type, short buffer, unaligned range, bad shape.
    assert_int_equal(st_kern_repack(ST_TYPE_Q4_0, 8, 256, ST_KERN_RUN_TERNARY_CODE, blk, 0, 8, dst, sz, &e), -1);
    assert_int_equal(st_kern_repack(ST_TYPE_TQ2_0, 8, 256, ST_KERN_RUN_TERNARY_CODE, blk, 0, 8, dst, sz - 1, &e), -1);
    assert_non_null(strstr(e.msg, "needed"));
    assert_int_equal(st_kern_repack(ST_TYPE_TQ2_0, 8, 256, ST_KERN_RUN_TERNARY_CODE, blk, 3, 8, dst, sz, &e), -1);
    assert_int_equal(st_kern_run_size(ST_KERN_RUN_Q8_0X8, 8, 33), 0);
    uint32_t rt = 0;
    assert_int_equal(st_kern_runfmt_size(ST_TYPE_Q8_K, 8, 256, &rt), 0);
    assert_true(st_kern_runfmt_size(ST_TYPE_TQ1_0, 8, 256, &rt) > 0);
    assert_int_equal(rt, ST_KERN_RUN_TERNARY_DEFAULT);
    struct st_kern_weight w;
    assert_int_equal(st_kern_weight_init(&w, ST_KERN_RUN_Q4_0X8, 8, 48, dst, &e), -1);
    free(dst);
}

// --- activation quantisation ---------------------------------------------------

static void test_quantize_levels(void **state)
{
    (void)state;
    const struct st_kern_ops *ref = st_kern_ops_get(ST_KERN_LEVEL_SCALAR);
    enum { N = 1024 };
    float *x = xmalloc(N * 4);
    for (int trial = 0; trial < 6; trial++) {
        float scale = trial == 0 ? 1e-6f : trial == 1 ? 1e4f : 1.0f;
        for (int i = 0; i < N; i++) x[i] = rndf() * scale;
        if (trial == 2) memset(x + 256, 0, 256 * 4); // an all-zero block
        if (trial == 3)
            for (int i = 0; i < N; i++) x[i] = (float)((int)(rnd() % 9) - 4) * 0.5f; // ties
        struct st_kern_q8_32 a[N / 32], b[N / 32];
        struct st_block_q8_k ka[N / 256], kb[N / 256];
        ref->quantize_q8_32(x, a, N);
        ref->quantize_q8_k(x, ka, N);
        // Reference self-check: the quants reproduce x within half a step.
        for (int i = 0; i < N; i++) {
            const struct st_kern_q8_32 *q = &a[i / 32];
            assert_true(fabs(x[i] - q->qs[i % 32] * (double)q->d) <= q->d * 0.57 + 1e-30);
            const struct st_block_q8_k *k = &ka[i / 256];
            assert_true(fabs(x[i] - k->qs[i % 256] * (double)k->d) <= k->d * 0.501 + 1e-30);
        }
        for (int l = 1; l < ST_KERN_LEVEL_COUNT; l++) {
            const struct st_kern_ops *ops = st_kern_ops_get((enum st_kern_level)l);
            if (!ops) continue;
            ops->quantize_q8_32(x, b, N);
            ops->quantize_q8_k(x, kb, N);
            assert_memory_equal(a, b, sizeof a);
            assert_memory_equal(ka, kb, sizeof ka);
        }
    }
    free(x);
}

// --- products ------------------------------------------------------------------

// Runs the product of M rows through a table, row range [r0, r1).
static float *product(const struct st_kern_ops *ops, const struct st_kern_weight *w, const void *xq,
                      int M, int64_t r0, int64_t r1)
{
    float *y = xmalloc(sizeof(float) * (size_t)M * w->rows);
    for (size_t i = 0; i < (size_t)M * w->rows; i++) y[i] = NAN;
    st_kern_matmul_ops(ops, w, xq, M, y, r0, r1);
    return y;
}

// One kernel table against the reference rows yr: each activation row
// alone within the bound, every M and every cut of the row range bit for
// bit equal to those rows.
static void check_ops(const struct st_kern_ops *ops, const char *name, const struct fmt *f, struct wt *t,
                      const void *xq, size_t xs, const float *yr, const double *mag, int64_t rows, int64_t cols,
                      const int *ms, int nms)
{
    // GEMV of each activation row alone: the rows every other M must equal.
    float *y1 = xmalloc(sizeof(float) * MMAX * rows);
    for (int m = 0; m < MMAX; m++) {
        float *y = product(ops, &t->w, (const uint8_t *)xq + m * xs, 1, 0, rows);
        memcpy(y1 + m * rows, y, sizeof(float) * rows);
        free(y);
    }
    for (int64_t i = 0; i < MMAX * rows; i++)
        if (fabs((double)y1[i] - yr[i]) > 2e-5 * mag[i] + 1e-30)
            fail_msg("%s %lldx%lld level %s: row %lld m %lld: %.9g vs reference %.9g",
                     st_kern_run_name(f->run), (long long)rows, (long long)cols,
                     name, (long long)(i % rows), (long long)(i / rows), y1[i], yr[i]);
    for (int k = 0; k < nms; k++) {
        int M = ms[k];
        float *y = product(ops, &t->w, xq, M, 0, rows);
        if (memcmp(y, y1, sizeof(float) * M * rows))
            fail_msg("%s %lldx%lld level %s: M=%d rows differ from M=1", st_kern_run_name(f->run),
                     (long long)rows, (long long)cols, name, M);
        free(y);
    }
    // Ranges that cut groups anywhere give the same rows, for every M
    // (the kernels run groups side by side in numbers that depend on M).
    for (int k = 0; k < nms && rows > 3; k++) {
        int M = ms[k];
        float *y = xmalloc(sizeof(float) * M * rows);
        int64_t cuts[] = {0, 3, rows / 3, rows / 3 + 8, rows - 1, rows};
        for (int c = 0; c + 1 < 6; c++)
            if (cuts[c] < cuts[c + 1]) st_kern_matmul_ops(ops, &t->w, xq, M, y, cuts[c], cuts[c + 1]);
        if (memcmp(y, y1, sizeof(float) * M * rows))
            fail_msg("%s %lldx%lld level %s: M=%d split ranges differ", st_kern_run_name(f->run),
                     (long long)rows, (long long)cols, name, M);
        free(y);
    }
    free(y1);
}

// Every level against the scalar reference (bound: 2e-5 of sum |w x|, the
// float rounding of a few hundred terms), the reference against the float
// product of the dequantised weights (bound: the activations' rounding), and
// small-M rows against M = 1 rows, bit for bit.
static void check_format(const struct fmt *f, int64_t rows, int64_t cols, const int *ms, int nms)
{
    struct wt t;
    wt_make(&t, f, rows, cols);
    float *x = xmalloc(sizeof(float) * MMAX * cols);
    for (int64_t i = 0; i < MMAX * cols; i++) x[i] = rndf() * (i % 17 == 0 ? 4.0f : 1.0f);
    void *xq = make_act(f->run, x, MMAX, cols);
    size_t xs = st_kern_act_row_bytes(f->run, cols);
    const struct st_kern_ops *ref = st_kern_ops_get(ST_KERN_LEVEL_SCALAR);
    float *yr = product(ref, &t.w, xq, MMAX, 0, rows);

    float *wrow = xmalloc(sizeof(float) * cols);
    double *mag = xmalloc(sizeof(double) * MMAX * rows);
    for (int64_t r = 0; r < rows; r++) {
        st_kern_weight_row(&t.w, r, wrow);
        for (int m = 0; m < MMAX; m++) {
            double exact = 0, xrounded = 0, abs = 0, bound = 0;
            for (int64_t c = 0; c < cols; c++) {
                double bnd, xv = act_value(f->run, xq, x, cols, m, c, &bnd);
                exact += (double)wrow[c] * x[m * cols + c];
                xrounded += (double)wrow[c] * xv;
                abs += fabs((double)wrow[c] * xv);
                bound += fabs((double)wrow[c]) * bnd;
            }
            mag[m * rows + r] = abs;
            double got = yr[m * rows + r];
            if (fabs(got - xrounded) > 2e-5 * abs + 1e-30 || fabs(got - exact) > bound * 1.001 + 2e-5 * abs + 1e-30)
                fail_msg("%s %lldx%lld scalar row %lld m %d: got %.9g, quantised-exact %.9g, float %.9g (bound %g)",
                         st_kern_run_name(f->run), (long long)rows, (long long)cols, (long long)r, m,
                         got, xrounded, exact, bound);
        }
    }

    for (int l = 0; l < ST_KERN_LEVEL_COUNT; l++) {
        const struct st_kern_ops *ops = st_kern_ops_get((enum st_kern_level)l);
        if (ops) check_ops(ops, st_kern_level_name(l), f, &t, xq, xs, yr, mag, rows, cols, ms, nms);
    }
#if defined(__x86_64__)
    // The AMX level's VNNI part (4 pairs of groups side by side), on any
    // AVX-512 machine.
    const struct st_kern_ops *avx512 = st_kern_ops_get(ST_KERN_LEVEL_AVX512);
    if (avx512 && f->run == ST_KERN_RUN_Q8_0X8) {
        struct st_kern_ops side4 = *avx512;
        side4.mm[ST_KERN_RUN_Q8_0X8] = st_kern_mm_q8_0x8_side4_avx512;
        check_ops(&side4, "avx512 4 pairs side by side", f, &t, xq, xs, yr, mag, rows, cols, ms, nms);
    }
#endif
    free(mag);
    free(wrow);
    free(yr);
    free(xq);
    free(x);
    wt_free(&t);
}

static void test_products_sizes(void **state)
{
    (void)state;
    // 2-4 rows: the pairs' streaming loop, 4 side by side from 64 rows; 5-6 the other.
    static const int ms[] = {2, 3, 4, 5, 6};
    for (int f = 0; f < NFORMATS; f++) {
        int64_t cs[16];
        int ncs = col_sizes(FORMATS[f].src, cs);
        for (int ri = 0; ri < NSIZES; ri++)
            for (int ci = 0; ci < ncs; ci++) {
                if (SIZES[ri] > 33 && cs[ci] > 288) continue; // keep the reference's time down
                check_format(&FORMATS[f], SIZES[ri], cs[ci], ms, (int)(sizeof ms / sizeof ms[0]));
            }
    }
}

static void test_products_every_m(void **state)
{
    (void)state;
    int ms[MMAX - 1];
    for (int i = 0; i < MMAX - 1; i++) ms[i] = i + 2;
    for (int f = 0; f < NFORMATS; f++) {
        int be = (int)st_type_get(FORMATS[f].src)->block_elems;
        check_format(&FORMATS[f], 41, be == 1 ? 67 : 2 * be, ms, MMAX - 1);
    }
}

// Prefill sizes go through the row-chunk tiling: still the GEMV's bits.
static void test_prefill_tiling(void **state)
{
    (void)state;
    static const struct fmt fs[] = {{ST_TYPE_Q8_0, ST_KERN_RUN_Q8_0X8},
                                    {ST_TYPE_Q4_0, ST_KERN_RUN_Q4_0X8},
                                    {ST_TYPE_TQ2_0, ST_KERN_RUN_TERNARY_CODE},
                                    {ST_TYPE_F16, ST_TYPE_F16},
                                    {ST_TYPE_Q4_K, ST_TYPE_Q4_K}};
    const struct st_kern_ops *ops = st_kern_ops_active();
    for (int f = 0; f < (int)(sizeof fs / sizeof fs[0]); f++) {
        int64_t rows = 1100, cols = 1024;
        int M = 40;
        struct wt t;
        wt_make(&t, &fs[f], rows, cols);
        float *x = xmalloc(sizeof(float) * M * cols);
        for (int64_t i = 0; i < M * cols; i++) x[i] = rndf();
        void *xq = xmalloc(st_kern_act_row_bytes(fs[f].run, cols) * M);
        st_kern_quantize_act(fs[f].run, x, xq, M, cols);
        size_t xs = st_kern_act_row_bytes(fs[f].run, cols);
        float *y = product(ops, &t.w, xq, M, 0, rows);
        for (int m = 0; m < M; m += 13) {
            float *y1 = product(ops, &t.w, (uint8_t *)xq + m * xs, 1, 0, rows);
            assert_memory_equal(y1, y + m * rows, sizeof(float) * rows);
            free(y1);
        }
        free(y);
        free(xq);
        free(x);
        wt_free(&t);
    }
}

// Ternary: the mask and code formats and the TQ1_0/TQ2_0 rows they came from
// give the same bits at the reference level, and mask and code the same bits
// at every level.
static void test_ternary_agree(void **state)
{
    (void)state;
    for (int src = 0; src < 2; src++) {
        uint32_t st = src ? ST_TYPE_TQ2_0 : ST_TYPE_TQ1_0;
        int64_t rows = 37, cols = 768;
        int M = 6;
        uint64_t seed = rng;
        struct wt tm, tc, tg;
        struct fmt fm = {st, ST_KERN_RUN_TERNARY_MASK}, fc = {st, ST_KERN_RUN_TERNARY_CODE}, fg = {st, st};
        rng = seed;
        wt_make(&tm, &fm, rows, cols);
        rng = seed;
        wt_make(&tc, &fc, rows, cols);
        rng = seed;
        wt_make(&tg, &fg, rows, cols);
        float *x = xmalloc(sizeof(float) * M * cols);
        for (int64_t i = 0; i < M * cols; i++) x[i] = rndf();
        void *xq = make_act(st, x, M, cols);
        for (int l = 0; l < ST_KERN_LEVEL_COUNT; l++) {
            const struct st_kern_ops *ops = st_kern_ops_get((enum st_kern_level)l);
            if (!ops) continue;
            float *ym = product(ops, &tm.w, xq, M, 0, rows), *yc = product(ops, &tc.w, xq, M, 0, rows);
            assert_memory_equal(ym, yc, sizeof(float) * M * rows);
            if (l == ST_KERN_LEVEL_SCALAR) {
                float *yg = product(ops, &tg.w, xq, M, 0, rows);
                assert_memory_equal(ym, yg, sizeof(float) * M * rows);
                free(yg);
            }
            free(ym);
            free(yc);
        }
        free(xq);
        free(x);
        wt_free(&tm);
        wt_free(&tc);
        wt_free(&tg);
    }
}

// Dot products of GGUF rows: every level against the reference.
static void test_vec_dot(void **state)
{
    (void)state;
    static const uint32_t types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0, ST_TYPE_Q4_0,
                                     ST_TYPE_Q4_K, ST_TYPE_Q6_K, ST_TYPE_TQ1_0, ST_TYPE_TQ2_0};
    const struct st_kern_ops *ref = st_kern_ops_get(ST_KERN_LEVEL_SCALAR);
    for (int ti = 0; ti < 9; ti++) {
        int be = (int)st_type_get(types[ti])->block_elems;
        for (int64_t n = be; n <= 1024; n += be == 1 ? 97 : be) {
            void *w = gen_tensor(types[ti], 1, n);
            float *x = xmalloc(sizeof(float) * n), *wf = xmalloc(sizeof(float) * n);
            for (int64_t i = 0; i < n; i++) x[i] = rndf();
            void *xq = make_act(types[ti], x, 1, n);
            st_dequant_row(types[ti], w, wf, n);
            double mag = 0;
            for (int64_t c = 0; c < n; c++) {
                double bnd;
                mag += fabs(wf[c] * act_value(types[ti], xq, x, n, 0, c, &bnd));
            }
            float r = ref->dot[types[ti]](n, w, xq);
            for (int l = 1; l < ST_KERN_LEVEL_COUNT; l++) {
                const struct st_kern_ops *ops = st_kern_ops_get((enum st_kern_level)l);
                if (!ops) continue;
                float s = ops->dot[types[ti]](n, w, xq);
                if (fabs((double)s - r) > 2e-5 * mag + 1e-30)
                    fail_msg("dot %s n=%lld level %d: %.9g vs %.9g", st_type_name(types[ti]), (long long)n, l, s, r);
            }
            assert_true(fabs((double)st_kern_vec_dot(types[ti], n, w, xq) - r) <= 2e-5 * mag + 1e-30);
            free(w);
            free(x);
            free(wf);
            free(xq);
        }
    }
}

static void test_levels(void **state)
{
    (void)state;
    st_kern_init();
    assert_non_null(st_kern_ops_get(ST_KERN_LEVEL_SCALAR));
    assert_int_equal(st_kern_ops_active()->level, st_kern_cpu.level);
#if defined(__x86_64__)
    if (st_kern_cpu.avx2 && st_kern_cpu.fma && st_kern_cpu.f16c)
        assert_non_null(st_kern_ops_get(ST_KERN_LEVEL_AVX2));
#endif
    assert_int_equal(st_kern_set_level(ST_KERN_LEVEL_SCALAR), 0);
    assert_int_equal(st_kern_ops_active()->level, ST_KERN_LEVEL_SCALAR);
    assert_int_equal(st_kern_set_level(ST_KERN_LEVEL_COUNT), -1);
    assert_int_equal(st_kern_set_level(st_kern_cpu.best), 0);
    printf("kernel level in use: %s\n", st_kern_level_name(st_kern_cpu.level));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_repack_exact),
        cmocka_unit_test(test_repack_errors),
        cmocka_unit_test(test_quantize_levels),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_ternary_agree),
        cmocka_unit_test(test_products_every_m),
        cmocka_unit_test(test_products_sizes),
        cmocka_unit_test(test_prefill_tiling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
