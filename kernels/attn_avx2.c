// Attention over an F16 KV cache, AVX2+FMA: the tiled kernel of
// attn_tiled.h on 8-float vectors.  Head sizes that are not a multiple of 8
// or above ST_KERN_ATTN_HD_MAX (no model in use has one) take the scalar
// reference, and are not split by segments (st_kern_attention_splits).
#if defined(__x86_64__)
#include <limits.h>

#include "kernels/simd_x86.h"

#define VF __m256
#define VW 8
#define vf_zero() _mm256_setzero_ps()
#define vf_set1(x) _mm256_set1_ps(x)
#define vf_load(p) _mm256_loadu_ps(p)
#define vf_store(p, v) _mm256_storeu_ps(p, v)
#define vf_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define vf_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vf_mul(a, b) _mm256_mul_ps(a, b)
#define vf_add(a, b) _mm256_add_ps(a, b)
#define vf_sub(a, b) _mm256_sub_ps(a, b)
#define vf_max(a, b) _mm256_max_ps(a, b)
#define vf_exp(x) st_exp256(x)
#define vf_hmax(v) st_hmax256(v)
#define vf_hsum(v) st_hsum256(v)

// Lane i of the result: ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
// of the i-th argument.
ST_INLINE __m128 vf_sum4(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// 16 registers: T x SCORE_POS sums, SCORE_POS K vectors and a query.  A
// one-row decode of a 3-head group takes 2 positions at a time, not 3: with
// K and V from memory that was 10% faster.
#define ATTN_TILE 8
#define SCORE_PAIRS 8
#define SCORE_POS(T) ((T) <= 2 ? 4 : (T) <= 6 ? 2 : 1)
#define V_VECS 2

#include "kernels/attn_tiled.h"

static const struct segments all_segments = {0, INT_MAX, NULL, 0};

static void attention_avx2(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end,
                           float *scratch)
{
    if (a->head_dim % VW || a->head_dim > ST_KERN_ATTN_HD_MAX)
        st_kern_attention_ref(a, kv_head_begin, kv_head_end, scratch);
    else
        attention_tiled(a, kv_head_begin, kv_head_end, all_segments);
}

static void attention_part_avx2(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end, int seg_begin,
                                int seg_end, float *part, int n_seg)
{
    attention_tiled(a, kv_head_begin, kv_head_end, (struct segments){seg_begin, seg_end, part, n_seg});
}

void st_kern_attention_fill_avx2(struct st_kern_ops *ops)
{
    ops->attention = attention_avx2;
    ops->attention_part = attention_part_avx2;
    ops->attention_merge = merge_tiled;
}
#endif
