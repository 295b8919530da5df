// The measured cost of a speculative round as a function of its draft length
// K, for adaptive K.  t(K) = K * draft_step + rest(K):
//  - draft_step: seconds per draft forward, from the workers' own timing of
//    the draft loop, so every round measures it whatever its K;
//  - rest(K) = a + b K: the verify of K+1 rows, messages, acceptance and
//    commit; a least-squares line through every round's rest.
// Both are decayed sums (about the last 20 rounds count), so one fit follows
// the host's speed changes for every K at once.  Averages kept per K alone
// went stale for the K rarely chosen and steered K by old noise; but the
// verify's cost is not a line in K (on Zen 5, 3 and 4 rows cost about the
// same, 5 rows a fifth more: the kernels change their loop past 4), so a K
// measured recently gets its own decayed mean, weighed against the line by
// how much of it there is.
#ifndef ST_COORDINATOR_ROUND_COST_H
#define ST_COORDINATOR_ROUND_COST_H

#include <stdint.h>

#define ST_ROUND_COST_MAX_K 32 // K with a mean of their own: 1..32

struct st_round_cost {
    double d_seconds, d_steps;        // decayed draft seconds and draft forwards
    double w, sk, skk, sr, skr;       // decayed sums for the rest line
    double kw[ST_ROUND_COST_MAX_K + 1], kr[ST_ROUND_COST_MAX_K + 1]; // per K: weight, rest
};

// Adds a round of K >= 1 drafts whose draft loop took draft_s of its dt
// seconds.  A round without the workers' draft figure (draft_s <= 0) is
// skipped: it would read as free drafting.
void st_round_cost_add(struct st_round_cost *c, uint32_t K, double draft_s, double dt);

// Predicted seconds of a round with K drafts; 0 before any round was added.
// Until rounds of different K were seen the line's slope comes from a prior:
// one more verified row costs row_prior seconds.
double st_round_cost_predict(const struct st_round_cost *c, uint32_t K, double row_prior);

#endif
