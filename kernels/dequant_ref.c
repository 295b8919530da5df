// Scalar dequantisers: the specification of every block format.  Layouts are
// ggml's; each loop writes the elements in their natural order.
#include "kernels/types.h"

void st_dequant_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void st_dequant_f16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = st_f16_to_f32(h[i]);
}

void st_dequant_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = st_bf16_to_f32(h[i]);
}

void st_dequant_q8_0(const void *src, float *dst, int64_t n)
{
    const struct st_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / ST_QK8_0; i++) {
        float d = st_f16_to_f32(b[i].d);
        for (int j = 0; j < ST_QK8_0; j++) dst[i * ST_QK8_0 + j] = b[i].qs[j] * d;
    }
}

void st_dequant_q4_0(const void *src, float *dst, int64_t n)
{
    const struct st_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / ST_QK4_0; i++) {
        float d = st_f16_to_f32(b[i].d);
        float *y = dst + i * ST_QK4_0;
        for (int j = 0; j < ST_QK4_0 / 2; j++) {
            y[j] = ((b[i].qs[j] & 0x0f) - 8) * d;
            y[j + ST_QK4_0 / 2] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

// Scale and min number j (0..7) of a Q4_K block: 6 bits each, packed in 12 bytes.
static void q4_k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void st_dequant_q4_k(const void *src, float *dst, int64_t n)
{
    const struct st_block_q4_k *b = src;
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        float d = st_f16_to_f32(b[i].d), dmin = st_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        float *y = dst + i * ST_QK_K;
        for (int j = 0; j < ST_QK_K; j += 64) {
            uint8_t sc, m;
            q4_k_scale_min(j / 32, b[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            q4_k_scale_min(j / 32 + 1, b[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
        }
    }
}

void st_dequant_q6_k(const void *src, float *dst, int64_t n)
{
    const struct st_block_q6_k *b = src;
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        float d = st_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        float *y = dst + i * ST_QK_K;
        for (int half = 0; half < 2; half++) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int)((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = (int)((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

// TQ1_0 packs 5 trits per byte as a fixed-point fraction: multiplying by 3^k
// (mod 256) brings trit k to the top, and (q * 3) >> 8 reads it.
static int tq1_trit(uint8_t byte, int k)
{
    static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};
    uint8_t q = (uint8_t)(byte * pow3[k]);
    return (int)(((uint16_t)q * 3) >> 8) - 1;
}

void st_dequant_tq1_0(const void *src, float *dst, int64_t n)
{
    const struct st_block_tq1_0 *b = src;
    const int nqs = (int)sizeof b->qs; // 48: one run of 32 bytes, one of 16
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        float d = st_f16_to_f32(b[i].d);
        float *y = dst + i * ST_QK_K;
        int j0 = nqs - nqs % 32;
        for (int j = 0; j < j0; j += 32)
            for (int k = 0; k < 5; k++)
                for (int m = 0; m < 32; m++) *y++ = tq1_trit(b[i].qs[j + m], k) * d;
        for (int j = j0; j < nqs; j += 16)
            for (int k = 0; k < 5; k++)
                for (int m = 0; m < 16; m++) *y++ = tq1_trit(b[i].qs[j + m], k) * d;
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < (int)sizeof b->qh; j++) *y++ = tq1_trit(b[i].qh[j], k) * d;
    }
}

void st_dequant_tq2_0(const void *src, float *dst, int64_t n)
{
    const struct st_block_tq2_0 *b = src;
    for (int64_t i = 0; i < n / ST_QK_K; i++) {
        float d = st_f16_to_f32(b[i].d);
        float *y = dst + i * ST_QK_K;
        for (int j = 0; j < (int)sizeof b->qs; j += 32)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++)
                    *y++ = ((int)((b[i].qs[j + m] >> (l * 2)) & 3) - 1) * d;
    }
}
