// Measured acceptance of speculative rounds, for adaptive K: a per-token
// estimate, and per draft depth i (1-based) decayed counts of rounds that
// reached depth i (the first i-1 drafts accepted, K >= i) and of those that
// also accepted draft i.  Acceptance is not independent from token to token
// (easy stretches accept in runs), so the chance of draft i given its
// predecessors is measured per depth rather than as one rate.  A session
// keeps one, and so does its node, over all its sessions' rounds: a new
// session starts from the node's.
#ifndef ST_COORDINATOR_ACCEPT_STATS_H
#define ST_COORDINATOR_ACCEPT_STATS_H

#include <stdint.h>

#define ST_ACCEPT_MAX_K 32 // depths with counts of their own: 1..32

struct st_accept_stats {
    // Per-token acceptance: a moving average of each round's share of
    // accepted drafts among those examined; 0 until a round was added.  It
    // reads low (0.59 for drafts accepted at 0.8 each: a long round counts
    // as one), and so keeps adaptive K short where depths are rarely
    // reached.  The pooled rate (accepted over examined, all rounds) in its
    // place chose longer K and was slower: l3b + l1b Q4_0, adaptive 1.65x
    // and 1.72x against 1.86x and 1.84x.
    double ema;
    double tried[ST_ACCEPT_MAX_K + 1], passed[ST_ACCEPT_MAX_K + 1];
};

// Adds a round of K drafts of which the first m were accepted.
void st_accept_add(struct st_accept_stats *a, uint32_t K, uint32_t m);

// A fresh estimate from `from`, its counts scaled to weigh at most
// max_rounds rounds; fallback is the per-token estimate when `from` has none.
void st_accept_start(struct st_accept_stats *a, const struct st_accept_stats *from, double max_rounds,
                     double fallback);

// Expected tokens of a round with K drafts: the bonus token plus the chance
// that drafts 1..i were all accepted, for each i <= K.
double st_accept_expected_tokens(const struct st_accept_stats *a, uint32_t K);

#endif
