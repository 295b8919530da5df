// Q4_K and Q6_K rows (GGUF layout) against Q8_K activations, AVX2.  A tile
// takes one weight row and up to 4 activation rows: each 32-column piece of
// a super-block is decoded once into a register and multiplied with the same
// columns of every activation row.  Per super-block the integer sums are
// exact; the float steps per (row, activation) are the same for every tile
// size, and the dot product is the tile of one, so GEMM rows equal GEMV rows.
#if defined(__x86_64__)
#include "kernels/simd_x86.h"

#define Q8K const struct st_block_q8_k

// The 8 scales and 8 mins of a Q4_K block, 6 bits each, as bytes: bytes
// 0..3 hold the low 6 bits of scales 0..3 (their top 2 bits are the high bits
// of scales 4..7), bytes 4..7 the same for mins, bytes 8..11 the low nibbles
// of scales 4..7 and (high nibble) of mins 4..7.  Four bytes at a time.
ST_INLINE void q4_k_scales(const uint8_t *q, uint64_t *sc, uint64_t *mn)
{
    uint32_t a, b, c;
    memcpy(&a, q, 4);
    memcpy(&b, q + 4, 4);
    memcpy(&c, q + 8, 4);
    uint32_t s_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
    uint32_t m_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
    *sc = (a & 0x3f3f3f3fu) | (uint64_t)s_hi << 32;
    *mn = (b & 0x3f3f3f3fu) | (uint64_t)m_hi << 32;
}

// Q4_K: sum_j (d sc_s q_j - dmin m_s) x_j per super-block is
//   d dx isum - dmin dx imin, isum = sum_s sc_s (q.x)_s, imin = sum_s m_s xsum_s,
// both exact; imin takes the activations' sums of 16 from bsums.
ST_INLINE void q4_k_tile(const struct st_block_q4_k *a, int64_t nb, const uint8_t *x, size_t xs,
                         const int MT, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc[ST_KERN_MT];
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++) acc[m] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        uint64_t sc, mn;
        q4_k_scales(a[i].scales, &sc, &mn);
        // Scales as int16 in both halves; scale s spread by a byte shuffle.
        __m256i scv = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((int64_t)sc)));
        __m256i is[ST_KERN_MT];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * j));
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            __m256i s0 = _mm256_shuffle_epi8(scv, _mm256_set1_epi16((short)(0x0100 * (4 * j + 1) + 4 * j)));
            __m256i s1 = _mm256_shuffle_epi8(scv, _mm256_set1_epi16((short)(0x0100 * (4 * j + 3) + 4 * j + 2)));
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) {
                Q8K *xb = (Q8K *)(x + m * xs) + i;
                __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(xb->qs + 64 * j)));
                __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xb->qs + 64 * j + 32)));
                __m256i t = _mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1));
                is[m] = j ? _mm256_add_epi32(is[m], t) : t;
                ST_OPAQUE(is[m]);
            }
        }
        // Mins: each m_s against the two bsums of its sub-block.
        __m128i m8 = _mm_cvtsi64_si128((int64_t)mn);
        __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        __m256 d = _mm256_set1_ps(st_f16_to_f32_hw(a[i].d)), dmin = _mm256_set1_ps(st_f16_to_f32_hw(a[i].dmin));
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            Q8K *xb = (Q8K *)(x + m * xs) + i;
            __m256i im = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), mins);
            __m256 dx = _mm256_set1_ps(xb->d);
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[m]), _mm256_mul_ps(d, dx), acc[m]);
            acc[m] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(im), _mm256_mul_ps(dmin, dx), acc[m]);
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++) out[m] = st_hsum256(acc[m]);
}

// Q6_K: quants 0..63 meet x unsigned-by-signed (pairs below 2 * 63 * 127);
// the offset 32 comes off as 32 * (scale-weighted bsums).  Per half of 128
// columns: quarter k holds columns 32k.. with scales 2k (first 16), 2k+1.
ST_INLINE void q6_k_tile(const struct st_block_q6_k *a, int64_t nb, const uint8_t *x, size_t xs,
                         const int MT, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30);
    __m256 acc[ST_KERN_MT];
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++) acc[m] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i is[ST_KERN_MT];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *sc = a[i].scales + 8 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i q;
                switch (k) {
                case 0: q = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2)); break;
                case 1: q = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2)); break;
                case 2: q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2)); break;
                default:
                    q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                        _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2));
                }
                // int16 lanes 0..7 hold columns 0..15 (scale 2k), 8..15 the next 16.
                __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
#pragma GCC unroll 4
                for (int m = 0; m < MT; m++) {
                    Q8K *xb = (Q8K *)(x + m * xs) + i;
                    __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(xb->qs + 128 * h + 32 * k)));
                    p = _mm256_madd_epi16(p, s);
                    is[m] = h || k ? _mm256_add_epi32(is[m], p) : p;
                    ST_OPAQUE(is[m]);
                }
            }
        }
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[i].scales));
        __m256 d = _mm256_set1_ps(st_f16_to_f32_hw(a[i].d));
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            Q8K *xb = (Q8K *)(x + m * xs) + i;
            __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), sc16);
            __m256i t = _mm256_sub_epi32(is[m], _mm256_slli_epi32(off, 5));
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(d, _mm256_set1_ps(xb->d)), acc[m]);
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MT; m++) out[m] = st_hsum256(acc[m]);
}

ST_INLINE void kq_rows(const uint32_t type, const struct st_kern_weight *w, const uint8_t *x, size_t xs,
                       const int MT, float *y, size_t ys, int64_t r0, int64_t r1)
{
    int64_t nb = w->cols / ST_QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const uint8_t *)w->data + r * w->stride;
        float out[ST_KERN_MT];
        if (type == ST_TYPE_Q4_K)
            q4_k_tile(row, nb, x, xs, MT, out);
        else
            q6_k_tile(row, nb, x, xs, MT, out);
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++) y[m * ys + r] = out[m];
    }
}

ST_INLINE void mm_kq(const uint32_t type, const struct st_kern_weight *w, const void *x, size_t xs,
                     int mt, float *y, size_t ys, int64_t r0, int64_t r1)
{
    switch (mt) {
    case 1: kq_rows(type, w, x, xs, 1, y, ys, r0, r1); break;
    case 2: kq_rows(type, w, x, xs, 2, y, ys, r0, r1); break;
    case 3: kq_rows(type, w, x, xs, 3, y, ys, r0, r1); break;
    default: kq_rows(type, w, x, xs, 4, y, ys, r0, r1); break;
    }
}

static void mm_q4_k(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                    size_t ys, int64_t r0, int64_t r1)
{
    mm_kq(ST_TYPE_Q4_K, w, x, xs, mt, y, ys, r0, r1);
}

static void mm_q6_k(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                    size_t ys, int64_t r0, int64_t r1)
{
    mm_kq(ST_TYPE_Q6_K, w, x, xs, mt, y, ys, r0, r1);
}

static float dot_q4_k(int64_t n, const void *w, const void *x)
{
    float out;
    q4_k_tile(w, n / ST_QK_K, x, 0, 1, &out);
    return out;
}

static float dot_q6_k(int64_t n, const void *w, const void *x)
{
    float out;
    q6_k_tile(w, n / ST_QK_K, x, 0, 1, &out);
    return out;
}

void st_kern_kquant_fill_avx2(struct st_kern_ops *ops)
{
    ops->dot[ST_TYPE_Q4_K] = dot_q4_k;
    ops->dot[ST_TYPE_Q6_K] = dot_q6_k;
    ops->mm[ST_TYPE_Q4_K] = mm_q4_k;
    ops->mm[ST_TYPE_Q6_K] = mm_q6_k;
}
#endif
