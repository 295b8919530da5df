// Private to kernels/: what the AMX kernels share -- the tile configuration
// they load, and the hand-off of the rows they leave to a VNNI kernel.
#ifndef ST_KERNELS_AMX_TILES_H
#define ST_KERNELS_AMX_TILES_H

#include <stdint.h>
#include <string.h>

#include "kernels/simd_x86.h"

struct st_amx_tile_config {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// Configures tiles 0..n-1 (palette 1): tile t holds rows[t] rows of
// colsb[t] bytes.  The intrinsics want literal tile numbers, so each
// kernel names its tiles' roles in a comment of its own.
ST_INLINE void st_amx_tiles_config(const uint8_t *rows, const uint16_t *colsb, int n)
{
    _Alignas(64) struct st_amx_tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < n; t++) {
        c.rows[t] = rows[t];
        c.colsb[t] = colsb[t];
    }
    _tile_loadconfig(&c);
}

// Rows [r0, r1) against mt activation rows by the VNNI kernel fn, which
// takes up to ST_KERN_MT_X8 activation rows a call.
ST_INLINE void st_amx_vnni_rows(st_kern_mm_fn fn, const struct st_kern_weight *w, const void *x, size_t xs, int mt,
                                float *y, size_t ys, int64_t r0, int64_t r1)
{
    for (int m0 = 0; m0 < mt; m0 += ST_KERN_MT_X8)
        fn(w, (const uint8_t *)x + (size_t)m0 * xs, xs, mt - m0 < ST_KERN_MT_X8 ? mt - m0 : ST_KERN_MT_X8,
           y + (size_t)m0 * ys, ys, r0, r1);
}

#endif
