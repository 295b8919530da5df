// Matrix products, scalar reference.  Row layouts go through the dot
// products; the interleaved layouts are read through st_kern_x8_unpack, so
// this file depends only on the layout's specification.  Each (row,
// activation) result is computed alone, in the same order for any mt.
#include "kernels/kern_internal.h"

void st_kern_mm_by_dot(st_kern_dot_fn dot, const struct st_kern_weight *w, const void *x,
                       size_t x_stride, int mt, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const uint8_t *)w->data + (size_t)r * w->stride;
        for (int m = 0; m < mt; m++)
            y[(size_t)m * y_stride + r] = dot(w->cols, row, (const uint8_t *)x + m * x_stride);
    }
}

#define MM_BY_DOT(name, fn)                                                                 \
    static void name(const struct st_kern_weight *w, const void *x, size_t xs, int mt,     \
                     float *y, size_t ys, int64_t r0, int64_t r1)                          \
    {                                                                                      \
        st_kern_mm_by_dot(fn, w, x, xs, mt, y, ys, r0, r1);                                \
    }

MM_BY_DOT(mm_f32, st_kern_dot_f32_ref)
MM_BY_DOT(mm_f16, st_kern_dot_f16_ref)
MM_BY_DOT(mm_q8_0, st_kern_dot_q8_0_ref)
MM_BY_DOT(mm_q4_0, st_kern_dot_q4_0_ref)
MM_BY_DOT(mm_q4_k, st_kern_dot_q4_k_ref)
MM_BY_DOT(mm_q6_k, st_kern_dot_q6_k_ref)
MM_BY_DOT(mm_bf16, st_kern_dot_bf16_ref)
MM_BY_DOT(mm_tq1_0, st_kern_dot_tq1_0_ref)
MM_BY_DOT(mm_tq2_0, st_kern_dot_tq2_0_ref)

// Interleaved formats: per block, isum exactly in integers, then
// acc += isum * (d_w * d_x), for each row of a group.  Q8_0-style
// activations for 32-column blocks, Q8_K for 256.
static void mm_x8(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y,
                  size_t ys, int64_t r0, int64_t r1)
{
    int64_t be = st_kern_x8_block_elems(w->type), nb = w->cols / be;
    size_t bs = st_kern_x8_bstep(w->type);
    int8_t q[ST_KERN_X8][256];
    for (int64_t g = r0 / ST_KERN_X8; g * ST_KERN_X8 < r1; g++) {
        const uint8_t *gq = st_kern_x8_group_q(w, g);
        const uint16_t *gd = st_kern_x8_group_d(w, g);
        float acc[ST_KERN_X8][ST_KERN_MT_X8] = {{0}};
        for (int64_t b = 0; b < nb; b++) {
            st_kern_x8_decode_block(w->type, gq + (size_t)b * bs, q);
            for (int m = 0; m < mt; m++) {
                const uint8_t *xm = (const uint8_t *)x + m * xs;
                const int8_t *xq;
                float dx;
                if (be == 32) {
                    const struct st_kern_q8_32 *blk = (const struct st_kern_q8_32 *)xm + b;
                    xq = blk->qs;
                    dx = blk->d;
                } else {
                    const struct st_block_q8_k *blk = (const struct st_block_q8_k *)xm + b;
                    xq = blk->qs;
                    dx = blk->d;
                }
                for (int l = 0; l < ST_KERN_X8; l++) {
                    int32_t is = 0;
                    for (int64_t c = 0; c < be; c++) is += q[l][c] * xq[c];
                    acc[l][m] += (float)is * (st_f16_to_f32(gd[b * ST_KERN_X8 + l]) * dx);
                }
            }
        }
        for (int l = 0; l < ST_KERN_X8; l++) {
            int64_t r = g * ST_KERN_X8 + l;
            if (r < r0 || r >= r1) continue;
            for (int m = 0; m < mt; m++) y[(size_t)m * ys + r] = acc[l][m];
        }
    }
}

void st_kern_mm_fill_scalar(struct st_kern_ops *ops)
{
    ops->mm[ST_TYPE_F32] = mm_f32;
    ops->mm[ST_TYPE_F16] = mm_f16;
    ops->mm[ST_TYPE_BF16] = mm_bf16;
    ops->mm[ST_TYPE_Q8_0] = mm_q8_0;
    ops->mm[ST_TYPE_Q4_0] = mm_q4_0;
    ops->mm[ST_TYPE_Q4_K] = mm_q4_k;
    ops->mm[ST_TYPE_Q6_K] = mm_q6_k;
    ops->mm[ST_TYPE_TQ1_0] = mm_tq1_0;
    ops->mm[ST_TYPE_TQ2_0] = mm_tq2_0;
    ops->mm[ST_KERN_RUN_Q8_0X8] = mm_x8;
    ops->mm[ST_KERN_RUN_Q4_0X8] = mm_x8;
    ops->mm[ST_KERN_RUN_TERNARY_MASK] = mm_x8;
    ops->mm[ST_KERN_RUN_TERNARY_CODE] = mm_x8;
}
