// How the ranks of a worker set share one attention call: by KV-head ranges,
// or over a long context by (segment, head range) items and a fold of the
// partials (kernels.h, st_kern_attention_part).  worker/forward.c runs it
// between the set's barriers; `bench attn --threads` runs the same claims.
#ifndef ST_WORKER_ATTN_SPLIT_H
#define ST_WORKER_ATTN_SPLIT_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "shm/sync.h"

// KV heads a rank claims at a time: one attention call then reads each
// cache row once for all the heads of its range.
static inline uint64_t st_attn_head_chunk(int n_kv_heads, uint32_t n_ranks)
{
    return (uint64_t)n_kv_heads / n_ranks > 1 ? (uint64_t)n_kv_heads / n_ranks : 1;
}

// This rank's items of a split by segments, claimed from wc, into part
// (n_seg segments a pair; items of segments a leaves out are claimed and
// do nothing).  The keys of a's rows must be stored before.
void st_attn_split_parts(const struct st_kern_attn *a, uint32_t n_ranks, struct st_work_counter *wc, float *part,
                         int n_seg);
// After every rank's parts (a barrier): this rank's share of the pairs,
// claimed from wc, folded from part into a->out.
void st_attn_split_merge(const struct st_kern_attn *a, uint32_t n_ranks, struct st_work_counter *wc,
                         const float *part, int n_seg);

#endif
