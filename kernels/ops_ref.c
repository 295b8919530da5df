// Row and element-wise ops, scalar reference.
#include <math.h>

#include "kernels/kern_internal.h"

// As ggml: the mean of squares in double, then x * scale, then * w.
static void rmsnorm_ref(const float *x, const float *w, float *y, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

static void rope_apply_ref(float *x, int head_begin, int head_end, int head_dim, int n_rot,
                           const float *cs)
{
    for (int h = head_begin; h < head_end; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < n_rot; i += 2) {
            float x0 = v[i], x1 = v[i + 1], c = cs[i], s = cs[i + 1];
            v[i] = x0 * c - x1 * s;
            v[i + 1] = x0 * s + x1 * c;
        }
    }
}

static void silu_gate_ref(float *out, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void add_ref(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static int64_t argmax_ref(const float *x, int64_t n, float *max_val)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    if (max_val) *max_val = n > 0 ? x[best] : -INFINITY;
    return best;
}

static float max_ref(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, x[i]);
    return m;
}

static float exp_sum_ref(const float *x, float *p, int64_t n, float max, float inv_temp)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        p[i] = expf((x[i] - max) * inv_temp);
        s += p[i];
    }
    return (float)s;
}

static void scale_ref(float *x, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void st_kern_ops_fill_scalar_rest(struct st_kern_ops *ops)
{
    ops->rmsnorm = rmsnorm_ref;
    ops->rope_apply = rope_apply_ref;
    ops->silu_gate = silu_gate_ref;
    ops->add = add_ref;
    ops->argmax = argmax_ref;
    ops->max = max_ref;
    ops->exp_sum = exp_sum_ref;
    ops->scale = scale_ref;
}
