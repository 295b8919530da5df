// Dot products of GGUF-layout rows, AVX2+FMA.  Quantised blocks are summed
// exactly in integers as in dot_ref.c; only the float accumulation order
// differs (8 lanes).
#if defined(__x86_64__)
#include <math.h>

#include "kernels/simd_x86.h"

static float dot_f32(int64_t n, const void *w, const void *x)
{
    const float *a = w, *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    float s = st_hsum256(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

static float dot_f16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8)));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(b + i + 8), acc1);
    }
    float s = st_hsum256(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s = fmaf(st_f16_to_f32_hw(a[i]), b[i], s);
    return s;
}

static float dot_bf16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a + i)));
        acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), _mm256_loadu_ps(b + i), acc);
    }
    float s = st_hsum256(acc);
    for (; i < n; i++) s = fmaf(st_bf16_to_f32(a[i]), b[i], s);
    return s;
}

static float dot_q8_0(int64_t n, const void *w, const void *x)
{
    const struct st_block_q8_0 *a = w;
    const struct st_kern_q8_32 *b = x;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i wq = _mm256_loadu_si256((const __m256i *)a[i].qs);
        __m256i xq = _mm256_loadu_si256((const __m256i *)b[i].qs);
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq)), ones);
        __m256 d = _mm256_set1_ps(st_f16_to_f32_hw(a[i].d) * b[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc);
    }
    return st_hsum256(acc);
}

// Nibbles u in 0..15 meet x unsigned-by-signed; the offset 8 comes off as
// 8 * sum(x), in lane 0, so the block's integer sum stays exact.
static float dot_q4_0(int64_t n, const void *w, const void *x)
{
    const struct st_block_q4_0 *a = w;
    const struct st_kern_q8_32 *b = x;
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)a[i].qs);
        __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)b[i].qs)), ones);
        p = _mm256_sub_epi32(p, _mm256_setr_epi32(8 * b[i].sum, 0, 0, 0, 0, 0, 0, 0));
        __m256 d = _mm256_set1_ps(st_f16_to_f32_hw(a[i].d) * b[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc);
    }
    return st_hsum256(acc);
}

// TQ2_0: codes c = w + 1 in 0..2 meet x unsigned-by-signed; the bias comes
// off as the block sum of x.
static float dot_tq2_0(int64_t n, const void *w, const void *x)
{
    const struct st_block_tq2_0 *a = w;
    const struct st_block_q8_k *b = x;
    const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        __m256i s16 = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * j));
            for (int l = 0; l < 4; l++) {
                __m256i c = _mm256_and_si256(_mm256_srli_epi16(v, 2 * l), m3);
                __m256i xq = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * j + 32 * l));
                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(c, xq));
            }
        }
        __m256i is = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones),
                                      _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)b[i].bsums), ones));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(st_f16_to_f32_hw(a[i].d) * b[i].d), acc);
    }
    return st_hsum256(acc);
}

void st_kern_dot_fill_avx2(struct st_kern_ops *ops)
{
    ops->dot[ST_TYPE_F32] = dot_f32;
    ops->dot[ST_TYPE_F16] = dot_f16;
    ops->dot[ST_TYPE_BF16] = dot_bf16;
    ops->dot[ST_TYPE_Q8_0] = dot_q8_0;
    ops->dot[ST_TYPE_Q4_0] = dot_q4_0;
    ops->dot[ST_TYPE_TQ2_0] = dot_tq2_0;
    // TQ1_0 rows are repacked to a ternary run format at load; its dot on
    // the raw layout stays the reference one.
}

ST_MM_BY_DOT(mm_q8_0, dot_q8_0)
ST_MM_BY_DOT(mm_q4_0, dot_q4_0)
ST_MM_BY_DOT(mm_tq2_0, dot_tq2_0)

void st_kern_mm_rows_fill_avx2(struct st_kern_ops *ops)
{
    ops->mm[ST_TYPE_Q8_0] = mm_q8_0;
    ops->mm[ST_TYPE_Q4_0] = mm_q4_0;
    ops->mm[ST_TYPE_TQ2_0] = mm_tq2_0;
}
#endif
