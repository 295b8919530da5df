#include "coordinator/round_cost.h"

#define DECAY 0.95
// Weight of the prior slope, in units of K's variance: a spread of K of
// about +-0.5 (exploring a neighbour every few rounds) already outweighs it.
#define PRIOR_WEIGHT 0.05
// Weight of the line against a K's own mean, in rounds: a K explored every
// 8 rounds holds about 3 of them, so its mean counts for 75%.
#define LINE_WEIGHT 1.0

void st_round_cost_add(struct st_round_cost *c, uint32_t K, double draft_s, double dt)
{
    if (K == 0 || draft_s <= 0 || dt < draft_s) return;
    double k = K, rest = dt - draft_s;
    c->d_seconds = DECAY * c->d_seconds + draft_s;
    c->d_steps = DECAY * c->d_steps + k;
    c->w = DECAY * c->w + 1;
    c->sk = DECAY * c->sk + k;
    c->skk = DECAY * c->skk + k * k;
    c->sr = DECAY * c->sr + rest;
    c->skr = DECAY * c->skr + k * rest;
    for (uint32_t j = 1; j <= ST_ROUND_COST_MAX_K; j++) c->kw[j] *= DECAY, c->kr[j] *= DECAY;
    if (K <= ST_ROUND_COST_MAX_K) c->kw[K] += 1, c->kr[K] += rest;
}

double st_round_cost_predict(const struct st_round_cost *c, uint32_t K, double row_prior)
{
    if (c->w <= 0 || c->d_steps <= 0) return 0;
    double mk = c->sk / c->w, mr = c->sr / c->w;
    double var = c->skk / c->w - mk * mk, cov = c->skr / c->w - mk * mr;
    if (var < 0) var = 0;
    double b = (cov + PRIOR_WEIGHT * row_prior) / (var + PRIOR_WEIGHT);
    if (b < 0) b = 0; // more rows never cost less; noise can say otherwise
    double rest = mr + b * ((double)K - mk);
    if (rest < 0) rest = 0;
    if (K <= ST_ROUND_COST_MAX_K) rest = (c->kr[K] + LINE_WEIGHT * rest) / (c->kw[K] + LINE_WEIGHT);
    return K * (c->d_seconds / c->d_steps) + rest;
}
