// The AVX-512 VNNI kernels, checked on any AVX2 machine: their source is
// compiled here with vpdpbusd replaced by an exact AVX2 emulation, and every
// product must equal the AVX2 kernels' bit for bit (same integer sums, same
// float steps), for every M and odd row ranges.  On a CPU with AVX-512 VNNI
// the real instructions are checked too, against the same AVX2 results.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#if defined(__x86_64__)
#include "kernels/simd_x86.h"

// acc + sum over the 4 bytes of each 32-bit lane of u8(a) * s8(b), exactly.
static inline __m256i emu_dpbusd(__m256i acc, __m256i a, __m256i b)
{
    __m256i a_even = _mm256_and_si256(a, _mm256_set1_epi16(0x00ff)), a_odd = _mm256_srli_epi16(a, 8);
    __m256i b_even = _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 8), b_odd = _mm256_srai_epi16(b, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a_even, b_even),
                                                  _mm256_madd_epi16(a_odd, b_odd)));
}

#undef _mm256_dpbusd_epi32
#define _mm256_dpbusd_epi32(acc, a, b) emu_dpbusd(acc, a, b)
#define st_kern_ops_fill_avx512 emu_fill_avx512
#include "kernels/mm_vnni_avx512.c"
#undef st_kern_ops_fill_avx512

static uint64_t rng = 0x1234567887654321u;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void *gen(uint32_t type, int64_t rows, int64_t cols)
{
    size_t n = st_type_row_bytes(type, cols) * (size_t)rows;
    uint8_t *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
    const struct st_type_info *ti = st_type_get(type);
    for (int64_t i = 0; i < rows * cols / ti->block_elems; i++) {
        uint8_t *b = p + (size_t)i * ti->block_bytes;
        uint16_t d = st_f32_to_f16((float)(rnd() % 1000) / 1e5f);
        switch (type) {
        case ST_TYPE_Q8_0: ((struct st_block_q8_0 *)b)->d = d; break;
        case ST_TYPE_Q4_0: ((struct st_block_q4_0 *)b)->d = d; break;
        case ST_TYPE_TQ1_0: ((struct st_block_tq1_0 *)b)->d = d; break;
        default: {
            struct st_block_tq2_0 *t = (struct st_block_tq2_0 *)b;
            for (int j = 0; j < 64; j++)
                if ((t->qs[j] & 0xaa) & ((t->qs[j] & 0x55) << 1)) t->qs[j] &= 0x55;
            t->d = d;
        }
        }
    }
    return p;
}

static void compare(const struct st_kern_ops *a, const struct st_kern_ops *b, const char *what)
{
    static const struct {
        uint32_t src, run;
    } fs[] = {{ST_TYPE_Q8_0, ST_KERN_RUN_Q8_0X8},
              {ST_TYPE_Q4_0, ST_KERN_RUN_Q4_0X8},
              {ST_TYPE_TQ1_0, ST_KERN_RUN_TERNARY_MASK},
              {ST_TYPE_TQ2_0, ST_KERN_RUN_TERNARY_CODE}};
    for (int f = 0; f < 4; f++)
        for (int64_t rows = 1; rows <= 77; rows += 19) {
            int64_t cols = st_type_get(fs[f].src)->block_elems == 32 ? 96 : 512;
            void *src = gen(fs[f].src, rows, cols);
            size_t sz = st_kern_run_size(fs[f].run, rows, cols);
            void *run = aligned_alloc(64, (sz + 63) & ~(size_t)63);
            struct st_error e;
            struct st_kern_weight w;
            if (st_kern_repack(fs[f].src, rows, cols, fs[f].run, src, 0, rows, run, sz, &e) ||
                st_kern_weight_init(&w, fs[f].run, rows, cols, run, &e))
                fail_msg("%s", e.msg);
            enum { M = 9 };
            float x[M * 512];
            for (int i = 0; i < M * cols; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
            void *xq = malloc(st_kern_act_row_bytes(fs[f].run, cols) * M);
            st_kern_quantize_act(fs[f].run, x, xq, M, cols);
            float ya[M * 77], yb[M * 77];
            for (int m = 1; m <= M; m += 4) {
                memset(ya, 0, sizeof ya);
                memset(yb, 0, sizeof yb);
                st_kern_matmul_ops(a, &w, xq, m, ya, 0, rows);
                st_kern_matmul_ops(b, &w, xq, m, yb, 0, rows / 3);
                st_kern_matmul_ops(b, &w, xq, m, yb, rows / 3, rows);
                if (memcmp(ya, yb, sizeof(float) * m * rows))
                    fail_msg("%s: %s %lldx%lld M=%d differs from AVX2", what, st_kern_run_name(fs[f].run),
                             (long long)rows, (long long)cols, m);
            }
            free(xq);
            free(run);
            free(src);
        }
}

static void test_vnni_emulated(void **state)
{
    (void)state;
    const struct st_kern_ops *avx2 = st_kern_ops_get(ST_KERN_LEVEL_AVX2);
    if (!avx2) skip();
    static struct st_kern_ops emu;
    emu = *avx2;
    emu_fill_avx512(&emu);
    compare(avx2, &emu, "emulated VNNI");
}

static void test_vnni_native(void **state)
{
    (void)state;
    const struct st_kern_ops *avx2 = st_kern_ops_get(ST_KERN_LEVEL_AVX2);
    const struct st_kern_ops *avx512 = st_kern_ops_get(ST_KERN_LEVEL_AVX512);
    if (!avx2 || !avx512) {
        printf("no AVX-512 VNNI on this CPU: native check skipped\n");
        skip();
    }
    compare(avx2, avx512, "AVX-512 VNNI");
}

static int run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vnni_emulated),
        cmocka_unit_test(test_vnni_native),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

// This file is compiled for AVX2; main runs first and stays plain x86-64 so
// that a CPU without AVX2 skips instead of faulting.
__attribute__((target("no-avx2,no-avx,no-fma,no-f16c"))) int main(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
        printf("no AVX2: test_kernels_vnni skipped\n");
        return 0;
    }
    return run();
}
#else
int main(void)
{
    return 0; // nothing to check off x86-64
}
#endif
