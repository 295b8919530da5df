// The public kernel entry points: each checks its arguments' invariants and
// calls the active level's table.
#include <math.h>
#include <string.h>

#include "kernels/kern_internal.h"

void st_kern_quantize_q8_32(const float *x, struct st_kern_q8_32 *y, int64_t n)
{
    ST_ASSERT(n % 32 == 0);
    st_kern_ops_active()->quantize_q8_32(x, y, n);
}

void st_kern_quantize_q8_k(const float *x, struct st_block_q8_k *y, int64_t n)
{
    ST_ASSERT(n % ST_QK_K == 0);
    st_kern_ops_active()->quantize_q8_k(x, y, n);
}

enum st_kern_act st_kern_act_type(uint32_t run_type)
{
    switch (run_type) {
    case ST_TYPE_Q8_0: case ST_TYPE_Q4_0: case ST_KERN_RUN_Q8_0X8: case ST_KERN_RUN_Q4_0X8:
        return ST_KERN_ACT_Q8_32;
    case ST_TYPE_Q4_K: case ST_TYPE_Q6_K: case ST_TYPE_TQ1_0: case ST_TYPE_TQ2_0:
    case ST_KERN_RUN_TERNARY_MASK: case ST_KERN_RUN_TERNARY_CODE:
        return ST_KERN_ACT_Q8_K;
    default:
        return ST_KERN_ACT_F32;
    }
}

size_t st_kern_act_row_bytes(uint32_t run_type, int64_t cols)
{
    switch (st_kern_act_type(run_type)) {
    case ST_KERN_ACT_Q8_32: return (size_t)(cols / 32) * sizeof(struct st_kern_q8_32);
    case ST_KERN_ACT_Q8_K: return (size_t)(cols / ST_QK_K) * sizeof(struct st_block_q8_k);
    default: return (size_t)cols * sizeof(float);
    }
}

void st_kern_quantize_act(uint32_t run_type, const float *x, void *xq, int M, int64_t cols)
{
    const struct st_kern_ops *ops = st_kern_ops_active();
    size_t rb = st_kern_act_row_bytes(run_type, cols);
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * cols;
        void *ym = (uint8_t *)xq + (size_t)m * rb;
        switch (st_kern_act_type(run_type)) {
        case ST_KERN_ACT_Q8_32:
            ST_ASSERT(cols % 32 == 0);
            ops->quantize_q8_32(xm, ym, cols);
            break;
        case ST_KERN_ACT_Q8_K:
            ST_ASSERT(cols % ST_QK_K == 0);
            ops->quantize_q8_k(xm, ym, cols);
            break;
        default:
            if (ym != xm) memcpy(ym, xm, rb);
            break;
        }
    }
}

float st_kern_vec_dot(uint32_t type, int64_t n, const void *w_row, const void *x)
{
    ST_ASSERT(type < ST_TYPE_COUNT);
    st_kern_dot_fn fn = st_kern_ops_active()->dot[type];
    ST_ASSERT(fn != NULL);
    return fn(n, w_row, x);
}

// The rows' positions, and a skipped range that keeps the first segment
// and ends before every row's own position.
static void check_rows(const struct st_kern_attn *a)
{
    bool skips = ST_KERN_ATTN_SKIPPED(a) > 0;
    ST_ASSERT(!skips || a->skip_begin >= 1);
    for (int m = 0; m < a->M; m++) {
        ST_ASSERT(a->pos[m] >= 0 && a->pos[m] < a->n_ctx);
        ST_ASSERT(!skips || a->pos[m] >= a->skip_end * ST_KERN_ATTN_SEG);
    }
}

void st_kern_attention(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end,
                       float *scratch)
{
    ST_ASSERT(a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0);
    ST_ASSERT(0 <= kv_head_begin && kv_head_begin <= kv_head_end && kv_head_end <= a->n_kv_heads);
    check_rows(a);
    st_kern_ops_active()->attention(a, kv_head_begin, kv_head_end, scratch);
}

bool st_kern_attention_splits(const struct st_kern_attn *a)
{
    // The tiled kernels' vectors are 8 floats at least (AVX-512 hands other
    // head sizes to AVX2); larger heads go to the reference.
    return st_kern_ops_active()->attention_part && a->head_dim % 8 == 0 && a->head_dim <= ST_KERN_ATTN_HD_MAX;
}

void st_kern_attention_part(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end, int seg_begin,
                            int seg_end, float *part, int n_seg)
{
    ST_ASSERT(st_kern_attention_splits(a));
    ST_ASSERT(0 <= kv_head_begin && kv_head_begin <= kv_head_end && kv_head_end <= a->n_kv_heads);
    ST_ASSERT(0 <= seg_begin && seg_begin <= seg_end && (int64_t)n_seg * ST_KERN_ATTN_SEG >= a->n_ctx);
    check_rows(a);
    st_kern_ops_active()->attention_part(a, kv_head_begin, kv_head_end, seg_begin, seg_end, part, n_seg);
}

void st_kern_attention_items(const struct st_kern_attn *a, int n_ranks, int *n_items, int *head_ranges)
{
    int n_seg = ST_KERN_ATTN_SEGS(a->n_ctx), hs = 1;
    while (hs < a->n_kv_heads && (n_seg * hs < 4 * n_ranks || a->n_kv_heads % hs)) hs++;
    *n_items = n_seg * hs;
    *head_ranges = hs;
}

bool st_kern_attention_split_pays(const struct st_kern_attn *a, int n_ranks)
{
    int n_seg = ST_KERN_ATTN_SEGS(a->n_ctx) - ST_KERN_ATTN_SKIPPED(a);
    return st_kern_attention_splits(a) && n_seg > 1 && ((a->M == 1 && n_seg >= 8) || n_ranks > a->n_kv_heads);
}

void st_kern_attention_merge(const struct st_kern_attn *a, int pair_begin, int pair_end, const float *part,
                             int n_seg)
{
    ST_ASSERT(st_kern_attention_splits(a));
    ST_ASSERT(0 <= pair_begin && pair_begin <= pair_end && pair_end <= a->M * a->n_heads);
    st_kern_ops_active()->attention_merge(a, pair_begin, pair_end, part, n_seg);
}

void st_kern_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps)
{
    st_kern_ops_active()->rmsnorm(x, w, y, n, eps);
}

// theta_i = pos * base^(-2i/n_rot) / ff[i], computed in double so that long
// positions keep their precision.
void st_kern_rope_cache(float *cs, int n_rot, int32_t pos, float base, const float *freq_factors)
{
    for (int i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos * pow((double)base, -2.0 * i / n_rot);
        if (freq_factors) theta /= freq_factors[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void st_kern_rope_apply(float *x, int head_begin, int head_end, int head_dim, int n_rot,
                        const float *cs)
{
    ST_ASSERT(n_rot % 2 == 0 && n_rot <= head_dim);
    st_kern_ops_active()->rope_apply(x, head_begin, head_end, head_dim, n_rot, cs);
}

void st_kern_rope(float *x, int head_begin, int head_end, int head_dim, int n_rot, int32_t pos,
                  float base, const float *freq_factors)
{
    float cs[1024];
    ST_ASSERT(n_rot <= 1024);
    st_kern_rope_cache(cs, n_rot, pos, base, freq_factors);
    st_kern_rope_apply(x, head_begin, head_end, head_dim, n_rot, cs);
}

void st_kern_silu_gate(float *out, const float *g, const float *u, int64_t n)
{
    st_kern_ops_active()->silu_gate(out, g, u, n);
}

void st_kern_add(float *y, const float *x, int64_t n)
{
    st_kern_ops_active()->add(y, x, n);
}

int64_t st_kern_argmax(const float *x, int64_t n, float *max_val)
{
    return st_kern_ops_active()->argmax(x, n, max_val);
}

float st_kern_max(const float *x, int64_t n)
{
    return st_kern_ops_active()->max(x, n);
}

float st_kern_exp_sum(const float *x, float *p, int64_t n, float max, float inv_temp)
{
    return st_kern_ops_active()->exp_sum(x, p, n, max, inv_temp);
}

void st_kern_scale(float *x, int64_t n, float s)
{
    st_kern_ops_active()->scale(x, n, s);
}

void st_kern_softmax(const float *x, float *p, int64_t n, float temp)
{
    ST_ASSERT(temp > 0.0f);
    const struct st_kern_ops *ops = st_kern_ops_active();
    float inv_temp = 1.0f / temp;
    float sum = ops->exp_sum(x, p, n, ops->max(x, n), inv_temp);
    ops->scale(p, n, 1.0f / sum);
}
