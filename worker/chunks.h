// How the rows of one op's matrix products are cut into chunks that the
// ranks claim one by one from the phase's work counter.  Every rank walks
// the same schedule, so a claimed index means the same rows everywhere.
//
// Decode and verify (up to 16 activation rows) stream their weights: a
// chunk pays a fixed cost (its streams ramping up, the prefetch stopping at
// its end), but the rank that takes the last chunk keeps the others waiting
// at the barrier.  So the chunks shrink as the op runs (guided
// self-scheduling): each is the rows still to do over twice the ranks, not
// less than 512 KiB of weights (CHUNK_MIN_BYTES, chunks.c), so the early
// chunks are large and the last ones small.  Prefill's products, bound by
// arithmetic, take equal chunks, 8 a rank.  Against equal chunks of at
// least 2 MiB (Zen 5, 2 ranks, the two rules alternated step by step,
// medians of 140-1100 pairs): l3b verifies of 5 and 9 rows took
// 0.94-0.96x the time, l1b draft steps 0.95-0.99x, l3b decoding
// 0.97-0.98x.  A tail of 256 KiB or 1 MiB did the same as 512 KiB; with 2
// ranks, chunks of a half or an eighth of the rest did worse than a quarter.
#ifndef ST_WORKER_CHUNKS_H
#define ST_WORKER_CHUNKS_H

#include <stdint.h>

#include "kernels/kernels.h"

#define ST_CHUNKS_MAX_W 3 // matrices one op walks (q, k and v)

struct st_chunks {
    // The schedule: matrices walked in order, rows in whole pairs of q8_0x8
    // groups (16 rows, kernels.h).
    int n_w;
    int64_t rows[ST_CHUNKS_MAX_W];     // rows of each matrix
    int64_t min_rows[ST_CHUNKS_MAX_W]; // the smallest chunk of each
    int64_t fixed[ST_CHUNKS_MAX_W];    // equal chunks (prefill); 0: guided
    uint32_t n_ranks;
    uint64_t count; // chunks in all
    // The walk: the chunk at `index`, rows [r0, r1) of matrix w.
    uint64_t index;
    int w;
    int64_t r0, r1;
    int64_t left; // rows of every matrix from r0 on
};

// Plans the chunks of M activation rows times n_w matrices that share a
// chunk's rows `share` times each (gate and up: 2), and counts them.
void st_chunks_plan(struct st_chunks *c, const struct st_kern_weight *const *ws, int n_w, int share, uint32_t M,
                    uint32_t n_ranks);

// Moves the walk to chunk `index` (not before the current one).
void st_chunks_seek(struct st_chunks *c, uint64_t index);

#endif
