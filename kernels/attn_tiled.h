// Private to kernels/: tiled attention over an F16 KV cache, written once
// for any vector width.  attn_avx2.c (8 floats) and attn_avx512.c (16
// floats) include it after defining:
//   VF, VW               the float vector type and its lane count
//   vf_zero() vf_set1(x) vf_load(p) vf_store(p, v) vf_f16(p) (VW halves)
//   vf_fma(a, b, c) (a * b + c), vf_mul, vf_sub, vf_add, vf_max, vf_exp
//   vf_hmax(v), vf_hsum(v)  one float each
//   vf_sum4(a, b, c, d)     __m128 of the four vectors' sums, each summed
//                           in the same order wherever it stands
//   ATTN_TILE               (row, head) pairs in a tile, at most 12
//   SCORE_PAIRS             pairs scored at once (a tile's pairs in blocks)
//   SCORE_POS(T)            positions scored at once by a tile of T pairs
//   V_VECS                  vectors of dimensions 4 pairs accumulate at once
// and get attention_tiled(a, kv_head_begin, kv_head_end, segments) and
// merge_tiled(a, pair_begin, pair_end, part, n_seg) for head sizes that are
// a multiple of VW, up to ST_KERN_ATTN_HD_MAX.
//
// The (row, head) pairs sharing a KV head are taken up to ATTN_TILE at a
// time, so each K and V row is read and converted once per tile rather than
// once per pair; tiles of all KV heads of the call run chunk by chunk
// (CHUNK positions) side by side, so a cache row [n_kv_heads][head_dim]
// fetched for one head serves the others while it is in L2.  Softmax is
// online: a running max and sum per pair, its accumulator rescaled when the
// max grows.  It restarts at every segment (ST_KERN_ATTN_SEG positions), and
// the segments' partials are folded in order by fold_partial, in the call
// (segment 0 accumulates in `out`, later ones in a buffer of the thread) or
// by merge_tiled after ranks computed them apart; segments a->skip_* leaves
// out are neither computed nor folded.  A pair's result depends
// only on its own query and position, never on M, its tile, the head range
// or who computed which segment: chunk and segment edges are fixed
// multiples of CHUNK, each score is one chain over the head's dimensions
// reduced by vf_sum4, whatever the number of positions scored with it, each
// V sum is one chain over a segment's positions, and the fold is the same
// code on the same values either way.
#include <math.h>
#include <stdbool.h>

#define CHUNK 64
#define BATCH 16 // tiles run side by side
#define PREFETCH_ROWS 16
#define SCORE_ACC 32 // most (pair, position) sums a score block holds
#define SEG ST_KERN_ATTN_SEG
#define PART_FLOATS(hd) ST_KERN_ATTN_PART_FLOATS(hd)
_Static_assert(SEG % CHUNK == 0, "segments end at chunk edges");

struct pair_state {
    const float *q;
    float *acc;  // [hd] the segment's running sum of exp(score - mx) * v
    int P;       // last position seen
    float mx;    // the segment's running max of scores
    float sum;   // the segment's running sum of exp(score - mx)
    float *out;  // [hd] the result: segments folded so far, then normalised
    float *part; // [n_seg][PART_FLOATS(hd)] partials, when ranks split segments
    float rm, rl; // max and sum of the segments folded into out
};

// Segments past the first accumulate here when one call folds them
// (BATCH tiles of ATTN_TILE pairs).
static _Thread_local float seg_acc[BATCH * ATTN_TILE * ST_KERN_ATTN_HD_MAX];

// Rows to ask for while a block is scored: nk K rows from k (PREFETCH_ROWS
// ahead), nv V rows from v (the block's own), a line every 64 bytes of the
// dimensions walked, so the requests spread over the block.
struct prefetch_rows {
    const char *k, *v;
    int nk, nv;
};

struct tile {
    int kvh, n;
    struct pair_state p[ATTN_TILE];
};

// Scores of T pairs at NP positions from kj on (rows ps apart) into
// s[t][j + p].  Each K vector is converted once for all T pairs; the sums
// are reduced four at a time, (pair, position) in order.
ST_INLINE void score_pairs(const struct pair_state *st, const uint16_t *kj, size_t ps, int hd,
                           float scale, float s[][CHUNK], int j, const int T, const int NP,
                           const struct prefetch_rows *pf)
{
    VF acc[SCORE_ACC];
#pragma GCC unroll 32
    for (int i = 0; i < T * NP; i++) acc[i] = vf_zero();
    for (int d = 0; d < hd; d += VW) {
        if (pf && (d * 2) % 64 == 0) {
            for (int p = 0; p < pf->nk; p++) _mm_prefetch(pf->k + (size_t)p * ps * 2 + d * 2, _MM_HINT_T0);
            for (int p = 0; p < pf->nv; p++) _mm_prefetch(pf->v + (size_t)p * ps * 2 + d * 2, _MM_HINT_T1);
        }
        VF kv[SCORE_ACC];
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) kv[p] = vf_f16(kj + (size_t)p * ps + d);
#pragma GCC unroll 12
        for (int t = 0; t < T; t++) {
            VF q = vf_load(st[t].q + d);
            // In a register for all NP positions: folded into each product
            // as a memory operand, the loads outran the multiplies.
            __asm__("" : "+v"(q));
#pragma GCC unroll 8
            for (int p = 0; p < NP; p++) acc[t * NP + p] = vf_fma(q, kv[p], acc[t * NP + p]);
        }
    }
    const __m128 vs = _mm_set1_ps(scale);
#pragma GCC unroll 8
    for (int i = 0; i < T * NP; i += 4) {
        VF z = vf_zero();
        __m128 r = _mm_mul_ps(vf_sum4(acc[i], i + 1 < T * NP ? acc[i + 1] : z,
                                      i + 2 < T * NP ? acc[i + 2] : z, i + 3 < T * NP ? acc[i + 3] : z),
                              vs);
        if (NP == 4) {
            _mm_storeu_ps(&s[i / 4][j], r);
            continue;
        }
        float o[4];
        _mm_storeu_ps(o, r);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            if (i + u < T * NP) s[(i + u) / NP][j + (i + u) % NP] = o[u];
    }
}

// Scores of a tile's T pairs at NP positions, SCORE_PAIRS pairs at a time
// (each such block converts the K vectors again; more pairs at once would
// leave too few registers for NP positions).
ST_INLINE void score_block(const struct pair_state *st, const uint16_t *kj, size_t ps, int hd,
                           float scale, float s[][CHUNK], int j, const int T, const int NP,
                           const struct prefetch_rows *pf)
{
#pragma GCC unroll 2
    for (int t0 = 0; t0 < T; t0 += SCORE_PAIRS)
        score_pairs(st + t0, kj, ps, hd, scale, s + t0, j, T - t0 < SCORE_PAIRS ? T - t0 : SCORE_PAIRS, NP,
                    t0 ? NULL : pf);
}

// Folds positions [0, valid) of one pair's scores into its running max and
// sum: s becomes exp(s - new max); returns the factor the pair's
// accumulator must be scaled by.
static float softmax_chunk(struct pair_state *st, float *s, int valid)
{
    float cm = st->mx;
    int j = 0;
    if (valid >= VW) {
        VF vmx = vf_load(s);
        for (j = VW; j + VW <= valid; j += VW) vmx = vf_max(vmx, vf_load(s + j));
        float hm = vf_hmax(vmx);
        cm = hm > cm ? hm : cm;
    }
    for (; j < valid; j++) cm = s[j] > cm ? s[j] : cm;
    float e[VW];
    vf_store(e, vf_exp(vf_set1(st->mx - cm)));
    VF vm = vf_set1(cm), vs = vf_zero();
    for (j = 0; j + VW <= valid; j += VW) {
        VF p = vf_exp(vf_sub(vf_load(s + j), vm));
        vf_store(s + j, p);
        vs = vf_add(vs, p);
    }
    float cs = vf_hsum(vs);
    if (j < valid) {
        float tmp[VW];
        for (int i = 0; i < VW; i++) tmp[i] = j + i < valid ? s[j + i] : cm;
        vf_store(tmp, vf_exp(vf_sub(vf_load(tmp), vm)));
        for (int i = 0; j + i < valid; i++) {
            s[j + i] = tmp[i];
            cs += tmp[i];
        }
    }
    st->sum = fmaf(st->sum, e[0], cs);
    st->mx = cm;
    return e[0];
}

// Position j of the V rows at vj into the sums of TN pairs, NV vectors of
// dimensions: acc[u] += s[u][j] * V; with `checked`, only for the pairs
// whose valid part reaches j.
ST_INLINE void v_pos(VF acc[][V_VECS], float s[][CHUNK], const int *valid, const uint16_t *vj, int j,
                     const int TN, const int NV, const bool checked)
{
    VF x[V_VECS];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) x[v] = vf_f16(vj + v * VW);
#pragma GCC unroll 4
    for (int u = 0; u < TN; u++) {
        if (checked && j >= valid[u]) continue;
        VF p = vf_set1(s[u][j]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[u][v] = vf_fma(p, x[v], acc[u][v]);
    }
}

// acc of TN pairs, NV vectors of dimensions from d: scaled by their
// factors, plus sum_j s[u][j] * V[j] over the chunk's positions; positions
// below vmin are valid for every pair and run without tests.
ST_INLINE void v_block(struct pair_state *st, float s[][CHUNK], const float *factor,
                       const int *valid, int vmin, int jn, const uint16_t *vd, size_t ps, int d,
                       const int TN, const int NV)
{
    VF acc[4][V_VECS];
#pragma GCC unroll 4
    for (int u = 0; u < TN; u++) {
        VF f = vf_set1(factor[u]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[u][v] = vf_mul(vf_load(st[u].acc + d + v * VW), f);
    }
    int j = 0;
    for (; j < vmin; j++) v_pos(acc, s, valid, vd + (size_t)j * ps, j, TN, NV, false);
    for (; j < jn; j++) v_pos(acc, s, valid, vd + (size_t)j * ps, j, TN, NV, true);
#pragma GCC unroll 4
    for (int u = 0; u < TN; u++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) vf_store(st[u].acc + d + v * VW, acc[u][v]);
}

// One group of TN pairs over all dimensions: V_VECS vectors at a time, the
// rest (head sizes that are not a multiple of V_VECS * VW) in a last block.
ST_INLINE void v_group(struct pair_state *st, float s[][CHUNK], const float *factor, const int *valid,
                       int vmin, int jn, const uint16_t *V, size_t ps, int hd, const int TN)
{
    int d = 0;
    for (; d + V_VECS * VW <= hd; d += V_VECS * VW)
        v_block(st, s, factor, valid, vmin, jn, V + d, ps, d, TN, V_VECS);
    switch ((hd - d) / VW) {
#if V_VECS > 3
    case 3: v_block(st, s, factor, valid, vmin, jn, V + d, ps, d, TN, 3); break;
#endif
#if V_VECS > 2
    case 2: v_block(st, s, factor, valid, vmin, jn, V + d, ps, d, TN, 2); break;
#endif
    case 1: v_block(st, s, factor, valid, vmin, jn, V + d, ps, d, TN, 1); break;
    default: break;
    }
}

// Positions [j0, j0 + jn) of one tile of T pairs.  T is a constant in each
// instance (tile_chunk dispatches), so the sums live in registers.
ST_INLINE void tile_chunk_t(const struct st_kern_attn *a, struct tile *tl, int j0, int jn, const int T)
{
    int hd = a->head_dim;
    size_t ps = (size_t)a->n_kv_heads * hd;
    const uint16_t *K = a->k + (size_t)tl->kvh * hd, *V = a->v + (size_t)tl->kvh * hd;
    struct pair_state *st = tl->p;
    float s[ATTN_TILE][CHUNK];
    const int NP = SCORE_POS(T);
    for (int j = 0; j < jn; j += NP) {
        // Rows are head_dim values apart from the next position's: ask for
        // K a few rows ahead, and for these rows' V, used after the scores,
        // into L2 only: a chunk's V in L1 as well pushed out the K rows.
        int r = j0 + j, n = jn - j < NP ? jn - j : NP, ahead = a->n_ctx - (r + PREFETCH_ROWS);
        struct prefetch_rows pf = {.k = (const char *)(K + (size_t)(r + PREFETCH_ROWS) * ps),
                                   .v = (const char *)(V + (size_t)r * ps),
                                   .nk = ahead < 0 ? 0 : ahead < n ? ahead : n,
                                   .nv = n};
        const uint16_t *kj = K + (size_t)r * ps;
        if (n == NP) {
            score_block(st, kj, ps, hd, a->scale, s, j, T, NP, &pf);
            continue;
        }
        for (int p = 0; p < n; p++) {
            struct prefetch_rows one = {.k = pf.k + (size_t)p * ps * 2, .v = pf.v + (size_t)p * ps * 2,
                                        .nk = p < pf.nk, .nv = 1};
            score_block(st, kj + (size_t)p * ps, ps, hd, a->scale, s, j + p, T, 1, &one);
        }
    }
    float factor[ATTN_TILE];
    int valid[ATTN_TILE], vmin = jn;
    for (int t = 0; t < T; t++) {
        valid[t] = st[t].P - j0 + 1 < jn ? st[t].P - j0 + 1 : jn;
        if (valid[t] < vmin) vmin = valid[t] > 0 ? valid[t] : 0;
        factor[t] = valid[t] > 0 ? softmax_chunk(&st[t], s[t], valid[t]) : 1.0f;
    }
    const uint16_t *vd = V + (size_t)j0 * ps;
#pragma GCC unroll 3
    for (int t0 = 0; t0 < T; t0 += 4) {
        const int tn = T - t0 < 4 ? T - t0 : 4;
        v_group(st + t0, s + t0, factor + t0, valid + t0, vmin, jn, vd, ps, hd, tn);
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
#if ATTN_TILE > 8
    case 8: tile_chunk_t(a, tl, j0, jn, 8); break;
    case 9: tile_chunk_t(a, tl, j0, jn, 9); break;
    case 10: tile_chunk_t(a, tl, j0, jn, 10); break;
    case 11: tile_chunk_t(a, tl, j0, jn, 11); break;
    default: tile_chunk_t(a, tl, j0, jn, 12); break;
#else
    default: tile_chunk_t(a, tl, j0, jn, 8); break;
#endif
    }
}

// out (max *rm, sum *rl) and a segment's partial (acc pa, max pm, sum pl)
// into one: both sides rescaled to the larger max.  pm and *rm are finite
// (a partial has at least one position).
static void fold_partial(float *out, float *rm, float *rl, const float *pa, float pm, float pl, int hd)
{
    float m = pm > *rm ? pm : *rm, e[VW];
    vf_store(e, vf_exp(vf_set1(*rm - m)));
    float fr = e[0];
    vf_store(e, vf_exp(vf_set1(pm - m)));
    float fp = e[0];
    VF vr = vf_set1(fr), vp = vf_set1(fp);
    for (int d = 0; d < hd; d += VW) vf_store(out + d, vf_fma(vf_load(pa + d), vp, vf_mul(vf_load(out + d), vr)));
    *rl = fmaf(pl, fp, *rl * fr);
    *rm = m;
}

ST_INLINE void normalise(float *out, float sum, int hd)
{
    VF inv = vf_set1(1.0f / sum);
    for (int d = 0; d < hd; d += VW) vf_store(out + d, vf_mul(vf_load(out + d), inv));
}

// Segment s of a batch's pairs, positions [s * SEG, s * SEG + SEG) up to
// each pair's own: a fresh softmax per pair, its partial then folded into
// out (one call for all segments) or stored in the pair's part.
static void run_segment(const struct st_kern_attn *a, struct tile *tl, int nt, int s)
{
    int hd = a->head_dim, sb = s * SEG, jmax = sb;
    for (int i = 0, n = 0; i < nt; i++)
        for (int t = 0; t < tl[i].n; t++, n++) {
            struct pair_state *p = &tl[i].p[t];
            p->acc = p->part ? p->part + (size_t)s * PART_FLOATS(hd) : s ? seg_acc + (size_t)n * hd : p->out;
            p->mx = -INFINITY;
            p->sum = 0.0f;
            memset(p->acc, 0, sizeof(float) * hd);
            jmax = p->P > jmax ? p->P : jmax;
        }
    int se = jmax + 1 < sb + SEG ? jmax + 1 : sb + SEG;
    for (int j0 = sb; j0 < se; j0 += CHUNK) {
        int jn = se - j0 < CHUNK ? se - j0 : CHUNK;
        for (int i = 0; i < nt; i++) {
            int tmax = 0;
            for (int t = 0; t < tl[i].n; t++) tmax = tl[i].p[t].P > tmax ? tl[i].p[t].P : tmax;
            if (j0 <= tmax) tile_chunk(a, &tl[i], j0, tmax + 1 - j0 < jn ? tmax + 1 - j0 : jn);
        }
    }
    for (int i = 0; i < nt; i++)
        for (int t = 0; t < tl[i].n; t++) {
            struct pair_state *p = &tl[i].p[t];
            if (p->P < sb) continue;
            if (p->part) {
                p->acc[hd] = p->mx;
                p->acc[hd + 1] = p->sum;
            } else if (s == 0) {
                p->rm = p->mx;
                p->rl = p->sum;
            } else {
                fold_partial(p->out, &p->rm, &p->rl, p->acc, p->mx, p->sum, hd);
            }
        }
}

// Which segments a call computes: all of each pair's, folded into out
// (part NULL), or [begin, end) into part.
struct segments {
    int begin, end;
    float *part;
    int n_seg;
};

static void run_batch(const struct st_kern_attn *a, struct tile *tl, int nt, struct segments sg)
{
    int jmax = 0;
    for (int i = 0; i < nt; i++)
        for (int t = 0; t < tl[i].n; t++) jmax = tl[i].p[t].P > jmax ? tl[i].p[t].P : jmax;
    int end = jmax / SEG + 1 < sg.end ? jmax / SEG + 1 : sg.end;
    for (int s = sg.begin; s < end; s++)
        if (!ST_KERN_ATTN_SKIPS(a, s)) run_segment(a, tl, nt, s);
    if (sg.part) return;
    for (int i = 0; i < nt; i++)
        for (int t = 0; t < tl[i].n; t++) normalise(tl[i].p[t].out, tl[i].p[t].rl, a->head_dim);
}

// Pairs [pair_begin, pair_end) (pair = m * n_heads + h): their partials in
// part folded in order into out, as one call folds them.
static void merge_tiled(const struct st_kern_attn *a, int pair_begin, int pair_end, const float *part, int n_seg)
{
    int hd = a->head_dim;
    size_t pf = PART_FLOATS(hd);
    for (int i = pair_begin; i < pair_end; i++) {
        const float *ps = part + (size_t)i * n_seg * pf;
        float *out = a->out + (size_t)i * hd, rm = ps[hd], rl = ps[hd + 1];
        memcpy(out, ps, sizeof(float) * hd);
        for (int s = 1; s <= a->pos[i / a->n_heads] / SEG; s++)
            if (!ST_KERN_ATTN_SKIPS(a, s))
                fold_partial(out, &rm, &rl, ps + s * pf, ps[s * pf + hd], ps[s * pf + hd + 1], hd);
        normalise(out, rl, hd);
    }
}

// Tiles: rows in blocks of mb, so a tile holds mb rows x the heads of one
// KV head (heads split further if a group exceeds ATTN_TILE).
static void attention_tiled(const struct st_kern_attn *a, int kv_head_begin, int kv_head_end, struct segments sg)
{
    int group = a->n_heads / a->n_kv_heads, hd = a->head_dim;
    int mb = group >= ATTN_TILE ? 1 : ATTN_TILE / group;
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
                    size_t pair = (size_t)m * a->n_heads + h;
                    t->p[t->n++] = (struct pair_state){
                        .q = a->q + pair * hd, .out = a->out + pair * hd, .P = a->pos[m],
                        .part = sg.part ? sg.part + pair * sg.n_seg * PART_FLOATS(hd) : NULL};
                    if (t->n == ATTN_TILE) { // full: start another tile for the same KV head
                        if (++nt == BATCH) {
                            run_batch(a, tl, nt, sg);
                            nt = 0;
                        }
                        t = &tl[nt];
                        t->kvh = kvh;
                        t->n = 0;
                    }
                }
            if (t->n && ++nt == BATCH) {
                run_batch(a, tl, nt, sg);
                nt = 0;
            }
        }
    }
    if (nt) run_batch(a, tl, nt, sg);
}
