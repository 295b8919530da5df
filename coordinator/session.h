// A generation session: a KV slot on one node, the committed tokens, and the
// speculative loop of DESIGN.md "Transactional KV": draft K -> verify K+1 ->
// accept -> commit by committed-length stores.  Greedy output equals greedy
// decoding of the target alone; stochastic output has the target's law.
#ifndef ST_COORDINATOR_SESSION_H
#define ST_COORDINATOR_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/engine.h"
#include "sampling/sampling.h"

#define ST_SESSION_MAX_STOPS 8

struct st_gen_params {
    uint32_t max_tokens;
    struct st_sampling sampling;
    uint64_t seed;
    bool speculate;          // use the draft (when the engine has one)
    uint32_t k;              // fixed draft length; 0: adaptive
    bool governor;           // suspend drafting when it stops paying
    float governor_threshold; // acceptance below this suspends (0: 0.30)
    float draft_p_min;       // a round's drafting stops below this confidence (0: never)
    // The draft's decoding attends the first 512 positions and at least the
    // last draft_window (0: every position).  Output is the same either way;
    // only the draft's cost at long contexts and its proposals change.
    uint32_t draft_window;
    const char *stop[ST_SESSION_MAX_STOPS];
    uint32_t n_stop;
    bool stop_at_eos;        // default true
    // Test hook: accept every draft token (a deliberately wrong rule, the
    // negative control of the distribution test).  Never set in serving.
    bool test_broken_acceptance;
    bool profile;            // per-op timings from the workers (rank 0)
};

enum st_finish {
    ST_FINISH_NONE = 0,
    ST_FINISH_LENGTH,
    ST_FINISH_EOS,
    ST_FINISH_STOP,
    ST_FINISH_CONTEXT,
};

struct st_session_stats {
    uint32_t prompt_tokens, tokens, rounds, drafted, accepted, suspended_rounds;
    double prompt_seconds, seconds;
    double round_seconds, target_only_seconds; // decode time in draft+verify rounds / target-only steps
    double draft_seconds, verify_seconds;      // time the workers spent drafting / verifying (rank 0's clock)
    double k_sum;             // sum of K over speculative rounds
    double commit_ns_sum;     // time of the committed-length stores
    uint32_t commits;
    uint32_t restarts;        // workers replaced during this session's steps
    // With gp.profile: seconds and weight bytes per op class, rank 0's view,
    // summed over the decode steps (prefill excluded).
    double op_seconds[ST_POOL_MAX_OPS];
    uint64_t op_bytes[ST_POOL_MAX_OPS];
    uint32_t op_model[ST_POOL_MAX_OPS];
    char op_names[ST_POOL_MAX_OPS][16];
    uint32_t n_ops;
    uint64_t barriers;        // barriers passed in decode steps
    uint32_t steps;           // decode steps
};

struct st_session;

// Reserves a slot (on the node with the fewest sessions) and prefills the
// prompt into both models.  Prompts that leave no room to generate are an
// error naming the lengths.
int st_session_start(struct st_engine *eng, const struct st_gen_params *gp, const int32_t *prompt, uint32_t n_prompt,
                     uint64_t session_id, struct st_session **out, struct st_error *e);
// Reserves the slot only (the server then runs the session step by step).
int st_session_new(struct st_engine *eng, const struct st_gen_params *gp, const int32_t *prompt, uint32_t n_prompt,
                   uint64_t session_id, struct st_session **out, struct st_error *e);
int st_session_prefill(struct st_session *s, struct st_error *e);

// One round: appends 1..K+1 tokens to *out (up to cap) and returns how many,
// or -1 on error.  *finish says whether the session ended.
int st_session_round(struct st_session *s, int32_t *out, uint32_t cap, enum st_finish *finish, struct st_error *e);

// The same work one worker-set step at a time, for a scheduler that keeps
// several nodes' sets busy at once (the server).  st_session_plan returns 1
// with *cmd the session's next step: while the prompt is not prefilled, a
// slice of at most max_prefill prompt tokens (0: no limit), one model's part
// of it at a time; then the draft's backlog, or a round.  A prompt or backlog
// step takes at most max_rows tokens (0: the engine's prefill batch).
// *cmd and what it points at belong to the session and stay valid until
// st_session_step_done.  It returns 0 when the session ends without a step
// (*finish: the context is full), -1 on error.  st_session_step_done applies
// the step's result: it returns how many tokens a round appended to out (0
// for other steps) and sets *finish, or -1 on error.
int st_session_plan(struct st_session *s, uint32_t max_prefill, uint32_t max_rows, Subternary__StepCommand **cmd,
                    enum st_finish *finish, struct st_error *e);
int st_session_step_done(struct st_session *s, const struct st_step_result *res, int32_t *out, uint32_t cap,
                         enum st_finish *finish, struct st_error *e);
// Takes back the planned step, unsent or failed: the next st_session_plan
// plans the same step again (a round keeps its K and random numbers).  A
// round's outputs are read from lane res->lane of the node's scratch, so
// several sessions' rounds can run as one batched step.
void st_session_unplan(struct st_session *s);

// Rolls the session back to its prompt (one committed-length store per
// model: nothing is copied or cleared) and restarts generation with new
// parameters.  Used by benchmarks and tests to reuse a prefilled prompt.
int st_session_rewind(struct st_session *s, const struct st_gen_params *gp, struct st_error *e);

void st_session_end(struct st_session **s);

const struct st_session_stats *st_session_stats(const struct st_session *s);
// Indices of st->op_* sorted by time, largest first; returns their total seconds.
double st_session_stats_op_order(const struct st_session_stats *st, uint32_t *order);
uint32_t st_session_node(const struct st_session *s);
uint32_t st_session_slot(const struct st_session *s);
// Generated ids so far.
const int32_t *st_session_output(const struct st_session *s, uint32_t *n);

#endif
