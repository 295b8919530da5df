// Weight quantisers (float rows to GGUF block formats) and the per-role type
// plan shared by `subternary model quantize` and `subternary model gen`.
//
// Each quantiser writes ggml's exact block layout (kernels/types.h) and is the
// inverse of the scalar dequantiser there:
//   F32, F16, BF16  element-wise (round to nearest even)
//   Q8_0            d = max|x| / 127, q = round(x / d)            (ggml's reference)
//   Q4_0            d = -(signed value of largest |x|) / 8,
//                   q = min(15, trunc(x / d + 8.5))               (ggml's reference)
//   TQ1_0, TQ2_0    codes by absmean: s = mean|x| of the block,
//                   t = clamp(round(x / s), -1, 1); the stored scale d is the
//                   mean |x| over the elements coded +-1 (the least-squares
//                   scale for those codes), so inputs already of the form
//                   t * d come back exactly and re-quantising a dequantised
//                   block gives the same bytes.
#ifndef ST_MODEL_QUANTIZE_H
#define ST_MODEL_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

// True for the types st_quantize_row can produce: F32, F16, BF16, Q8_0, Q4_0,
// TQ1_0, TQ2_0.
bool st_quant_supported(uint32_t type);

// Quantises n floats (a multiple of the type's block) into dst, which holds
// st_type_row_bytes(type, n) bytes.  Returns -1 for an unsupported type or n.
int st_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

// llama.cpp's general.file_type (llama_ftype) for a file mostly of `type`.
uint32_t st_quant_ftype(uint32_t type);

// Where a tensor sits in a Llama model, by its GGUF name.
enum st_quant_role {
    ST_QROLE_NORM,   // 1-D tensors (norms, rope frequencies): always F32
    ST_QROLE_EMBD,   // token_embd.weight
    ST_QROLE_OUTPUT, // output.weight
    ST_QROLE_ATTN,   // blk.N.attn_* (q, k, v, output, qkv)
    ST_QROLE_MLP,    // blk.N.ffn_* (gate, up, down)
    ST_QROLE_OTHER,  // any other matrix: the base type
};
enum st_quant_role st_quant_role_of(const char *name, uint32_t n_dims);
const char *st_quant_role_name(enum st_quant_role r);

// Tensor types by role.  -1 means "the base type", except that embd and
// output default to Q8_0 when the base type is ternary (as llama.cpp keeps
// those two at higher precision).
struct st_quant_plan {
    int base;
    int attn, mlp, embd, output;
};
void st_quant_plan_init(struct st_quant_plan *p, int base);

// Applies one command-line option to a plan: "--type", "--attn-type",
// "--mlp-type", "--embd-type" or "--output-type" with a type name (any case).
// Returns 0 when applied, 1 when opt is not a plan option, -1 (e set) for a
// type name that is unknown or not producible.
int st_quant_plan_option(struct st_quant_plan *p, const char *opt, const char *val, struct st_error *e);
// "F32 F16 BF16 Q8_0 Q4_0 TQ2_0 TQ1_0", for messages.
const char *st_quant_type_list(void);

// The type a tensor gets under the plan.  When the row length ne0 does not
// fit the wanted type's block, a type that fits is chosen instead (ternary:
// Q4_0 then F16; Q8_0/Q4_0: F16) and `note` (if cap > 0) says so; otherwise
// note is set to "".
uint32_t st_quant_pick(const struct st_quant_plan *p, const char *name, uint32_t n_dims, int64_t ne0,
                       char *note, size_t cap);

// Runs fn(ctx, r0, r1) over [0, n) cut into contiguous ranges, one per
// thread, on as many threads as this process has CPUs (at most 16; threads
// are started per call and joined before it returns).  fn may touch only its
// own range, so results never depend on the number of threads.
void st_quant_parallel(int64_t n, void (*fn)(void *ctx, int64_t r0, int64_t r1), void *ctx);

// Converts a whole GGUF file: every key is copied (general.file_type set to
// the base type's), 1-D tensors become F32, matrices get the plan's types
// (a tensor already of its new type is copied unchanged).  Streams tensor by
// tensor; the output appears at `out` only when complete.  Fallback notes go
// to stderr unless quiet.
struct st_quant_report {
    uint64_t n_tensors;
    uint64_t in_bytes, out_bytes; // tensor data
    uint32_t n_fallback;          // tensors given another type than asked
};
int st_quantize_file(const char *in, const char *out, const struct st_quant_plan *p, bool progress, bool quiet,
                     struct st_quant_report *rep, struct st_error *e);

#endif
