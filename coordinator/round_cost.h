// The measured cost of a speculative round as a function of its draft length
// K, for adaptive K.  t(K) = K * draft_step + rest(K):
//  - draft_step: seconds per draft forward, from the workers' own timing of
//    the draft loop, so every round measures it whatever its K;
//  - rest(K) = a + b K: the verify of K+1 rows, messages, acceptance and
//    commit; a least-squares line through every round's rest.
// Both are decayed sums (about the last 20 rounds count), so one fit follows
// the host's speed changes for every K at once.  Averages kept per K went
// stale for the K rarely chosen and steered K by old noise.
#ifndef ST_COORDINATOR_ROUND_COST_H
#define ST_COORDINATOR_ROUND_COST_H

#include <stdint.h>

struct st_round_cost {
    double d_seconds, d_steps;        // decayed draft seconds and draft forwards
    double w, sk, skk, sr, skr;       // decayed sums for the rest line
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
