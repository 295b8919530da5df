#include "coordinator/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/governor.h"

#define STREAM_ACCEPT 2
#define ROW_PRIOR 0.08 // a verified row beyond the first, in target steps, until measured

struct st_session {
    struct st_engine *eng;
    struct st_gen_params gp;
    uint32_t node, slot;
    uint64_t id;
    int32_t *tokens;          // prompt then generated; tokens[t] is the pending one
    uint32_t n_tokens, cap;
    uint32_t n_prompt;
    uint32_t t;               // target committed length (position of the pending token)
    uint32_t dc;              // draft committed length
    bool prefilled;
    struct st_governor gov;
    struct st_accept_stats accept; // starts from the node's
    float *resid;             // [n_vocab]
    char *text;               // detokenised output (stop strings)
    size_t text_len, text_cap;
    struct st_session_stats st;
    // The step planned or in flight (st_session_plan .. st_session_step_done).
    enum { PEND_NONE, PEND_PREFILL, PEND_ROUND } pend;
    Subternary__StepCommand cmd;
    Subternary__Sampling sm;
    uint32_t pend_model, pend_to; // a prefill step: its model, the committed length after it
    uint32_t pre_to;          // end of the prompt slice being prefilled
    double t0;                // a prefill step's start
    // A round decided before its draft caught up (steps of their own).
    bool decided, catching_up, spec, probe;
    uint32_t K;
    uint64_t seed;
    double round_t0;
};

// A session's acceptance estimates start from its node's, worth at most
// PRIOR_ROUNDS rounds of its own, or from FALLBACK_ACCEPT on a node without
// rounds.  Starting every session from a fixed 0.7 kept K at 1-4 for the
// first 8 of 22 rounds of a 128-token reply from a draft that accepts 90%
// (l3b with l1b TQ2_0), where K 7-8 paid.
#define PRIOR_ROUNDS 4.0
#define FALLBACK_ACCEPT 0.7

static void accept_start(struct st_session *s)
{
    st_accept_start(&s->accept, &s->eng->node[s->node].accept, PRIOR_ROUNDS, FALLBACK_ACCEPT);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void sampling_msg(const struct st_gen_params *gp, Subternary__Sampling *m)
{
    subternary__sampling__init(m);
    m->temperature = gp->sampling.temperature;
    m->top_k = gp->sampling.top_k;
    m->top_p = gp->sampling.top_p;
    m->min_p = gp->sampling.min_p;
    m->seed = gp->seed;
}

// The session's parameters: gp with its defaults filled in, within what
// the engine has.
static void params_of(struct st_session *s, const struct st_gen_params *gp)
{
    s->gp = *gp;
    if (!s->gp.governor_threshold) s->gp.governor_threshold = 0.30f;
    if (!s->eng->draft) s->gp.speculate = false;
    if (s->gp.k > s->eng->k_max) s->gp.k = s->eng->k_max;
}

static bool set_whole(const struct st_engine *eng, uint32_t n)
{
    return st_pool_ready(eng->node[n].pool) == st_pool_ranks(eng->node[n].pool);
}

int st_session_new(struct st_engine *eng, const struct st_gen_params *gp, const int32_t *prompt, uint32_t n_prompt,
                   uint64_t id, struct st_session **out, struct st_error *e)
{
    *out = NULL;
    if (n_prompt == 0) return st_error_set(e, "empty prompt");
    if (n_prompt + 1 > eng->n_ctx)
        return st_error_set(e, "prompt of %u tokens does not fit the context of %u", n_prompt, eng->n_ctx);
    for (uint32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= eng->n_vocab)
            return st_error_set(e, "prompt token %d at %u is out of range (vocabulary %u)", prompt[i], i, eng->n_vocab);
    struct st_session *s = calloc(1, sizeof *s);
    if (!s) return st_error_set(e, "out of memory");
    s->eng = eng;
    params_of(s, gp);
    s->id = id;
    s->cap = eng->n_ctx + 1;
    s->tokens = malloc(s->cap * sizeof *s->tokens);
    s->resid = malloc(eng->n_vocab * sizeof *s->resid);
    if (!s->tokens || !s->resid) {
        st_session_end(&s);
        return st_error_set(e, "out of memory");
    }
    memcpy(s->tokens, prompt, n_prompt * sizeof *prompt);
    s->n_tokens = s->n_prompt = n_prompt;
    s->st.prompt_tokens = n_prompt;
    st_governor_reset(&s->gov, s->gp.governor, s->gp.governor_threshold);
    // Place on the node with the fewest sessions; of equals, one whose worker
    // set is whole (a set still replacing a worker would hold up the first step).
    uint32_t best = 0;
    for (uint32_t i = 1; i < eng->n_nodes; i++)
        if (eng->node[i].sessions < eng->node[best].sessions ||
            (eng->node[i].sessions == eng->node[best].sessions && !set_whole(eng, best) && set_whole(eng, i)))
            best = i;
    uint64_t gen;
    for (uint32_t k = 0; k < eng->n_nodes; k++) {
        uint32_t n = (best + k) % eng->n_nodes;
        if (st_kv_reserve(&eng->node[n].kv, id, &s->slot, &gen, e) == 0) {
            s->node = n;
            eng->node[n].sessions++;
            accept_start(s);
            *out = s;
            return 0;
        }
    }
    free(s->tokens);
    free(s->resid);
    free(s);
    return st_error_set(e, "no free KV slot");
}

static void prefill_cmd(struct st_session *s, uint32_t model, uint32_t at, uint32_t to)
{
    subternary__step_command__init(&s->cmd);
    s->cmd.kind = SUBTERNARY__STEP_KIND__STEP_PREFILL;
    s->cmd.slot = s->slot;
    s->cmd.model = model;
    s->cmd.n_tokens = to - at;
    s->cmd.tokens = (uint32_t *)(s->tokens + at);
    s->cmd.pos = at;
    s->pend = PEND_PREFILL;
    s->pend_model = model;
    s->pend_to = to;
    s->t0 = now_s();
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

// Everything but the last prompt token is prefilled (that one is pending and
// goes through the first round's rows).
static bool prompt_done(const struct st_session *s)
{
    uint32_t n = s->n_prompt - 1;
    return s->t == n && (!s->gp.speculate || s->dc == n);
}

// Plans the prompt's next step, in slices of at most max_tokens (the
// target's part of a slice, then the draft's) and steps of a prefill batch
// or of max_rows tokens, the fewer; false when the prompt is prefilled.
static bool plan_prefill(struct st_session *s, uint32_t max_tokens, uint32_t max_rows)
{
    if (s->prefilled) return false;
    if (prompt_done(s)) {
        s->prefilled = true;
        return false;
    }
    uint32_t n = s->n_prompt - 1, batch = max_rows && max_rows < s->eng->m_max * 8 ? max_rows : s->eng->m_max * 8;
    if (s->t == s->pre_to && (!s->gp.speculate || s->dc == s->pre_to))
        s->pre_to = n - s->pre_to > max_tokens ? s->pre_to + max_tokens : n;
    if (s->t < s->pre_to) prefill_cmd(s, ST_MODEL_TARGET, s->t, min_u32(s->pre_to, s->t + batch));
    else prefill_cmd(s, ST_MODEL_DRAFT, s->dc, min_u32(s->pre_to, s->dc + batch));
    return true;
}

static int prefill_done(struct st_session *s, struct st_error *e)
{
    if (st_kv_commit(&s->eng->node[s->node].kv, s->slot, s->pend_model, s->pend_to, e)) return -1;
    if (s->pend_model == ST_MODEL_TARGET) s->t = s->pend_to;
    else s->dc = s->pend_to;
    if (s->catching_up) { // the draft's backlog before a round: the round's time
        s->catching_up = s->dc < s->t;
        return 0;
    }
    s->st.prompt_seconds += now_s() - s->t0;
    if (prompt_done(s)) s->prefilled = true;
    return 0;
}

// Runs the planned step and applies it (the blocking form of the two).
static int run_planned(struct st_session *s, int32_t *out, uint32_t cap, enum st_finish *finish, struct st_error *e)
{
    struct st_step_result res;
    if (st_engine_step(s->eng, s->node, &s->cmd, &res, e)) {
        s->pend = PEND_NONE;
        s->decided = s->catching_up = false;
        return -1;
    }
    return st_session_step_done(s, &res, out, cap, finish, e);
}

int st_session_prefill(struct st_session *s, struct st_error *e)
{
    enum st_finish fin;
    while (plan_prefill(s, UINT32_MAX, 0))
        if (run_planned(s, NULL, 0, &fin, e) < 0) return -1;
    return 0;
}

int st_session_start(struct st_engine *eng, const struct st_gen_params *gp, const int32_t *prompt, uint32_t n_prompt,
                     uint64_t id, struct st_session **out, struct st_error *e)
{
    if (st_session_new(eng, gp, prompt, n_prompt, id, out, e)) return -1;
    if (st_session_prefill(*out, e)) {
        st_session_end(out);
        return -1;
    }
    return 0;
}

// Expected tokens per second of a round with K drafts, from the session's
// measured acceptance and the node's measured round costs.
static double rate(const struct st_session *s, uint32_t K)
{
    const struct st_engine_node *nd = &s->eng->node[s->node];
    double tokens = st_accept_expected_tokens(&s->accept, K);
    // Prior, until rounds are measured: a verified row beyond the first costs
    // ROW_PRIOR of a target step, a draft forward its share of the bytes.
    double t = st_round_cost_predict(&nd->round_cost, K, ROW_PRIOR * nd->ema_ar);
    if (t <= 0) {
        const struct st_engine *eng = s->eng;
        double ratio = (double)eng->draft->gguf->size / (double)eng->target->gguf->size;
        t = nd->ema_ar * (1 + ROW_PRIOR * K) + K * nd->ema_ar * ratio;
    }
    return tokens / t;
}

static uint32_t choose_k(struct st_session *s, uint32_t room)
{
    const struct st_engine_node *nd = &s->eng->node[s->node];
    uint32_t kmax = s->eng->k_max < room ? s->eng->k_max : room;
    if (s->gp.k) return s->gp.k < kmax ? s->gp.k : kmax;
    if (nd->ema_ar <= 0) return kmax < 4 ? kmax : 4;
    uint32_t best = 1;
    double br = 0;
    for (uint32_t K = 1; K <= kmax; K++) {
        double r = rate(s, K);
        if (r > br) br = r, best = K;
    }
    // Explore a neighbour now and then so the costs of other K get measured.
    if (s->st.rounds % 8 == 3 && best < kmax) best++;
    else if (s->st.rounds % 8 == 7 && best > 1) best--;
    return best;
}

static bool ends_with_stop(struct st_session *s)
{
    for (uint32_t i = 0; i < s->gp.n_stop; i++) {
        size_t n = strlen(s->gp.stop[i]);
        if (n && s->text_len >= n && memmem(s->text + (s->text_len > n + 64 ? s->text_len - n - 64 : 0),
                                            s->text_len - (s->text_len > n + 64 ? s->text_len - n - 64 : 0),
                                            s->gp.stop[i], n))
            return true;
    }
    return false;
}

// Appends a committed token; says whether generation must stop after it.
static enum st_finish emit(struct st_session *s, int32_t tok, int32_t *out, uint32_t *n_out, uint32_t cap)
{
    struct st_engine *eng = s->eng;
    s->tokens[s->n_tokens++] = tok;
    s->st.tokens++;
    if (*n_out < cap) out[(*n_out)++] = tok;
    if (s->gp.n_stop && eng->tok) {
        char piece[256];
        int n = st_tok_decode_piece(eng->tok, tok, piece, sizeof piece);
        if (n > 0) {
            if (s->text_len + (size_t)n + 1 > s->text_cap) {
                size_t nc = (s->text_cap + (size_t)n + 1) * 2;
                char *t = realloc(s->text, nc);
                if (t) s->text = t, s->text_cap = nc;
            }
            if (s->text_len + (size_t)n + 1 <= s->text_cap) {
                memcpy(s->text + s->text_len, piece, n < (int)sizeof piece ? (size_t)n : sizeof piece);
                s->text_len += n < (int)sizeof piece ? (size_t)n : sizeof piece;
            }
        }
        if (ends_with_stop(s)) return ST_FINISH_STOP;
    }
    if (s->gp.stop_at_eos && eng->tok && st_tok_is_eog(eng->tok, tok)) return ST_FINISH_EOS;
    if (s->st.tokens >= s->gp.max_tokens) return ST_FINISH_LENGTH;
    if (s->n_tokens >= eng->n_ctx) return ST_FINISH_CONTEXT;
    return ST_FINISH_NONE;
}

static void commit(struct st_session *s, uint32_t model, uint32_t n, struct st_error *e)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    st_kv_commit(&s->eng->node[s->node].kv, s->slot, model, n, e);
    clock_gettime(CLOCK_MONOTONIC, &b);
    s->st.commit_ns_sum += (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    s->st.commits++;
}

// Decides the next round (speculative or not, K, its random numbers), then
// plans its steps: the draft's backlog first when it is longer than a
// forward's rows, then the round.  Returns 0 when the context is full.
static int plan_round(struct st_session *s, enum st_finish *finish, uint32_t max_rows)
{
    struct st_engine *eng = s->eng;
    struct st_engine_node *nd = &eng->node[s->node];
    if (!s->decided) {
        uint32_t room = eng->n_ctx - 1 - s->t; // positions left after the pending token
        if (room == 0 || s->n_tokens >= eng->n_ctx) {
            *finish = ST_FINISH_CONTEXT;
            return 0;
        }
        s->probe = s->gp.speculate && st_governor_probe_due(&s->gov);
        s->spec = s->gp.speculate && (s->gov.drafting || s->probe);
        // Adaptive K needs the cost of a target-only step: measure it once per node.
        if (s->spec && !s->gp.k && nd->ema_ar <= 0) s->spec = false;
        s->K = s->spec ? choose_k(s, room) : 0;
        if (s->probe && s->K > 2) s->K = 2; // a probe only measures acceptance: keep it cheap
        if (s->K == 0) s->spec = false;
        // A round's random numbers are keyed by where it starts: positions only
        // grow, so no two rounds share them, a replayed round draws the same,
        // and the same seed and rounds give the same tokens in any session.
        s->seed = mix(s->gp.seed, s->t);
        s->round_t0 = now_s();
        s->decided = true;
        // The draft catches up on the tokens it has not seen (after suspended
        // rounds) inside the round's first forward; only a backlog longer
        // than a forward's rows takes prefill steps first.
        s->catching_up = s->spec && s->t - s->dc + 1 > eng->m_max;
    }
    if (s->catching_up) {
        uint32_t step = max_rows && max_rows < eng->m_max * 8 ? max_rows : eng->m_max * 8;
        prefill_cmd(s, ST_MODEL_DRAFT, s->dc, min_u32(s->t, s->dc + step));
        return 1;
    }
    if (s->round_t0 < 0) s->round_t0 = now_s();
    sampling_msg(&s->gp, &s->sm);
    Subternary__StepCommand *cmd = &s->cmd;
    subternary__step_command__init(cmd);
    cmd->slot = s->slot;
    cmd->sampling = &s->sm;
    cmd->seed = s->seed;
    cmd->want_probs = !st_sampling_greedy(&s->gp.sampling);
    cmd->want_timings = s->gp.profile;
    cmd->verify_pos = s->t;
    cmd->verify_token = (uint32_t)s->tokens[s->t];
    if (s->spec) {
        cmd->kind = SUBTERNARY__STEP_KIND__STEP_ROUND;
        cmd->tokens = (uint32_t *)(s->tokens + s->dc);
        cmd->n_tokens = s->t - s->dc + 1;
        cmd->pos = s->dc;
        cmd->k = s->K;
        cmd->draft_p_min = s->gp.draft_p_min;
        cmd->draft_window = s->gp.draft_window;
    } else {
        cmd->kind = SUBTERNARY__STEP_KIND__STEP_VERIFY;
    }
    s->pend = PEND_ROUND;
    return 1;
}

// Accepts, commits and emits the round the workers ran.
static int round_done(struct st_session *s, const struct st_step_result *res, int32_t *out, uint32_t cap,
                      enum st_finish *finish, struct st_error *e)
{
    struct st_engine *eng = s->eng;
    struct st_engine_node *nd = &eng->node[s->node];
    bool greedy = st_sampling_greedy(&s->gp.sampling), spec = s->spec, probe = s->probe;
    uint32_t K = s->K;
    uint64_t seed = s->seed;
    s->decided = false;
    double dt = now_s() - s->round_t0;
    s->st.steps++;
    s->st.barriers += res->barriers;
    for (uint32_t k = 0; k < res->n_ops; k++) { // accumulate by (model, op name)
        uint32_t j = 0;
        while (j < s->st.n_ops && (s->st.op_model[j] != res->op_model[k] || strcmp(s->st.op_names[j], res->op_names[k])))
            j++;
        if (j == s->st.n_ops) {
            if (j == ST_POOL_MAX_OPS) continue;
            s->st.n_ops++;
            s->st.op_model[j] = res->op_model[k];
            memcpy(s->st.op_names[j], res->op_names[k], sizeof s->st.op_names[j]);
        }
        s->st.op_seconds[j] += res->op_seconds[k];
        s->st.op_bytes[j] += res->op_bytes[k];
    }
    const struct st_scratch_layout *sl = &nd->sl;
    const uint8_t *lane = nd->scratch + st_scratch_lane(sl, res->lane); // this session's outputs
    // The workers' own split of the step; the rest of dt (messages,
    // acceptance, commit) is "other".  Clamped: a step that replaced a
    // worker may leave a stale figure.
    const uint64_t *ns = (const uint64_t *)(lane + sl->step_ns);
    double d_s = spec ? ns[0] * 1e-9 : 0, v_s = ns[1] * 1e-9;
    if (d_s > dt) d_s = dt;
    if (v_s > dt - d_s) v_s = dt - d_s;
    s->st.draft_seconds += d_s;
    s->st.verify_seconds += v_s;
    const uint32_t *am = (const uint32_t *)(lane + sl->target_argmax);
    const uint32_t *y = (const uint32_t *)(lane + sl->draft_tokens);
    if (spec) { // the draft may have stopped early (draft_p_min)
        uint32_t kept = *(const uint32_t *)(lane + sl->draft_kept);
        if (kept >= 1 && kept < K) K = kept;
    }
    uint32_t m, z;
    if (greedy) {
        m = st_spec_accept_greedy(am, y, K, &z);
    } else {
        const float *p = (const float *)(lane + sl->target_probs);
        const float *q = (const float *)(lane + sl->draft_probs);
        m = st_spec_accept(p, q, y, K, eng->n_vocab, seed, STREAM_ACCEPT, s->resid, &z);
        if (s->gp.test_broken_acceptance) { // wrong on purpose: keep every draft
            m = K;
            z = st_sample_draw(p + (size_t)K * eng->n_vocab, eng->n_vocab, st_rng_uniform(seed, STREAM_ACCEPT, 99));
        }
    }
    // Commit: the target keeps x_t, y_1..y_m; the draft what it saw of them.
    uint32_t t = s->t;
    commit(s, ST_MODEL_TARGET, t + m + 1, e);
    if (spec) {
        uint32_t dnew = t + m + 1 < t + K ? t + m + 1 : t + K;
        commit(s, ST_MODEL_DRAFT, dnew, e);
        s->dc = dnew;
        s->st.drafted += K;
        s->st.accepted += m;
        s->st.k_sum += K;
        s->st.round_seconds += dt;
        st_round_cost_add(&nd->round_cost, K, d_s, dt);
        st_accept_add(&s->accept, K, m);
        st_accept_add(&nd->accept, K, m);
        st_governor_update(&s->gov, K, m, probe);
    } else {
        s->st.target_only_seconds += dt;
        nd->ema_ar = nd->ema_ar > 0 ? 0.7 * nd->ema_ar + 0.3 * dt : dt;
        if (s->gp.speculate) s->st.suspended_rounds++;
    }
    s->t = t + m + 1;
    s->st.rounds++;
    s->st.seconds += dt;
    uint32_t n_out = 0;
    for (uint32_t i = 0; i < m && *finish == ST_FINISH_NONE; i++) *finish = emit(s, (int32_t)y[i], out, &n_out, cap);
    if (*finish == ST_FINISH_NONE) *finish = emit(s, (int32_t)z, out, &n_out, cap);
    return (int)n_out;
}

int st_session_plan(struct st_session *s, uint32_t max_prefill, uint32_t max_rows, Subternary__StepCommand **cmd,
                    enum st_finish *finish, struct st_error *e)
{
    *finish = ST_FINISH_NONE;
    *cmd = NULL;
    if (s->pend != PEND_NONE) return st_error_set(e, "session %llu already has a step in flight", (unsigned long long)s->id);
    if (!plan_prefill(s, max_prefill ? max_prefill : UINT32_MAX, max_rows) && !plan_round(s, finish, max_rows))
        return 0;
    *cmd = &s->cmd;
    return 1;
}

int st_session_step_done(struct st_session *s, const struct st_step_result *res, int32_t *out, uint32_t cap,
                         enum st_finish *finish, struct st_error *e)
{
    *finish = ST_FINISH_NONE;
    int pend = s->pend;
    s->pend = PEND_NONE;
    s->st.restarts += res->restarts;
    if (pend == PEND_PREFILL) return prefill_done(s, e) ? -1 : 0;
    if (pend == PEND_ROUND) return round_done(s, res, out, cap, finish, e);
    return st_error_set(e, "session %llu has no step in flight", (unsigned long long)s->id);
}

void st_session_unplan(struct st_session *s)
{
    // A round taken back is timed again from when it is planned next: its
    // time feeds the node's cost model, which must not count the wait.
    if (s->pend == PEND_ROUND) s->round_t0 = -1;
    s->pend = PEND_NONE;
}

int st_session_round(struct st_session *s, int32_t *out, uint32_t cap, enum st_finish *finish, struct st_error *e)
{
    *finish = ST_FINISH_NONE;
    if (st_session_prefill(s, e)) return -1;
    for (;;) {
        if (!plan_round(s, finish, 0)) return 0;
        bool round = s->pend == PEND_ROUND;
        int n = run_planned(s, out, cap, finish, e);
        if (n < 0 || round) return n;
    }
}

int st_session_rewind(struct st_session *s, const struct st_gen_params *gp, struct st_error *e)
{
    struct st_kv *kv = &s->eng->node[s->node].kv;
    if (!s->prefilled) return st_error_set(e, "rewind before prefill");
    uint32_t base = s->n_prompt - 1;
    if (st_kv_rollback(kv, s->slot, ST_MODEL_TARGET, base, e)) return -1;
    if (s->eng->n_models > 1) {
        uint32_t d = s->dc < base ? s->dc : base;
        if (st_kv_rollback(kv, s->slot, ST_MODEL_DRAFT, d, e)) return -1;
        s->dc = d;
    }
    params_of(s, gp);
    s->pend = PEND_NONE;
    s->decided = s->catching_up = false;
    s->t = base;
    s->n_tokens = s->n_prompt;
    st_governor_reset(&s->gov, s->gp.governor, s->gp.governor_threshold);
    accept_start(s);
    s->text_len = 0;
    double ps = s->st.prompt_seconds;
    memset(&s->st, 0, sizeof s->st);
    s->st.prompt_tokens = s->n_prompt;
    s->st.prompt_seconds = ps;
    return 0;
}

void st_session_end(struct st_session **sp)
{
    struct st_session *s = *sp;
    if (!s) return;
    if (s->eng) {
        struct st_error e;
        if (st_kv_release(&s->eng->node[s->node].kv, s->slot, s->id, &e) == 0 && s->eng->node[s->node].sessions)
            s->eng->node[s->node].sessions--;
    }
    free(s->tokens);
    free(s->resid);
    free(s->text);
    free(s);
    *sp = NULL;
}

const struct st_session_stats *st_session_stats(const struct st_session *s) { return &s->st; }

double st_session_stats_op_order(const struct st_session_stats *st, uint32_t *order)
{
    double total = 0;
    for (uint32_t k = 0; k < st->n_ops; k++) order[k] = k, total += st->op_seconds[k];
    for (uint32_t a = 0; a < st->n_ops; a++)
        for (uint32_t b = a + 1; b < st->n_ops; b++)
            if (st->op_seconds[order[b]] > st->op_seconds[order[a]]) {
                uint32_t t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    return total;
}
uint32_t st_session_node(const struct st_session *s) { return s->node; }
uint32_t st_session_slot(const struct st_session *s) { return s->slot; }

const int32_t *st_session_output(const struct st_session *s, uint32_t *n)
{
    *n = s->n_tokens - s->n_prompt;
    return s->tokens + s->n_prompt;
}
