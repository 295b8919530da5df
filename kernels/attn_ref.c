// Attention, scalar reference: for each query row and head, scores against
// every position up to the row's own (but the segments a->skip_* leave
// out), softmax in F32, weighted sum of V.
#include <math.h>

#include "kernels/kern_internal.h"

void st_kern_attention_ref(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end,
                           float *scratch)
{
    int group = a->n_heads / a->n_kv_heads, hd = a->head_dim;
    size_t pos_stride = (size_t)a->n_kv_heads * hd; // elements between positions
    for (int m = 0; m < a->M; m++) {
        int P = a->pos[m];
        for (int h = kv_head_begin * group; h < kv_head_end * group; h++) {
            int kvh = h / group;
            const float *q = a->q + ((size_t)m * a->n_heads + h) * hd;
            float *out = a->out + ((size_t)m * a->n_heads + h) * hd;
            float mx = -INFINITY;
            for (int j = 0; j <= P; j++) {
                if (ST_KERN_ATTN_SKIPS(a, j / ST_KERN_ATTN_SEG)) continue;
                const uint16_t *k = a->k + (size_t)j * pos_stride + (size_t)kvh * hd;
                float s = 0.0f;
                for (int d = 0; d < hd; d++) s += q[d] * st_f16_to_f32(k[d]);
                scratch[j] = s * a->scale;
                mx = fmaxf(mx, scratch[j]);
            }
            float sum = 0.0f;
            for (int j = 0; j <= P; j++) {
                if (ST_KERN_ATTN_SKIPS(a, j / ST_KERN_ATTN_SEG)) continue;
                scratch[j] = expf(scratch[j] - mx);
                sum += scratch[j];
            }
            for (int d = 0; d < hd; d++) out[d] = 0.0f;
            for (int j = 0; j <= P; j++) {
                if (ST_KERN_ATTN_SKIPS(a, j / ST_KERN_ATTN_SEG)) continue;
                const uint16_t *v = a->v + (size_t)j * pos_stride + (size_t)kvh * hd;
                for (int d = 0; d < hd; d++) out[d] += scratch[j] * st_f16_to_f32(v[d]);
            }
            float inv = 1.0f / sum;
            for (int d = 0; d < hd; d++) out[d] *= inv;
        }
    }
}
