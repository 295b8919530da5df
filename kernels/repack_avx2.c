// The Q8_0 -> q8_0x8 repack of a whole 8-row group, AVX2: per block, the
// 8 rows' 32 quants are an 8 x 8 matrix of 4-byte column groups, and the
// run format wants it transposed (vector g = group g of rows 0..7).  Model
// loading spends most of its CPU time here; the scalar copy does ~4 GB/s.
#if defined(__x86_64__)
#include "kernels/simd_x86.h"

void st_kern_repack_q8_0x8_group_avx2(const uint8_t *rows8, size_t src_row, int64_t nb, uint8_t *g)
{
    const size_t sb = sizeof(struct st_block_q8_0), qb = 256;
    uint16_t *scales = (uint16_t *)(g + (size_t)nb * qb);
    const bool aligned = (uintptr_t)g % 32 == 0;
    for (int64_t b = 0; b < nb; b++) {
        __m256i a[8], t[8], u[8];
        for (int l = 0; l < 8; l++) {
            const uint8_t *blk = rows8 + (size_t)l * src_row + (size_t)b * sb;
            memcpy(&scales[b * 8 + l], blk, sizeof(uint16_t));
            a[l] = _mm256_loadu_si256((const __m256i *)(blk + 2));
        }
        for (int l = 0; l < 8; l += 2) {
            t[l] = _mm256_unpacklo_epi32(a[l], a[l + 1]);
            t[l + 1] = _mm256_unpackhi_epi32(a[l], a[l + 1]);
        }
        for (int h = 0; h < 8; h += 4) { // rows h..h+3
            u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
            u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
            u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
            u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
        }
        __m256i *out = (__m256i *)(g + (size_t)b * qb);
        for (int c = 0; c < 4; c++) { // u[c] holds groups c and c + 4 of rows 0..3, u[4 + c] of rows 4..7
            __m256i lo = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
            __m256i hi = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
            // Streaming stores: the weights are not read again here, and
            // skipping the read-for-ownership halves the memory traffic.
            if (aligned) {
                _mm256_stream_si256(out + c, lo);
                _mm256_stream_si256(out + c + 4, hi);
            } else {
                _mm256_storeu_si256(out + c, lo);
                _mm256_storeu_si256(out + c + 4, hi);
            }
        }
    }
    _mm_sfence();
}
#endif
