// AMX version of the ternary code product for 3-16 activation rows (prefill
// tiles, a draft's catch-up, a ternary target's verify).  The 2-bit codes
// c = w + 1 of two adjacent groups (16 weight rows) are unpacked to bytes,
// one bit pair of each byte to a row of the B tile, so that B row 4k + p
// holds the codes vector k's bit pair p multiplies; TDPBSUD (signed
// activations by unsigned codes) then sums 64 activation bytes against
// them, four products a 256-weight block into one int32 sum per (row,
// weight row).  The sum minus the activations' block sum is the exact
// integer sum(w * x) of the VNNI kernel, and the float step is its
// fma(sum, dw * dx, acc): rows are bit-identical to the avx512 level's.
// The unpacking is shared by all rows and both pairs side by side; the
// VNNI kernel instead masks and shifts the codes per row from 3 rows on.
// One core, 2048x2048 in L2, us (VNNI -> AMX): 3 rows 103 -> 60, 4 rows
// 151 -> 63, 8 rows 223 -> 78, 16 rows 445 -> 123 (one pair at a time
// instead of two side by side: 88-94 and 130-137); 2 rows stay on VNNI (51,
// where 3 rows take 60 here).  l3b's prompt of 1561 tokens with l1b TQ2_0
// drafting: 24.7 -> 20.0 s (the target alone 16.1 s).
#if defined(__x86_64__)
#include <stdalign.h>

#include "kernels/amx_tiles.h"

#define Q8K const struct st_block_q8_k
#define AMX_ROWS 16
#define AMX_CODE_MIN_ROWS 3 // fewer rows: the VNNI kernel

// The avx512 level's code product, for the rows this kernel leaves to it.
static st_kern_mm_fn code_vnni;

// Block b's codes of groups q0 and q1 (adjacent), as the 64 rows of 64
// bytes of the four B tiles of the block: row 16j + 4k + p (vector 4j + k,
// bit pair p) holds group q0's 32 bytes, then q1's.
ST_INLINE void unpack_block(const uint8_t *q0, const uint8_t *q1, int64_t b, uint8_t (*rows)[64])
{
    const __m512i m3 = _mm512_set1_epi8(3);
#pragma GCC unroll 4
    for (int v = 0; v < 16; v++) {
        __m512i c = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q0 + (size_t)b * 512 + 32 * v))),
            _mm256_loadu_si256((const __m256i *)(q1 + (size_t)b * 512 + 32 * v)), 1);
        _mm512_store_si512(rows[4 * v], _mm512_and_si512(c, m3));
        _mm512_store_si512(rows[4 * v + 1], _mm512_and_si512(_mm512_srli_epi16(c, 2), m3));
        _mm512_store_si512(rows[4 * v + 2], _mm512_and_si512(_mm512_srli_epi16(c, 4), m3));
        _mm512_store_si512(rows[4 * v + 3], _mm512_and_si512(_mm512_srli_epi16(c, 6), m3));
    }
}

// P pairs of groups from g (P <= 2) against MT activation rows over every
// block.  The next block is unpacked while the tiles multiply this one (two
// buffers): a tile load of rows still in the store buffer waited for them.
ST_INLINE void run_pairs(const struct st_kern_weight *w, const uint8_t *x, size_t xs, const int MT, const int P,
                         float *y, size_t ys, int64_t g, int64_t r0, int64_t r1)
{
    const int64_t nb = w->cols / 256;
    const uint8_t *q[4];
    const uint16_t *d[4];
    for (int i = 0; i < 2 * P; i++) q[i] = st_kern_x8_group_q(w, g + i), d[i] = st_kern_x8_group_d(w, g + i);
    alignas(64) uint8_t rows[2][2][64][64];
    alignas(64) int32_t sums[2][AMX_ROWS][16];
    __m512 acc[2][AMX_ROWS];
#pragma GCC unroll 2
    for (int i = 0; i < P; i++)
#pragma GCC unroll 16
        for (int m = 0; m < MT; m++) acc[i][m] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int i = 0; i < P; i++) unpack_block(q[2 * i], q[2 * i + 1], 0, rows[0][i]);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t(*cur)[64][64] = rows[b & 1];
        _tile_zero(3);
        if (P > 1) _tile_zero(4);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            _tile_loadd(0, ((Q8K *)x + b)->qs + 64 * j, (long)xs);
            _tile_loadd(1, cur[0][16 * j], 64);
            _tile_dpbsud(3, 0, 1);
            if (P > 1) {
                _tile_loadd(2, cur[1][16 * j], 64);
                _tile_dpbsud(4, 0, 2);
            }
        }
        if (b + 1 < nb)
#pragma GCC unroll 2
            for (int i = 0; i < P; i++) unpack_block(q[2 * i], q[2 * i + 1], b + 1, rows[(b + 1) & 1][i]);
        _tile_stored(3, &sums[0][0][0], 64);
        if (P > 1) _tile_stored(4, &sums[1][0][0], 64);
#pragma GCC unroll 16
        for (int m = 0; m < MT; m++) {
            Q8K *xb = (Q8K *)(x + m * xs) + b;
            __m512i neg = _mm512_broadcast_i32x8(st_q8_k_sum_bcast(xb));
            __m512 dx = _mm512_set1_ps(xb->d);
#pragma GCC unroll 2
            for (int i = 0; i < P; i++) {
                __m512i s = _mm512_sub_epi32(_mm512_load_si512(sums[i][m]), neg);
                acc[i][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(st_pair_scales(d[2 * i], d[2 * i + 1], b), dx),
                                            acc[i][m]);
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < P; i++) st_pair_store(acc[i], MT, y, ys, g + 2 * i, r0, r1);
}

// Rows [r0, r1) by the VNNI kernel, up to ST_KERN_MT_X8 activation rows a call.
static void vnni_rows(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y, size_t ys,
                      int64_t r0, int64_t r1)
{
    for (int m0 = 0; m0 < mt; m0 += ST_KERN_MT_X8)
        code_vnni(w, (const uint8_t *)x + (size_t)m0 * xs, xs, mt - m0 < ST_KERN_MT_X8 ? mt - m0 : ST_KERN_MT_X8,
                  y + (size_t)m0 * ys, ys, r0, r1);
}

static void mm_code_amx(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y, size_t ys,
                        int64_t r0, int64_t r1)
{
    if (mt < AMX_CODE_MIN_ROWS) {
        vnni_rows(w, x, xs, mt, y, ys, r0, r1);
        return;
    }
    // Pairs of adjacent groups; a group left over at the end goes to the
    // VNNI kernel, which computes its rows the same way.
    int64_t g = r0 / ST_KERN_X8, g1 = (r1 + ST_KERN_X8 - 1) / ST_KERN_X8;
    if ((g1 - g) % 2) {
        vnni_rows(w, x, xs, mt, y, ys, (g1 - 1) * ST_KERN_X8 > r0 ? (g1 - 1) * ST_KERN_X8 : r0, r1);
        g1--;
    }
    if (g >= g1) return;
    // Tiles: 0 the activations' 64 bytes, 1-2 the pairs' codes unpacked, 3-4
    // their sums.
    const uint8_t m = (uint8_t)mt;
    st_amx_tiles_config((const uint8_t[5]){m, 16, 16, m, m}, (const uint16_t[5]){64, 64, 64, 64, 64}, 5);
    switch (mt) {
#define CASE(n) \
    case n: {                                                                                      \
        int64_t p = g;                                                                             \
        for (; p + 4 <= g1; p += 4) run_pairs(w, (const uint8_t *)x, xs, n, 2, y, ys, p, r0, r1);  \
        if (p < g1) run_pairs(w, (const uint8_t *)x, xs, n, 1, y, ys, p, r0, r1);                  \
        break;                                                                                     \
    }
        CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9)
        CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
#undef CASE
    }
    _tile_release();
}

// ops is a copy of the avx512 level's table.
void st_kern_ops_fill_amx_code(struct st_kern_ops *ops)
{
    code_vnni = ops->mm[ST_KERN_RUN_TERNARY_CODE];
    ops->mm[ST_KERN_RUN_TERNARY_CODE] = mm_code_amx;
    ops->mm_rows[ST_KERN_RUN_TERNARY_CODE] = AMX_ROWS;
    ops->mm_tile[ST_KERN_RUN_TERNARY_CODE] = AMX_ROWS;
}
#endif
