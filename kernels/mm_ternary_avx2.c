// Matrix products of the ternary run formats with Q8_K activations, AVX2.
// A 32-byte weight vector, once decoded, holds 4 columns of each of 8 rows
// and meets the same 4 activation bytes broadcast.  Both formats sum each
// block exactly in int16 (at most 64 pair sums of <= 2 * 2 * 127) and then
// take the same float steps, so mask and code give identical bits.
#if defined(__x86_64__)
#include "kernels/simd_x86.h"

#define Q8K const struct st_block_q8_k

// Finishes a block: acc += (isum) * (d_w * d_x).
ST_INLINE __m256 block_end(__m256i is, __m256 dw, Q8K *xb, __m256 acc)
{
    __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(xb->d));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), s, acc);
}

// Mask format: per block 8 pairs (nonzero vector, sign vector); bit j of a
// byte is column group 8k + j.  Per group, n is 1 where the weight is nonzero
// and s carries the weight's sign in bit 7: sign(x, s) is +x or -x, and
// maddubs with n adds up those of the nonzero weights.
ST_INLINE void mask_block(const uint8_t *q, const uint16_t *gd, int64_t b, const uint8_t *x,
                          size_t xs, const int MT, __m256 *acc)
{
    const __m256i ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
    const __m256i zero = _mm256_setzero_si256();
    __m256i s16[ST_KERN_MT_X8];
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) s16[m] = zero;
    for (int k = 0; k < 8; k++) {
        __m256i nz = _mm256_loadu_si256((const __m256i *)(q + 64 * k));
        __m256i sg = _mm256_loadu_si256((const __m256i *)(q + 64 * k + 32));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            // n: 1 where the weight is nonzero; s: the weight's sign in bit 7, never 0.
            __m256i n = _mm256_and_si256(j ? _mm256_srli_epi16(nz, j) : nz, ones8);
            __m256i s = _mm256_or_si256(j < 7 ? _mm256_slli_epi16(sg, 7 - j) : sg, ones8);
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                Q8K *xb = (Q8K *)(x + m * xs) + b;
                __m256i v = _mm256_sign_epi8(st_bcast4(xb->qs + 4 * (8 * k + j)), s);
                s16[m] = _mm256_add_epi16(s16[m], _mm256_maddubs_epi16(n, v));
                ST_OPAQUE(s16[m]);
            }
        }
    }
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd + 8 * b)));
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) {
        Q8K *xb = (Q8K *)(x + m * xs) + b;
        acc[m] = block_end(_mm256_madd_epi16(s16[m], ones16), dw, xb, acc[m]);
    }
}

// Code format: per block 16 vectors of four 2-bit planes; plane p of vector
// k is column group 4k + p.  c = w + 1 in 0..2 meets x unsigned-by-signed;
// the bias sum(x) comes off per block.
ST_INLINE void code_block(const uint8_t *q, const uint16_t *gd, int64_t b, const uint8_t *x,
                          size_t xs, const int MT, __m256 *acc)
{
    const __m256i ones16 = _mm256_set1_epi16(1), m3 = _mm256_set1_epi8(3);
    __m256i s16[ST_KERN_MT_X8];
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) s16[m] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int k = 0; k < 16; k++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * k));
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256i c = _mm256_and_si256(p ? _mm256_srli_epi16(v, 2 * p) : v, m3);
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                Q8K *xb = (Q8K *)(x + m * xs) + b;
                s16[m] = _mm256_add_epi16(s16[m], _mm256_maddubs_epi16(c, st_bcast4(xb->qs + 4 * (4 * k + p))));
                ST_OPAQUE(s16[m]);
            }
        }
    }
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd + 8 * b)));
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) {
        Q8K *xb = (Q8K *)(x + m * xs) + b;
        __m256i is = _mm256_sub_epi32(_mm256_madd_epi16(s16[m], ones16), st_q8_k_sum_bcast(xb));
        acc[m] = block_end(is, dw, xb, acc[m]);
    }
}

// One activation row against G groups side by side (the M = 1 case): each
// broadcast of 4 activation bytes serves every group, where x8_block
// would load it once per group.  Per group the same steps in the same order
// as code_block, so the bits are the same.
ST_INLINE void code_block_groups(const uint8_t *const *q, const uint16_t *const *gd, int64_t b, const uint8_t *x,
                                 const int G, __m256 (*acc)[ST_KERN_MT_X8])
{
    const __m256i ones16 = _mm256_set1_epi16(1), m3 = _mm256_set1_epi8(3);
    Q8K *xb = (Q8K *)x + b;
    __m256i s16[4];
#pragma GCC unroll 4
    for (int i = 0; i < G; i++) s16[i] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int k = 0; k < 16; k++) {
        __m256i v[4];
#pragma GCC unroll 4
        for (int i = 0; i < G; i++) v[i] = _mm256_loadu_si256((const __m256i *)(q[i] + (size_t)b * 512 + 32 * k));
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256i xv = st_bcast4(xb->qs + 4 * (4 * k + p));
#pragma GCC unroll 4
            for (int i = 0; i < G; i++) {
                __m256i c = _mm256_and_si256(p ? _mm256_srli_epi16(v[i], 2 * p) : v[i], m3);
                s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(c, xv));
                ST_OPAQUE(s16[i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < G; i++) {
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd[i] + 8 * b)));
        __m256i is = _mm256_sub_epi32(_mm256_madd_epi16(s16[i], ones16), st_q8_k_sum_bcast(xb));
        acc[i][0] = block_end(is, dw, xb, acc[i][0]);
    }
}

// Whether x8_block_groups serves this format and number of rows (M = 1 only).
ST_INLINE bool x8_has_block_groups(const uint32_t type, const int MT)
{
    return type == ST_KERN_RUN_TERNARY_CODE && MT == 1;
}

ST_INLINE void x8_block_groups(const uint32_t type, const uint8_t *const *q, const uint16_t *const *gd, int64_t b,
                               const uint8_t *x, size_t xs, const int MT, const int G, __m256 (*acc)[ST_KERN_MT_X8])
{
    (void)type, (void)xs, (void)MT;
    code_block_groups(q, gd, b, x, G, acc);
}

ST_INLINE void x8_block(const uint32_t type, const uint8_t *q, const uint16_t *gd, int64_t b,
                        const uint8_t *x, size_t xs, const int MT, __m256 *acc)
{
    if (type == ST_KERN_RUN_TERNARY_MASK)
        mask_block(q, gd, b, x, xs, MT, acc);
    else
        code_block(q, gd, b, x, xs, MT, acc);
}

#define ST_X8_BLOCK_GROUPS
#include "kernels/x8_driver.h"

ST_X8_MM(mm_mask, ST_KERN_RUN_TERNARY_MASK)
ST_X8_MM(mm_code, ST_KERN_RUN_TERNARY_CODE)

void st_kern_mm_ternary_fill_avx2(struct st_kern_ops *ops)
{
    ops->mm[ST_KERN_RUN_TERNARY_MASK] = mm_mask;
    ops->mm[ST_KERN_RUN_TERNARY_CODE] = mm_code;
}
#endif
