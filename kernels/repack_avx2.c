// The Q8_0 -> q8_0x8 repack of a whole pair of 8-row groups and the Q4_0 ->
// q4_0x8 one of a group, AVX2: per block, 8 rows' quants are an 8 x 8 (Q4_0:
// 8 x 4) matrix of 4-byte column groups, and the run format wants it
// transposed (vector g = group g of rows 0..7).  Model loading spends most of its CPU time here.
// Every loop is unrolled by pragma: left rolled, the arrays went through the
// stack and the Q8_0 repack ran at a third of the speed (one thread, L2 to
// region: 6 against 17.5 GB/s).
#if defined(__x86_64__)
#include "kernels/simd_x86.h"

// Stores one repacked block: nv quant vectors and 8 rows' scales (dv; a
// pair's second group stores its scales with nv 0).
// Streaming stores, in address order, where aligned: the weights are not
// read again here, and skipping the read-for-ownership halves the memory
// traffic.  The scales go the same way (one 16-byte store a block, where 8
// two-byte stores each read their line first).
ST_INLINE void store_block(uint8_t *qdst, const __m256i *o, const int nv, uint8_t *sdst, __m128i dv, bool aligned)
{
    __m256i *out = (__m256i *)qdst;
    if (aligned) {
#pragma GCC unroll 16
        for (int v = 0; v < nv; v++) _mm256_stream_si256(out + v, o[v]);
        _mm_stream_si128((__m128i *)sdst, dv);
    } else {
#pragma GCC unroll 16
        for (int v = 0; v < nv; v++) _mm256_storeu_si256(out + v, o[v]);
        _mm_storeu_si128((__m128i *)sdst, dv);
    }
}

// The 8 rows of a group are one contiguous run of the source, read here 8
// places at a time, which the hardware prefetchers follow poorly; each block
// prefetches its share of the next group in address order instead (4.3 GB
// of 3072-column Q8_0 rows in memory: one thread 8.4 -> 10 GB/s, two 16.5
// -> 21; a whole warm l3b load about 3%, within the host's noise).
// Prefetches never fault, so reaching past the source's end is harmless.
ST_INLINE const uint8_t *prefetch_next(const uint8_t *pf, const uint8_t *until)
{
    for (; pf < until; pf += 64) _mm_prefetch((const char *)pf, _MM_HINT_T0);
    return pf;
}

// Block b of 8 Q8_0 rows transposed: o[g] = columns 4g..4g+3 of rows
// 0..7; their f16 scales packed in d (rows 0-3, 4-7).
ST_INLINE void q8_0_transpose8(const uint8_t *rows8, size_t src_row, int64_t b, __m256i *o, uint64_t *d)
{
    const size_t sb = sizeof(struct st_block_q8_0);
    __m256i a[8], t[8], u[8];
    d[0] = d[1] = 0;
#pragma GCC unroll 8
    for (int l = 0; l < 8; l++) {
        const uint8_t *blk = rows8 + (size_t)l * src_row + (size_t)b * sb;
        uint16_t dl;
        memcpy(&dl, blk, sizeof dl);
        d[l / 4] |= (uint64_t)dl << (16 * (l % 4));
        a[l] = _mm256_loadu_si256((const __m256i *)(blk + 2));
    }
#pragma GCC unroll 4
    for (int l = 0; l < 8; l += 2) {
        t[l] = _mm256_unpacklo_epi32(a[l], a[l + 1]);
        t[l + 1] = _mm256_unpackhi_epi32(a[l], a[l + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) { // rows h..h+3
        u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
        u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
        u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
        u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) { // u[c] holds groups c and c + 4 of rows 0..3, u[4 + c] of rows 4..7
        o[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
        o[c + 4] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
    }
}

// A pair's block: vector g is o0[g] (rows 0..7) then o1[g] (rows 8..15),
// 64 bytes, stored whole line by line.
void st_kern_repack_q8_0x8_pair_avx2(const uint8_t *rows16, size_t src_row, int64_t nb, uint8_t *unit)
{
    const size_t bs = 512;
    uint8_t *scales0 = unit + (size_t)nb * bs, *scales1 = scales0 + (size_t)nb * 16;
    const bool aligned = (uintptr_t)unit % 32 == 0;
    const uint8_t *next = rows16 + 16 * src_row, *pf = next;
    for (int64_t b = 0; b < nb; b++) {
        pf = prefetch_next(pf, next + 16 * src_row * (size_t)(b + 1) / (size_t)nb);
        __m256i o0[8], o1[8], o[16];
        uint64_t d0[2], d1[2];
        q8_0_transpose8(rows16, src_row, b, o0, d0);
        q8_0_transpose8(rows16 + 8 * src_row, src_row, b, o1, d1);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            o[2 * g] = o0[g];
            o[2 * g + 1] = o1[g];
        }
        store_block(unit + (size_t)b * bs, o, 16, scales0 + 16 * b, _mm_set_epi64x((long long)d0[1], (long long)d0[0]),
                    aligned);
        store_block(unit + (size_t)b * bs, o, 0, scales1 + 16 * b, _mm_set_epi64x((long long)d1[1], (long long)d1[0]),
                    aligned);
    }
    _mm_sfence();
}

// Q4_0 keeps 16 bytes of nibbles a block: rows l and l + 4 share a vector
// (low and high lane), so the 32-bit and 64-bit interleaves give vector g
// directly, without crossing lanes.
void st_kern_repack_q4_0x8_group_avx2(const uint8_t *rows8, size_t src_row, int64_t nb, uint8_t *g)
{
    const size_t sb = sizeof(struct st_block_q4_0), qb = 128;
    uint8_t *scales = g + (size_t)nb * qb;
    const bool aligned = (uintptr_t)g % 32 == 0;
    const uint8_t *next = rows8 + 8 * src_row, *pf = next;
    for (int64_t b = 0; b < nb; b++) {
        pf = prefetch_next(pf, next + 8 * src_row * (size_t)(b + 1) / (size_t)nb);
        __m256i r[4];
        uint64_t d[2] = {0, 0};
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++) {
            const uint8_t *lo = rows8 + (size_t)l * src_row + (size_t)b * sb, *hi = lo + 4 * src_row;
            uint16_t dl, dh;
            memcpy(&dl, lo, sizeof dl);
            memcpy(&dh, hi, sizeof dh);
            d[0] |= (uint64_t)dl << (16 * l);
            d[1] |= (uint64_t)dh << (16 * l);
            r[l] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(hi + 2)),
                                    _mm_loadu_si128((const __m128i *)(lo + 2)));
        }
        __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        __m256i o[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                        _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
        store_block(g + (size_t)b * qb, o, 4, scales + 16 * b, _mm_set_epi64x((long long)d[1], (long long)d[0]), aligned);
    }
    _mm_sfence();
}
#endif
