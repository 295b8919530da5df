// Private to kernels/: the row-group loop shared by the SIMD kernels of the
// interleaved run formats.  The including file defines, before including
// this header,
//   ST_INLINE void x8_block(const uint32_t type, const uint8_t *q,
//                           const uint16_t *gd, int64_t b, const uint8_t *x,
//                           size_t xs, const int MT, __m256 *acc);
// which adds block b of one group (quants q, scales gd) times MT activation
// rows (x + m * xs) to acc[m] (lane l = row l of the group).  A file that
// defines ST_X8_BLOCK_GROUPS also defines x8_has_block_groups(type, MT) and
// x8_block_groups(type, q[G], gd[G], b, x, xs, MT, G, acc[G]): the
// activation rows against G groups at once, sharing the activation loads.
#ifndef ST_KERNELS_X8_DRIVER_H
#define ST_KERNELS_X8_DRIVER_H

#include "kernels/x8_prefetch.h"

// G groups from group g side by side: G streams of weights in flight keep
// more memory requests outstanding than one (M = 1 is memory-bound).  Each
// group's rows are computed exactly as alone.
ST_INLINE void x8_run_groups(const uint32_t type, const struct st_kern_weight *w, const uint8_t *x,
                             size_t xs, const int MT, const int G, float *y, size_t ys, int64_t g,
                             int64_t r0, int64_t r1)
{
    const size_t bs = st_kern_x8_bstep(type);
    const int64_t nb = w->cols / st_kern_x8_block_elems(type), u = st_kern_x8_unit(type);
    const uint8_t *gq[4], *pq[4]; // pq: where a group asks for its unit's block (NULL: its pair does)
    const uint16_t *gd[4];
    __m256 acc[4][ST_KERN_MT_X8];
#pragma GCC unroll 4
    for (int i = 0; i < G; i++) {
        gq[i] = st_kern_x8_group_q(w, g + i);
        gd[i] = st_kern_x8_group_d(w, g + i);
        pq[i] = (g + i) % u == 0 || i == 0 ? gq[i] - 32 * ((g + i) % u) : NULL;
#pragma GCC unroll 8
        for (int m = 0; m < MT; m++) acc[i][m] = _mm256_setzero_ps();
    }
    // Software prefetch of the weights ahead of the hardware prefetcher's
    // reach, up to the end of this call's rows.
    const struct x8_prefetch_plan pf = x8_prefetch_plan(type, MT, (size_t)G * w->stride);
    const uint8_t *end = st_kern_x8_end(w, r1);
#ifdef ST_X8_BLOCK_GROUPS
    if (G > 1 && x8_has_block_groups(type, MT)) {
        for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
            for (int i = 0; i < G; i++)
                if (pq[i]) x8_prefetch(pq[i] + (size_t)b * bs, bs, pf, end);
            x8_block_groups(type, gq, gd, b, x, xs, MT, G, acc);
        }
        for (int i = 0; i < G; i++) st_x8_store(acc[i], MT, y, ys, g + i, r0, r1);
        return;
    }
#endif
    for (int64_t b = 0; b < nb; b++)
#pragma GCC unroll 4
        for (int i = 0; i < G; i++) {
            if (pq[i]) x8_prefetch(pq[i] + (size_t)b * bs, bs, pf, end);
            x8_block(type, gq[i] + b * bs, gd[i], b, x, xs, MT, acc[i]);
        }
    for (int i = 0; i < G; i++) st_x8_store(acc[i], MT, y, ys, g + i, r0, r1);
}

// Up to how many activation rows Q8_0 runs 4 groups side by side (4 x MT
// sums live): an including file whose vectors are the 32 of AVX-512VL sets
// more than AVX2's 16 allow.
#ifndef ST_X8_FOUR_GROUPS_MAX_MT
#define ST_X8_FOUR_GROUPS_MAX_MT 1
#endif
// The number of activation rows for which Q8_0 runs 3 groups side by side
// (0: none), where 4 would not fit in the registers.
#ifndef ST_X8_THREE_GROUPS_MT
#define ST_X8_THREE_GROUPS_MT 0
#endif

ST_INLINE void x8_groups(const uint32_t type, const struct st_kern_weight *w, const uint8_t *x,
                         size_t xs, const int MT, float *y, size_t ys, int64_t r0, int64_t r1)
{
    int64_t g = r0 / ST_KERN_X8, g1 = (r1 + ST_KERN_X8 - 1) / ST_KERN_X8;
    // The mask format's one-row loop has more live vectors per group: with
    // 2 groups side by side it ran 17% faster than with 4 (alternated A/B,
    // 2048x8192, 2 threads); the others measured best at 4.
    if (MT == 1 && type == ST_KERN_RUN_TERNARY_MASK)
        for (; g + 2 <= g1; g += 2) x8_run_groups(type, w, x, xs, MT, 2, y, ys, g, r0, r1);
    if (MT == 1 || (MT <= ST_X8_FOUR_GROUPS_MAX_MT && type == ST_KERN_RUN_Q8_0X8))
        for (; g + 4 <= g1; g += 4) x8_run_groups(type, w, x, xs, MT, 4, y, ys, g, r0, r1);
    if (MT == ST_X8_THREE_GROUPS_MT && type == ST_KERN_RUN_Q8_0X8)
        for (; g + 3 <= g1; g += 3) x8_run_groups(type, w, x, xs, MT, 3, y, ys, g, r0, r1);
    if (MT == 2)
        for (; g + 2 <= g1; g += 2) x8_run_groups(type, w, x, xs, MT, 2, y, ys, g, r0, r1);
    for (; g < g1; g++) x8_run_groups(type, w, x, xs, MT, 1, y, ys, g, r0, r1);
}

// The product of mt <= ST_KERN_MT_X8 activation rows with rows [r0, r1):
// one pass over the weights for every mt (a second pass for rows 5-8 cost
// M = 8 a third more time than one pass, memory-bound while the first ran).
ST_INLINE void x8_mm(const uint32_t type, const struct st_kern_weight *w, const void *x, size_t xs,
                     int mt, float *y, size_t ys, int64_t r0, int64_t r1)
{
    switch (mt) {
    case 1: x8_groups(type, w, x, xs, 1, y, ys, r0, r1); break;
    case 2: x8_groups(type, w, x, xs, 2, y, ys, r0, r1); break;
    case 3: x8_groups(type, w, x, xs, 3, y, ys, r0, r1); break;
    case 4: x8_groups(type, w, x, xs, 4, y, ys, r0, r1); break;
    case 5: x8_groups(type, w, x, xs, 5, y, ys, r0, r1); break;
    case 6: x8_groups(type, w, x, xs, 6, y, ys, r0, r1); break;
    case 7: x8_groups(type, w, x, xs, 7, y, ys, r0, r1); break;
    default: x8_groups(type, w, x, xs, 8, y, ys, r0, r1); break;
    }
}

// Defines a table entry for one format.
#define ST_X8_MM(name, type)                                                                \
    static void name(const struct st_kern_weight *w, const void *x, size_t xs, int mt,     \
                     float *y, size_t ys, int64_t r0, int64_t r1)                          \
    {                                                                                      \
        x8_mm(type, w, x, xs, mt, y, ys, r0, r1);                                          \
    }

#endif
