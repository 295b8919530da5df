#include "model/layout.h"

#include "kernels/kernels.h"

static uint64_t take(uint64_t *at, uint64_t bytes)
{
    uint64_t off = (*at + 63) & ~UINT64_C(63);
    *at = off + bytes;
    return off;
}

static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

int st_scratch_plan(const struct st_llama_hparams *const *hp, uint32_t n_models, uint32_t m_max,
                    uint32_t k_max, uint32_t n_lanes, uint32_t n_ranks, uint32_t n_ctx, uint64_t act_row_max,
                    struct st_scratch_layout *s, struct st_error *e)
{
    if (n_models < 1 || n_models > ST_LAYOUT_MAX_MODELS || n_lanes < 1 || n_lanes > ST_SCRATCH_MAX_LANES ||
        (uint64_t)n_lanes * (k_max + 1) > m_max || n_ranks < 1 || n_ctx < 1)
        return st_error_set(e, "scratch plan: bad limits (models %u, rows %u, k_max %u, lanes %u, ranks %u, ctx %u)",
                            n_models, m_max, k_max, n_lanes, n_ranks, n_ctx);
    *s = (struct st_scratch_layout){.m_max = m_max, .k_max = k_max, .n_lanes = n_lanes,
                                    .logit_rows = n_lanes * (k_max + 1), .n_ranks = n_ranks, .n_ctx = n_ctx,
                                    .n_vocab = hp[0]->n_vocab, .act_row_max = (act_row_max + 63) & ~UINT64_C(63)};
    for (uint32_t i = 0; i < n_models; i++) {
        if (hp[i]->n_vocab != s->n_vocab)
            return st_error_set(e, "draft vocabulary (%u) differs from the target's (%u)", hp[i]->n_vocab, s->n_vocab);
        s->d_max = max_u32(s->d_max, hp[i]->n_embd);
        s->qd_max = max_u32(s->qd_max, hp[i]->n_head * hp[i]->head_dim);
        s->kvd_max = max_u32(s->kvd_max, hp[i]->n_head_kv * hp[i]->head_dim);
        s->ff_max = max_u32(s->ff_max, hp[i]->n_ff);
    }
    s->attn_segs = ST_KERN_ATTN_SEGS(n_ctx);
    for (uint32_t i = 0; i < n_models; i++) {
        uint64_t row = (uint64_t)hp[i]->n_head * ST_KERN_ATTN_PART_FLOATS(hp[i]->head_dim) * s->attn_segs;
        s->attn_part_row = row > s->attn_part_row ? row : s->attn_part_row;
    }
    uint64_t M = m_max, V = s->n_vocab, K1 = k_max + 1, at = 0;
    s->x = take(&at, M * s->d_max * 4);
    s->tmp = take(&at, M * s->d_max * 4);
    s->q = take(&at, M * s->qd_max * 4);
    s->k = take(&at, M * s->kvd_max * 4);
    s->v = take(&at, M * s->kvd_max * 4);
    s->att = take(&at, M * s->qd_max * 4);
    s->g = take(&at, M * s->ff_max * 4);
    s->u = take(&at, M * s->ff_max * 4);
    s->logits = take(&at, (uint64_t)s->logit_rows * V * 4);
    s->partial = take(&at, (uint64_t)s->logit_rows * n_ranks * sizeof(struct st_argmax_partial));
    uint64_t lane0 = take(&at, 0);
    s->draft_tokens = take(&at, K1 * 4);
    s->draft_kept = take(&at, 4);
    s->step_ns = take(&at, 16);
    s->draft_probs = take(&at, (uint64_t)k_max * V * 4);
    s->target_argmax = take(&at, K1 * 4);
    s->target_probs = take(&at, K1 * V * 4);
    s->lane_bytes = take(&at, 0) - lane0;
    at = lane0 + s->lane_bytes * n_lanes;
    s->attn_part = take(&at, K1 * s->attn_part_row * 4);
    uint64_t widest = max_u32(max_u32(s->d_max, s->ff_max), s->qd_max), r = 0;
    s->rank_xn = take(&r, M * widest * 4);
    s->rank_act = take(&r, M * s->act_row_max);
    s->rank_attn = take(&r, (uint64_t)n_ctx * 4);
    s->per_rank_bytes = (r + 4095) & ~UINT64_C(4095); // own pages: no false sharing
    s->per_rank = take(&at, 0);
    s->per_rank = (s->per_rank + 4095) & ~UINT64_C(4095);
    s->total = s->per_rank + s->per_rank_bytes * n_ranks;
    return 0;
}
