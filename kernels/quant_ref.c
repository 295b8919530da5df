// Activation quantisation, scalar reference.  The SIMD versions produce the
// same bytes: the scale is computed the same way and every quant is rounded
// to nearest-even (lrintf in the default rounding mode, cvtps2dq in SIMD).
#include <math.h>

#include "kernels/kern_internal.h"

static float block_amax(const float *x, int n)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

// As llama.cpp's q8_0: d = amax / 127, quants x / d, d kept at f16 precision.
void st_kern_quantize_q8_32_ref(const float *x, struct st_kern_q8_32 *y, int64_t n)
{
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float d = block_amax(x, 32) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            long q = lrintf(x[j] * id);
            y[i].qs[j] = (int8_t)q;
            sum += (int32_t)q;
        }
        y[i].d = st_kern_q8_32_scale(d);
        y[i].sum = sum;
    }
}

// As llama.cpp's q8_K: scale 127 / amax, d its float reciprocal.
void st_kern_quantize_q8_k_ref(const float *x, struct st_block_q8_k *y, int64_t n)
{
    for (int64_t i = 0; i < n / ST_QK_K; i++, x += ST_QK_K) {
        float amax = block_amax(x, ST_QK_K);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < ST_QK_K; j++) y[i].qs[j] = (int8_t)lrintf(x[j] * id);
        for (int g = 0; g < ST_QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = amax != 0.0f ? 1.0f / id : 0.0f;
    }
}
