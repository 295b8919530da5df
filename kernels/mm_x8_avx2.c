// Matrix products of the interleaved Q8_0 and Q4_0 run formats (8 rows per
// group) with Q8_0-style activations, AVX2.  A 32-byte weight vector holds
// 4 columns of each of the 8 rows; it is decoded once and multiplied with
// the same 4 activation bytes, broadcast, of each of up to 4 activation
// rows, so lane l accumulates row l.  Per block the integer sum is exact;
// then acc = fma(isum, d_w * d_x, acc), the same steps for every M.
#if defined(__x86_64__)
#include "kernels/simd_x86.h"

#define Q8 const struct st_kern_q8_32

// Block b of one group (quants q, scales gd) against MT activation rows.
ST_INLINE void q8_0x8_block(const uint8_t *q, const uint16_t *gd, int64_t b, const uint8_t *x,
                            size_t xs, const int MT, __m256 *acc)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i is[ST_KERN_MT_X8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const uint8_t *v = q + st_kern_x8_vstep(ST_KERN_RUN_Q8_0X8) * g; // the pair's other group between
        __m256i wv = _mm256_loadu_si256((const __m256i *)v);
        __m256i aw = _mm256_abs_epi8(wv);
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++) {
            Q8 *xb = (Q8 *)(x + m * xs) + b;
            __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(st_bcast4(xb->qs + 4 * g), wv));
            p = _mm256_madd_epi16(p, ones);
            is[m] = g ? _mm256_add_epi32(is[m], p) : p;
            ST_OPAQUE(is[m]);
        }
    }
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd + 8 * b)));
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) {
        Q8 *xb = (Q8 *)(x + m * xs) + b;
        __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(xb->d));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[m]), s, acc[m]);
    }
}

// Nibbles u in 0..15 (low: columns 4v.., high: 16+4v..) meet x
// unsigned-by-signed; pair sums stay below 2 * 15 * 127, so the 8 of a block
// add up in int16; the offset 8 comes off as 8 * sum(x).
ST_INLINE void q4_0x8_block(const uint8_t *q, const uint16_t *gd, int64_t b, const uint8_t *x,
                            size_t xs, const int MT, __m256 *acc)
{
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(15);
    __m256i s16[ST_KERN_MT_X8];
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        __m256i wv = _mm256_loadu_si256((const __m256i *)(q + 32 * v));
        __m256i lo = _mm256_and_si256(wv, m4), hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++) {
            Q8 *xb = (Q8 *)(x + m * xs) + b;
            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, st_bcast4(xb->qs + 4 * v)),
                                         _mm256_maddubs_epi16(hi, st_bcast4(xb->qs + 16 + 4 * v)));
            s16[m] = v ? _mm256_add_epi16(s16[m], p) : p;
            ST_OPAQUE(s16[m]);
        }
    }
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd + 8 * b)));
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) {
        Q8 *xb = (Q8 *)(x + m * xs) + b;
        __m256i is = _mm256_sub_epi32(_mm256_madd_epi16(s16[m], ones), _mm256_set1_epi32(8 * xb->sum));
        __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(xb->d));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), s, acc[m]);
    }
}

ST_INLINE void x8_block(const uint32_t type, const uint8_t *q, const uint16_t *gd, int64_t b,
                        const uint8_t *x, size_t xs, const int MT, __m256 *acc)
{
    if (type == ST_KERN_RUN_Q8_0X8)
        q8_0x8_block(q, gd, b, x, xs, MT, acc);
    else
        q4_0x8_block(q, gd, b, x, xs, MT, acc);
}

#include "kernels/x8_driver.h"

ST_X8_MM(mm_q8_0x8, ST_KERN_RUN_Q8_0X8)
ST_X8_MM(mm_q4_0x8, ST_KERN_RUN_Q4_0X8)

void st_kern_mm_x8_fill_avx2(struct st_kern_ops *ops)
{
    ops->mm[ST_KERN_RUN_Q8_0X8] = mm_q8_0x8;
    ops->mm[ST_KERN_RUN_Q4_0X8] = mm_q4_0x8;
}
#endif
