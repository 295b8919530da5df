// Private to kernels/: AVX2 helpers shared by the *_avx2.c and *_avx512.c
// files (compiled with -mavx2 -mfma -mf16c or wider).
#ifndef ST_KERNELS_SIMD_X86_H
#define ST_KERNELS_SIMD_X86_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kern_internal.h"

#define ST_INLINE static inline __attribute__((always_inline))

// Sum of the 8 lanes, always in the same order.
ST_INLINE float st_hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

ST_INLINE int32_t st_hsum256_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

ST_INLINE float st_hmax256(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Makes v opaque to the compiler: keeps an accumulation chain in source
// order (no reassociation into a tree of temporaries that spills registers).
#define ST_OPAQUE(v) __asm__("" : "+x"(v))

// The 4 bytes at p in every 32-bit lane.
ST_INLINE __m256i st_bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

ST_INLINE float st_f16_to_f32_hw(uint16_t h)
{
    return _cvtsh_ss(h);
}

// Sum of a Q8_K block's 16 partial sums, in every lane.
ST_INLINE __m256i st_q8_k_sum_bcast(const struct st_block_q8_k *b)
{
    __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)b->bsums),
                                  _mm256_set1_epi16(1));
    s = _mm256_add_epi32(s, _mm256_permute2x128_si256(s, s, 1));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0x4e));
    return _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0xb1));
}

// exp(x) for float lanes, within about 2 ulp of expf: x = n ln2 + r with
// |r| <= ln2/2, exp(r) by its Taylor polynomial of degree 7 (error below
// 1e-8 relative), 2^n through the exponent field.  Below -87.33 gives 0,
// above 88 gives +inf.
ST_INLINE __m256 st_exp256(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33f), hi = _mm256_set1_ps(88.0f);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    res = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), res);
    return _mm256_blendv_ps(res, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
}

// Stores the 8 rows of group g held in acc[m] (lane l = row 8g + l) into
// y[m][row] for the rows inside [r0, r1).
ST_INLINE void st_x8_store(const __m256 *acc, int mt, float *y, size_t ys, int64_t g, int64_t r0,
                           int64_t r1)
{
    int64_t base = g * ST_KERN_X8;
    if (base >= r0 && base + ST_KERN_X8 <= r1) {
        for (int m = 0; m < mt; m++) _mm256_storeu_ps(y + m * ys + base, acc[m]);
        return;
    }
    for (int m = 0; m < mt; m++) {
        float t[ST_KERN_X8];
        _mm256_storeu_ps(t, acc[m]);
        for (int l = 0; l < ST_KERN_X8; l++)
            if (base + l >= r0 && base + l < r1) y[m * ys + base + l] = t[l];
    }
}

// Rows [r0, r1) of a q8_0x8 weight as whole pairs of groups [*g, *g1) and
// the rows of a group without its pair at either end, [r0, *lead_end) and
// [*tail_begin, r1) (empty where lead_end is r0, tail_begin r1).
ST_INLINE void st_pairs_split(int64_t r0, int64_t r1, int64_t *g, int64_t *g1, int64_t *lead_end,
                              int64_t *tail_begin)
{
    *g = r0 / ST_KERN_X8;
    *g1 = (r1 + ST_KERN_X8 - 1) / ST_KERN_X8;
    *lead_end = r0;
    *tail_begin = r1;
    if (*g % 2) {
        *lead_end = (*g + 1) * ST_KERN_X8 < r1 ? (*g + 1) * ST_KERN_X8 : r1;
        (*g)++;
    }
    if ((*g1 - *g) % 2) {
        (*g1)--;
        *tail_begin = *g1 * ST_KERN_X8 > r0 ? *g1 * ST_KERN_X8 : r0;
    }
}

// Quants (q[i]) and the two groups' scales (d[i][0], d[i][1]) of the P
// pairs from group g.
ST_INLINE void st_pairs_at(const struct st_kern_weight *w, int64_t g, const int P, const uint8_t **q,
                           const uint16_t *(*d)[2])
{
#pragma GCC unroll 4
    for (int i = 0; i < P; i++) {
        q[i] = st_kern_x8_group_q(w, g + 2 * i);
        d[i][0] = st_kern_x8_group_d(w, g + 2 * i);
        d[i][1] = st_kern_x8_group_d(w, g + 2 * i + 1);
    }
}

#ifdef __AVX512F__
// The 16 f16 scales of block b of a pair of q8_0x8 groups (d0: the first
// group's, d1: the second's) as floats, lane l = row l of the pair.
ST_INLINE __m512 st_pair_scales(const uint16_t *d0, const uint16_t *d1, int64_t b)
{
    return _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(d1 + 8 * b)),
                                            _mm_loadu_si128((const __m128i *)(d0 + 8 * b))));
}

// Stores the 16 rows of the pair of groups g, g + 1 held in acc[m] (mt <=
// 16) into y[m][row] for the rows inside [r0, r1).
ST_INLINE void st_pair_store(const __m512 *acc, int mt, float *y, size_t ys, int64_t g, int64_t r0, int64_t r1)
{
    __m256 a0[16], a1[16];
    for (int m = 0; m < mt; m++) {
        a0[m] = _mm512_castps512_ps256(acc[m]);
        a1[m] = _mm512_extractf32x8_ps(acc[m], 1);
    }
    st_x8_store(a0, mt, y, ys, g, r0, r1);
    st_x8_store(a1, mt, y, ys, g + 1, r0, r1);
}
#endif

// Declares a matrix-product function over a dot-product function.
#define ST_MM_BY_DOT(name, fn)                                                              \
    static void name(const struct st_kern_weight *w, const void *x, size_t xs, int mt,     \
                     float *y, size_t ys, int64_t r0, int64_t r1)                          \
    {                                                                                      \
        st_kern_mm_by_dot(fn, w, x, xs, mt, y, ys, r0, r1);                                \
    }

#endif
