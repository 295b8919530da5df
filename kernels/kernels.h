// Compute kernels: activation quantisation, dot products and matrix products
// of every supported weight type, attention over an F16 KV cache, and the
// element-wise ops of a Llama layer.
//
// Every kernel has a scalar reference and SIMD versions (AVX2+FMA, AVX-512
// VNNI); the best one the CPU supports is chosen at run time, so one binary
// runs on any x86-64 (and on arm64 with the scalar path).  Kernels take a row
// (or head, or element) range so the ranks of a worker set can split an op;
// a row's result never depends on who computed it or on how many activation
// rows were processed with it: each row of a small-M or prefill product is
// bit-identical to the M = 1 product of that row, at a given kernel level.
#ifndef ST_KERNELS_KERNELS_H
#define ST_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/types.h"

// ---------------------------------------------------------------------------
// CPU features and kernel selection (the only process-wide state).

enum st_kern_level {
    ST_KERN_LEVEL_SCALAR = 0, // plain C, the reference
    ST_KERN_LEVEL_AVX2 = 1,   // AVX2 + FMA + F16C
    ST_KERN_LEVEL_AVX512 = 2, // AVX-512 F/BW/VL/DQ + VNNI (int8 kernels, attention; rest as AVX2)
    ST_KERN_LEVEL_AMX = 3,    // AVX-512 + AMX-TILE/INT8 (Q8_0 products of 7-16 rows; rest as AVX-512)
    ST_KERN_LEVEL_COUNT
};

struct st_kern_cpu {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni;
    bool amx; // AMX-TILE and AMX-INT8, with the tile state granted to this process
    enum st_kern_level best;   // best level this CPU runs
    enum st_kern_level level;  // level in use (best unless forced)
};

// Filled by st_kern_init(); read-only afterwards except through
// st_kern_set_level().
extern struct st_kern_cpu st_kern_cpu;

// Detects the CPU's features and selects the best level.  Idempotent; every
// public kernel calls it on first use.  The environment variable
// ST_KERN_LEVEL=scalar|avx2|avx512|amx caps the level (for comparisons in
// production runs).
void st_kern_init(void);
// Forces a level (tests, benchmarks).  Returns -1 if the CPU or the build
// lacks it, leaving the level unchanged.
int st_kern_set_level(enum st_kern_level level);
const char *st_kern_level_name(enum st_kern_level level);

// ---------------------------------------------------------------------------
// Activations.  Float rows are quantised per row, independently of the other
// rows, so a row's bytes do not depend on M.  Rounding is to nearest-even at
// every level, so every level produces the same bytes.

// Q8_0-style block of 32 activations: x[i] ~ qs[i] * d.
struct st_kern_q8_32 {
    int8_t qs[32];
    float d;     // scale, rounded to f16 precision as llama.cpp stores it
                 // (unrounded below the f16 normal range)
    int32_t sum; // sum of qs (the offset term of 4-bit weights)
};
_Static_assert(sizeof(struct st_kern_q8_32) == 40, "q8_32 layout");
// Q8_K-style blocks of 256 (K-quants and ternary) are struct st_block_q8_k
// of kernels/types.h: d is a float, bsums are sums of 16 quants.

enum st_kern_act {
    ST_KERN_ACT_F32 = 0,   // float rows
    ST_KERN_ACT_Q8_32 = 1, // struct st_kern_q8_32 blocks
    ST_KERN_ACT_Q8_K = 2,  // struct st_block_q8_k blocks
};

// n must be a multiple of 32 (resp. 256).
void st_kern_quantize_q8_32(const float *x, struct st_kern_q8_32 *y, int64_t n);
void st_kern_quantize_q8_k(const float *x, struct st_block_q8_k *y, int64_t n);

// ---------------------------------------------------------------------------
// Weights in their run format.
//
// A run format is how a weight matrix sits in memory while the kernels use
// it.  Values below ST_TYPE_COUNT mean the GGUF layout of that enum st_type
// (rows as stored in the file); the values below are repacked layouts.
enum st_kern_run {
    // Q8_0 with 16 rows interleaved (two groups of 8): per block of 32
    // columns, 8 vectors of 64 bytes, vector g holding columns 4g..4g+3 of
    // rows 0..15; f16 scales apart.  8.5 bits per weight, as Q8_0.
    ST_KERN_RUN_Q8_0X8 = 64,
    // Q4_0 with 8 rows interleaved: per block, 4 vectors of 32 bytes whose
    // low nibbles hold columns 4v..4v+3 and high nibbles 16+4v..16+4v+3 of
    // rows 0..7.  4.5 bits per weight.
    ST_KERN_RUN_Q4_0X8 = 65,
    // Ternary {-1,0,+1} (from TQ1_0 or TQ2_0), 8 rows interleaved: a
    // nonzero bitmask and a sign bitmask; the dot product with int8
    // activations is additions and subtractions only.  2.06 bits per weight.
    ST_KERN_RUN_TERNARY_MASK = 66,
    // Ternary as 2-bit codes w + 1 in {0,1,2}, 8 rows interleaved; the bias
    // is removed with the activations' block sums.  2.06 bits per weight.
    ST_KERN_RUN_TERNARY_CODE = 67,
    ST_KERN_RUN_MAX = 68,
};

// The ternary run format used by default (the faster one on the benchmark).
#define ST_KERN_RUN_TERNARY_DEFAULT ST_KERN_RUN_TERNARY_CODE

struct st_kern_weight {
    uint32_t type;      // run format: enum st_kern_run or enum st_type
    int64_t rows, cols; // output and input dimension
    int32_t group;      // rows per row group: 1, or 8 for the interleaved formats
    size_t stride;      // bytes from one row group to the next
    const void *data;   // 64-byte aligned for best speed
};

// Name of a run format ("q8_0x8", "ternary-code", or the GGUF type name).
const char *st_kern_run_name(uint32_t run_type);
// The run format a GGUF tensor type is given by default (itself where no
// faster layout exists); UINT32_MAX for unsupported types.
uint32_t st_kern_run_default(uint32_t gguf_type);
// Whether GGUF type src can be repacked into run format run_type.
bool st_kern_run_accepts(uint32_t run_type, uint32_t gguf_type);
// Bytes of the run format of a rows x cols tensor; 0 if unsupported or cols
// is not a multiple of the type's block.
size_t st_kern_run_size(uint32_t run_type, int64_t rows, int64_t cols);
// Size of the default run format of a GGUF tensor; *run_type receives it.
size_t st_kern_runfmt_size(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t *run_type);

// Repacks rows [row_begin, row_end) of a GGUF tensor (src points at row
// row_begin, in the GGUF layout of gguf_type) into the run format run_type
// of the whole tensor at dst (dst_size bytes, st_kern_run_size()).  Ranges
// may be done in any order or in parallel; for the interleaved formats they
// must start and end at multiples of st_kern_run_row_align (or end at
// `rows`: that range also zeroes the padding rows).
int st_kern_repack(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t run_type,
                   const void *src, int64_t row_begin, int64_t row_end, void *dst,
                   size_t dst_size, struct st_error *e);

// The bytes [*off, *off + *len) of a tensor's run format (cols columns) that
// rows [row_begin, row_end) fill: whole units of 8-row groups for the
// interleaved formats (the padding rows of the last one included).
void st_kern_repack_span(uint32_t run_type, int64_t cols, int64_t row_begin, int64_t row_end, size_t *off,
                         size_t *len);
// st_kern_repack writing only that span, to part (part_size bytes): the
// loader repacks into a buffer and writes it where it belongs.
int st_kern_repack_part(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t run_type, const void *src,
                        int64_t row_begin, int64_t row_end, void *part, size_t part_size, struct st_error *e);

// The multiple of rows a repack range starts at: 16 for q8_0x8 (its groups
// come in interleaved pairs), 8 for the other interleaved formats, else 1.
int64_t st_kern_run_row_align(uint32_t run_type);

// Describes run-format data (e.g. mapped from shared memory).
int st_kern_weight_init(struct st_kern_weight *w, uint32_t run_type, int64_t rows,
                        int64_t cols, const void *data, struct st_error *e);

// Row `row` of a run-format weight as floats (reference; exact: the same
// values st_dequant_row gives for the GGUF source).
void st_kern_weight_row(const struct st_kern_weight *w, int64_t row, float *dst /*[cols]*/);

// Activation format a run format multiplies with, and bytes of one
// activation row of `cols` elements in it.
enum st_kern_act st_kern_act_type(uint32_t run_type);
size_t st_kern_act_row_bytes(uint32_t run_type, int64_t cols);
// Converts M float rows [M][cols] into the activation format of run_type
// (a copy for float formats).  xq: [M][st_kern_act_row_bytes()].
void st_kern_quantize_act(uint32_t run_type, const float *x, void *xq, int M, int64_t cols);

// ---------------------------------------------------------------------------
// Products.

// Dot product of one GGUF-layout weight row of `type` with one activation
// row in st_kern_act_type(type) format; n elements.
float st_kern_vec_dot(uint32_t type, int64_t n, const void *w_row, const void *x);

// y[m][r] = sum_c W[r][c] * x[m][c] for m < M and row_begin <= r < row_end.
// x: M activation rows in st_kern_act_type(w->type) format, each
// st_kern_act_row_bytes() apart.  y: [M][w->rows].  Each rank may take any
// row range; ranges at multiples of w->group avoid recomputing a group.
// Each weight block is decoded once for up to ST_KERN_MT activation rows
// (every format, Q4_K/Q6_K rows included; ST_KERN_MT_X8 for the run
// formats); large M is tiled for cache reuse.
// Row r of the result is bit-identical for every M and every range that
// contains r.  y must not overlap x.
void st_kern_matmul(const struct st_kern_weight *w, const void *x, int M, float *y,
                    int64_t row_begin, int64_t row_end);

// ---------------------------------------------------------------------------
// Attention: grouped-query heads over an F16 KV cache, causal.

struct st_kern_attn {
    const float *q;     // [M][n_heads][head_dim], RoPE applied
    const uint16_t *k;  // [n_ctx][n_kv_heads][head_dim] f16, one layer
    const uint16_t *v;  // [n_ctx][n_kv_heads][head_dim] f16, one layer
    float *out;         // [M][n_heads][head_dim]
    const int32_t *pos; // [M] absolute positions; row i sees positions 0..pos[i]
    int M;
    int n_heads, n_kv_heads, head_dim;
    int n_ctx;          // cache length; every pos[i] < n_ctx
    float scale;        // score scale, usually 1/sqrt(head_dim)
    // Segments of ST_KERN_ATTN_SEG positions [skip_begin, skip_end) are left
    // out (none when equal): a draft's window over a long context attends
    // the first segment and the last few.  When the range is not empty,
    // skip_begin >= 1 and every row's own position lies past it.
    int skip_begin, skip_end;
};

// Computes the query heads of KV heads [kv_head_begin, kv_head_end) for all
// M rows; the rows and heads sharing a KV head are processed together so
// that K and V are read once per few of them, and all KV heads of the call
// position by position, so a cache row [n_kv_heads][head_dim] fetched once
// serves them all: give each rank a contiguous range of KV heads rather
// than one head per call.  scratch: n_ctx floats.  out must not overlap q.
// Softmax in F32 (exact two-pass in the reference, online in SIMD levels).
void st_kern_attention(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end,
                       float *scratch);

// Long contexts split by positions.  The SIMD levels take positions in
// segments of ST_KERN_ATTN_SEG: a (row, head) pair's softmax runs over each
// segment on its own and the segments' partials are folded in order, so the
// result is the same bits whether one st_kern_attention call does it all or
// ranks compute segments apart (st_kern_attention_part, each reading a
// contiguous stretch of the cache for all its KV heads) and fold them after
// (st_kern_attention_merge).
#define ST_KERN_ATTN_SEG 512
// Segments of a context of n positions.
#define ST_KERN_ATTN_SEGS(n) (((n) + ST_KERN_ATTN_SEG - 1) / ST_KERN_ATTN_SEG)
// Whether a leaves out segment s, and how many segments it leaves out.
#define ST_KERN_ATTN_SKIPS(a, s) ((s) >= (a)->skip_begin && (s) < (a)->skip_end)
#define ST_KERN_ATTN_SKIPPED(a) ((a)->skip_begin < (a)->skip_end ? (a)->skip_end - (a)->skip_begin : 0)
#define ST_KERN_ATTN_HD_MAX 256
// Floats of one (row, head, segment) partial: acc[head_dim], max, sum, padding.
#define ST_KERN_ATTN_PART_FLOATS(hd) ((size_t)(hd) + 16)

// True if the level in use computes a's shape by segments (not the scalar
// reference, nor head sizes it hands to it).
bool st_kern_attention_splits(const struct st_kern_attn *a);
// Segments [seg_begin, seg_end) of the query heads of KV heads
// [kv_head_begin, kv_head_end), all M rows: the partial of (row m, head h,
// segment s) goes to part + ((m * n_heads + h) * n_seg + s) *
// ST_KERN_ATTN_PART_FLOATS(head_dim), for the segments that hold positions
// up to the row's own.  n_seg: segments per pair in part, >= the segments
// of n_ctx.
void st_kern_attention_part(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end, int seg_begin,
                            int seg_end, float *part, int n_seg);
// The result of pairs [pair_begin, pair_end) (pair = m * n_heads + h) from
// all their partials into a->out.
void st_kern_attention_merge(const struct st_kern_attn *a, int pair_begin, int pair_end, const float *part,
                             int n_seg);
// How n_ranks ranks split a's positions: items of (segment, range of
// n_kv_heads / *head_ranges KV heads), segment-major, *n_items of them.
// Head ranges are split only as far as it takes to give every rank a few
// items: a whole row of the cache is then read by one rank, in stretches
// of ST_KERN_ATTN_SEG rows.
void st_kern_attention_items(const struct st_kern_attn *a, int n_ranks, int *n_items, int *head_ranges);
// Whether n_ranks ranks should split a by segments rather than by KV heads
// (and the level can): a one-row decode over 8 segments or more, read from
// memory at a rate the split raises, or more ranks than KV heads.  Two
// ranks, Zen 5 (bench attn --threads 2, runs in several phases of the
// host): one row 1.02-1.24x faster by segments at 4096-8192, 0.92-1.03x at
// 2048, 0.92-0.94x at 1024; rows of a verify, bound by arithmetic, mostly
// 3-14% slower.
bool st_kern_attention_split_pays(const struct st_kern_attn *a, int n_ranks);

// ---------------------------------------------------------------------------
// Element-wise and row ops.

// y = x / sqrt(mean(x^2) + eps) * w, one row of n.  y may alias x.
void st_kern_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);

// RoPE, LLaMA ("normal", not NEOX) mode: pairs (2i, 2i+1), i < n_rot/2, of
// every head rotate by theta_i = pos * base^(-2i/n_rot) / freq_factors[i]
// (freq_factors may be NULL).  cs receives cos/sin per pair.
void st_kern_rope_cache(float *cs /*[n_rot]: cos,sin pairs*/, int n_rot, int32_t pos,
                        float base, const float *freq_factors /*[n_rot/2] or NULL*/);
// x: one row [n_heads][head_dim]; rotates heads [head_begin, head_end).
void st_kern_rope_apply(float *x, int head_begin, int head_end, int head_dim, int n_rot,
                        const float *cs);
// Both in one call (cs computed on the stack; n_rot <= 1024).
void st_kern_rope(float *x, int head_begin, int head_end, int head_dim, int n_rot,
                  int32_t pos, float base, const float *freq_factors);

// out[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u; out may alias g or u.
void st_kern_silu_gate(float *out, const float *g, const float *u, int64_t n);
// y[i] += x[i] (residual).
void st_kern_add(float *y, const float *x, int64_t n);
// Index of the largest element (the first of equal ones); *max_val gets it
// (may be NULL).  Ranks combine their ranges' answers.
int64_t st_kern_argmax(const float *x, int64_t n, float *max_val);
// Largest element.
float st_kern_max(const float *x, int64_t n);
// p[i] = exp((x[i] - max) * inv_temp); returns the sum of p (over this range).
float st_kern_exp_sum(const float *x, float *p, int64_t n, float max, float inv_temp);
// x[i] *= s.
void st_kern_scale(float *x, int64_t n, float s);
// Softmax of one whole row with temperature temp > 0 (max, exp_sum, scale).
void st_kern_softmax(const float *x, float *p, int64_t n, float temp);

// ---------------------------------------------------------------------------
// Kernel tables: what the functions above dispatch to.  Tests take two
// levels' tables and compare them.

// Product of up to ops->mm_rows[w->type] activation rows with rows [r0, r1)
// of w.  The interleaved int8 formats take up to ST_KERN_MT_X8 rows in one
// pass over the weights (a verify of K + 1 <= 8 rows reads each weight
// once; Q8_0 16 at the avx512 and amx levels); the others ST_KERN_MT.
#define ST_KERN_MT 4
#define ST_KERN_MT_X8 8
typedef void (*st_kern_mm_fn)(const struct st_kern_weight *w, const void *x, size_t x_stride,
                              int mt, float *y, size_t y_stride, int64_t r0, int64_t r1);
typedef float (*st_kern_dot_fn)(int64_t n, const void *w_row, const void *x);

struct st_kern_ops {
    enum st_kern_level level;
    void (*quantize_q8_32)(const float *x, struct st_kern_q8_32 *y, int64_t n);
    void (*quantize_q8_k)(const float *x, struct st_block_q8_k *y, int64_t n);
    st_kern_dot_fn dot[ST_TYPE_COUNT]; // GGUF-layout rows
    st_kern_mm_fn mm[ST_KERN_RUN_MAX]; // every run format
    int mm_rows[ST_KERN_RUN_MAX];      // the most activation rows one mm call takes
    int mm_tile[ST_KERN_RUN_MAX];      // rows a call when M is more than mm_rows (0: mm_rows)
    void (*attention)(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end,
                      float *scratch);
    // NULL where the level does not split by segments.
    void (*attention_part)(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end, int seg_begin,
                           int seg_end, float *part, int n_seg);
    void (*attention_merge)(const struct st_kern_attn *a, int pair_begin, int pair_end, const float *part,
                            int n_seg);
    void (*rmsnorm)(const float *x, const float *w, float *y, int64_t n, float eps);
    void (*rope_apply)(float *x, int head_begin, int head_end, int head_dim, int n_rot,
                       const float *cs);
    void (*silu_gate)(float *out, const float *g, const float *u, int64_t n);
    void (*add)(float *y, const float *x, int64_t n);
    int64_t (*argmax)(const float *x, int64_t n, float *max_val);
    float (*max)(const float *x, int64_t n);
    float (*exp_sum)(const float *x, float *p, int64_t n, float max, float inv_temp);
    void (*scale)(float *x, int64_t n, float s);
};

// The table of a level; NULL if this CPU or build cannot run it.
const struct st_kern_ops *st_kern_ops_get(enum st_kern_level level);
// The table in use.
const struct st_kern_ops *st_kern_ops_active(void);

// Matrix product through a given table (st_kern_matmul uses the active one).
void st_kern_matmul_ops(const struct st_kern_ops *ops, const struct st_kern_weight *w,
                        const void *x, int M, float *y, int64_t row_begin, int64_t row_end);

#endif
