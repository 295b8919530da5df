// Dot products of GGUF-layout weight rows with activation rows, scalar
// reference.  Float weights meet float activations (summed in double);
// Q8_0 and Q4_0 meet Q8_0-style blocks; K-quants and ternary meet Q8_K
// blocks.  Quantised products sum each block exactly in integers and add
// isum * (d_w * d_x) in float, as llama.cpp does.
#include "kernels/kern_internal.h"

float st_kern_dot_f32_ref(int64_t n, const void *w, const void *x)
{
    const float *a = w, *b = x;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

float st_kern_dot_f16_ref(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)st_f16_to_f32(a[i]) * b[i];
    return (float)s;
}

float st_kern_dot_bf16_ref(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)st_bf16_to_f32(a[i]) * b[i];
    return (float)s;
}

float st_kern_dot_q8_0_ref(int64_t n, const void *w, const void *x)
{
    const struct st_block_q8_0 *a = w;
    const struct st_kern_q8_32 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t is = 0;
        for (int j = 0; j < 32; j++) is += a[i].qs[j] * b[i].qs[j];
        s += (float)is * (st_f16_to_f32(a[i].d) * b[i].d);
    }
    return s;
}

float st_kern_dot_q4_0_ref(int64_t n, const void *w, const void *x)
{
    const struct st_block_q4_0 *a = w;
    const struct st_kern_q8_32 *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int32_t is = 0;
        for (int j = 0; j < 16; j++)
            is += ((a[i].qs[j] & 15) - 8) * b[i].qs[j] + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        s += (float)is * (st_f16_to_f32(a[i].d) * b[i].d);
    }
    return s;
}

// Scale and min j (0..7) of a Q4_K block, 6 bits each.
static void q4_k_scale_min(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// sum_j (d*sc_s*q_j - dmin*m_s) * x_j = d*sum_s sc_s*(q.x)_s - dmin*sum_s m_s*xsum_s.
float st_kern_dot_q4_k_ref(int64_t n, const void *w, const void *x)
{
    const struct st_block_q4_k *a = w;
    const struct st_block_q8_k *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        int32_t isum = 0, imin = 0;
        for (int sub = 0; sub < 8; sub++) {
            int sc, m;
            q4_k_scale_min(sub, a[i].scales, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (sub / 2);
            const int8_t *y = b[i].qs + 32 * sub;
            int32_t t = 0;
            for (int l = 0; l < 32; l++) t += ((sub & 1) ? q[l] >> 4 : q[l] & 15) * y[l];
            isum += sc * t;
            imin += m * (b[i].bsums[2 * sub] + b[i].bsums[2 * sub + 1]);
        }
        s += b[i].d * (st_f16_to_f32(a[i].d) * (float)isum - st_f16_to_f32(a[i].dmin) * (float)imin);
    }
    return s;
}

// Quant (0..63, offset 32 removed below) of element e of a Q6_K block, and
// its group-of-16 scale index.
static int q6_k_quant(const struct st_block_q6_k *b, int e, int *is)
{
    int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
    int lo = quarter & 1 ? ql[l + 32] : ql[l];
    lo = quarter & 2 ? lo >> 4 : lo & 15;
    int hi = (qh[l] >> (2 * quarter)) & 3;
    *is = 8 * h + l / 16 + 2 * quarter;
    return lo | hi << 4;
}

float st_kern_dot_q6_k_ref(int64_t n, const void *w, const void *x)
{
    const struct st_block_q6_k *a = w;
    const struct st_block_q8_k *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        int32_t g[16] = {0};
        for (int e = 0; e < ST_QK_K; e++) {
            int is, q = q6_k_quant(&a[i], e, &is);
            g[is] += (q - 32) * b[i].qs[e];
        }
        int32_t isum = 0;
        for (int k = 0; k < 16; k++) isum += a[i].scales[k] * g[k];
        s += (float)isum * (st_f16_to_f32(a[i].d) * b[i].d);
    }
    return s;
}

float st_kern_dot_tq1_0_ref(int64_t n, const void *w, const void *x)
{
    const struct st_block_tq1_0 *a = w;
    const struct st_block_q8_k *b = x;
    float s = 0.0f;
    int8_t t[ST_QK_K];
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        st_kern_tq1_0_trits(&a[i], t);
        int32_t is = 0;
        for (int j = 0; j < ST_QK_K; j++) is += t[j] * b[i].qs[j];
        s += (float)is * (st_f16_to_f32(a[i].d) * b[i].d);
    }
    return s;
}

// Code 3 (not produced by any quantiser) counts as +2, as the dequantiser
// reads it.
float st_kern_dot_tq2_0_ref(int64_t n, const void *w, const void *x)
{
    const struct st_block_tq2_0 *a = w;
    const struct st_block_q8_k *b = x;
    float s = 0.0f;
    int8_t t[ST_QK_K];
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        st_kern_tq2_0_trits(&a[i], t);
        int32_t is = 0;
        for (int j = 0; j < ST_QK_K; j++) is += t[j] * b[i].qs[j];
        s += (float)is * (st_f16_to_f32(a[i].d) * b[i].d);
    }
    return s;
}

void st_kern_dot_fill_scalar(struct st_kern_ops *ops)
{
    ops->dot[ST_TYPE_F32] = st_kern_dot_f32_ref;
    ops->dot[ST_TYPE_F16] = st_kern_dot_f16_ref;
    ops->dot[ST_TYPE_BF16] = st_kern_dot_bf16_ref;
    ops->dot[ST_TYPE_Q8_0] = st_kern_dot_q8_0_ref;
    ops->dot[ST_TYPE_Q4_0] = st_kern_dot_q4_0_ref;
    ops->dot[ST_TYPE_Q4_K] = st_kern_dot_q4_k_ref;
    ops->dot[ST_TYPE_Q6_K] = st_kern_dot_q6_k_ref;
    ops->dot[ST_TYPE_TQ1_0] = st_kern_dot_tq1_0_ref;
    ops->dot[ST_TYPE_TQ2_0] = st_kern_dot_tq2_0_ref;
}
