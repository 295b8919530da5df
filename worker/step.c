#include "worker/step.h"

#include <string.h>

#include "kernels/kernels.h"
#include "sampling/sampling.h"
#include "shm/sync.h"

// Random streams of one step's seed: draft proposals use stream 1; the
// coordinator's acceptance uses stream 2.
#define STREAM_DRAFT 1

static void sampling_of(const Subternary__StepCommand *c, struct st_sampling *s)
{
    memset(s, 0, sizeof *s);
    if (!c->sampling) return;
    s->temperature = c->sampling->temperature;
    s->top_k = c->sampling->top_k;
    s->top_p = c->sampling->top_p;
    s->min_p = c->sampling->min_p;
}

static int check_pos(struct st_plan *p, uint32_t slot, uint32_t model, uint32_t pos)
{
    uint32_t c = st_kv_committed(p->kv, slot, model);
    if (pos != c)
        return st_error_set(&p->err, "step writes model %u of slot %u at position %u, committed length is %u", model,
                            slot, pos, c);
    return 0;
}

static int prefill(struct st_plan *p, const Subternary__StepCommand *c)
{
    if (c->model >= p->n_models) return st_error_set(&p->err, "prefill: no model %u", c->model);
    if (check_pos(p, c->slot, c->model, c->pos)) return -1;
    // want_logits: one forward of at most k_max + 1 rows, all with logits
    // (the coordinator copies them out between steps: tests and `logits`).
    if (c->want_logits && c->n_tokens > p->sl.k_max + 1)
        return st_error_set(&p->err, "prefill with logits: %zu rows > %u", c->n_tokens, p->sl.k_max + 1);
    for (size_t i = 0; i < c->n_tokens; i += p->sl.m_max) {
        uint32_t n = c->n_tokens - i < p->sl.m_max ? (uint32_t)(c->n_tokens - i) : p->sl.m_max;
        if (st_fwd(p, c->model, c->slot, c->tokens + i, n, c->pos + (uint32_t)i, c->want_logits ? n : 0,
                   p->target_argmax, c->draft_window))
            return -1;
    }
    return 0;
}

// The draft's confidence in its next token: the largest probability of the
// distribution it draws from (stochastic), or of softmax(logits) (greedy;
// buf: n floats of scratch).
static float confidence(const float *logits, const float *q, float *buf, uint32_t n)
{
    if (q) return q[st_argmax(q, n)];
    float mx = st_kern_max(logits, n);
    return 1.0f / st_kern_exp_sum(logits, buf, n, mx, 1.0f);
}

// One session's part of a step (a lane): its command, and where its outputs
// go in the scratch.
struct lane {
    const Subternary__StepCommand *c;
    struct st_sampling s;
    bool drafts;       // ROUND or DRAFT: the draft proposes first
    bool prefill;      // PREFILL: a slice of a prompt, rows without logits in the first forward of its model
    uint32_t *draft_tokens, *draft_kept, *target_argmax;
    uint64_t *step_ns;
    float *draft_probs, *target_probs;
    // Drafting in progress: the rows of the next draft forward.
    bool drafting;
    const uint32_t *in;
    uint32_t n, pos;
};

static void lane_init(struct st_plan *p, const Subternary__StepCommand *c, uint32_t i, struct lane *l)
{
    uint64_t off = st_scratch_lane(&p->sl, i);
    memset(l, 0, sizeof *l);
    l->c = c;
    sampling_of(c, &l->s);
    l->prefill = c->kind == SUBTERNARY__STEP_KIND__STEP_PREFILL;
    l->drafts = c->kind == SUBTERNARY__STEP_KIND__STEP_ROUND || c->kind == SUBTERNARY__STEP_KIND__STEP_DRAFT;
    l->draft_tokens = (uint32_t *)((uint8_t *)p->draft_tokens + off);
    l->draft_kept = (uint32_t *)((uint8_t *)p->draft_kept + off);
    l->target_argmax = (uint32_t *)((uint8_t *)p->target_argmax + off);
    l->step_ns = (uint64_t *)((uint8_t *)p->step_ns + off);
    l->draft_probs = (float *)((uint8_t *)p->draft_probs + off);
    l->target_probs = (float *)((uint8_t *)p->target_probs + off);
}

// The leader's pick of lane l's draft token i from its logits row: argmax,
// or a draw from the transformed distribution.  Below draft_p_min confidence
// the draft stops before the doubtful token (after at least one): it would
// likely be rejected, and its draft and verify rows cost time.  The stop
// depends only on the draft's own distribution, so sampling stays exact.
static void pick_draft(struct st_plan *p, struct lane *l, uint32_t i, const float *logits, uint32_t am)
{
    uint32_t V = p->sl.n_vocab, y = am;
    float *q = l->draft_probs + (size_t)i * V;
    bool greedy = st_sampling_greedy(&l->s);
    if (!greedy) {
        st_sample_probs(logits, V, &l->s, q);
        y = st_sample_draw(q, V, st_rng_uniform(l->c->seed, STREAM_DRAFT, i));
    }
    l->draft_tokens[i] = y;
    bool stop = i > 0 && l->c->draft_p_min > 0 && confidence(logits, greedy ? NULL : q, q, V) < l->c->draft_p_min;
    *l->draft_kept = stop ? i : i + 1;
}

// A prompt slice's rows in a forward of its model, without logits (after
// the segments with logits, so those keep the first logit rows).
static struct st_fwd_seg prefill_seg(const struct lane *l)
{
    const Subternary__StepCommand *c = l->c;
    return (struct st_fwd_seg){.slot = c->slot, .tokens = c->tokens, .M = (uint32_t)c->n_tokens, .pos0 = c->pos,
                               .draft_window = c->draft_window};
}

// Adds the prompt slices of `model` among the lanes to seg[*n].
static void add_prefills(const struct lane *ln, uint32_t n_lanes, uint32_t model, struct st_fwd_seg *seg, uint32_t *n)
{
    for (uint32_t j = 0; j < n_lanes; j++)
        if (ln[j].prefill && ln[j].c->model == model) seg[(*n)++] = prefill_seg(&ln[j]);
}

// The drafting lanes' drafts, side by side: each forward takes one row of
// every lane still drafting (its unseen tokens, the first time, and the
// draft's prompt slices beside them); the leader picks each lane's token
// between forwards and the barrier after it publishes the tokens and how
// many drafts each lane keeps.
static int draft_lanes(struct st_plan *p, struct lane *ln, uint32_t n_lanes)
{
    struct st_fwd_seg seg[ST_SCRATCH_MAX_LANES];
    struct lane *at[ST_SCRATCH_MAX_LANES];
    uint32_t am[ST_SCRATCH_MAX_LANES];
    for (uint32_t i = 0;; i++) {
        uint32_t n = 0, n_seg;
        for (uint32_t j = 0; j < n_lanes; j++) {
            struct lane *l = &ln[j];
            if (!l->drafting || i >= l->c->k) continue;
            seg[n] = (struct st_fwd_seg){.slot = l->c->slot, .tokens = l->in, .M = l->n, .pos0 = l->pos,
                                         .n_logits = 1, .argmax = &am[n], .draft_window = l->c->draft_window};
            at[n++] = l;
        }
        n_seg = n;
        if (i == 0) add_prefills(ln, n_lanes, ST_MODEL_DRAFT, seg, &n_seg);
        if (!n_seg) return 0;
        if (st_fwd_batch(p, ST_MODEL_DRAFT, seg, n_seg)) return -1;
        if (!n) return 0;
        if (p->rank == 0)
            for (uint32_t j = 0; j < n; j++) pick_draft(p, at[j], i, p->logits + (size_t)j * p->sl.n_vocab, am[j]);
        if (st_plan_sync(p)) return -1;
        for (uint32_t j = 0; j < n; j++) {
            struct lane *l = at[j];
            // The draft's KV now holds through pos + n - 1: commit is the
            // coordinator's, but the next forward reads these rows in flight.
            l->drafting = *l->draft_kept > i;
            l->pos += l->n;
            l->in = &l->draft_tokens[i];
            l->n = 1;
        }
    }
}

// The target on every lane's [x_t, y_1 .. y_K] in one forward: per-row
// argmax, and for stochastic sampling the transformed distributions (rows
// split across ranks).
static int verify_lanes(struct st_plan *p, struct lane *ln, uint32_t n_lanes)
{
    struct st_fwd_seg seg[ST_SCRATCH_MAX_LANES];
    uint32_t rows[1025], at = 0, V = p->sl.n_vocab;
    struct lane *of[ST_SCRATCH_MAX_LANES];
    bool probs = false;
    uint32_t n = 0;
    for (uint32_t j = 0; j < n_lanes; j++) {
        if (ln[j].prefill) continue;
        const Subternary__StepCommand *c = ln[j].c;
        uint32_t K = ln[j].drafts ? *ln[j].draft_kept : (uint32_t)c->n_tokens;
        const uint32_t *drafts = ln[j].drafts ? ln[j].draft_tokens : c->tokens;
        if (K > p->sl.k_max || at + K + 1 > p->sl.m_max)
            return st_error_set(&p->err, "verify: k %u > %u, or %u rows over %u", K, p->sl.k_max, at + K + 1,
                                p->sl.m_max);
        if (check_pos(p, c->slot, ST_MODEL_TARGET, c->verify_pos)) return -1;
        of[n] = &ln[j];
        seg[n++] = (struct st_fwd_seg){.slot = c->slot, .tokens = rows + at, .M = K + 1, .pos0 = c->verify_pos,
                                       .n_logits = K + 1, .argmax = ln[j].target_argmax};
        rows[at++] = c->verify_token;
        for (uint32_t i = 0; i < K; i++) rows[at++] = drafts[i];
        probs |= c->want_probs;
    }
    uint32_t n_seg = n;
    add_prefills(ln, n_lanes, ST_MODEL_TARGET, seg, &n_seg);
    if (n_seg && st_fwd_batch(p, ST_MODEL_TARGET, seg, n_seg)) return -1;
    if (!probs) return 0;
    for (uint32_t r = p->rank; r < at; r += p->n_ranks) {
        uint32_t j = 0, first = 0;
        while (r >= first + seg[j].M) first += seg[j++].M;
        if (of[j]->c->want_probs)
            st_sample_probs(p->logits + (size_t)r * V, V, &of[j]->s, of[j]->target_probs + (size_t)(r - first) * V);
    }
    return st_plan_sync(p);
}

// Checks a step's lanes: ROUND, VERIFY or a prompt slice (PREFILL without
// logits) each, or one DRAFT alone; distinct slots, drafts within k_max,
// positions at the committed lengths.
static int check_lanes(struct st_plan *p, struct lane *ln, uint32_t n)
{
    for (uint32_t j = 0; j < n; j++) {
        const Subternary__StepCommand *c = ln[j].c;
        bool ok = c->kind == SUBTERNARY__STEP_KIND__STEP_ROUND || c->kind == SUBTERNARY__STEP_KIND__STEP_VERIFY ||
                  (c->kind == SUBTERNARY__STEP_KIND__STEP_PREFILL && !c->want_logits) ||
                  (n == 1 && c->kind == SUBTERNARY__STEP_KIND__STEP_DRAFT);
        if (!ok) return st_error_set(&p->err, "lane %u: step kind %d cannot be batched", j, c->kind);
        for (uint32_t i = 0; i < j; i++)
            if (ln[i].c->slot == c->slot) return st_error_set(&p->err, "lanes %u and %u share slot %u", i, j, c->slot);
        if (ln[j].prefill) {
            if (c->model >= p->n_models || c->n_tokens < 1 || c->n_tokens > p->sl.m_max)
                return st_error_set(&p->err, "lane %u: prompt slice of %zu tokens into model %u", j, c->n_tokens,
                                    c->model);
            if (check_pos(p, c->slot, c->model, c->pos)) return -1;
            continue;
        }
        if (!ln[j].drafts) continue;
        if (p->n_models < 2) return st_error_set(&p->err, "draft step without a draft model");
        if (c->k < 1 || c->k > p->sl.k_max || c->n_tokens < 1 || c->n_tokens > p->sl.m_max)
            return st_error_set(&p->err, "draft: k %u / %zu unseen tokens out of range", c->k, c->n_tokens);
        if (check_pos(p, c->slot, ST_MODEL_DRAFT, c->pos)) return -1;
        ln[j].drafting = true;
        ln[j].in = c->tokens;
        ln[j].n = (uint32_t)c->n_tokens;
        ln[j].pos = c->pos;
    }
    return 0;
}

// Draft (the lanes that draft), then verify (unless the step only drafts).
// Rank 0's clock splits the two where every rank has finished drafting
// (the draft loop ends at a barrier); every lane gets the step's times.
static int run_lanes(struct st_plan *p, const Subternary__StepCommand *const *cmds, uint32_t n)
{
    struct lane ln[ST_SCRATCH_MAX_LANES];
    if (n < 1 || n > p->sl.n_lanes)
        return st_error_set(&p->err, "step with %u lanes, the set takes 1 .. %u", n, p->sl.n_lanes);
    for (uint32_t j = 0; j < n; j++) lane_init(p, cmds[j], j, &ln[j]);
    if (check_lanes(p, ln, n)) return -1;
    uint64_t t0 = st_shm_now_ns();
    if (draft_lanes(p, ln, n)) return -1;
    uint64_t t1 = st_shm_now_ns();
    bool verify = cmds[0]->kind != SUBTERNARY__STEP_KIND__STEP_DRAFT;
    if (verify && verify_lanes(p, ln, n)) return -1;
    if (p->rank == 0)
        for (uint32_t j = 0; j < n; j++) ln[j].step_ns[0] = t1 - t0, ln[j].step_ns[1] = st_shm_now_ns() - t1;
    return 0;
}

int st_step_run(struct st_plan *p, const Subternary__StepCommand *c, bool *aborted)
{
    int rc;
    *aborted = false;
    p->barriers = 0;
    memset(p->op_seconds, 0, sizeof p->op_seconds);
    memset(p->op_bytes, 0, sizeof p->op_bytes);
    p->timing = c->want_timings;
    switch (c->kind) {
    case SUBTERNARY__STEP_KIND__STEP_PREFILL: rc = prefill(p, c); break;
    case SUBTERNARY__STEP_KIND__STEP_DRAFT:
    case SUBTERNARY__STEP_KIND__STEP_VERIFY:
    case SUBTERNARY__STEP_KIND__STEP_ROUND: rc = run_lanes(p, (const Subternary__StepCommand *const *)&c, 1); break;
    case SUBTERNARY__STEP_KIND__STEP_BATCH:
        rc = run_lanes(p, (const Subternary__StepCommand *const *)c->lanes, (uint32_t)c->n_lanes);
        break;
    case SUBTERNARY__STEP_KIND__STEP_PING:
        rc = 0;
        for (uint32_t i = 0; i < (c->k ? c->k : 1) && !rc; i++) rc = st_plan_sync(p);
        break;
    default: rc = st_error_set(&p->err, "unknown step kind %d", c->kind);
    }
    if (rc && st_barrier_aborted(p->barrier)) *aborted = true;
    return rc;
}
