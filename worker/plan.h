// A worker's execution plan: every buffer of both models' forward passes
// resolved in the region once, at start.  Nothing is allocated, built or
// spawned per step; all ranks of the set run every op together, splitting
// matrix rows by dynamically claimed chunks and attention by KV heads (and,
// for decode and verify rows over a long context, by segments of
// positions), and meet at the set's barrier between dependent ops.
#ifndef ST_WORKER_PLAN_H
#define ST_WORKER_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "model/layout.h"
#include "sampling/sampling.h"
#include "shm/kv.h"
#include "shm/sync.h"
#include "shm/workset.h"

enum st_op {
    ST_OP_EMBED = 0,
    ST_OP_NORM,    // rmsnorm + activation quantisation (per rank)
    ST_OP_QKV,
    ST_OP_ATTN,    // RoPE, KV store, attention
    ST_OP_WO,
    ST_OP_FFN_UP,  // gate, up, SiLU-gate
    ST_OP_FFN_DOWN,
    ST_OP_OUTPUT,  // final norm, vocabulary projection, argmax partials
    ST_OP_SAMPLE,  // leader's per-token work
    ST_OP_BARRIER, // time spent waiting at barriers
    ST_OP_COUNT
};
const char *st_op_name(enum st_op op);

struct st_plan_layer {
    const float *attn_norm, *ffn_norm; // [n_embd]
    struct st_kern_weight wq, wk, wv, wo, gate, up, down;
};

struct st_plan_model {
    const struct st_layout_model *lm;
    const uint8_t *embd;      // [n_vocab] GGUF rows
    const float *output_norm; // [n_embd]
    const float *rope;        // [n_rot/2] inverse frequencies
    struct st_kern_weight output;
    struct st_plan_layer *layers; // [n_layer]
};

struct st_plan {
    uint32_t rank, n_ranks;
    uint32_t n_models;
    struct st_plan_model model[ST_LAYOUT_MAX_MODELS];
    struct st_scratch_layout sl;
    struct st_kv *kv;
    struct st_barrier *barrier;
    struct st_rank_slot *slot; // this rank's liveness words (may be NULL in tests)
    // Shared scratch (see struct st_scratch_layout for shapes).
    float *x, *tmp, *q, *k, *v, *att, *g, *u, *logits;
    struct st_argmax_partial *partial;
    uint32_t *draft_tokens, *draft_kept, *target_argmax;
    uint64_t *step_ns; // [draft, verify] nanoseconds of the last step, rank 0 writes
    float *draft_probs, *target_probs;
    float *attn_part; // attention partials of a long context split by positions
    // This rank's own scratch.
    float *xn;          // [m_max][widest] normalised rows
    uint8_t *act;       // [m_max][act_row_max] quantised activations
    float *attn_scratch; // [n_ctx]
    float *rope_cs;     // [m_max][n_rot_max] cos/sin pairs of the current rows (private heap)
    uint32_t n_rot_max;
    int32_t pos[1024];  // positions of the rows of the current forward
    // Per-step state.
    uint64_t deadline_ns;
    uint32_t barriers;          // barriers passed in this step
    uint32_t crash_at_barrier;  // test hook: _exit when barriers reaches it (0 off)
    bool crash_killed;          // ... SIGKILL itself instead, as if from outside
    bool timing;
    uint32_t cur_model;          // model of the forward in progress
    double op_seconds[ST_LAYOUT_MAX_MODELS][ST_OP_COUNT];
    uint64_t op_bytes[ST_LAYOUT_MAX_MODELS][ST_OP_COUNT];
    struct st_error err;
};

// Builds the plan of rank `rank` from the region's weights directory and
// scratch section.  kv and barrier live in the region too.
int st_plan_build(struct st_plan *p, const void *weights, uint64_t weights_bytes, void *scratch,
                  uint64_t scratch_bytes, const struct st_scratch_layout *sl, struct st_kv *kv,
                  struct st_barrier *barrier, uint32_t rank, struct st_error *e);
void st_plan_free(struct st_plan *p);

// One session's rows in a forward: M tokens at positions pos0.. of KV slot
// `slot`, with logits for the last n_logits of them (0: none) and their
// argmax into argmax[n_logits].  draft_window: the draft model attends the
// first 512 positions and at least the last draft_window (0: all).
struct st_fwd_seg {
    uint32_t slot;
    const uint32_t *tokens;
    uint32_t M, pos0, n_logits;
    uint32_t *argmax;
    uint32_t draft_window;
};

// Runs one forward through model `model` of the segments' rows together
// (every weight read once for all of them), all ranks together.  Logits go
// to p->logits, the segments' logit rows one after another; every rank
// merges the argmax.  Returns 0, or the barrier's error (aborted, deadline)
// or a shape error with p->err set.
int st_fwd_batch(struct st_plan *p, uint32_t model, const struct st_fwd_seg *seg, uint32_t n_seg);
// The same for one segment.
int st_fwd(struct st_plan *p, uint32_t model, uint32_t slot, const uint32_t *tokens, uint32_t M,
           uint32_t pos0, uint32_t n_logits, uint32_t *argmax_out, uint32_t draft_window);

// Waits at the set's barrier (test hook and timing included).
int st_plan_sync(struct st_plan *p);

#endif
