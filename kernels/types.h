// GGUF/ggml tensor types: block layouts, sizes, and the scalar dequantisers
// that are the reference for every faster kernel.
#ifndef ST_KERNELS_TYPES_H
#define ST_KERNELS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/half.h"

// Values are ggml's type ids, as stored in GGUF tensor infos.
enum st_type {
    ST_TYPE_F32 = 0,
    ST_TYPE_F16 = 1,
    ST_TYPE_Q4_0 = 2,
    ST_TYPE_Q8_0 = 8,
    ST_TYPE_Q4_K = 12,
    ST_TYPE_Q6_K = 14,
    ST_TYPE_Q8_K = 15,
    ST_TYPE_BF16 = 30,
    ST_TYPE_TQ1_0 = 34,
    ST_TYPE_TQ2_0 = 35,
    ST_TYPE_COUNT = 40, // table size; ids without an entry are unsupported
};

#define ST_QK8_0 32
#define ST_QK4_0 32
#define ST_QK_K 256

struct st_block_q8_0 {
    uint16_t d;         // f16 scale
    int8_t qs[ST_QK8_0];
};
struct st_block_q4_0 {
    uint16_t d;         // f16 scale
    uint8_t qs[ST_QK4_0 / 2]; // low nibbles: elements 0..15, high: 16..31
};
struct st_block_q4_k {
    uint16_t d;         // f16 super-block scale for the 6-bit scales
    uint16_t dmin;      // f16 super-block scale for the 6-bit mins
    uint8_t scales[12]; // 8 scales and 8 mins, 6 bits each
    uint8_t qs[ST_QK_K / 2];
};
struct st_block_q6_k {
    uint8_t ql[ST_QK_K / 2]; // low 4 bits
    uint8_t qh[ST_QK_K / 4]; // high 2 bits
    int8_t scales[ST_QK_K / 16];
    uint16_t d;
};
struct st_block_q8_k { // activations for K-quants and ternary
    float d;
    int8_t qs[ST_QK_K];
    int16_t bsums[ST_QK_K / 16]; // sums of groups of 16
};
struct st_block_tq1_0 {
    uint8_t qs[(ST_QK_K - 4 * ST_QK_K / 64) / 5]; // 5 trits per byte
    uint8_t qh[ST_QK_K / 64];                      // 4 trits per byte
    uint16_t d;
};
struct st_block_tq2_0 {
    uint8_t qs[ST_QK_K / 4]; // 2-bit codes, value = code - 1
    uint16_t d;
};

_Static_assert(sizeof(struct st_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct st_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct st_block_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(struct st_block_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(struct st_block_q8_k) == 292, "q8_k layout");
_Static_assert(sizeof(struct st_block_tq1_0) == 54, "tq1_0 layout");
_Static_assert(sizeof(struct st_block_tq2_0) == 66, "tq2_0 layout");

typedef void (*st_dequant_fn)(const void *src, float *dst, int64_t n);

struct st_type_info {
    const char *name;       // GGUF spelling, lower case ("q8_0")
    uint32_t block_elems;   // elements per block (1 for plain floats)
    uint32_t block_bytes;   // bytes per block
    st_dequant_fn dequant;  // scalar reference; n is a multiple of block_elems
};

// NULL for types this project does not support.
const struct st_type_info *st_type_get(uint32_t type);
const char *st_type_name(uint32_t type); // "unknown" when unsupported
// Type id from its name (case-insensitive); -1 if unknown.
int st_type_from_name(const char *name);
// Bytes of a row of n elements; 0 when n is not a multiple of the block.
size_t st_type_row_bytes(uint32_t type, int64_t n);

// Scalar dequantisers (reference).  n must be a multiple of the block size.
void st_dequant_f32(const void *src, float *dst, int64_t n);
void st_dequant_f16(const void *src, float *dst, int64_t n);
void st_dequant_bf16(const void *src, float *dst, int64_t n);
void st_dequant_q8_0(const void *src, float *dst, int64_t n);
void st_dequant_q4_0(const void *src, float *dst, int64_t n);
void st_dequant_q4_k(const void *src, float *dst, int64_t n);
void st_dequant_q6_k(const void *src, float *dst, int64_t n);
void st_dequant_tq1_0(const void *src, float *dst, int64_t n);
void st_dequant_tq2_0(const void *src, float *dst, int64_t n);
// Dispatch by type; returns -1 for unsupported types or bad n.
int st_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

#endif
