// One forward pass of a Llama model, executed by every rank of a worker set
// together.  Rows of each matrix product are claimed in chunks from the
// phase's work counter; attention is split by KV head (over a long
// context, by segments of positions); ranks meet at the
// barrier between dependent ops.  Each rank normalises and quantises the
// (small) activation rows itself, so no barrier is needed for that.
#include <math.h>
#include <signal.h>
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
    if (p->crash_at_barrier && p->barriers == p->crash_at_barrier) { // test hook
        if (p->crash_killed) raise(SIGKILL);
        _exit(86);
    }
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

// RoPE of rows [m0, m0 + M)'s queries and keys of KV heads [h0, h1), and
// the keys and values stored in the cache rows kw, vw (of row m0).
static void rope_store(struct st_plan *p, const struct st_llama_hparams *hp, uint32_t m0, uint32_t M, uint16_t *kw,
                       uint16_t *vw, uint64_t h0, uint64_t h1)
{
    uint32_t hd = hp->head_dim, kvd = hp->n_head_kv * hd, qd = hp->n_head * hd, group = hp->n_head / hp->n_head_kv;
    for (uint32_t m = m0; m < m0 + M; m++) {
        const float *cs = p->rope_cs + (size_t)m * hp->n_rot;
        float *kr_row = p->k + (size_t)m * kvd;
        st_kern_rope_apply(kr_row, (int)h0, (int)h1, (int)hd, (int)hp->n_rot, cs);
        st_kern_rope_apply(p->q + (size_t)m * qd, (int)(h0 * group), (int)(h1 * group), (int)hd, (int)hp->n_rot,
                           cs);
        uint16_t *kd = kw + (size_t)(m - m0) * kvd, *vd = vw + (size_t)(m - m0) * kvd;
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
// segments that hold the last `window` positions before the rows
// (StreamingLLM's sink and window): the draft's KV reads stop growing with
// the context.  Only its proposals change; the target verifies them.
static void draft_window(uint32_t model, uint32_t window, uint32_t pos0, struct st_kern_attn *a)
{
    if (model != ST_MODEL_DRAFT || !window || pos0 <= window) return;
    int keep = (int)((pos0 - window) / ST_KERN_ATTN_SEG);
    if (keep > 1) a->skip_begin = 1, a->skip_end = keep;
}

// A segment's cache rows (written from its first row, read through its
// last) and its attention call over rows [m0, m0 + M).
struct seg_attn {
    struct st_kern_attn a;
    uint16_t *kw, *vw;
    uint32_t m0;
};

static int seg_attn_init(struct st_plan *p, const struct st_llama_hparams *hp, uint32_t model, uint32_t layer,
                         const struct st_fwd_seg *g, uint32_t m0, struct seg_attn *sa, uint64_t *positions)
{
    uint32_t hd = hp->head_dim, qd = hp->n_head * hd;
    const uint16_t *kr, *vr;
    if (st_kv_write(p->kv, g->slot, model, layer, g->pos0, g->M, &sa->kw, &sa->vw, &p->err) ||
        st_kv_read(p->kv, g->slot, model, layer, g->pos0 + g->M, g->pos0 + g->M - st_kv_committed(p->kv, g->slot, model),
                   &kr, &vr, &p->err))
        return -1;
    sa->m0 = m0;
    sa->a = (struct st_kern_attn){.q = p->q + (size_t)m0 * qd, .k = kr, .v = vr, .out = p->att + (size_t)m0 * qd,
                                  .pos = p->pos + m0, .M = (int)g->M, .n_heads = (int)hp->n_head,
                                  .n_kv_heads = (int)hp->n_head_kv, .head_dim = (int)hd,
                                  .n_ctx = (int)(g->pos0 + g->M), .scale = 1.0f / sqrtf((float)hd)};
    draft_window(model, g->draft_window, g->pos0, &sa->a);
    *positions += (uint64_t)sa->a.n_ctx - (uint64_t)ST_KERN_ATTN_SKIPPED(&sa->a) * ST_KERN_ATTN_SEG;
    return 0;
}

// RoPE, K/V store and attention for the KV heads this rank claims (or, over
// a long context, the segments it claims).  Several sessions' segments:
// items are (segment, KV-head range), each segment against its own slot.
static int attention(struct st_plan *p, const struct st_llama_hparams *hp, uint32_t model, uint32_t layer,
                     const struct st_fwd_seg *seg, uint32_t n_seg, double *t, uint64_t *positions)
{
    struct seg_attn sa[ST_SCRATCH_MAX_LANES];
    *positions = 0;
    for (uint32_t i = 0, m0 = 0; i < n_seg; m0 += seg[i].M, i++)
        if (seg_attn_init(p, hp, model, layer, &seg[i], m0, &sa[i], positions)) return -1;
    // One session's decode and verify rows over a long context: split by positions, where it pays.
    uint32_t M = seg[0].M, pos0 = seg[0].pos0;
    bool split = n_seg == 1 && ST_KERN_ATTN_SEGS(pos0 + M) <= p->sl.attn_segs && M <= p->sl.k_max + 1 &&
                 st_kern_attention_split_pays(&sa[0].a, (int)p->n_ranks);
    uint64_t H = hp->n_head_kv, chunk = st_attn_head_chunk((int)H, p->n_ranks);
    struct st_work_counter *wc = st_barrier_work(p->barrier, 0);
    uint64_t b, e;
    while (st_work_claim(wc, chunk, H * n_seg, &b, &e))
        for (uint64_t i = b; i < e;) { // a claim may cross into the next segment
            uint64_t g = i / H, h0 = i % H, h1 = h0 + (e - i) < H ? h0 + (e - i) : H;
            rope_store(p, hp, sa[g].m0, seg[g].M, sa[g].kw, sa[g].vw, h0, h1);
            if (!split) st_kern_attention(&sa[g].a, (int)h0, (int)h1, p->attn_scratch);
            i += h1 - h0;
        }
    return split ? attention_split(p, &sa[0].a, t) : 0;
}

// Vocabulary projection of the rows listed in rows[n], with this rank's
// argmax partials.
static void output(struct st_plan *p, const struct st_plan_model *pm, const uint32_t *rows, uint32_t n,
                   struct act_cache *ac)
{
    const struct st_llama_hparams *hp = &pm->lm->hp;
    uint32_t d = hp->n_embd, V = hp->n_vocab;
    for (uint32_t j = 0; j < n; j++)
        st_kern_rmsnorm(p->x + (size_t)rows[j] * d, pm->output_norm, p->xn + (size_t)j * d, d, hp->rms_eps);
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

// The merged argmax of logit row j.
static uint32_t argmax_of(const struct st_plan *p, uint32_t j)
{
    struct st_argmax_partial best = {-INFINITY, -1};
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        struct st_argmax_partial c = p->partial[j * p->n_ranks + r];
        if (c.index < 0) continue;
        if (best.index < 0 || c.value > best.value || (c.value == best.value && c.index < best.index)) best = c;
    }
    return (uint32_t)best.index;
}

int st_fwd(struct st_plan *p, uint32_t model, uint32_t slot, const uint32_t *tokens, uint32_t M, uint32_t pos0,
           uint32_t n_logits, uint32_t *argmax_out, uint32_t draft_window)
{
    struct st_fwd_seg g = {.slot = slot, .tokens = tokens, .M = M, .pos0 = pos0, .n_logits = n_logits,
                           .argmax = argmax_out, .draft_window = draft_window};
    return st_fwd_batch(p, model, &g, 1);
}

// Checks the segments' shapes and lists the rows that get logits.
static int fwd_shape(struct st_plan *p, uint32_t model, const struct st_fwd_seg *seg, uint32_t n_seg, uint32_t *M,
                     uint32_t *logit_rows, uint32_t *n_logits)
{
    *M = *n_logits = 0;
    if (model >= p->n_models || n_seg == 0 || n_seg > p->sl.n_lanes)
        return st_error_set(&p->err, "forward: bad shape (model %u, %u segments)", model, n_seg);
    for (uint32_t i = 0; i < n_seg; i++) {
        const struct st_fwd_seg *g = &seg[i];
        if (g->M == 0 || g->M > p->sl.m_max - *M || g->n_logits > g->M ||
            g->n_logits > p->sl.logit_rows - *n_logits)
            return st_error_set(&p->err, "forward: bad shape (model %u, %u rows after %u, %u logits after %u)", model,
                                g->M, *M, g->n_logits, *n_logits);
        for (uint32_t j = 0; j < g->n_logits; j++) logit_rows[(*n_logits)++] = *M + g->M - g->n_logits + j;
        *M += g->M;
    }
    return 0;
}

int st_fwd_batch(struct st_plan *p, uint32_t model, const struct st_fwd_seg *seg, uint32_t n_seg)
{
    uint32_t M, n_logits, logit_rows[1024];
    if (fwd_shape(p, model, seg, n_seg, &M, logit_rows, &n_logits)) return -1;
    const struct st_plan_model *pm = &p->model[model];
    const struct st_llama_hparams *hp = &pm->lm->hp;
    uint32_t d = hp->n_embd, kvd = hp->n_head_kv * hp->head_dim;
    p->cur_model = model;
    double t = p->timing ? now_s() : 0;
    for (uint32_t i = 0, m = 0; i < n_seg; i++)
        for (uint32_t r = 0; r < seg[i].M; r++, m++) {
            uint32_t tok = seg[i].tokens[r], pos = seg[i].pos0 + r;
            if (tok >= hp->n_vocab) return st_error_set(&p->err, "forward: token %u out of range", tok);
            p->pos[m] = (int32_t)pos;
            float *cs = p->rope_cs + (size_t)m * hp->n_rot;
            for (uint32_t k = 0; k < hp->n_rot / 2; k++) {
                double th = (double)pos * pm->rope[k];
                cs[2 * k] = (float)cos(th);
                cs[2 * k + 1] = (float)sin(th);
            }
            if (m % p->n_ranks == p->rank)
                st_dequant_row(pm->lm->embd_type, pm->embd + (size_t)tok * pm->lm->embd_row_bytes,
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
        if (attention(p, hp, model, l, seg, n_seg, &t, &positions)) return -1;
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
    output(p, pm, logit_rows, n_logits, &ac);
    account(p, ST_OP_OUTPUT, &t, st_kern_run_size(pm->output.type, pm->output.rows, pm->output.cols));
    if (st_plan_sync(p)) return -1;
    for (uint32_t i = 0, j = 0; i < n_seg; i++)
        for (uint32_t r = 0; r < seg[i].n_logits; r++, j++) seg[i].argmax[r] = argmax_of(p, j);
    return 0;
}
