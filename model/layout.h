// How models and scratch buffers sit in a shared region.  The coordinator
// writes a directory at the start of the weights section while loading; every
// worker reads it to build its plans.  The scratch layout is a pure function
// of the models and the set's limits, computed the same way on both sides.
#ifndef ST_MODEL_LAYOUT_H
#define ST_MODEL_LAYOUT_H

#include <stdint.h>

#include "model/llama.h"

#define ST_LAYOUT_MAGIC UINT64_C(0x3252494457545324) // "$STWDIR2"
#define ST_LAYOUT_MAX_MODELS 2

enum st_layout_model_id { ST_MODEL_TARGET = 0, ST_MODEL_DRAFT = 1 };

// A matrix in a kernel run format (kernels/kernels.h), in the weights section.
struct st_layout_mat {
    uint64_t offset;   // from the weights section start
    uint64_t bytes;
    uint32_t run_type; // enum st_kern_run or enum st_type
    uint32_t gguf_type;
    int64_t rows, cols;
};

// A float vector (norm weights, RoPE frequencies).
struct st_layout_vec {
    uint64_t offset;
    uint32_t n;
    uint32_t pad;
};

struct st_layout_layer {
    struct st_layout_vec attn_norm, ffn_norm;
    struct st_layout_mat wq, wk, wv, wo, gate, up, down;
};

struct st_layout_model {
    struct st_llama_hparams hp;
    uint32_t embd_type;      // GGUF type of the embedding rows (read one row per token)
    uint32_t pad;
    uint64_t embd_offset;    // [n_vocab] rows of embd_row_bytes
    uint64_t embd_row_bytes;
    struct st_layout_vec output_norm;
    struct st_layout_vec rope_freqs; // [n_rot/2] inverse frequencies, factors applied
    struct st_layout_mat output;
    uint64_t layers_offset;  // [n_layer] struct st_layout_layer
    uint64_t weight_bytes;   // bytes of this model's matrices (for GB/s figures)
};

struct st_layout_dir {
    uint64_t magic;
    uint32_t n_models;
    uint32_t pad;
    struct st_layout_model model[ST_LAYOUT_MAX_MODELS];
};

// Scratch section of one worker set.  Offsets from the scratch section start.
#define ST_SCRATCH_MAX_LANES 8 // sessions one batched step carries at most

struct st_scratch_layout {
    uint32_t m_max;        // rows per forward (prefill chunk, >= k_max + 1)
    uint32_t k_max;        // longest draft
    uint32_t n_lanes;      // sessions one batched step can carry (>= 1)
    uint32_t logit_rows;   // n_lanes * (k_max + 1): rows of logits one forward can produce
    uint32_t n_ranks;
    uint32_t n_vocab;      // of the target (the draft must match)
    uint32_t d_max, qd_max, kvd_max, ff_max; // widest of both models
    uint32_t n_ctx;        // attention scratch per rank
    uint64_t act_row_max;  // bytes of one quantised activation row, widest input
    uint64_t x;            // float [m_max][d_max] residual stream
    uint64_t tmp;          // float [m_max][d_max] projection outputs
    uint64_t q;            // float [m_max][qd_max]
    uint64_t k;            // float [m_max][kvd_max]
    uint64_t v;            // float [m_max][kvd_max]
    uint64_t att;          // float [m_max][qd_max]
    uint64_t g;            // float [m_max][ff_max] gate, then silu(gate) * up
    uint64_t u;            // float [m_max][ff_max] up
    uint64_t logits;       // float [logit_rows][n_vocab]
    uint64_t partial;      // struct st_argmax_partial [logit_rows][n_ranks]
    uint64_t per_rank;     // start of the per-rank areas, per_rank_bytes apart
    uint64_t per_rank_bytes;
    uint64_t rank_xn;      // in a rank area: float [m_max][max(d_max, ff_max, qd_max)]
    uint64_t rank_act;     // in a rank area: [m_max][act_row_max] bytes
    uint64_t rank_attn;    // in a rank area: float [n_ctx]
    // One step's outputs per lane, lane 0's offsets here and lane i's
    // i * lane_bytes further on (a batched step's sessions each read theirs).
    uint64_t lane_bytes;
    uint64_t draft_tokens; // uint32 [k_max + 1]
    uint64_t draft_kept;   // uint32: drafts the last draft loop kept (it may stop early)
    uint64_t step_ns;      // uint64 [2]: the last step's draft and verify time (rank 0's clock)
    uint64_t draft_probs;  // float [k_max][n_vocab] (stochastic drafts)
    uint64_t target_argmax; // uint32 [k_max + 1]
    uint64_t target_probs; // float [k_max + 1][n_vocab] (stochastic verify)
    uint32_t attn_segs;    // attention segments of n_ctx (kernels.h: ST_KERN_ATTN_SEG)
    uint64_t attn_part_row; // floats of one row's partials: max over models of n_head x
                            // ST_KERN_ATTN_PART_FLOATS(head_dim) x attn_segs
    uint64_t attn_part;    // float [k_max + 1][attn_part_row]: decode and verify rows' attention
                           // partials, when ranks split a long context by positions
    uint64_t total;
};

struct st_argmax_partial {
    float value;
    int32_t index;
};

// Computes the scratch layout for the given models (n_models 1 or 2), with
// room for n_lanes sessions' rounds in one step (n_lanes * (k_max + 1) <= m_max).
int st_scratch_plan(const struct st_llama_hparams *const *hp, uint32_t n_models, uint32_t m_max,
                    uint32_t k_max, uint32_t n_lanes, uint32_t n_ranks, uint32_t n_ctx, uint64_t act_row_max,
                    struct st_scratch_layout *out, struct st_error *e);

// How far lane `lane`'s outputs lie past lane 0's (the offsets above).
static inline uint64_t st_scratch_lane(const struct st_scratch_layout *sl, uint32_t lane)
{
    return (uint64_t)lane * sl->lane_bytes;
}

#endif
