// Matrix product driver: up to ops->mm_rows[] rows in one call, more in
// tiles of ops->mm_tile[] rows, walking the weights in chunks small enough
// to stay in L2 while every tile passes over them (prefill).
// The kernels compute each (row, activation) pair the same way whatever the
// tile, so a row's result does not depend on M.
#include "kernels/kern_internal.h"

// Bytes of weights per chunk: a quarter of a 1 MiB L2.
#define CHUNK_BYTES (256 * 1024)

void st_kern_matmul_ops(const struct st_kern_ops *ops, const struct st_kern_weight *w,
                        const void *x, int M, float *y, int64_t row_begin, int64_t row_end)
{
    ST_ASSERT(w->type < ST_KERN_RUN_MAX && ops->mm[w->type] != NULL);
    ST_ASSERT(0 <= row_begin && row_begin <= row_end && row_end <= w->rows && M >= 0);
    st_kern_mm_fn fn = ops->mm[w->type];
    size_t xs = st_kern_act_row_bytes(w->type, w->cols), ys = (size_t)w->rows;
    if (M <= ops->mm_rows[w->type]) {
        if (M > 0 && row_begin < row_end) fn(w, x, xs, M, y, ys, row_begin, row_end);
        return;
    }
    const int tile = ops->mm_tile[w->type] ? ops->mm_tile[w->type] : ops->mm_rows[w->type];
    int64_t row_bytes = (int64_t)(w->stride / (size_t)w->group) + 1;
    // Whole units of the run format (Q8_0's pairs of groups): a chunk
    // ending inside a pair sent both halves to the kernels' one-group path.
    int64_t unit = st_kern_run_row_align(w->type);
    if (unit < w->group) unit = w->group;
    int64_t chunk = CHUNK_BYTES / row_bytes / unit * unit;
    if (chunk < unit) chunk = unit;
    for (int64_t c0 = row_begin; c0 < row_end;) {
        int64_t c1 = (c0 / chunk + 1) * chunk;
        if (c1 > row_end) c1 = row_end;
        for (int m0 = 0; m0 < M; m0 += tile) {
            int mt = M - m0 < tile ? M - m0 : tile;
            fn(w, (const uint8_t *)x + (size_t)m0 * xs, xs, mt, y + (size_t)m0 * ys, ys, c0, c1);
        }
        c0 = c1;
    }
}

void st_kern_matmul(const struct st_kern_weight *w, const void *x, int M, float *y,
                    int64_t row_begin, int64_t row_end)
{
    st_kern_matmul_ops(st_kern_ops_active(), w, x, M, y, row_begin, row_end);
}
