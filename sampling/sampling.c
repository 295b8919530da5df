#include "sampling/sampling.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double st_rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter)
{
    uint64_t h = splitmix64(seed ^ splitmix64(stream ^ splitmix64(counter)));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

uint32_t st_argmax(const float *v, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

// Largest threshold t in [0, max p] such that keep(t) holds, by bisection;
// keep must be monotone (true at 0).  Ties at the threshold stay together.
static float bisect_threshold(const float *p, uint32_t n, double want, bool by_mass)
{
    float lo = 0, hi = p[st_argmax(p, n)];
    for (int it = 0; it < 40; it++) {
        float mid = 0.5f * (lo + hi);
        double acc = 0;
        for (uint32_t i = 0; i < n; i++)
            if (p[i] >= mid) acc += by_mass ? p[i] : 1.0;
        if (acc >= want) lo = mid;
        else hi = mid;
    }
    return lo;
}

static void normalise(float *p, uint32_t n)
{
    double s = 0;
    for (uint32_t i = 0; i < n; i++) s += p[i];
    float inv = (float)(1.0 / s);
    for (uint32_t i = 0; i < n; i++) p[i] *= inv;
}

void st_sample_probs(const float *logits, uint32_t n, const struct st_sampling *s, float *probs)
{
    if (st_sampling_greedy(s)) {
        memset(probs, 0, n * sizeof *probs);
        probs[st_argmax(logits, n)] = 1.0f;
        return;
    }
    float mx = logits[st_argmax(logits, n)];
    float inv_t = 1.0f / s->temperature;
    for (uint32_t i = 0; i < n; i++) probs[i] = expf((logits[i] - mx) * inv_t);
    normalise(probs, n);
    if (s->top_k > 0 && s->top_k < n) {
        float t = bisect_threshold(probs, n, s->top_k, false);
        for (uint32_t i = 0; i < n; i++)
            if (probs[i] < t) probs[i] = 0;
        normalise(probs, n);
    }
    if (s->top_p > 0 && s->top_p < 1) { // the smallest nucleus of mass >= top_p
        float t = bisect_threshold(probs, n, s->top_p, true);
        for (uint32_t i = 0; i < n; i++)
            if (probs[i] < t) probs[i] = 0;
        normalise(probs, n);
    }
    if (s->min_p > 0) {
        float cut = s->min_p * probs[st_argmax(probs, n)];
        for (uint32_t i = 0; i < n; i++)
            if (probs[i] < cut) probs[i] = 0;
        normalise(probs, n);
    }
}

uint32_t st_sample_draw(const float *probs, uint32_t n, double u)
{
    double total = 0;
    for (uint32_t i = 0; i < n; i++) total += probs[i];
    double target = u * total, acc = 0;
    uint32_t last = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (probs[i] <= 0) continue;
        acc += probs[i];
        last = i;
        if (acc > target) return i;
    }
    return last; // rounding: the last token with mass
}

uint32_t st_spec_accept(const float *p, const float *q, const uint32_t *y, uint32_t K, uint32_t n,
                        uint64_t seed, uint64_t stream, float *resid, uint32_t *z)
{
    for (uint32_t i = 0; i < K; i++) {
        const float *pi = p + (size_t)i * n, *qi = q + (size_t)i * n;
        float py = pi[y[i]], qy = qi[y[i]];
        double u = st_rng_uniform(seed, stream, 2 * i);
        if (qy > 0 && u * qy < py) continue; // accepted with probability min(1, py/qy)
        double mass = 0;
        for (uint32_t j = 0; j < n; j++) {
            float r = pi[j] - qi[j];
            resid[j] = r > 0 ? r : 0;
            mass += resid[j];
        }
        // p == q exactly leaves no residual mass; p itself is then the law.
        *z = st_sample_draw(mass > 0 ? resid : pi, n, st_rng_uniform(seed, stream, 2 * i + 1));
        return i;
    }
    *z = st_sample_draw(p + (size_t)K * n, n, st_rng_uniform(seed, stream, 2 * K + 1));
    return K;
}

uint32_t st_spec_accept_greedy(const uint32_t *target_argmax, const uint32_t *y, uint32_t K, uint32_t *z)
{
    uint32_t m = 0;
    while (m < K && target_argmax[m] == y[m]) m++;
    *z = target_argmax[m];
    return m;
}
