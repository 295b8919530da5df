// Token sampling and speculative acceptance: pure functions over probability
// vectors, shared by the worker leader (draft proposals) and the coordinator
// (acceptance).  Random numbers come from a counter-based generator so that a
// replayed step draws exactly the same numbers.
#ifndef ST_SAMPLING_H
#define ST_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

struct st_sampling {
    float temperature; // <= 0: greedy
    uint32_t top_k;    // 0: off
    float top_p;       // <= 0 or >= 1: off
    float min_p;       // <= 0: off
};

static inline bool st_sampling_greedy(const struct st_sampling *s) { return !(s->temperature > 0); }

// Uniform double in [0, 1) for (seed, stream, counter): splitmix64 of a mix.
double st_rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter);

// Probabilities after the sampling transforms, in this order: temperature,
// softmax, top-k, top-p, min-p, renormalise.  Entries outside the kept set
// are exactly 0.  Greedy settings give a one-hot vector at the argmax.
void st_sample_probs(const float *logits, uint32_t n, const struct st_sampling *s, float *probs);

// Inverse-CDF draw from a probability vector (sum ~1; zeros never chosen).
uint32_t st_sample_draw(const float *probs, uint32_t n, double u);

// Index of the largest value; the lowest index wins ties.
uint32_t st_argmax(const float *v, uint32_t n);

// Speculative acceptance over K drafts.  p: [K+1][n] target probabilities
// (row i is the distribution of the token after the prefix ending at verify
// row i); q: [K][n] draft probabilities the drafts were drawn from; y: [K]
// drafts.  Accept y_i with probability min(1, p_i(y_i)/q_i(y_i)); at the first
// rejection draw from normalize(max(0, p_i - q_i)); after K acceptances draw
// the bonus from p_K.  `resid` is [n] scratch.  Returns the number accepted m
// and the extra token in *z.
uint32_t st_spec_accept(const float *p, const float *q, const uint32_t *y, uint32_t K, uint32_t n,
                        uint64_t seed, uint64_t stream, float *resid, uint32_t *z);

// Greedy acceptance: accept while the target's argmax equals the draft token.
uint32_t st_spec_accept_greedy(const uint32_t *target_argmax, const uint32_t *y, uint32_t K,
                               uint32_t *z);

#endif
