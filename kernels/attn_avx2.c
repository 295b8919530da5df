// Attention over an F16 KV cache, AVX2+FMA.  The (row, head) pairs of a KV
// head are taken in tiles so that K and V are streamed once per tile (see
// attend_tile); head sizes that are not a multiple of 16 take each pair alone
// with an exact two-pass softmax.  Either way a pair's result depends only
// on its own query and position: not on M, the tile, or the head range.
#if defined(__x86_64__)
#include <math.h>

#include "kernels/simd_x86.h"

ST_INLINE __m256 load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

// q . k for hd dimensions (q float, k f16).
ST_INLINE float dot_qk(const float *q, const uint16_t *k, int hd)
{
    __m256 acc = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= hd; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_f16(k + d), acc);
    float s = st_hsum256(acc);
    for (; d < hd; d++) s = fmaf(q[d], st_f16_to_f32_hw(k[d]), s);
    return s;
}

static void scores(const float *q, const uint16_t *k, size_t ps, int P, int hd, float scale,
                   float *sc)
{
    int j = 0;
    if (hd % 8 == 0) {
        for (; j + 4 <= P + 1; j += 4) {
            const uint16_t *k0 = k + (size_t)j * ps;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int d = 0; d < hd; d += 8) {
                __m256 qv = _mm256_loadu_ps(q + d);
                a0 = _mm256_fmadd_ps(qv, load_f16(k0 + d), a0);
                a1 = _mm256_fmadd_ps(qv, load_f16(k0 + ps + d), a1);
                a2 = _mm256_fmadd_ps(qv, load_f16(k0 + 2 * ps + d), a2);
                a3 = _mm256_fmadd_ps(qv, load_f16(k0 + 3 * ps + d), a3);
            }
            sc[j] = st_hsum256(a0) * scale;
            sc[j + 1] = st_hsum256(a1) * scale;
            sc[j + 2] = st_hsum256(a2) * scale;
            sc[j + 3] = st_hsum256(a3) * scale;
        }
    }
    for (; j <= P; j++) sc[j] = dot_qk(q, k + (size_t)j * ps, hd) * scale;
}

// p = exp(s - max) in place; returns the sum.
static float softmax_num(float *s, int n)
{
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + j));
    float mx = st_hmax256(vm);
    for (; j < n; j++) mx = fmaxf(mx, s[j]);
    __m256 vmax = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = st_exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
        _mm256_storeu_ps(s + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = st_hsum256(acc);
    if (j < n) {
        float t[8], e[8];
        for (int i = 0; i < 8; i++) t[i] = j + i < n ? s[j + i] : mx;
        _mm256_storeu_ps(e, st_exp256(_mm256_sub_ps(_mm256_loadu_ps(t), vmax)));
        for (int i = 0; j + i < n; i++) {
            s[j + i] = e[i];
            sum += e[i];
        }
    }
    return sum;
}

// out = sum_j p_j v_j * inv.
static void weighted_v(const float *p, const uint16_t *v, size_t ps, int n, int hd, float inv,
                       float *out)
{
    int d = 0;
    for (; d + 32 <= hd; d += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < n; j++) {
            const uint16_t *vj = v + (size_t)j * ps + d;
            __m256 pj = _mm256_set1_ps(p[j]);
            a0 = _mm256_fmadd_ps(pj, load_f16(vj), a0);
            a1 = _mm256_fmadd_ps(pj, load_f16(vj + 8), a1);
            a2 = _mm256_fmadd_ps(pj, load_f16(vj + 16), a2);
            a3 = _mm256_fmadd_ps(pj, load_f16(vj + 24), a3);
        }
        __m256 vi = _mm256_set1_ps(inv);
        _mm256_storeu_ps(out + d, _mm256_mul_ps(a0, vi));
        _mm256_storeu_ps(out + d + 8, _mm256_mul_ps(a1, vi));
        _mm256_storeu_ps(out + d + 16, _mm256_mul_ps(a2, vi));
        _mm256_storeu_ps(out + d + 24, _mm256_mul_ps(a3, vi));
    }
    for (; d + 8 <= hd; d += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int j = 0; j < n; j++) a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load_f16(v + (size_t)j * ps + d), a);
        _mm256_storeu_ps(out + d, _mm256_mul_ps(a, _mm256_set1_ps(inv)));
    }
    for (; d < hd; d++) {
        float a = 0.0f;
        for (int j = 0; j < n; j++) a = fmaf(p[j], st_f16_to_f32_hw(v[(size_t)j * ps + d]), a);
        out[d] = a * inv;
    }
}

// One (row, head) alone: scores, exact softmax, weighted V.  For head sizes
// that are not a multiple of 16.
static void attend_one(const struct st_kern_attn *a, int m, int h, float *scratch)
{
    int group = a->n_heads / a->n_kv_heads, hd = a->head_dim, P = a->pos[m];
    size_t ps = (size_t)a->n_kv_heads * hd, kv_off = (size_t)(h / group) * hd;
    const float *q = a->q + ((size_t)m * a->n_heads + h) * hd;
    float *out = a->out + ((size_t)m * a->n_heads + h) * hd;
    scores(q, a->k + kv_off, ps, P, hd, a->scale, scratch);
    float sum = softmax_num(scratch, P + 1);
    weighted_v(scratch, a->v + kv_off, ps, P + 1, hd, 1.0f / sum, out);
}

// Tiled attention.  The (row, head) pairs that share a KV head are taken up
// to TILE at a time, so each K and V row is read once per tile rather than
// once per pair; tiles of all KV heads of the call are run chunk by chunk
// (CHUNK positions) side by side, so that a cache row [n_kv_heads][head_dim]
// fetched for one head is used by the others while it is in L2.  Softmax is
// online: a running max and sum per pair, its accumulator (kept in `out`)
// rescaled when the max grows.  Chunk edges are fixed multiples of CHUNK and
// each pair's steps depend only on its own query and position, so a pair's
// result does not depend on its tile, on M, or on the head range.
#define TILE 8
#define CHUNK 64
#define BATCH 16 // tiles run side by side
#define PREFETCH_ROWS 16

struct pair_state {
    const float *q;
    float *acc;  // [hd], in out: running sum of exp(score - mx) * v
    int P;       // last position seen
    float mx;    // running max of scores
    float sum;   // running sum of exp(score - mx)
};

struct tile {
    int kvh, n;
    struct pair_state p[TILE];
};

// Positions [j0, j0 + jn) of one tile of T pairs.  T is a constant in each
// instance (tile_chunk dispatches), so the accumulators live in registers;
// with T known only at run time they went through memory, cleared by a
// `rep stos` per position, and every step tested t < T.
ST_INLINE void tile_chunk_t(const struct st_kern_attn *a, struct tile *tl, int j0, int jn, const int T)
{
    int hd = a->head_dim;
    size_t ps = (size_t)a->n_kv_heads * hd;
    const uint16_t *K = a->k + (size_t)tl->kvh * hd, *V = a->v + (size_t)tl->kvh * hd;
    struct pair_state *st = tl->p;
    float s[TILE][CHUNK];
    // Scores: each K row converted once, dotted with every query.
    for (int j = 0; j < jn; j++) {
        const uint16_t *kj = K + (size_t)(j0 + j) * ps;
        // Rows are head_dim values apart from the next position's: ask for
        // K a few rows ahead, and for this row's V, used after the scores,
        // into L2 only: a chunk's V in L1 as well pushed out the K rows.
        const uint16_t *vp = V + (size_t)(j0 + j) * ps;
        bool ahead = j0 + j + PREFETCH_ROWS < a->n_ctx;
        for (int d = 0; d < hd; d += 32) {
            if (ahead) _mm_prefetch((const char *)(kj + PREFETCH_ROWS * ps + d), _MM_HINT_T0);
            _mm_prefetch((const char *)(vp + d), _MM_HINT_T1);
        }
        __m256 acc[TILE];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
            __m256 kv = load_f16(kj + d);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(st[t].q + d), kv, acc[t]);
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) s[t][j] = st_hsum256(acc[t]) * a->scale;
    }
    // Online softmax per pair over its valid part of the chunk.
    float factor[TILE];
    int valid[TILE], vmin = jn;
    for (int t = 0; t < T; t++) {
        valid[t] = st[t].P - j0 + 1 < jn ? st[t].P - j0 + 1 : jn;
        if (valid[t] < vmin) vmin = valid[t] > 0 ? valid[t] : 0;
        factor[t] = 1.0f;
        if (valid[t] <= 0) continue;
        // The chunk's max, 8 positions per step (a scalar loop was a
        // dependent chain of 64 compares per pair).
        float cm = st[t].mx;
        int j = 0;
        if (valid[t] >= 8) {
            __m256 vmx = _mm256_loadu_ps(s[t]);
            for (j = 8; j + 8 <= valid[t]; j += 8) vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(s[t] + j));
            float hm = st_hmax256(vmx);
            cm = hm > cm ? hm : cm;
        }
        for (; j < valid[t]; j++) cm = s[t][j] > cm ? s[t][j] : cm;
        float e[8];
        _mm256_storeu_ps(e, st_exp256(_mm256_set1_ps(st[t].mx - cm)));
        factor[t] = e[0];
        __m256 vm = _mm256_set1_ps(cm), vs = _mm256_setzero_ps();
        for (j = 0; j + 8 <= valid[t]; j += 8) {
            __m256 p = st_exp256(_mm256_sub_ps(_mm256_loadu_ps(s[t] + j), vm));
            _mm256_storeu_ps(s[t] + j, p);
            vs = _mm256_add_ps(vs, p);
        }
        float cs = st_hsum256(vs);
        if (j < valid[t]) {
            float tmp[8];
            for (int i = 0; i < 8; i++) tmp[i] = j + i < valid[t] ? s[t][j + i] : cm;
            _mm256_storeu_ps(tmp, st_exp256(_mm256_sub_ps(_mm256_loadu_ps(tmp), vm)));
            for (int i = 0; j + i < valid[t]; i++) {
                s[t][j + i] = tmp[i];
                cs += tmp[i];
            }
        }
        st[t].sum = fmaf(st[t].sum, factor[t], cs);
        st[t].mx = cm;
    }
    // V: 4 pairs x 16 dimensions of accumulators at a time.  Positions below
    // every pair's valid length run without per-pair tests.
#pragma GCC unroll 2
    for (int t0 = 0; t0 < T; t0 += 4) {
        const int tn = T - t0 < 4 ? T - t0 : 4;
        for (int d = 0; d < hd; d += 16) {
            __m256 lo[4], hi[4];
#pragma GCC unroll 4
            for (int u = 0; u < tn; u++) {
                __m256 f = _mm256_set1_ps(factor[t0 + u]);
                lo[u] = _mm256_mul_ps(_mm256_loadu_ps(st[t0 + u].acc + d), f);
                hi[u] = _mm256_mul_ps(_mm256_loadu_ps(st[t0 + u].acc + d + 8), f);
            }
            const uint16_t *vd = V + (size_t)j0 * ps + d;
            int j = 0;
            for (; j < vmin; j++) {
                __m256 v0 = load_f16(vd + (size_t)j * ps), v1 = load_f16(vd + (size_t)j * ps + 8);
#pragma GCC unroll 4
                for (int u = 0; u < tn; u++) {
                    __m256 p = _mm256_set1_ps(s[t0 + u][j]);
                    lo[u] = _mm256_fmadd_ps(p, v0, lo[u]);
                    hi[u] = _mm256_fmadd_ps(p, v1, hi[u]);
                }
            }
            for (; j < jn; j++) {
                __m256 v0 = load_f16(vd + (size_t)j * ps), v1 = load_f16(vd + (size_t)j * ps + 8);
#pragma GCC unroll 4
                for (int u = 0; u < tn; u++) {
                    if (j >= valid[t0 + u]) continue;
                    __m256 p = _mm256_set1_ps(s[t0 + u][j]);
                    lo[u] = _mm256_fmadd_ps(p, v0, lo[u]);
                    hi[u] = _mm256_fmadd_ps(p, v1, hi[u]);
                }
            }
#pragma GCC unroll 4
            for (int u = 0; u < tn; u++) {
                _mm256_storeu_ps(st[t0 + u].acc + d, lo[u]);
                _mm256_storeu_ps(st[t0 + u].acc + d + 8, hi[u]);
            }
        }
    }
}

static void tile_chunk(const struct st_kern_attn *a, struct tile *tl, int j0, int jn)
{
    switch (tl->n) {
    case 1: tile_chunk_t(a, tl, j0, jn, 1); break;
    case 2: tile_chunk_t(a, tl, j0, jn, 2); break;
    case 3: tile_chunk_t(a, tl, j0, jn, 3); break;
    case 4: tile_chunk_t(a, tl, j0, jn, 4); break;
    case 5: tile_chunk_t(a, tl, j0, jn, 5); break;
    case 6: tile_chunk_t(a, tl, j0, jn, 6); break;
    case 7: tile_chunk_t(a, tl, j0, jn, 7); break;
    default: tile_chunk_t(a, tl, j0, jn, 8); break;
    }
}

static void run_batch(const struct st_kern_attn *a, struct tile *tl, int nt)
{
    int jmax = 0;
    for (int i = 0; i < nt; i++)
        for (int t = 0; t < tl[i].n; t++) {
            struct pair_state *p = &tl[i].p[t];
            p->mx = -INFINITY;
            p->sum = 0.0f;
            memset(p->acc, 0, sizeof(float) * a->head_dim);
            jmax = p->P > jmax ? p->P : jmax;
        }
    for (int j0 = 0; j0 <= jmax; j0 += CHUNK) {
        int jn = jmax + 1 - j0 < CHUNK ? jmax + 1 - j0 : CHUNK;
        for (int i = 0; i < nt; i++) {
            int tmax = 0;
            for (int t = 0; t < tl[i].n; t++) tmax = tl[i].p[t].P > tmax ? tl[i].p[t].P : tmax;
            if (j0 <= tmax) tile_chunk(a, &tl[i], j0, tmax + 1 - j0 < jn ? tmax + 1 - j0 : jn);
        }
    }
    for (int i = 0; i < nt; i++)
        for (int t = 0; t < tl[i].n; t++) {
            struct pair_state *p = &tl[i].p[t];
            __m256 inv = _mm256_set1_ps(1.0f / p->sum);
            for (int d = 0; d < a->head_dim; d += 8)
                _mm256_storeu_ps(p->acc + d, _mm256_mul_ps(_mm256_loadu_ps(p->acc + d), inv));
        }
}

static void attention_avx2(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end,
                           float *scratch)
{
    int group = a->n_heads / a->n_kv_heads, hd = a->head_dim;
    if (hd % 16) {
        for (int m = 0; m < a->M; m++)
            for (int h = kv_head_begin * group; h < kv_head_end * group; h++) attend_one(a, m, h, scratch);
        return;
    }
    // Tiles: rows in blocks of mb, so a tile holds mb rows x the heads of one
    // KV head (heads split further if a group exceeds TILE).
    int mb = group >= TILE ? 1 : TILE / group;
    struct tile tl[BATCH];
    int nt = 0;
    for (int m0 = 0; m0 < a->M; m0 += mb) {
        int m1 = m0 + mb < a->M ? m0 + mb : a->M;
        for (int kvh = kv_head_begin; kvh < kv_head_end; kvh++) {
            struct tile *t = &tl[nt];
            t->kvh = kvh;
            t->n = 0;
            for (int m = m0; m < m1; m++)
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    size_t off = ((size_t)m * a->n_heads + h) * hd;
                    t->p[t->n++] = (struct pair_state){.q = a->q + off, .acc = a->out + off, .P = a->pos[m]};
                    if (t->n == TILE) { // full: start another tile for the same KV head
                        if (++nt == BATCH) {
                            run_batch(a, tl, nt);
                            nt = 0;
                        }
                        t = &tl[nt];
                        t->kvh = kvh;
                        t->n = 0;
                    }
                }
            if (t->n && ++nt == BATCH) {
                run_batch(a, tl, nt);
                nt = 0;
            }
        }
    }
    if (nt) run_batch(a, tl, nt);
}

void st_kern_attention_fill_avx2(struct st_kern_ops *ops)
{
    ops->attention = attention_avx2;
}
#endif
