#include "coordinator/accept_stats.h"

#include <string.h>

#include "coordinator/governor.h"

#define DECAY 0.95    // depth counts: about the last 20 rounds count
#define EMA_NEW 0.2   // weight of a round in the per-token estimate
#define CAP 0.999     // no rate of 1: K would grow without bound

void st_accept_add(struct st_accept_stats *a, uint32_t K, uint32_t m)
{
    double x = m / (st_drafts_examined(K, m) + 1e-9);
    a->ema = a->ema > 0 ? (1 - EMA_NEW) * a->ema + EMA_NEW * x : x;
    for (uint32_t i = 1; i <= ST_ACCEPT_MAX_K; i++) {
        a->tried[i] *= DECAY;
        a->passed[i] *= DECAY;
    }
    for (uint32_t i = 1; i <= K && i <= m + 1 && i <= ST_ACCEPT_MAX_K; i++) {
        a->tried[i] += 1;
        if (i <= m) a->passed[i] += 1;
    }
}

void st_accept_start(struct st_accept_stats *a, const struct st_accept_stats *from, double max_rounds,
                     double fallback)
{
    double f = from->tried[1] > max_rounds ? max_rounds / from->tried[1] : 1;
    memset(a, 0, sizeof *a);
    a->ema = from->ema > 0 ? from->ema : fallback;
    for (uint32_t i = 1; i <= ST_ACCEPT_MAX_K; i++) {
        a->tried[i] = f * from->tried[i];
        a->passed[i] = f * from->passed[i];
    }
}

double st_accept_expected_tokens(const struct st_accept_stats *a, uint32_t K)
{
    // Each depth's rate is shrunk towards the per-token one by one pseudo-round.
    double r = a->ema < CAP ? a->ema : CAP;
    double tokens = 1, surv = 1;
    for (uint32_t i = 1; i <= K; i++) {
        double h = i <= ST_ACCEPT_MAX_K ? (a->passed[i] + r) / (a->tried[i] + 1) : r;
        surv *= h < CAP ? h : CAP;
        tokens += surv;
    }
    return tokens;
}
