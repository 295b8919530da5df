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
                   p->target_argmax))
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

// Draft model: the tokens it has not seen yet, then up to K proposals.  The
// leader picks each token (argmax, or a draw from the transformed
// distribution) between iterations; the barrier after it publishes the token
// and how many drafts are kept.  Below draft_p_min confidence the loop stops
// before the doubtful token (after at least one): it would likely be
// rejected, and its draft and verify rows cost time.  The stop depends only
// on the draft's own distribution, so sampling stays exact.
static int draft(struct st_plan *p, const Subternary__StepCommand *c)
{
    struct st_sampling s;
    sampling_of(c, &s);
    uint32_t model = ST_MODEL_DRAFT, V = p->sl.n_vocab;
    if (p->n_models < 2) return st_error_set(&p->err, "draft step without a draft model");
    if (c->k < 1 || c->k > p->sl.k_max || c->n_tokens < 1 || c->n_tokens > p->sl.m_max)
        return st_error_set(&p->err, "draft: k %u / %zu unseen tokens out of range", c->k, c->n_tokens);
    if (check_pos(p, c->slot, model, c->pos)) return -1;
    const uint32_t *in = c->tokens;
    uint32_t n = (uint32_t)c->n_tokens, pos = c->pos;
    for (uint32_t i = 0; i < c->k; i++) {
        uint32_t am;
        if (st_fwd(p, model, c->slot, in, n, pos, 1, &am)) return -1;
        if (p->rank == 0) {
            uint32_t y = am;
            float *q = p->draft_probs + (size_t)i * V;
            bool greedy = st_sampling_greedy(&s);
            if (!greedy) {
                st_sample_probs(p->logits, V, &s, q);
                y = st_sample_draw(q, V, st_rng_uniform(c->seed, STREAM_DRAFT, i));
            }
            p->draft_tokens[i] = y;
            bool stop = i > 0 && c->draft_p_min > 0 && confidence(p->logits, greedy ? NULL : q, q, V) < c->draft_p_min;
            *p->draft_kept = stop ? i : i + 1;
        }
        if (st_plan_sync(p)) return -1;
        if (*p->draft_kept <= i) break;
        pos += n;
        in = &p->draft_tokens[i];
        n = 1;
        // The draft's KV now holds through pos - 1: commit is the
        // coordinator's, but the next forward reads these rows in flight.
    }
    return 0;
}

// Target on [x_t, y_1 .. y_K]: per-row argmax, and for stochastic sampling
// the transformed distributions (rows split across ranks).
static int verify(struct st_plan *p, const Subternary__StepCommand *c, uint32_t K, const uint32_t *drafts)
{
    uint32_t rows[1025];
    uint32_t V = p->sl.n_vocab;
    if (K > p->sl.k_max) return st_error_set(&p->err, "verify: k %u > %u", K, p->sl.k_max);
    if (check_pos(p, c->slot, ST_MODEL_TARGET, c->verify_pos)) return -1;
    rows[0] = c->verify_token;
    for (uint32_t i = 0; i < K; i++) rows[i + 1] = drafts[i];
    if (st_fwd(p, ST_MODEL_TARGET, c->slot, rows, K + 1, c->verify_pos, K + 1, p->target_argmax)) return -1;
    if (c->want_probs) {
        struct st_sampling s;
        sampling_of(c, &s);
        for (uint32_t j = p->rank; j <= K; j += p->n_ranks)
            st_sample_probs(p->logits + (size_t)j * V, V, &s, p->target_probs + (size_t)j * V);
        if (st_plan_sync(p)) return -1;
    }
    return 0;
}

int st_step_run(struct st_plan *p, const Subternary__StepCommand *c, bool *aborted)
{
    int rc;
    uint64_t t0, t1;
    *aborted = false;
    p->barriers = 0;
    memset(p->op_seconds, 0, sizeof p->op_seconds);
    memset(p->op_bytes, 0, sizeof p->op_bytes);
    p->timing = c->want_timings;
    p->draft_window = c->draft_window;
    switch (c->kind) {
    case SUBTERNARY__STEP_KIND__STEP_PREFILL: rc = prefill(p, c); break;
    case SUBTERNARY__STEP_KIND__STEP_DRAFT: rc = draft(p, c); break;
    case SUBTERNARY__STEP_KIND__STEP_VERIFY:
        t0 = st_shm_now_ns();
        rc = verify(p, c, (uint32_t)c->n_tokens, c->tokens);
        if (p->rank == 0) p->step_ns[0] = 0, p->step_ns[1] = st_shm_now_ns() - t0;
        break;
    case SUBTERNARY__STEP_KIND__STEP_PING:
        rc = 0;
        for (uint32_t i = 0; i < (c->k ? c->k : 1) && !rc; i++) rc = st_plan_sync(p);
        break;
    case SUBTERNARY__STEP_KIND__STEP_ROUND:
        // Draft then verify; the draft loop ends at a barrier, so rank 0's
        // clock splits the round where every rank has finished drafting.
        t0 = st_shm_now_ns();
        rc = draft(p, c);
        t1 = st_shm_now_ns();
        if (!rc) rc = verify(p, c, *p->draft_kept, p->draft_tokens);
        if (p->rank == 0) p->step_ns[0] = t1 - t0, p->step_ns[1] = st_shm_now_ns() - t1;
        break;
    default: rc = st_error_set(&p->err, "unknown step kind %d", c->kind);
    }
    if (rc && st_barrier_aborted(p->barrier)) *aborted = true;
    return rc;
}
