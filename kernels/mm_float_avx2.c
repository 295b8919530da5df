// Matrix products of float weights (F32, F16, BF16 rows) with float
// activations, AVX2+FMA.  A tile takes R rows and MT activation rows; each
// weight vector is converted once and used for all MT rows.  Every (row,
// activation) pair has its own accumulator, walked over the columns in the
// same order whatever R and MT, so results do not depend on M.
#if defined(__x86_64__)
#include <math.h>

#include "kernels/simd_x86.h"

ST_INLINE __m256 load8(uint32_t type, const uint8_t *row, int64_t c)
{
    if (type == ST_TYPE_F32) return _mm256_loadu_ps((const float *)row + c);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + c));
    if (type == ST_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

ST_INLINE float load1(uint32_t type, const uint8_t *row, int64_t c)
{
    if (type == ST_TYPE_F32) return ((const float *)row)[c];
    uint16_t h = ((const uint16_t *)row)[c];
    return type == ST_TYPE_F16 ? st_f16_to_f32_hw(h) : st_bf16_to_f32(h);
}

ST_INLINE void tile(const uint32_t type, const uint8_t *w, size_t ws, const int R, const float *x,
                    size_t xs, const int MT, int64_t n, float *y, size_t ys)
{
    __m256 acc[4][ST_KERN_MT];
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 16
        for (int m = 0; m < MT; m++) acc[r][m] = _mm256_setzero_ps();
    int64_t n8 = n & ~(int64_t)7;
    for (int64_t c = 0; c < n8; c += 8) {
        __m256 xv[ST_KERN_MT];
        #pragma GCC unroll 16
        for (int m = 0; m < MT; m++) xv[m] = _mm256_loadu_ps(x + m * xs + c);
        #pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            __m256 wv = load8(type, w + r * ws, c);
            #pragma GCC unroll 16
            for (int m = 0; m < MT; m++) acc[r][m] = _mm256_fmadd_ps(wv, xv[m], acc[r][m]);
        }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 16
        for (int m = 0; m < MT; m++) {
            float s = st_hsum256(acc[r][m]);
            for (int64_t c = n8; c < n; c++) s = fmaf(load1(type, w + r * ws, c), x[m * xs + c], s);
            y[m * ys + r] = s;
        }
}

// Rows [r0, r1) with R rows per tile, then single rows.
ST_INLINE void rows(const uint32_t type, const struct st_kern_weight *w, const float *x,
                    size_t xs, const int MT, const int R, float *y, size_t ys, int64_t r0, int64_t r1)
{
    const uint8_t *base = w->data;
    int64_t r = r0;
    for (; r + R <= r1; r += R) tile(type, base + r * w->stride, w->stride, R, x, xs, MT, w->cols, y + r, ys);
    for (; r < r1; r++) tile(type, base + r * w->stride, w->stride, 1, x, xs, MT, w->cols, y + r, ys);
}

ST_INLINE void mm_float(const uint32_t type, const struct st_kern_weight *w, const void *xv,
                        size_t x_stride, int mt, float *y, size_t ys, int64_t r0, int64_t r1)
{
    const float *x = xv;
    size_t xs = x_stride / sizeof(float);
    switch (mt) {
    case 1: rows(type, w, x, xs, 1, 4, y, ys, r0, r1); break;
    case 2: rows(type, w, x, xs, 2, 4, y, ys, r0, r1); break;
    case 3: rows(type, w, x, xs, 3, 2, y, ys, r0, r1); break;
    default: rows(type, w, x, xs, 4, 2, y, ys, r0, r1); break;
    }
}

static void mm_f32(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                   size_t ys, int64_t r0, int64_t r1)
{
    mm_float(ST_TYPE_F32, w, x, xs, mt, y, ys, r0, r1);
}

static void mm_f16(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                   size_t ys, int64_t r0, int64_t r1)
{
    mm_float(ST_TYPE_F16, w, x, xs, mt, y, ys, r0, r1);
}

static void mm_bf16(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                    size_t ys, int64_t r0, int64_t r1)
{
    mm_float(ST_TYPE_BF16, w, x, xs, mt, y, ys, r0, r1);
}

void st_kern_mm_float_fill_avx2(struct st_kern_ops *ops)
{
    ops->mm[ST_TYPE_F32] = mm_f32;
    ops->mm[ST_TYPE_F16] = mm_f16;
    ops->mm[ST_TYPE_BF16] = mm_bf16;
}
#endif
