// Activation quantisation, AVX2.  Same bytes as quant_ref.c: the same scale
// arithmetic, and cvtps2dq rounds to nearest-even like lrintf.
#if defined(__x86_64__)
#include "kernels/simd_x86.h"

// Largest |x| of 32 floats.
ST_INLINE float amax32(const float *x)
{
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_and_ps(_mm256_loadu_ps(x), abs_mask);
    for (int i = 8; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
    return st_hmax256(m);
}

// Quantises 32 floats with scale id into qs; returns the 4 int32 vectors'
// sum per 16 (s[0]: elements 0..15, s[1]: 16..31).
ST_INLINE void quant32(const float *x, float id, int8_t *qs, int32_t *s)
{
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), vid));
    __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid));
    __m256i q2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid));
    __m256i q3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid));
    s[0] = st_hsum256_epi32(_mm256_add_epi32(q0, q1));
    s[1] = st_hsum256_epi32(_mm256_add_epi32(q2, q3));
    // packs work within 128-bit halves; the permute restores element order.
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, p);
}

static void quantize_q8_32_avx2(const float *x, struct st_kern_q8_32 *y, int64_t n)
{
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float d = amax32(x) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t s[2];
        quant32(x, id, y[i].qs, s);
        y[i].d = st_kern_q8_32_scale(d);
        y[i].sum = s[0] + s[1];
    }
}

static void quantize_q8_k_avx2(const float *x, struct st_block_q8_k *y, int64_t n)
{
    for (int64_t i = 0; i < n / ST_QK_K; i++, x += ST_QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < ST_QK_K; j += 32) {
            float a = amax32(x + j);
            amax = a > amax ? a : amax;
        }
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < ST_QK_K; j += 32) {
            int32_t s[2];
            quant32(x + j, id, y[i].qs + j, s);
            y[i].bsums[j / 16] = (int16_t)s[0];
            y[i].bsums[j / 16 + 1] = (int16_t)s[1];
        }
        y[i].d = amax != 0.0f ? 1.0f / id : 0.0f;
    }
}

void st_kern_quant_fill_avx2(struct st_kern_ops *ops)
{
    ops->quantize_q8_32 = quantize_q8_32_avx2;
    ops->quantize_q8_k = quantize_q8_k_avx2;
}
#endif
