// Private to kernels/: how far ahead the interleaved run-format products
// ask for their weights (x8_driver.h's loops and the AMX Q8_0 kernel).
#ifndef ST_KERNELS_X8_PREFETCH_H
#define ST_KERNELS_X8_PREFETCH_H

// How far ahead of the block being computed the weights are requested, and
// into which cache.
struct x8_prefetch_plan {
    size_t ahead; // bytes; 0: none
    bool l2;      // into L2 only (_MM_HINT_T1), else into L1 (_MM_HINT_T0)
};

// Distances measured by alternating candidates over weights 8x the LLC,
// 2 threads, median of 24-30 pairs (this VM, Zen 3):
// - Q8_0, one row: no prefetch; any distance cost 2-8%.  On the later
//   Intel host (2 MiB L2, 105 MiB L3) the opposite: the same block of the
//   next groups (side_bytes ahead) into L1, as for several rows, took one
//   row of 8192x3072 and 3072x8192 from 1.04-1.21 to 0.83-1.07 ms (3
//   alternations, 2 threads), 80% -> 100% of the read probe, and l3b's
//   decoding from 6.0-6.7 to 7.1-8.7 tokens/s.  Kept where the AVX2 level
//   runs; that host's AMX level now asks nearer (x8_prefetch_plan_near).
//   Zen 5's 1-4-row pairs ask for none (mm_vnni_avx512.c's mm_q8_0x8).
// - Q4_0, one row: 64 KiB into L2, 8192x2048 12-17% faster (32 KiB: 12%,
//   128 KiB and 16 KiB worse); neutral at 2048x8192.
// - Q8_0 and Q4_0, 2-8 rows (Zen 3): 32 KiB into L2, Q8_0 6-11% and Q4_0 (M=4)
//   23% faster than the 4 KiB into L1 used before (64 KiB the same).
//   With several rows the core computes long enough per byte that the
//   hardware prefetcher's reach no longer covers memory latency.
// - Ternary: 32 KiB (5-35% over 4-8 KiB); the code format's one row 5-9%
//   faster into L2 than into L1 (2048x8192 and 8192x2048; 64 KiB the same),
//   its 4 rows 5% slower, the mask format the same either way.
// - Q8_0 and Q4_0, 2-8 rows (Zen 5, the same shapes, 2 threads, 3-5
//   alternations): 32 KiB past a block is inside the groups this call
//   streams side by side whenever they span more, so the request is for
//   a line on its way already.  The same block of the next groups
//   (side_bytes ahead, at least 32 KiB), into L1: Q8_0 M=4 8192x3072
//   43.7-45.6 -> 48.0-51.0 GB/s, 3072x8192 41.7-44.5 -> 50.8-54.2; M=2
//   20-40% faster, M=5 10-25%, M=8 5-15%; Q4_0 M=2 15-60%, M=5 and 8 the
//   same.  Not measured on Zen 3.
// - Q4_0, one row, rows longer than the distance (Zen 5): 64 KiB past a
//   block of one of the groups side by side is in a group this call is
//   streaming already; the same block of the next groups (side_bytes ahead)
//   took l1b's FFN down 3.6-3.8 -> 3.1-3.3 ms a token, the whole draft
//   token 3% less (bench profile, 6 alternations).
// - Q4_0, one row, AVX-512 (Zen 5): the same block of the next groups into
//   L1, as for several rows, instead of into L2: l1b decoding alone
//   0.88-0.96x the step time (steps alternated one by one within a
//   generation, medians of 400-600 pairs, 9 generations), its draft steps
//   beside l3b 0.90x.  The same distance into L2: 0.98x; 128 / 192 KiB into
//   L2: 1.03 / 1.07x; no software prefetch 1.22x; 2 groups side by side
//   1.16x; asking for the scales too: the same.  A 512-bit loop, two groups
//   to a vector, made no difference (1.01-1.03x).  A file sets
//   ST_X8_Q4_ONE_ROW_L1 before including this header to take the rule; the
//   AVX2 level (Zen 3's measurement above) does not.
ST_INLINE struct x8_prefetch_plan x8_prefetch_plan(const uint32_t type, const int MT, size_t side_bytes)
{
#ifdef ST_X8_Q4_ONE_ROW_L1
    const bool q4_l1 = true;
#else
    const bool q4_l1 = false;
#endif
    if (type == ST_KERN_RUN_TERNARY_CODE) return (struct x8_prefetch_plan){32768, MT == 1};
    if (type == ST_KERN_RUN_TERNARY_MASK) return (struct x8_prefetch_plan){32768, false};
    if (MT > 1 || type == ST_KERN_RUN_Q8_0X8 || (q4_l1 && type == ST_KERN_RUN_Q4_0X8))
        return (struct x8_prefetch_plan){side_bytes > 32768 ? side_bytes : 32768, false};
    if (type == ST_KERN_RUN_Q4_0X8) return (struct x8_prefetch_plan){side_bytes > 65536 ? side_bytes : 65536, true};
    return (struct x8_prefetch_plan){0, false};
}

// The AMX host's Q8_0 pairs (the VNNI kernel's 4 pairs side by side at 1-6
// rows, the AMX tiles at 7-16): the block 3 blocks ahead in the same
// stream, into L1.  The next groups' block (the plan above) lands in L1 a
// whole row of pairs early and is evicted to L2 before its turn, so the
// tile loads and the several-row loops waited on L2; the hardware's
// streams reach far enough ahead by themselves.  bench kernels, 2
// threads, 3 alternations (ms, old -> new): 8192x3072 / 3072x8192 one row
// 1.01-1.02 / 1.10-1.17 -> 0.92-1.03 / 0.93-0.99, 2-6 rows 1.01-1.13 /
// 1.10-1.25 -> 0.86-1.03 / 0.93-1.05, 7-9 rows 1.12-1.23 / 1.29-1.42 ->
// 1.07-1.17 / 1.05-1.19.  2-5 blocks ahead measured about the same as 3,
// 8 or more slower; the next groups' block asked for beside the near one
// sat between the two.  l3b decoding alone 8.35-8.42 -> 9.35-9.48
// tokens/s (2 alternations).  The draft formats (Q4_0, ternary code) were
// slower with it at 8192x2048 (0.18 -> 0.22 ms one row) and keep the plan
// above.
#define X8_Q8_NEAR_BLOCKS 3
ST_INLINE struct x8_prefetch_plan x8_prefetch_plan_near(size_t block_bytes)
{
    return (struct x8_prefetch_plan){X8_Q8_NEAR_BLOCKS * block_bytes, false};
}

// Asks for the qb bytes of a block `pf.ahead` bytes past blk, if that is
// still before `end` (the end of the caller's rows: rows past it are
// another rank's chunk more often than not).
ST_INLINE void x8_prefetch(const uint8_t *blk, size_t qb, struct x8_prefetch_plan pf, const uint8_t *end)
{
    if (!pf.ahead || (size_t)(end - blk) <= pf.ahead) return;
    for (size_t o = 0; o < qb; o += 64) {
        if (pf.l2) _mm_prefetch((const char *)(blk + pf.ahead + o), _MM_HINT_T1);
        else _mm_prefetch((const char *)(blk + pf.ahead + o), _MM_HINT_T0);
    }
}

#endif
