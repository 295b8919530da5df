// AVX-512 VNNI versions of the int8 run-format products (Q8_0x8, Q4_0x8,
// ternary mask and code), on 256-bit vectors (AVX512VL): vpdpbusd adds the
// unsigned-by-signed byte products of each 32-bit lane straight into int32,
// replacing maddubs + madd + add.  Integer sums are exact and the float
// steps are those of the AVX2 versions, so results are bit-identical to
// them.  Selected only on CPUs with AVX-512 F/BW/VL/DQ and VNNI.
#if defined(__x86_64__)
#define ST_X8_Q4_ONE_ROW_L1
#include "kernels/simd_x86.h"
#include "kernels/x8_prefetch.h"

#define Q8 const struct st_kern_q8_32
#define Q8K const struct st_block_q8_k

ST_INLINE __m256 block_end(__m256i is, __m256 dw, float dx, __m256 acc)
{
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc);
}

ST_INLINE void q8_0x8_block(const uint8_t *q, const uint16_t *gd, int64_t b, const uint8_t *x,
                            size_t xs, const int MT, __m256 *acc)
{
    // vpdpbusd multiplies unsigned by signed bytes: the weights go in offset
    // by 128 (w ^ 0x80 = w + 128, once per weight vector for every row) and
    // 128 * sum(x), from the activation block's sum, starts each row's sum
    // negative.  A row then costs one product per 4 bytes, without the
    // vpsignb per row that |w| * sign(x, w) needs.  Integer sums are exact,
    // so the result is the same.  One core, weights in L2 (Zen 5): 4 rows
    // 120 -> 142 GMAC/s, one row 87 -> 99.
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256i is[ST_KERN_MT_X8];
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) is[m] = _mm256_set1_epi32(-128 * ((Q8 *)(x + m * xs))[b].sum);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const uint8_t *v = q + st_kern_x8_vstep(ST_KERN_RUN_Q8_0X8) * g; // the pair's other group between
        __m256i wu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)v), bias);
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++) {
            Q8 *xb = (Q8 *)(x + m * xs) + b;
            is[m] = _mm256_dpbusd_epi32(is[m], wu, st_bcast4(xb->qs + 4 * g));
        }
    }
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd + 8 * b)));
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) acc[m] = block_end(is[m], dw, ((Q8 *)(x + m * xs))[b].d, acc[m]);
}

ST_INLINE void q4_0x8_block(const uint8_t *q, const uint16_t *gd, int64_t b, const uint8_t *x,
                            size_t xs, const int MT, __m256 *acc)
{
    // The high nibbles are multiplied where they stand (16 x nibble, still
    // a byte) into a sum of their own, exactly 16 times theirs, shifted back
    // once per block: no shift per weight vector.
    const __m256i m4 = _mm256_set1_epi8(15), m4h = _mm256_set1_epi8((char)0xf0);
    __m256i is[ST_KERN_MT_X8], hs[ST_KERN_MT_X8];
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) {
        is[m] = _mm256_set1_epi32(-8 * ((Q8 *)(x + m * xs))[b].sum);
        hs[m] = _mm256_setzero_si256();
    }
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        __m256i wv = _mm256_loadu_si256((const __m256i *)(q + 32 * v));
        __m256i lo = _mm256_and_si256(wv, m4), hi = _mm256_and_si256(wv, m4h);
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++) {
            Q8 *xb = (Q8 *)(x + m * xs) + b;
            is[m] = _mm256_dpbusd_epi32(is[m], lo, st_bcast4(xb->qs + 4 * v));
            hs[m] = _mm256_dpbusd_epi32(hs[m], hi, st_bcast4(xb->qs + 16 + 4 * v));
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) is[m] = _mm256_add_epi32(is[m], _mm256_srai_epi32(hs[m], 4));
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd + 8 * b)));
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) acc[m] = block_end(is[m], dw, ((Q8 *)(x + m * xs))[b].d, acc[m]);
}

ST_INLINE void mask_block(const uint8_t *q, const uint16_t *gd, int64_t b, const uint8_t *x,
                          size_t xs, const int MT, __m256 *acc)
{
    const __m256i ones8 = _mm256_set1_epi8(1), zero = _mm256_setzero_si256();
    __m256i is[ST_KERN_MT_X8];
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) is[m] = zero;
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
                is[m] = _mm256_dpbusd_epi32(is[m], n, _mm256_sign_epi8(st_bcast4(xb->qs + 4 * (8 * k + j)), s));
            }
        }
    }
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd + 8 * b)));
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) acc[m] = block_end(is[m], dw, ((Q8K *)(x + m * xs))[b].d, acc[m]);
}

ST_INLINE void code_block(const uint8_t *q, const uint16_t *gd, int64_t b, const uint8_t *x,
                          size_t xs, const int MT, __m256 *acc)
{
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i is[ST_KERN_MT_X8];
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++)
        is[m] = _mm256_sub_epi32(_mm256_setzero_si256(), st_q8_k_sum_bcast((Q8K *)(x + m * xs) + b));
    // Up to 4 rows the 2-bit codes, bound by arithmetic rather than memory,
    // are multiplied where they stand: bit pair p gives 4^p times the code
    // (at most 128, still an unsigned byte) into a sum of its own, exactly
    // 4^p times the sum wanted, shifted back once per block.  That saves
    // the shift per code vector (one core, weights in L2, Zen 5: M = 1
    // 62 -> 129 GMAC/s, M = 2 90 -> 158, M = 4 118 -> 128; a draft step of
    // l1b TQ2_0 13 -> 10 ms).  16 sums at M = 4 fit in AVX-512VL's 32
    // registers; 5-8 rows shift each plane down into one sum per row.
    const bool planes = MT <= 4;
    __m256i ps[4][4];
    if (planes)
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++)
#pragma GCC unroll 4
            for (int m = 0; m < MT; m++) ps[p][m] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int k = 0; k < 16; k++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * k));
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256i c = planes ? _mm256_and_si256(v, _mm256_set1_epi8((char)(3 << (2 * p))))
                               : _mm256_and_si256(p ? _mm256_srli_epi16(v, 2 * p) : v, m3);
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                __m256i xv = st_bcast4(((Q8K *)(x + m * xs) + b)->qs + 4 * (4 * k + p));
                if (planes) ps[p][m] = _mm256_dpbusd_epi32(ps[p][m], c, xv);
                else is[m] = _mm256_dpbusd_epi32(is[m], c, xv);
            }
        }
    }
    if (planes)
#pragma GCC unroll 4
        for (int m = 0; m < MT; m++) {
            __m256i t = _mm256_add_epi32(ps[0][m], _mm256_srai_epi32(ps[1][m], 2));
            t = _mm256_add_epi32(t, _mm256_add_epi32(_mm256_srai_epi32(ps[2][m], 4), _mm256_srai_epi32(ps[3][m], 6)));
            is[m] = _mm256_add_epi32(is[m], t);
        }
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd + 8 * b)));
#pragma GCC unroll 8
    for (int m = 0; m < MT; m++) acc[m] = block_end(is[m], dw, ((Q8K *)(x + m * xs))[b].d, acc[m]);
}

#ifdef __AVX512F__ // (tests compile this file for AVX2, vpdpbusd emulated)
// vpdpbusd in place: through the intrinsic GCC 12 copied every sum to a
// new register and back each step.
ST_INLINE __m512i dpbusd512(__m512i acc, __m512i u, __m512i s)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
}

// One or two activation rows of the code format against G groups side by
// side, two groups to a 512-bit vector (group i in the low half, i + 1 in
// the high): one broadcast of 4 activation bytes, one mask and one
// vpdpbusd serve 64 weight bytes, and the plane sums of all groups are
// independent chains.  On 256-bit vectors one group at a time, one row's 4
// plane chains waited on vpdpbusd's latency: 8-10 GB/s on one core with
// the weights in L2, below what the core reads from memory; 20-22 GB/s
// this way.  Each 32-bit lane sums the same bytes in the same order as
// code_block's, so the sums, and after them the float steps, are the same.
ST_INLINE void code_block_groups(const uint8_t *const *q, const uint16_t *const *gd, int64_t b, const uint8_t *x,
                                 size_t xs, const int MT, const int G, __m256 (*acc)[ST_KERN_MT_X8])
{
    __m512i ps[2][4][2];
#pragma GCC unroll 2
    for (int j = 0; j < G / 2; j++)
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++)
#pragma GCC unroll 2
            for (int m = 0; m < MT; m++) ps[j][p][m] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int k = 0; k < 16; k++) {
        __m512i v[2];
#pragma GCC unroll 2
        for (int j = 0; j < G / 2; j++)
            v[j] = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q[2 * j] + (size_t)b * 512 + 32 * k))),
                _mm256_loadu_si256((const __m256i *)(q[2 * j + 1] + (size_t)b * 512 + 32 * k)), 1);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m512i xv[2];
#pragma GCC unroll 2
            for (int m = 0; m < MT; m++) {
                int32_t xw;
                memcpy(&xw, ((Q8K *)(x + m * xs) + b)->qs + 4 * (4 * k + p), 4);
                xv[m] = _mm512_set1_epi32(xw);
            }
#pragma GCC unroll 2
            for (int j = 0; j < G / 2; j++) {
                __m512i c = _mm512_and_si512(v[j], _mm512_set1_epi8((char)(3 << (2 * p))));
#pragma GCC unroll 2
                for (int m = 0; m < MT; m++) ps[j][p][m] = dpbusd512(ps[j][p][m], c, xv[m]);
            }
        }
    }
#pragma GCC unroll 2
    for (int m = 0; m < MT; m++) {
        Q8K *xb = (Q8K *)(x + m * xs) + b;
        __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(), st_q8_k_sum_bcast(xb));
#pragma GCC unroll 2
        for (int j = 0; j < G / 2; j++) {
            __m512i t = _mm512_add_epi32(ps[j][0][m], _mm512_srai_epi32(ps[j][1][m], 2));
            t = _mm512_add_epi32(t, _mm512_add_epi32(_mm512_srai_epi32(ps[j][2][m], 4), _mm512_srai_epi32(ps[j][3][m], 6)));
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int i = 2 * j + h;
                __m256i is = _mm256_add_epi32(neg, h ? _mm512_extracti64x4_epi64(t, 1) : _mm512_castsi512_si256(t));
                __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gd[i] + 8 * b)));
                acc[i][m] = block_end(is, dw, xb->d, acc[i][m]);
            }
        }
    }
    if (G % 2) code_block(q[G - 1] + (size_t)b * 512, gd[G - 1], b, x, xs, MT, acc[G - 1]);
}

// How a Q8_0 pairs loop asks for its weights ahead in software: not at all,
// the next groups' block (x8_prefetch_plan), or its own streams' block a
// few blocks ahead (x8_prefetch_plan_near).
enum q8_ask { Q8_ASK_NONE, Q8_ASK_NEXT_GROUPS, Q8_ASK_NEAR };

// P pairs of Q8_0 groups from group g (even) side by side on 512-bit
// vectors: a pair's vector k is one 64-byte line, 16 rows' 4 bytes.  Each
// 32-bit lane sums the same bytes in the same order as q8_0x8_block's and
// the float step is block_end's, lane for lane: the same results.  What
// sets the speed is how many streams of weights are in flight (one core
// reading 1 / 2 / 4 streams: 9.9 / 11.3 / 13.6 GB/s): the 256-bit loop,
// 4 groups side by side, is 2 streams on this layout and took 1.22x the
// time of the layout before pairs at one row (65536x3072, 2 threads).
// `ask`: how the weights are asked for ahead in software.
ST_INLINE void q8_pairs_run(const struct st_kern_weight *w, const uint8_t *x, size_t xs, const int MT,
                            const int P, const enum q8_ask ask, float *y, size_t ys, int64_t g, int64_t r0,
                            int64_t r1)
{
    const int64_t nb = w->cols / 32;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const uint8_t *q[4];
    const uint16_t *d[4][2];
    __m512 acc[4][ST_KERN_MT_X8];
    st_pairs_at(w, g, P, q, d);
#pragma GCC unroll 4
    for (int i = 0; i < P; i++)
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++) acc[i][m] = _mm512_setzero_ps();
    const struct x8_prefetch_plan plan =
        ask == Q8_ASK_NEAR          ? x8_prefetch_plan_near(512)
        : ask == Q8_ASK_NEXT_GROUPS ? x8_prefetch_plan(ST_KERN_RUN_Q8_0X8, MT, (size_t)P * 2 * w->stride)
                                    : (struct x8_prefetch_plan){0, false};
    const uint8_t *end = st_kern_x8_end(w, r1);
    for (int64_t b = 0; b < nb; b++) {
        // Below 4 sums the vpdpbusd chains wait on its latency: the odd
        // vectors go to a second sum per row, added at the block's end
        // (integer sums are exact: the same result).  Zen 5, one thread,
        // 512x3072 and 512x8192 in L3, 3 alternations: 1-2 rows 1-5% faster.
        // One pair of 4-5 rows too: l3b's verify steps (steps alternated one
        // by one within a generation, l1b Q4_0 drafting) took 0.95x the
        // time at 4 rows (2 generations), 0.97-0.98x at 5 (4); 6 and 8 rows
        // 1.00x and 0.99x, so they keep one sum (and 8 would spill).
        const bool two = P * MT < 4 || (P == 1 && MT <= 5);
        __m512i is[4][ST_KERN_MT_X8], iz[4][ST_KERN_MT_X8];
#pragma GCC unroll 4
        for (int i = 0; i < P; i++) {
            x8_prefetch(q[i] + b * 512, 512, plan, end);
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                is[i][m] = _mm512_set1_epi32(-128 * ((Q8 *)(x + m * xs))[b].sum);
                if (two) iz[i][m] = _mm512_setzero_si512();
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i xv[ST_KERN_MT_X8];
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                int32_t xw;
                memcpy(&xw, ((Q8 *)(x + m * xs))[b].qs + 4 * k, 4);
                xv[m] = _mm512_set1_epi32(xw);
            }
#pragma GCC unroll 4
            for (int i = 0; i < P; i++) {
                __m512i wu = _mm512_xor_si512(_mm512_load_si512(q[i] + b * 512 + 64 * k), bias);
#pragma GCC unroll 8
                for (int m = 0; m < MT; m++) {
                    if (two && (k & 1)) iz[i][m] = dpbusd512(iz[i][m], wu, xv[m]);
                    else is[i][m] = dpbusd512(is[i][m], wu, xv[m]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < P; i++) {
            __m512 dw = st_pair_scales(d[i][0], d[i][1], b);
#pragma GCC unroll 8
            for (int m = 0; m < MT; m++) {
                if (two) is[i][m] = _mm512_add_epi32(is[i][m], iz[i][m]);
                float dx = ((Q8 *)(x + m * xs))[b].d;
                acc[i][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[i][m]), _mm512_mul_ps(dw, _mm512_set1_ps(dx)),
                                            acc[i][m]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < P; i++) st_pair_store(acc[i], MT, y, ys, g + 2 * i, r0, r1);
}

// One pair against 9-16 activation rows in one pass over the weights: per
// block, the rows in two halves of at most 8, so that 16 float sums stay in
// registers beside one half's 8 integer sums, and the second half reads
// the block's weights from L1.  Each row's sums and float steps are
// q8_pairs_run's: the result is the same as the row's alone.
ST_INLINE void q8_pair_rows16(const struct st_kern_weight *w, const uint8_t *x, size_t xs, const int MT, float *y,
                              size_t ys, int64_t g, int64_t r0, int64_t r1)
{
    const int64_t nb = w->cols / 32;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const uint8_t *q[1];
    const uint16_t *d[1][2];
    __m512 acc[16];
    st_pairs_at(w, g, 1, q, d);
#pragma GCC unroll 16
    for (int m = 0; m < MT; m++) acc[m] = _mm512_setzero_ps();
    const struct x8_prefetch_plan pf = x8_prefetch_plan(ST_KERN_RUN_Q8_0X8, MT, 2 * w->stride);
    const uint8_t *end = st_kern_x8_end(w, r1);
    for (int64_t b = 0; b < nb; b++) {
        x8_prefetch(q[0] + b * 512, 512, pf, end);
        const __m512 dw = st_pair_scales(d[0][0], d[0][1], b);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const int m0 = 8 * h, H = h ? MT - 8 : 8;
            __m512i is[8];
#pragma GCC unroll 8
            for (int m = 0; m < H; m++) is[m] = _mm512_set1_epi32(-128 * ((Q8 *)(x + (m0 + m) * xs))[b].sum);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m512i wu = _mm512_xor_si512(_mm512_load_si512(q[0] + b * 512 + 64 * k), bias);
#pragma GCC unroll 8
                for (int m = 0; m < H; m++) {
                    int32_t xw;
                    memcpy(&xw, ((Q8 *)(x + (m0 + m) * xs))[b].qs + 4 * k, 4);
                    is[m] = dpbusd512(is[m], wu, _mm512_set1_epi32(xw));
                }
            }
#pragma GCC unroll 8
            for (int m = 0; m < H; m++) {
                float dx = ((Q8 *)(x + (m0 + m) * xs))[b].d;
                acc[m0 + m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[m]), _mm512_mul_ps(dw, _mm512_set1_ps(dx)),
                                              acc[m0 + m]);
            }
        }
    }
    st_pair_store(acc, MT, y, ys, g, r0, r1);
}

// Pairs [g, g1) of MT rows, `side` (4 or 1) at a time.  How many streams
// of weights one core needs in flight depends on the machine.  The AMX host
// (Intel, model 167) needs many: 4 pairs side by side up to 6 rows (the sums
// of 5-6 rows spill, and still beat 2 side by side), then 2; against the
// layout before pairs (256-bit, 4 groups side by side), 65536x3072, 2
// threads, medians of 5 alternations: 1 row 1.04x the time, 2-5 rows
// 1.04-1.07x, 6 rows 0.96x; 3072x8192, one row, 1.09-1.11x.  Zen 5 streams
// one pair best: 1 / 4 / 8 rows 0.92-0.94 / 0.96 / 0.89x the layout
// before pairs' time, where 4 pairs side by side took 1.13-1.18x
// (65536x3072, 2 threads, 2 alternations) -- with the software prefetch
// 8 groups ahead.  One row without it streams best 4 pairs side by side:
// 8192x3072 and 3072x8192 88-93% of the read probe against 80-84% for one
// pair with it (bench kernels, 3 alternations); l3b's decoding 22.0-22.4
// against 20.2-20.5 tokens/s while the host read fast, 14.8-14.9 against
// 14.4-14.7 while slow (4 and 4 alternations).  Over one matrix (bench
// kernels, whose 26 MiB the 32 MiB L3 may partly hold) 2-8 rows needed it;
// in l3b's verify steps, 28 layers' weights streamed in turn, 2-4 rows do
// not (mm_q8_0x8's figures).
ST_INLINE void q8_pairs(const struct st_kern_weight *w, const uint8_t *x, size_t xs, const int MT,
                        const int side, const enum q8_ask ask, float *y, size_t ys, int64_t g, int64_t g1,
                        int64_t r0, int64_t r1)
{
    if (side == 4) {
        if (MT <= 6)
            for (; g + 8 <= g1; g += 8) q8_pairs_run(w, x, xs, MT, 4, ask, y, ys, g, r0, r1);
        for (; g + 4 <= g1; g += 4) q8_pairs_run(w, x, xs, MT, 2, ask, y, ys, g, r0, r1);
    }
    for (; g + 2 <= g1; g += 2) q8_pairs_run(w, x, xs, MT, 1, ask, y, ys, g, r0, r1);
}
#define ST_Q8_PAIRS

// Whether x8_block_groups serves this format and number of rows.
ST_INLINE bool x8_has_block_groups(const uint32_t type, const int MT)
{
    return type == ST_KERN_RUN_TERNARY_CODE && MT <= 2;
}

ST_INLINE void x8_block_groups(const uint32_t type, const uint8_t *const *q, const uint16_t *const *gd, int64_t b,
                               const uint8_t *x, size_t xs, const int MT, const int G, __m256 (*acc)[ST_KERN_MT_X8])
{
    (void)type;
    code_block_groups(q, gd, b, x, xs, MT, G, acc);
}
#define ST_X8_BLOCK_GROUPS
#endif

ST_INLINE void x8_block(const uint32_t type, const uint8_t *q, const uint16_t *gd, int64_t b,
                        const uint8_t *x, size_t xs, const int MT, __m256 *acc)
{
    switch (type) {
    case ST_KERN_RUN_Q8_0X8: q8_0x8_block(q, gd, b, x, xs, MT, acc); break;
    case ST_KERN_RUN_Q4_0X8: q4_0x8_block(q, gd, b, x, xs, MT, acc); break;
    case ST_KERN_RUN_TERNARY_MASK: mask_block(q, gd, b, x, xs, MT, acc); break;
    default: code_block(q, gd, b, x, xs, MT, acc); break;
    }
}

// A verify's 4 rows of Q8_0 with 4 groups side by side (16 sums in 32
// registers): the target's matrices of a K = 3 round took about 6% less
// time than with one group (bench profile, median of 5 alternations, Zen 5);
// in L2, 4 rows 142 -> 167 GMAC/s a core.  5 rows (20 sums) still fit: on
// the AMX host one thread streaming 65536x3072 took 1.03-1.06x the time of
// 4 rows, where one group at a time took about 1.45x.  6 rows spill with
// 4 groups; with 3 (18 sums) they took 0.91x the AMX tiles' time the same
// way (1.14x the 4 rows'), the same as the tiles in L2; 7 rows with 2
// groups 1.28x the tiles'.
#define ST_X8_FOUR_GROUPS_MAX_MT 5
#define ST_X8_THREE_GROUPS_MT 6
#include "kernels/x8_driver.h"

#ifdef ST_Q8_PAIRS
// Q8_0: whole pairs on 512-bit vectors, `side` at a time; a group without
// its pair at either end of the rows on the 256-bit loop.
// 9-16 rows, one pair at a time; the groups without their pair at either
// end 8 rows at a time.  A function of its own: inlined beside the loops
// for 1-8 rows, it cost those 8-20% (the bigger function compiled worse).
static void q8_0x8_rows16_mm(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                             size_t ys, int64_t r0, int64_t r1)
{
    int64_t g, g1, lead_end, tail_begin;
    st_pairs_split(r0, r1, &g, &g1, &lead_end, &tail_begin);
    const uint8_t *xb = (const uint8_t *)x;
    for (int m0 = 0; m0 < mt; m0 += ST_KERN_MT_X8) {
        int mc = mt - m0 < ST_KERN_MT_X8 ? mt - m0 : ST_KERN_MT_X8;
        if (lead_end > r0) x8_mm(ST_KERN_RUN_Q8_0X8, w, xb + m0 * xs, xs, mc, y + m0 * ys, ys, r0, lead_end);
        if (tail_begin < r1) x8_mm(ST_KERN_RUN_Q8_0X8, w, xb + m0 * xs, xs, mc, y + m0 * ys, ys, tail_begin, r1);
    }
    switch (mt) {
#define CASE(n) \
    case n: for (; g + 2 <= g1; g += 2) q8_pair_rows16(w, xb, xs, n, y, ys, g, r0, r1); break;
        CASE(9) CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
#undef CASE
    }
}

// Q8_0: whole pairs on 512-bit vectors; a group without its pair at either
// end of the rows on the 256-bit loop.  Up to `stream_rows` rows go 4 pairs
// side by side without software prefetch (the hardware's streams keep up
// while the core computes little per byte), more rows `side` at a time
// asking ahead in software as `ask` says.
ST_INLINE void q8_0x8_pairs_mm(const struct st_kern_weight *w, const void *x, size_t xs, int mt, const int side,
                               const int stream_rows, const enum q8_ask ask, float *y, size_t ys, int64_t r0,
                               int64_t r1)
{
    if (mt > ST_KERN_MT_X8) {
        q8_0x8_rows16_mm(w, x, xs, mt, y, ys, r0, r1);
        return;
    }
    int64_t g, g1, lead_end, tail_begin;
    st_pairs_split(r0, r1, &g, &g1, &lead_end, &tail_begin);
    if (lead_end > r0) x8_mm(ST_KERN_RUN_Q8_0X8, w, x, xs, mt, y, ys, r0, lead_end);
    if (tail_begin < r1) x8_mm(ST_KERN_RUN_Q8_0X8, w, x, xs, mt, y, ys, tail_begin, r1);
    const uint8_t *xb = (const uint8_t *)x;
    const bool stream = mt <= stream_rows;
    const int sd = stream ? 4 : side;
    switch (mt) {
#define CASE(n) \
    case n: q8_pairs(w, xb, xs, n, sd, stream ? Q8_ASK_NONE : ask, y, ys, g, g1, r0, r1); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
    default: q8_pairs(w, xb, xs, 8, sd, stream ? Q8_ASK_NONE : ask, y, ys, g, g1, r0, r1); break;
    }
}

// The AVX-512 level: 1-4 rows stream, 5-8 one pair at a time.  On Zen 5,
// l3b's verify steps with l1b Q4_0 drafting (whole generations alternated,
// --k fixed) against one pair with the software prefetch for 2-8 rows:
// 2 rows (K = 1) 0.87-0.90x the verify time (3 alternations), 3 rows
// 0.83-0.89x (2), 4 rows 0.91-0.93x (2); 5 rows 1.09-1.12x (2), so they
// keep it.
static void mm_q8_0x8(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y, size_t ys,
                      int64_t r0, int64_t r1)
{
    q8_0x8_pairs_mm(w, x, xs, mt, 1, 4, Q8_ASK_NEXT_GROUPS, y, ys, r0, r1);
}

void st_kern_mm_q8_0x8_side4_avx512(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                                    size_t ys, int64_t r0, int64_t r1)
{
    q8_0x8_pairs_mm(w, x, xs, mt, 4, 0, Q8_ASK_NEAR, y, ys, r0, r1);
}
#else
ST_X8_MM(mm_q8_0x8, ST_KERN_RUN_Q8_0X8)
#endif
ST_X8_MM(mm_q4_0x8, ST_KERN_RUN_Q4_0X8)
ST_X8_MM(mm_mask, ST_KERN_RUN_TERNARY_MASK)
ST_X8_MM(mm_code, ST_KERN_RUN_TERNARY_CODE)

void st_kern_ops_fill_avx512(struct st_kern_ops *ops)
{
    ops->mm[ST_KERN_RUN_Q8_0X8] = mm_q8_0x8;
#ifdef ST_Q8_PAIRS
    // A verify of up to 16 rows reads the weights once; prefill's tiles,
    // over weights in L2, compute faster 8 rows at a time (Zen 5, 2
    // threads, M = 32: 3072x8192 2.60 -> 1.77 ms, 8192x3072 1.86 -> 1.58).
    ops->mm_rows[ST_KERN_RUN_Q8_0X8] = 16;
    ops->mm_tile[ST_KERN_RUN_Q8_0X8] = ST_KERN_MT_X8;
#endif
    ops->mm[ST_KERN_RUN_Q4_0X8] = mm_q4_0x8;
    ops->mm[ST_KERN_RUN_TERNARY_MASK] = mm_mask;
    ops->mm[ST_KERN_RUN_TERNARY_CODE] = mm_code;
}
#endif
