// `subternary bench attn --threads N`: one attention call per layer shared by
// N pinned threads the way a worker set's ranks share it, split by KV heads
// or by segments of positions (kernels.h, st_kern_attention_items).
#ifndef ST_CLI_BENCH_ATTN_RANKS_H
#define ST_CLI_BENCH_ATTN_RANKS_H

#include <stdint.h>

#include "kernels/kernels.h"

// Seconds a layer, best of `trials` passes over `layers` layers (K and V of
// layer l at k[l], v[l]; the rest of the shape from *shape), per split:
// best[0] by KV heads, best[1] by segments (-1 where the context has only
// one).  The two alternate within each trial.  Returns 0, or -1 (a message
// on stderr).
int st_bench_attn_ranks(uint16_t *const *k, uint16_t *const *v, int layers, const struct st_kern_attn *shape,
                        int threads, int trials, double best[2]);

#endif
