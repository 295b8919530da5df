// Private to kernels/: run-format layout arithmetic shared by the reference
// and SIMD kernels, and the per-level table builders.  Nothing outside
// kernels/ includes this; kernels/kernels.h is the public face.
#ifndef ST_KERNELS_KERN_INTERNAL_H
#define ST_KERNELS_KERN_INTERNAL_H

#include "kernels/kernels.h"

// Interleaved ("x8") run formats: rows are taken 8 at a time.  A row group
// is laid out as
//   [quant part: nb blocks x x8_qbytes][scales: nb x 8 f16 (row order)][pad to 64]
// where nb = cols / block elements.  Rows past `rows` are zero (padding).
#define ST_KERN_X8 8

static inline bool st_kern_is_x8(uint32_t run_type)
{
    return run_type >= ST_KERN_RUN_Q8_0X8 && run_type <= ST_KERN_RUN_TERNARY_CODE;
}

// Activation rows one call of ops->mm[run_type] takes below the AMX level
// (kernels.h).
static inline int st_kern_mm_tile(uint32_t run_type)
{
    return st_kern_is_x8(run_type) ? ST_KERN_MT_X8 : ST_KERN_MT;
}

// Columns per block of an x8 format.
static inline int64_t st_kern_x8_block_elems(uint32_t run_type)
{
    return run_type == ST_KERN_RUN_Q8_0X8 || run_type == ST_KERN_RUN_Q4_0X8 ? 32 : 256;
}

// Bytes of one block's quant part for a group of 8 rows.
static inline size_t st_kern_x8_qbytes(uint32_t run_type)
{
    switch (run_type) {
    case ST_KERN_RUN_Q8_0X8: return 256; // 8 vectors of 32 bytes
    case ST_KERN_RUN_Q4_0X8: return 128; // 4 vectors of 32 bytes, two nibbles each
    default: return 512;                 // ternary: 16 vectors of 32 bytes
    }
}

static inline size_t st_kern_align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

// Bytes of one row group.
static inline size_t st_kern_x8_stride(uint32_t run_type, int64_t cols)
{
    size_t nb = (size_t)(cols / st_kern_x8_block_elems(run_type));
    return st_kern_align64(nb * (st_kern_x8_qbytes(run_type) + 8 * sizeof(uint16_t)));
}

// Groups per unit.  Q8_0 groups come in pairs whose quant parts interleave:
// a pair (groups 2p and 2p + 1, 2 strides of bytes) is laid out as
//   [quant part: nb blocks x 512][scales of 2p: nb x 8][of 2p + 1: nb x 8][pad]
// where vector k of a block is 64 bytes, bytes 4k..4k+3 of each of the 16
// rows (group 2p's 8 rows in the low 32 bytes, 2p + 1's in the high).  A
// block of a pair is then exactly the 16-column tile AMX multiplies by (one
// TDPBSSD where two 8-column ones took 1.4x the time), and one 512-bit
// vector of 16 rows for AVX-512; the 256-bit kernels read each group's
// half, vectors 64 bytes apart.  The other formats' units are one group.
static inline int64_t st_kern_x8_unit(uint32_t run_type)
{
    return run_type == ST_KERN_RUN_Q8_0X8 ? 2 : 1;
}

// Distance between a group's consecutive 32-byte vectors, and blocks.
static inline size_t st_kern_x8_vstep(uint32_t run_type)
{
    return 32 * (size_t)st_kern_x8_unit(run_type);
}

static inline size_t st_kern_x8_bstep(uint32_t run_type)
{
    return st_kern_x8_qbytes(run_type) * (size_t)st_kern_x8_unit(run_type);
}

// Block 0 of group g's quants, and its scales (nb x 8 f16).
static inline const uint8_t *st_kern_x8_group_q(const struct st_kern_weight *w, int64_t g)
{
    int64_t h = g % st_kern_x8_unit(w->type);
    return (const uint8_t *)w->data + (size_t)(g - h) * w->stride + 32 * (size_t)h;
}

static inline const uint16_t *st_kern_x8_group_d(const struct st_kern_weight *w, int64_t g)
{
    int64_t h = g % st_kern_x8_unit(w->type);
    size_t nb = (size_t)(w->cols / st_kern_x8_block_elems(w->type));
    const uint8_t *unit = (const uint8_t *)w->data + (size_t)(g - h) * w->stride;
    return (const uint16_t *)(unit + nb * st_kern_x8_bstep(w->type)) + (size_t)h * nb * 8;
}

// The end of the units that hold rows before r1.
static inline const uint8_t *st_kern_x8_end(const struct st_kern_weight *w, int64_t r1)
{
    int64_t u = st_kern_x8_unit(w->type), rows = ST_KERN_X8 * u;
    return (const uint8_t *)w->data + (size_t)((r1 + rows - 1) / rows * u) * w->stride;
}

// Row `row`, block b of an x8 weight as small integers (q8_0: the int8
// quants; q4_0: nibble - 8; ternary: -1/0/+1) and its f16 scale.
void st_kern_x8_unpack(const struct st_kern_weight *w, int64_t row, int64_t b, int8_t *q,
                       uint16_t *d);

// All 8 rows of block blk of an x8 weight (a group's block, vectors
// st_kern_x8_vstep apart) as small integers, as st_kern_x8_unpack gives
// them one row at a time (the fast path of the scalar kernels).
void st_kern_x8_decode_block(uint32_t type, const uint8_t *blk, int8_t (*q)[256]);

// Matrix product of row-layout weights via a dot-product function, one
// (row, activation) pair at a time; shared by levels that have no faster
// tile for a type.
void st_kern_mm_by_dot(st_kern_dot_fn dot, const struct st_kern_weight *w, const void *x,
                       size_t x_stride, int mt, float *y, size_t y_stride, int64_t r0,
                       int64_t r1);

// Q8_0 rows16[16][src_row] -> one q8_0x8 pair of row groups, unit, of nb
// blocks (x86-64, AVX2).
void st_kern_repack_q8_0x8_pair_avx2(const uint8_t *rows16, size_t src_row, int64_t nb, uint8_t *unit);
// Q4_0 rows8[8][src_row] -> one q4_0x8 row group g of nb blocks (x86-64, AVX2).
void st_kern_repack_q4_0x8_group_avx2(const uint8_t *rows8, size_t src_row, int64_t nb, uint8_t *g);

// Table builders, one per level (the SIMD ones exist only on x86-64).
void st_kern_ops_fill_scalar(struct st_kern_ops *ops);
void st_kern_ops_fill_avx2(struct st_kern_ops *ops);
void st_kern_ops_fill_avx512(struct st_kern_ops *ops);
void st_kern_ops_fill_amx(struct st_kern_ops *ops);
// The AMX ternary code and Q4_0 products (mm_unpack_amx.c), into a copy of
// the avx512 table.
void st_kern_ops_fill_amx_unpack(struct st_kern_ops *ops);
// The avx512 level's Q8_0 product with 4 pairs of groups side by side (its
// table's streams one pair): what the AMX level runs below 7 rows.
void st_kern_mm_q8_0x8_side4_avx512(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                                    size_t ys, int64_t r0, int64_t r1);
bool st_kern_amx_usable(void);

// Parts of the tables, filled by their files.
void st_kern_dot_fill_scalar(struct st_kern_ops *ops);
void st_kern_mm_fill_scalar(struct st_kern_ops *ops);
void st_kern_ops_fill_scalar_rest(struct st_kern_ops *ops);
void st_kern_quant_fill_avx2(struct st_kern_ops *ops);
void st_kern_dot_fill_avx2(struct st_kern_ops *ops);
void st_kern_mm_rows_fill_avx2(struct st_kern_ops *ops);
void st_kern_kquant_fill_avx2(struct st_kern_ops *ops);
void st_kern_mm_float_fill_avx2(struct st_kern_ops *ops);
void st_kern_mm_x8_fill_avx2(struct st_kern_ops *ops);
void st_kern_mm_ternary_fill_avx2(struct st_kern_ops *ops);
void st_kern_ops_fill_avx2_rest(struct st_kern_ops *ops);
void st_kern_attention_fill_avx2(struct st_kern_ops *ops);
void st_kern_attention_fill_avx512(struct st_kern_ops *ops);
void st_kern_attention_ref(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end,
                           float *scratch);

// Pieces of the scalar table that the SIMD tables reuse.
void st_kern_quantize_q8_32_ref(const float *x, struct st_kern_q8_32 *y, int64_t n);
void st_kern_quantize_q8_k_ref(const float *x, struct st_block_q8_k *y, int64_t n);
float st_kern_dot_f32_ref(int64_t n, const void *w, const void *x);
float st_kern_dot_f16_ref(int64_t n, const void *w, const void *x);
float st_kern_dot_bf16_ref(int64_t n, const void *w, const void *x);
float st_kern_dot_q8_0_ref(int64_t n, const void *w, const void *x);
float st_kern_dot_q4_0_ref(int64_t n, const void *w, const void *x);
float st_kern_dot_q4_k_ref(int64_t n, const void *w, const void *x);
float st_kern_dot_q6_k_ref(int64_t n, const void *w, const void *x);
float st_kern_dot_tq1_0_ref(int64_t n, const void *w, const void *x);
float st_kern_dot_tq2_0_ref(int64_t n, const void *w, const void *x);

// Ternary trits of GGUF blocks, in element order (reference decoders).
void st_kern_tq1_0_trits(const struct st_block_tq1_0 *b, int8_t *t /*[256]*/);
// Returns false if a code is 3 (not a ternary value).
bool st_kern_tq2_0_trits(const struct st_block_tq2_0 *b, int8_t *t /*[256]*/);

// The scale a Q8_0-style activation block keeps: d rounded to f16 as
// llama.cpp stores it, except below the f16 normal range, where rounding
// would destroy it (llama.cpp's blocks go to zero there; ours stay exact).
static inline float st_kern_q8_32_scale(float d)
{
    return d < 6.103515625e-05f ? d : st_f16_to_f32(st_f32_to_f16(d));
}

// Sum of the 16 partial sums of a Q8_K block.
static inline int32_t st_kern_q8_k_sum(const struct st_block_q8_k *b)
{
    int32_t s = 0;
    for (int i = 0; i < ST_QK_K / 16; i++) s += b->bsums[i];
    return s;
}

#endif
