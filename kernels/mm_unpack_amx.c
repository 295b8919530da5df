// AMX versions of the products of the packed int run formats -- ternary
// code and Q4_0x8 -- for 3-16 activation rows (prefill tiles, a draft's
// catch-up, a verify).  The weights of two adjacent groups (16 weight rows)
// are unpacked to bytes once for all rows: B tile row kk holds, for each
// weight row, the 4 weights that activation bytes 4kk..4kk+3 of the
// product multiply (the code format: vector k's bit pair p is row 4k + p,
// 2-bit codes c = w + 1; Q4_0: vector v's low nibbles row v, high nibbles
// row 4 + v, w + 8).  TDPBSUD (signed activations by unsigned weights) sums
// each 64 (code) or 32 (Q4_0) activation bytes against them, a code block
// of 256 in four products into one int32 per (row, weight row).  That sum
// minus the offset times the activations' block sum is the exact integer
// sum(w * x) of the VNNI kernels, and the float step is theirs, fma(sum,
// dw * dx, acc): rows are bit-identical to the avx512 level's.  The VNNI
// kernels instead mask and shift the weights once per row.
// One core, 2048x2048 in L2, us (VNNI -> AMX), the code format: 3 rows 103
// -> 60, 4 rows 151 -> 63, 8 rows 223 -> 78, 16 rows 445 -> 123 (one pair
// at a time instead of two side by side: 88-94 and 130-137); 2 rows stay
// on VNNI (51, where 3 rows take 60 here).  Q4_0, whose blocks of 32 cost a
// product, a tile store and a float step each: 4 rows 175 -> 157, 8 rows
// 303 -> 208, 16 rows 595 -> 325; 3 rows stay on VNNI (131 against 150).
#if defined(__x86_64__)
#include <stdalign.h>

#include "kernels/amx_tiles.h"

#define Q8 const struct st_kern_q8_32
#define Q8K const struct st_block_q8_k
#define AMX_ROWS 16

// The avx512 level's products, for the rows these kernels leave to them.
static st_kern_mm_fn code_vnni, q4_vnni;

// A format's shape for the tiles: the activation bytes one product takes
// (the A tile's row), products per weight block, B tile rows a product.
#define IS_CODE(type) ((type) == ST_KERN_RUN_TERNARY_CODE)
#define K_BYTES(type) (IS_CODE(type) ? 64 : 32)
#define PRODUCTS(type) (IS_CODE(type) ? 4 : 1)
#define B_ROWS(type) (K_BYTES(type) / 4)
// Fewer rows go to the VNNI kernels (figures above).
#define AMX_MIN_ROWS(type) (IS_CODE(type) ? 3 : 4)

// Block b of groups q0 and q1 (adjacent) as the B tiles' rows (PRODUCTS x
// B_ROWS rows of 64 bytes): group q0's 32 bytes, then q1's.
ST_INLINE void unpack_block(const uint32_t type, const uint8_t *q0, const uint8_t *q1, int64_t b,
                            uint8_t (*rows)[64])
{
    const size_t bs = st_kern_x8_qbytes(type);
    const int nv = (int)(bs / 32);
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        __m512i c = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(q0 + (size_t)b * bs + 32 * v))),
            _mm256_loadu_si256((const __m256i *)(q1 + (size_t)b * bs + 32 * v)), 1);
        if (IS_CODE(type)) {
            const __m512i m3 = _mm512_set1_epi8(3);
            _mm512_store_si512(rows[4 * v], _mm512_and_si512(c, m3));
            _mm512_store_si512(rows[4 * v + 1], _mm512_and_si512(_mm512_srli_epi16(c, 2), m3));
            _mm512_store_si512(rows[4 * v + 2], _mm512_and_si512(_mm512_srli_epi16(c, 4), m3));
            _mm512_store_si512(rows[4 * v + 3], _mm512_and_si512(_mm512_srli_epi16(c, 6), m3));
        } else {
            const __m512i m4 = _mm512_set1_epi8(15);
            _mm512_store_si512(rows[v], _mm512_and_si512(c, m4));
            _mm512_store_si512(rows[4 + v], _mm512_and_si512(_mm512_srli_epi16(c, 4), m4));
        }
    }
}

// The weights' offset times row m's activation sum over block b, in every
// lane; the row's scale for the block into *dx.
ST_INLINE __m512i block_offset(const uint32_t type, const uint8_t *x, size_t xs, int m, int64_t b, float *dx)
{
    if (IS_CODE(type)) {
        Q8K *xb = (Q8K *)(x + m * xs) + b;
        *dx = xb->d;
        return _mm512_broadcast_i32x8(st_q8_k_sum_bcast(xb));
    }
    Q8 *xb = (Q8 *)(x + m * xs) + b;
    *dx = xb->d;
    return _mm512_set1_epi32(8 * xb->sum);
}

ST_INLINE const int8_t *act_block(const uint32_t type, const uint8_t *x, int64_t b)
{
    return IS_CODE(type) ? ((Q8K *)x + b)->qs : ((Q8 *)x + b)->qs;
}

// P pairs of groups from g (P <= 2) against MT activation rows over every
// block.  The next block is unpacked while the tiles multiply this one (two
// buffers): a tile load of rows still in the store buffer waited for them.
// Tiles: 0 the activations, 1-2 the pairs' weights unpacked, 3-4 their sums.
ST_INLINE void run_pairs(const uint32_t type, const struct st_kern_weight *w, const uint8_t *x, size_t xs,
                         const int MT, const int P, float *y, size_t ys, int64_t g, int64_t r0, int64_t r1)
{
    const int64_t nb = w->cols / st_kern_x8_block_elems(type);
    const int np = PRODUCTS(type), br = B_ROWS(type);
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
    for (int i = 0; i < P; i++) unpack_block(type, q[2 * i], q[2 * i + 1], 0, rows[0][i]);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t(*cur)[64][64] = rows[b & 1];
        _tile_zero(3);
        if (P > 1) _tile_zero(4);
#pragma GCC unroll 4
        for (int j = 0; j < np; j++) {
            _tile_loadd(0, act_block(type, x, b) + K_BYTES(type) * j, (long)xs);
            _tile_loadd(1, cur[0][br * j], 64);
            _tile_dpbsud(3, 0, 1);
            if (P > 1) {
                _tile_loadd(2, cur[1][br * j], 64);
                _tile_dpbsud(4, 0, 2);
            }
        }
        if (b + 1 < nb)
#pragma GCC unroll 2
            for (int i = 0; i < P; i++) unpack_block(type, q[2 * i], q[2 * i + 1], b + 1, rows[(b + 1) & 1][i]);
        _tile_stored(3, &sums[0][0][0], 64);
        if (P > 1) _tile_stored(4, &sums[1][0][0], 64);
        __m512 dw[2];
#pragma GCC unroll 2
        for (int i = 0; i < P; i++) dw[i] = st_pair_scales(d[2 * i], d[2 * i + 1], b);
#pragma GCC unroll 16
        for (int m = 0; m < MT; m++) {
            float dx;
            __m512i off = block_offset(type, x, xs, m, b, &dx);
#pragma GCC unroll 2
            for (int i = 0; i < P; i++) {
                __m512i s = _mm512_sub_epi32(_mm512_load_si512(sums[i][m]), off);
                acc[i][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[i], _mm512_set1_ps(dx)),
                                            acc[i][m]);
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < P; i++) st_pair_store(acc[i], MT, y, ys, g + 2 * i, r0, r1);
}

ST_INLINE void mm_unpack(const uint32_t type, st_kern_mm_fn vnni, const struct st_kern_weight *w, const void *x,
                         size_t xs, int mt, float *y, size_t ys, int64_t r0, int64_t r1)
{
    if (mt < AMX_MIN_ROWS(type)) {
        st_amx_vnni_rows(vnni, w, x, xs, mt, y, ys, r0, r1);
        return;
    }
    // Pairs of adjacent groups; a group left over at the end goes to the
    // VNNI kernel, which computes its rows the same way.
    int64_t g = r0 / ST_KERN_X8, g1 = (r1 + ST_KERN_X8 - 1) / ST_KERN_X8;
    if ((g1 - g) % 2) {
        st_amx_vnni_rows(vnni, w, x, xs, mt, y, ys, (g1 - 1) * ST_KERN_X8 > r0 ? (g1 - 1) * ST_KERN_X8 : r0, r1);
        g1--;
    }
    if (g >= g1) return;
    const uint8_t m = (uint8_t)mt, br = (uint8_t)B_ROWS(type);
    st_amx_tiles_config((const uint8_t[5]){m, br, br, m, m}, (const uint16_t[5]){K_BYTES(type), 64, 64, 64, 64}, 5);
    switch (mt) {
#define CASE(n)                                                                                        \
    case n: {                                                                                          \
        int64_t p = g;                                                                                 \
        for (; p + 4 <= g1; p += 4) run_pairs(type, w, (const uint8_t *)x, xs, n, 2, y, ys, p, r0, r1); \
        if (p < g1) run_pairs(type, w, (const uint8_t *)x, xs, n, 1, y, ys, p, r0, r1);                \
        break;                                                                                         \
    }
        CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9)
        CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
#undef CASE
    }
    _tile_release();
}

static void mm_code_amx(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y, size_t ys,
                        int64_t r0, int64_t r1)
{
    mm_unpack(ST_KERN_RUN_TERNARY_CODE, code_vnni, w, x, xs, mt, y, ys, r0, r1);
}

static void mm_q4_0x8_amx(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y, size_t ys,
                          int64_t r0, int64_t r1)
{
    mm_unpack(ST_KERN_RUN_Q4_0X8, q4_vnni, w, x, xs, mt, y, ys, r0, r1);
}

// ops is a copy of the avx512 level's table.
void st_kern_ops_fill_amx_unpack(struct st_kern_ops *ops)
{
    code_vnni = ops->mm[ST_KERN_RUN_TERNARY_CODE];
    q4_vnni = ops->mm[ST_KERN_RUN_Q4_0X8];
    ops->mm[ST_KERN_RUN_TERNARY_CODE] = mm_code_amx;
    ops->mm[ST_KERN_RUN_Q4_0X8] = mm_q4_0x8_amx;
    ops->mm_rows[ST_KERN_RUN_TERNARY_CODE] = ops->mm_tile[ST_KERN_RUN_TERNARY_CODE] = AMX_ROWS;
    ops->mm_rows[ST_KERN_RUN_Q4_0X8] = ops->mm_tile[ST_KERN_RUN_Q4_0X8] = AMX_ROWS;
}
#endif
