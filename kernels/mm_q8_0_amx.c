// AMX version of the Q8_0 run-format product for 7-16 activation rows (a
// verify of K + 1 rows, prefill tiles).  A block of a pair of groups is 8
// vectors of 64 bytes, vector k holding bytes 4k..4k+3 of each of the 16
// rows: exactly the tile AMX multiplies by (8 rows of 4 K-bytes x 16
// columns), so the weights load straight from the run format.  TDPBSSD
// gives each (activation row, weight row) block sum in int32, exactly as
// the VNNI kernel's, and the float step per block is the same
// fma(sum, dw * dx, acc): rows are bit-identical to the avx512 level's
// one-row product.  Selected where the CPU has AMX-TILE and AMX-INT8 and
// the kernel grants the process its tile state.
#if defined(__x86_64__)
#include <stdalign.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/amx_tiles.h"
#include "kernels/x8_prefetch.h"

#define Q8 const struct st_kern_q8_32
#define AMX_ROWS 16 // activation rows per call: the tile height

// Tiles: 0 the activations' block, 1-3 the pairs' weights, 4-7 their
// block sums.
static void load_config(int mt)
{
    const uint8_t m = (uint8_t)mt;
    st_amx_tiles_config((const uint8_t[8]){m, 8, 8, 8, m, m, m, m},
                        (const uint16_t[8]){32, 64, 64, 64, 64, 64, 64, 64}, 8);
}

// Block b of pair i: its 16 sums per row into sums, then the float step.
ST_INLINE void pair_float_step(const int32_t (*sums)[16], const uint16_t *d0, const uint16_t *d1, int64_t b,
                               const uint8_t *x, size_t xs, const int MT, __m512 *acc)
{
    __m512 dw = st_pair_scales(d0, d1, b);
#pragma GCC unroll 16
    for (int m = 0; m < MT; m++) {
        __m512 is = _mm512_cvtepi32_ps(_mm512_load_si512(sums[m]));
        float dx = ((Q8 *)(x + m * xs))[b].d;
        acc[m] = _mm512_fmadd_ps(is, _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[m]);
    }
}

// P pairs from group g (16 weight rows each) side by side over every
// block: P streams of weights in flight (one core reading 4 streams took
// 13.6 GB/s where one took 9.9).  One 16-column product per pair and
// block: two 8-column ones (the layout before pairs) took 1.3-1.5x the
// time with the weights in L2.  One row's 16 sums are one 512-bit vector
// and its float step one FMA.  MT is a constant: the sums then live in
// registers.
ST_INLINE void run_pairs_side(const struct st_kern_weight *w, const uint8_t *x, size_t xs, const int MT,
                              const int P, float *y, size_t ys, int64_t g, int64_t r0, int64_t r1)
{
    const int64_t nb = w->cols / 32;
    const uint8_t *q[4];
    const uint16_t *d[4][2];
    __m512 acc[4][AMX_ROWS];
    alignas(64) int32_t sums[4][AMX_ROWS][16];
    st_pairs_at(w, g, P, q, d);
#pragma GCC unroll 4
    for (int i = 0; i < P; i++)
#pragma GCC unroll 16
        for (int m = 0; m < MT; m++) acc[i][m] = _mm512_setzero_ps();
    // Each stream's block a few blocks ahead, as the VNNI kernel's pairs on
    // this host ask (x8_prefetch.h).
    const struct x8_prefetch_plan pf = x8_prefetch_plan_near(512);
    const uint8_t *end = st_kern_x8_end(w, r1);
    for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int i = 0; i < P; i++) x8_prefetch(q[i] + b * 512, 512, pf, end);
        _tile_loadd(0, ((Q8 *)x + b)->qs, (long)xs);
        _tile_zero(4);
        _tile_loadd(1, q[0] + b * 512, 64);
        _tile_dpbssd(4, 0, 1);
        if (P > 1) {
            _tile_zero(5);
            _tile_loadd(2, q[1] + b * 512, 64);
            _tile_dpbssd(5, 0, 2);
        }
        if (P > 2) {
            _tile_zero(6);
            _tile_loadd(3, q[2] + b * 512, 64);
            _tile_dpbssd(6, 0, 3);
        }
        if (P > 3) {
            _tile_zero(7);
            _tile_loadd(1, q[3] + b * 512, 64);
            _tile_dpbssd(7, 0, 1);
        }
        _tile_stored(4, &sums[0][0][0], 64);
        if (P > 1) _tile_stored(5, &sums[1][0][0], 64);
        if (P > 2) _tile_stored(6, &sums[2][0][0], 64);
        if (P > 3) _tile_stored(7, &sums[3][0][0], 64);
#pragma GCC unroll 4
        for (int i = 0; i < P; i++) pair_float_step(sums[i], d[i][0], d[i][1], b, x, xs, MT, acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < P; i++) st_pair_store(acc[i], MT, y, ys, g + 2 * i, r0, r1);
}

// Pairs [g, g1), 4 side by side where there are: 9 rows of 65536x3072, 2
// threads, took 0.81x the time of the two 8-column products of the layout
// before pairs (medians of 8 alternations), 2 side by side 0.85x, one 1.0x.
ST_INLINE void run_pairs(const struct st_kern_weight *w, const uint8_t *x, size_t xs, const int MT, float *y,
                         size_t ys, int64_t g, int64_t g1, int64_t r0, int64_t r1)
{
    for (; g + 8 <= g1; g += 8) run_pairs_side(w, x, xs, MT, 4, y, ys, g, r0, r1);
    for (; g + 4 <= g1; g += 4) run_pairs_side(w, x, xs, MT, 2, y, ys, g, r0, r1);
    for (; g + 2 <= g1; g += 2) run_pairs_side(w, x, xs, MT, 1, y, ys, g, r0, r1);
}

// The VNNI kernel for the rows this one leaves to it: with 4 pairs of
// groups side by side, the streams in flight this host's cores need.
static const st_kern_mm_fn vnni = st_kern_mm_q8_0x8_side4_avx512;

static void mm_q8_0x8_amx(const struct st_kern_weight *w, const void *x, size_t xs, int mt, float *y, size_t ys,
                          int64_t r0, int64_t r1)
{
    // Up to 6 rows the VNNI kernel keeps up better (4 rows took what 1
    // takes); the tiles' fixed cost a block only pays from 7 rows on.  One
    // 8192x3072 product, 2 threads, against the VNNI kernel one group at a
    // time: 5 rows 1.22-1.46 against 1.40-1.55 ms, 8 rows 1.25-1.64 against
    // 1.79-1.94; 2-4 rows 1.13-1.44 against 0.88-1.20.  With 4 groups side
    // by side, 5 rows took 0.83-0.88x the tiles' time (one thread, 65536x3072
    // streamed from memory, alternated 61 times in one process) and 0.74-0.86x
    // with the weights in L2; 6 rows with 3 groups 0.91x (mm_vnni_avx512.c).
    // With pairs of groups the tiles at 1-6 rows still took 0.97-1.12x the
    // VNNI kernel's time (65536x3072, 2 threads, 3 alternations).
    if (mt <= 6) {
        vnni(w, x, xs, mt, y, ys, r0, r1);
        return;
    }
    // A group without its pair at either end: the VNNI kernel computes its
    // rows the same way.
    int64_t g, g1, lead_end, tail_begin;
    st_pairs_split(r0, r1, &g, &g1, &lead_end, &tail_begin);
    if (lead_end > r0) st_amx_vnni_rows(vnni, w, x, xs, mt, y, ys, r0, lead_end);
    if (tail_begin < r1) st_amx_vnni_rows(vnni, w, x, xs, mt, y, ys, tail_begin, r1);
    if (g < g1) {
        load_config(mt);
        switch (mt) {
#define CASE(n) \
    case n: run_pairs(w, (const uint8_t *)x, xs, n, y, ys, g, g1, r0, r1); break;
            CASE(7) CASE(8) CASE(9)
            CASE(10) CASE(11) CASE(12) CASE(13) CASE(14) CASE(15) CASE(16)
#undef CASE
        }
        _tile_release();
    }
}

// Whether this process may use AMX: the CPU has it, the OS saves its state
// (XCR0 bits 17 and 18) and grants this process the tile data.
bool st_kern_amx_usable(void)
{
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return false; // AMX-TILE, AMX-INT8
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    if (!(c & (1u << 27))) return false; // OSXSAVE
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
    const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
}

// ops is a copy of the avx512 level's table.
void st_kern_ops_fill_amx(struct st_kern_ops *ops)
{
    ops->mm[ST_KERN_RUN_Q8_0X8] = mm_q8_0x8_amx;
    ops->mm_rows[ST_KERN_RUN_Q8_0X8] = AMX_ROWS;
    ops->mm_tile[ST_KERN_RUN_Q8_0X8] = AMX_ROWS;
    st_kern_ops_fill_amx_unpack(ops);
}
#endif
