// Row and element-wise ops, AVX2+FMA, and the AVX2 table.  Element-wise
// results depend only on the element (tails go through the same vector code
// via a small buffer), so ranks may split a row anywhere.
#if defined(__x86_64__)
#include <math.h>

#include "kernels/simd_x86.h"

static void rmsnorm_avx2(const float *x, const float *w, float *y, int64_t n, float eps)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    float ss = st_hsum256(acc);
    for (; i < n; i++) ss = fmaf(x[i], x[i], ss);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = x[i] * scale * w[i];
}

// Pairs (x0, x1) -> (x0 c - x1 s, x0 s + x1 c), 4 pairs per vector.
static void rope_apply_avx2(float *x, int head_begin, int head_end, int head_dim, int n_rot,
                            const float *cs)
{
    for (int h = head_begin; h < head_end; h++) {
        float *v = x + (size_t)h * head_dim;
        int i = 0;
        for (; i + 8 <= n_rot; i += 8) {
            __m256 xv = _mm256_loadu_ps(v + i), t = _mm256_loadu_ps(cs + i);
            __m256 c = _mm256_moveldup_ps(t), s = _mm256_movehdup_ps(t);
            __m256 sw = _mm256_permute_ps(xv, 0xb1);
            _mm256_storeu_ps(v + i, _mm256_fmaddsub_ps(xv, c, _mm256_mul_ps(sw, s)));
        }
        for (; i < n_rot; i += 2) {
            float x0 = v[i], x1 = v[i + 1], c = cs[i], s = cs[i + 1];
            v[i] = fmaf(x0, c, -(x1 * s));
            v[i + 1] = fmaf(x1, c, x0 * s);
        }
    }
}

ST_INLINE __m256 silu_gate8(__m256 g, __m256 u)
{
    __m256 e = st_exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static void silu_gate_avx2(float *out, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_gate8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float tg[8] = {0}, tu[8] = {0}, to[8];
        memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(tu, u + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(to, silu_gate8(_mm256_loadu_ps(tg), _mm256_loadu_ps(tu)));
        memcpy(out + i, to, (size_t)(n - i) * sizeof(float));
    }
}

static void add_avx2(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

static float max_avx2(const float *x, int64_t n)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    float r = st_hmax256(m);
    for (; i < n; i++) r = fmaxf(r, x[i]);
    return r;
}

// The largest value, then the first index holding it.
static int64_t argmax_avx2(const float *x, int64_t n, float *max_val)
{
    float mx = max_avx2(x, n);
    if (max_val) *max_val = n > 0 ? mx : -INFINITY;
    __m256 vm = _mm256_set1_ps(mx);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (bits) return i + __builtin_ctz((unsigned)bits);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return 0;
}

static float exp_sum_avx2(const float *x, float *p, int64_t n, float max, float inv_temp)
{
    const __m256 vmax = _mm256_set1_ps(max), vt = _mm256_set1_ps(inv_temp);
    // The sum runs in double: a vocabulary has 10^5 terms.
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = st_exp256(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax), vt));
        _mm256_storeu_ps(p + i, e);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double t4[4];
    _mm256_storeu_pd(t4, _mm256_add_pd(acc0, acc1));
    double s = (t4[0] + t4[1]) + (t4[2] + t4[3]);
    if (i < n) {
        float t[8], e[8];
        for (int j = 0; j < 8; j++) t[j] = i + j < n ? x[i + j] : max;
        _mm256_storeu_ps(e, st_exp256(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(t), vmax), vt)));
        for (int j = 0; i + j < n; j++) {
            p[i + j] = e[j];
            s += e[j];
        }
    }
    return (float)s;
}

static void scale_avx2(float *x, int64_t n, float s)
{
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++) x[i] *= s;
}

void st_kern_ops_fill_avx2(struct st_kern_ops *ops)
{
    st_kern_quant_fill_avx2(ops);
    st_kern_dot_fill_avx2(ops);
    st_kern_mm_rows_fill_avx2(ops);
    st_kern_kquant_fill_avx2(ops);
    st_kern_mm_float_fill_avx2(ops);
    st_kern_mm_x8_fill_avx2(ops);
    st_kern_mm_ternary_fill_avx2(ops);
    st_kern_attention_fill_avx2(ops);
    ops->rmsnorm = rmsnorm_avx2;
    ops->rope_apply = rope_apply_avx2;
    ops->silu_gate = silu_gate_avx2;
    ops->add = add_avx2;
    ops->argmax = argmax_avx2;
    ops->max = max_avx2;
    ops->exp_sum = exp_sum_avx2;
    ops->scale = scale_avx2;
}
#endif
