// One forward pass of a Llama model, executed by every rank of a worker set
// together.  Rows of each matrix product are claimed in chunks from the
// phase's work counter; attention is split by KV head (over a long
// context, by segments of positions); ranks meet at the
// barrier between dependent ops.  Each rank normalises and quantises the
// (small) activation rows itself, so no barrier is needed for that.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker/attn_split.h"
#include "worker/chunks.h"
#include "worker/plan.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// bytes: what the whole op reads, on every rank together, so that over this
// rank's time in the op it gives the set's read rate (the figure `bench
// kernels` and the read probe print), each rank reading its share meanwhile.
static void account(struct st_plan *p, enum st_op op, double *t, uint64_t bytes)
{
    if (!p->timing) return;
    double n = now_s();
    p->op_seconds[p->cur_model][op] += n - *t;
    p->op_bytes[p->cur_model][op] += bytes;
    *t = n;
}

int st_plan_sync(struct st_plan *p)
{
    p->barriers++;
    if (p->slot) atomic_store_explicit(&p->slot->step_barriers, p->barriers, memory_order_relaxed);
    if (p->crash_at_barrier && p->barriers == p->crash_at_barrier) _exit(86); // test hook
    double t = p->timing ? now_s() : 0;
    int rc = st_barrier_wait(p->barrier, p->deadline_ns, &p->err);
    account(p, ST_OP_BARRIER, &t, 0);
    return rc;
}

// Activation rows quantised for the kernel of `w`, cached while the source
// and the format stay the same (q, k and v share one quantisation).
struct act_cache {
    const float *src;
    uint32_t act;
};

static const void *prep_act(struct st_plan *p, struct act_cache *c, const struct st_kern_weight *w,
                             const float *src, uint32_t M)
{
    uint32_t act = st_kern_act_type(w->type);
    if (act == ST_KERN_ACT_F32) return src; // float kernels read the rows as they are
    if (c->src != src || c->act != act) {
        st_kern_quantize_act(w->type, src, p->act, (int)M, w->cols);
        c->src = src;
        c->act = act;
    }
    return p->act;
}

// Normalises M rows of x [M][d] into this rank's xn.
static void norm_rows(struct st_plan *p, const float *x, uint32_t M, uint32_t d, const float *w, float eps)
{
    for (uint32_t i = 0; i < M; i++) st_kern_rmsnorm(x + (size_t)i * d, w, p->xn + (size_t)i * d, d, eps);
}

// Products of the same input with up to 3 matrices, rows claimed in chunks
// over their concatenated row space.
static void multi_matmul(struct st_plan *p, uint32_t counter, const struct st_kern_weight *const *ws,
                         float *const *ys, int n, const float *src, uint32_t M, struct act_cache *ac)
{
    struct st_chunks c;
    st_chunks_plan(&c, ws, n, 1, M, p->n_ranks);
    struct st_work_counter *wc = st_barrier_work(p->barrier, counter);
    uint64_t b, e;
    while (st_work_claim(wc, 1, c.count, &b, &e)) {
        st_chunks_seek(&c, b);
        const struct st_kern_weight *w = ws[c.w];
        st_kern_matmul(w, prep_act(p, ac, w, src, M), (int)M, ys[c.w], c.r0, c.r1);
    }
}

// y = x + W * a for rows claimed by this rank: out-projection and FFN down.
static void matmul_residual(struct st_plan *p, const struct st_kern_weight *w, const float *src, uint32_t M,
                            float *x, struct act_cache *ac)
{
    struct st_chunks c;
    st_chunks_plan(&c, &w, 1, 1, M, p->n_ranks);
    struct st_work_counter *wc = st_barrier_work(p->barrier, 0);
    uint64_t b, e;
    while (st_work_claim(wc, 1, c.count, &b, &e)) {
        st_chunks_seek(&c, b);
        int64_t r0 = c.r0, r1 = c.r1;
        st_kern_matmul(w, prep_act(p, ac, w, src, M), (int)M, p->tmp, r0, r1);
        for (uint32_t m = 0; m < M; m++)
            st_kern_add(x + (size_t)m * w->rows + r0, p->tmp + (size_t)m * w->rows + r0, r1 - r0);
    }
}

// Gate and up rows of a chunk, then silu(gate) * up in place in g.
static void ffn_gate_up(struct st_plan *p, const struct st_plan_layer *L, uint32_t M, struct act_cache *ac)
{
    const struct st_kern_weight *gw = &L->gate, *uw = &L->up;
    int64_t rows = gw->rows;
    struct st_chunks c;
    st_chunks_plan(&c, &gw, 1, 2, M, p->n_ranks);
    struct st_work_counter *wc = st_barrier_work(p->barrier, 0);
    uint64_t b, e;
    while (st_work_claim(wc, 1, c.count, &b, &e)) {
        st_chunks_seek(&c, b);
        int64_t r0 = c.r0, r1 = c.r1;
        st_kern_matmul(gw, prep_act(p, ac, gw, p->xn, M), (int)M, p->g, r0, r1);
        st_kern_matmul(uw, prep_act(p, ac, uw, p->xn, M), (int)M, p->u, r0, r1);
        for (uint32_t m = 0; m < M; m++)
            st_kern_silu_gate(p->g + (size_t)m * rows + r0, p->g + (size_t)m * rows + r0,
                              p->u + (size_t)m * rows + r0, r1 - r0);
    }
}

// RoPE of the rows' queries and keys of KV heads [h0, h1), and the keys
// and values stored in the cache rows kw, vw.
static void rope_store(struct st_plan *p, const struct st_llama_hparams *hp, uint32_t M, uint16_t *kw, uint16_t *vw,
                       uint64_t h0, uint64_t h1)
{
    uint32_t hd = hp->head_dim, kvd = hp->n_head_kv * hd, qd = hp->n_head * hd, group = hp->n_head / hp->n_head_kv;
    for (uint32_t m = 0; m < M; m++) {
        const float *cs = p->rope_cs + (size_t)m * hp->n_rot;
        float *kr_row = p->k + (size_t)m * kvd;
        st_kern_rope_apply(kr_row, (int)h0, (int)h1, (int)hd, (int)hp->n_rot, cs);
        st_kern_rope_apply(p->q + (size_t)m * qd, (int)(h0 * group), (int)(h1 * group), (int)hd, (int)hp->n_rot,
                           cs);
        uint16_t *kd = kw + (size_t)m * kvd, *vd = vw + (size_t)m * kvd;
        const float *vs = p->v + (size_t)m * kvd;
        for (uint64_t j = h0 * hd; j < h1 * hd; j++) {
            kd[j] = st_f32_to_f16(kr_row[j]);
            vd[j] = st_f32_to_f16(vs[j]);
        }
    }
}

// A long context's attention split by positions: every rank takes items of
// (segment, KV-head range) (st_kern_attention_items), so each reads whole
// stretches of cache rows rather than every rank a part of each row.  The
// keys must be stored first, the partials folded after: two barriers more.
static int attention_split(struct st_plan *p, const struct st_kern_attn *a, double *t)
{
    account(p, ST_OP_ATTN, t, 0);
    if (st_plan_sync(p)) return -1;
    *t = p->timing ? now_s() : 0;
    st_attn_split_parts(a, p->n_ranks, st_barrier_work(p->barrier, 0), p->attn_part, (int)p->sl.attn_segs);
    account(p, ST_OP_ATTN, t, 0);
    if (st_plan_sync(p)) return -1;
    *t = p->timing ? now_s() : 0;
    st_attn_split_merge(a, p->n_ranks, st_barrier_work(p->barrier, 0), p->attn_part, (int)p->sl.attn_segs);
    return 0;
}

// A draft's decoding over a long context attends the first segment and the
// segments that hold the last p->draft_window positions before the rows
// (StreamingLLM's sink and window): the draft's KV reads stop growing with
// the context.  Only its proposals change; the target verifies them.
static void draft_window(const struct st_plan *p, uint32_t model, uint32_t pos0, struct st_kern_attn *a)
{
    if (model != ST_MODEL_DRAFT || !p->draft_window || pos0 <= p->draft_window) return;
    int keep = (int)((pos0 - p->draft_window) / ST_KERN_ATTN_SEG);
    if (keep > 1) a->skip_begin = 1, a->skip_end = keep;
}

// RoPE, K/V store and attention for the KV heads this rank claims (or, over
// a long context, the segments it claims).
static int attention(struct st_plan *p, const struct st_llama_hparams *hp, uint32_t model, uint32_t slot,
                     uint32_t layer, uint32_t M, uint32_t pos0, double *t, uint64_t *positions)
{
    uint32_t hd = hp->head_dim;
    uint16_t *kw, *vw;
    const uint16_t *kr, *vr;
    if (st_kv_write(p->kv, slot, model, layer, pos0, M, &kw, &vw, &p->err) ||
        st_kv_read(p->kv, slot, model, layer, pos0 + M, pos0 + M - st_kv_committed(p->kv, slot, model), &kr, &vr,
                   &p->err))
        return -1;
    struct st_kern_attn a = {.q = p->q, .k = kr, .v = vr, .out = p->att, .pos = p->pos, .M = (int)M,
                             .n_heads = (int)hp->n_head, .n_kv_heads = (int)hp->n_head_kv, .head_dim = (int)hd,
                             .n_ctx = (int)(pos0 + M), .scale = 1.0f / sqrtf((float)hd)};
    draft_window(p, model, pos0, &a);
    *positions = (uint64_t)a.n_ctx - (uint64_t)ST_KERN_ATTN_SKIPPED(&a) * ST_KERN_ATTN_SEG;
    // Decode and verify rows (the partials' room), where it pays.
    bool split = ST_KERN_ATTN_SEGS(pos0 + M) <= p->sl.attn_segs && M <= p->sl.k_max + 1 &&
                 st_kern_attention_split_pays(&a, (int)p->n_ranks);
    struct st_work_counter *wc = st_barrier_work(p->barrier, 0);
    uint64_t h0, h1;
    while (st_work_claim(wc, st_attn_head_chunk(a.n_kv_heads, p->n_ranks), hp->n_head_kv, &h0, &h1)) {
        rope_store(p, hp, M, kw, vw, h0, h1);
        if (!split) st_kern_attention(&a, (int)h0, (int)h1, p->attn_scratch);
    }
    return split ? attention_split(p, &a, t) : 0;
}

// Vocabulary projection of the last n rows, with this rank's argmax partials.
static void output(struct st_plan *p, const struct st_plan_model *pm, uint32_t M, uint32_t n, struct act_cache *ac)
{
    const struct st_llama_hparams *hp = &pm->lm->hp;
    uint32_t d = hp->n_embd, V = hp->n_vocab;
    for (uint32_t j = 0; j < n; j++)
        st_kern_rmsnorm(p->x + (size_t)(M - n + j) * d, pm->output_norm, p->xn + (size_t)j * d, d, hp->rms_eps);
    float best[1024];
    int32_t idx[1024];
    for (uint32_t j = 0; j < n; j++) best[j] = -INFINITY, idx[j] = -1;
    const struct st_kern_weight *w = &pm->output;
    struct st_chunks c;
    st_chunks_plan(&c, &w, 1, 1, n, p->n_ranks);
    struct st_work_counter *wc = st_barrier_work(p->barrier, 0);
    uint64_t b, e;
    while (st_work_claim(wc, 1, c.count, &b, &e)) {
        st_chunks_seek(&c, b);
        int64_t r0 = c.r0, r1 = c.r1;
        st_kern_matmul(w, prep_act(p, ac, w, p->xn, n), (int)n, p->logits, r0, r1);
        for (uint32_t j = 0; j < n; j++) {
            float v;
            int64_t i = st_kern_argmax(p->logits + (size_t)j * V + r0, r1 - r0, &v) + r0;
            if (v > best[j] || (v == best[j] && i < idx[j])) best[j] = v, idx[j] = (int32_t)i;
        }
    }
    for (uint32_t j = 0; j < n; j++) p->partial[j * p->n_ranks + p->rank] = (struct st_argmax_partial){best[j], idx[j]};
}

int st_fwd(struct st_plan *p, uint32_t model, uint32_t slot, const uint32_t *tokens, uint32_t M, uint32_t pos0,
           uint32_t n_logits, uint32_t *argmax_out)
{
    const struct st_plan_model *pm = &p->model[model];
    const struct st_llama_hparams *hp = &pm->lm->hp;
    uint32_t d = hp->n_embd, kvd = hp->n_head_kv * hp->head_dim;
    if (model >= p->n_models || M == 0 || M > p->sl.m_max || n_logits > M || n_logits > p->sl.k_max + 1)
        return st_error_set(&p->err, "forward: bad shape (model %u, %u rows, %u logits)", model, M, n_logits);
    p->cur_model = model;
    double t = p->timing ? now_s() : 0;
    for (uint32_t m = 0; m < M; m++) {
        if (tokens[m] >= hp->n_vocab) return st_error_set(&p->err, "forward: token %u out of range", tokens[m]);
        p->pos[m] = (int32_t)(pos0 + m);
        float *cs = p->rope_cs + (size_t)m * hp->n_rot;
        for (uint32_t i = 0; i < hp->n_rot / 2; i++) {
            double th = (double)(pos0 + m) * pm->rope[i];
            cs[2 * i] = (float)cos(th);
            cs[2 * i + 1] = (float)sin(th);
        }
        if (m % p->n_ranks == p->rank)
            st_dequant_row(pm->lm->embd_type, pm->embd + (size_t)tokens[m] * pm->lm->embd_row_bytes,
                           p->x + (size_t)m * d, d);
    }
    account(p, ST_OP_EMBED, &t, 0);
    if (st_plan_sync(p)) return -1;
    t = p->timing ? now_s() : 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct st_plan_layer *L = &pm->layers[l];
        struct act_cache ac = {0};
        norm_rows(p, p->x, M, d, L->attn_norm, hp->rms_eps);
        account(p, ST_OP_NORM, &t, 0);
        const struct st_kern_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
        float *out[3] = {p->q, p->k, p->v};
        multi_matmul(p, 0, qkv, out, 3, p->xn, M, &ac);
        account(p, ST_OP_QKV, &t, st_kern_run_size(L->wq.type, L->wq.rows, L->wq.cols) +
                                      st_kern_run_size(L->wk.type, L->wk.rows, L->wk.cols) +
                                      st_kern_run_size(L->wv.type, L->wv.rows, L->wv.cols));
        if (st_plan_sync(p)) return -1;
        t = p->timing ? now_s() : 0;
        uint64_t positions;
        if (attention(p, hp, model, slot, l, M, pos0, &t, &positions)) return -1;
        account(p, ST_OP_ATTN, &t, positions * kvd * 4);
        if (st_plan_sync(p)) return -1;
        t = p->timing ? now_s() : 0;
        ac.src = NULL;
        matmul_residual(p, &L->wo, p->att, M, p->x, &ac);
        account(p, ST_OP_WO, &t, st_kern_run_size(L->wo.type, L->wo.rows, L->wo.cols));
        if (st_plan_sync(p)) return -1;
        t = p->timing ? now_s() : 0;
        norm_rows(p, p->x, M, d, L->ffn_norm, hp->rms_eps);
        account(p, ST_OP_NORM, &t, 0);
        ac.src = NULL;
        ffn_gate_up(p, L, M, &ac);
        account(p, ST_OP_FFN_UP, &t, st_kern_run_size(L->gate.type, L->gate.rows, L->gate.cols) * 2);
        if (st_plan_sync(p)) return -1;
        t = p->timing ? now_s() : 0;
        ac.src = NULL;
        matmul_residual(p, &L->down, p->g, M, p->x, &ac);
        account(p, ST_OP_FFN_DOWN, &t, st_kern_run_size(L->down.type, L->down.rows, L->down.cols));
        if (st_plan_sync(p)) return -1;
        t = p->timing ? now_s() : 0;
    }
    if (n_logits == 0) return 0;
    struct act_cache ac = {0};
    output(p, pm, M, n_logits, &ac);
    account(p, ST_OP_OUTPUT, &t, st_kern_run_size(pm->output.type, pm->output.rows, pm->output.cols));
    if (st_plan_sync(p)) return -1;
    for (uint32_t j = 0; j < n_logits; j++) {
        struct st_argmax_partial best = {-INFINITY, -1};
        for (uint32_t r = 0; r < p->n_ranks; r++) {
            struct st_argmax_partial c = p->partial[j * p->n_ranks + r];
            if (c.index < 0) continue;
            if (best.index < 0 || c.value > best.value || (c.value == best.value && c.index < best.index)) best = c;
        }
        argmax_out[j] = (uint32_t)best.index;
    }
    return 0;
}
