// Attention over an F16 KV cache, AVX-512: the tiled kernel of attn_tiled.h
// on 16-float vectors, with 32 registers for larger tiles (a 4-row verify of
// a 3-head group is one tile).  Other head sizes take the AVX2 kernel.
#if defined(__x86_64__)
#include <limits.h>

#include "kernels/simd_x86.h"

#define VF __m512
#define VW 16
#define vf_zero() _mm512_setzero_ps()
#define vf_set1(x) _mm512_set1_ps(x)
#define vf_load(p) _mm512_loadu_ps(p)
#define vf_store(p, v) _mm512_storeu_ps(p, v)
#define vf_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define vf_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vf_mul(a, b) _mm512_mul_ps(a, b)
#define vf_add(a, b) _mm512_add_ps(a, b)
#define vf_sub(a, b) _mm512_sub_ps(a, b)
#define vf_max(a, b) _mm512_max_ps(a, b)
#define vf_hmax(v) _mm512_reduce_max_ps(v)
#define vf_hsum(v) _mm512_reduce_add_ps(v)

// exp by halves: it runs once per score, far from the inner loops.
ST_INLINE __m512 vf_exp(__m512 x)
{
    __m256 lo = st_exp256(_mm512_castps512_ps256(x)), hi = st_exp256(_mm512_extractf32x8_ps(x, 1));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// Lane i of the result: the i-th argument's 16 lanes summed as
// ((x[0:4] + x[8:12]) + (x[4:8] + x[12:16])), then within the 4 lanes
// (l0 + l2) + (l1 + l3).
ST_INLINE __m128 vf_sum4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    __m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    // x = [a0+a2, a1+a3, b0+b2, b1+b3] in 128-bit quarters, y likewise.
    __m512 z = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xdd));
    // z = one quarter per argument; its 4 lanes still to add.
    z = _mm512_add_ps(z, _mm512_permute_ps(z, 0x4e));
    z = _mm512_add_ps(z, _mm512_permute_ps(z, 0xb1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), z));
}

// 32 registers: 6 pairs x 4 positions of sums, 4 K vectors and a query.
// Up to 3 pairs (a one-row decode) take 2 positions at a time: one layer of
// 8192 positions, mostly from memory, ran 1.4-1.7 instead of 2.1 ms on one
// core (their prefetches spread over twice as many blocks).
#define ATTN_TILE 12
#define SCORE_PAIRS 6
#define SCORE_POS(T) ((T) <= 3 ? 2 : 4)
#define V_VECS 4

#include "kernels/attn_tiled.h"

static const struct segments all_segments = {0, INT_MAX, NULL, 0};

static void attention_avx512(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end,
                             float *scratch)
{
    if (a->head_dim % VW || a->head_dim > ST_KERN_ATTN_HD_MAX)
        st_kern_ops_get(ST_KERN_LEVEL_AVX2)->attention(a, kv_head_begin, kv_head_end, scratch);
    else
        attention_tiled(a, kv_head_begin, kv_head_end, all_segments);
}

static void attention_part_avx512(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end, int seg_begin,
                                  int seg_end, float *part, int n_seg)
{
    if (a->head_dim % VW)
        st_kern_ops_get(ST_KERN_LEVEL_AVX2)->attention_part(a, kv_head_begin, kv_head_end, seg_begin, seg_end, part,
                                                           n_seg);
    else
        attention_tiled(a, kv_head_begin, kv_head_end, (struct segments){seg_begin, seg_end, part, n_seg});
}

static void attention_merge_avx512(const struct st_kern_attn *a, int pair_begin, int pair_end, const float *part,
                                   int n_seg)
{
    if (a->head_dim % VW)
        st_kern_ops_get(ST_KERN_LEVEL_AVX2)->attention_merge(a, pair_begin, pair_end, part, n_seg);
    else
        merge_tiled(a, pair_begin, pair_end, part, n_seg);
}

void st_kern_attention_fill_avx512(struct st_kern_ops *ops)
{
    ops->attention = attention_avx512;
    ops->attention_part = attention_part_avx512;
    ops->attention_merge = attention_merge_avx512;
}
#endif
