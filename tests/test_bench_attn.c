// `subternary bench attn`: the real binary prints a row per (context, M)
// with a figure for every SIMD level this CPU has, with --threads both
// splits of the level in use, and refuses impossible shapes with the usage
// (exit 2).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "tests/support/test_support.h"

static char out[1 << 16];

static void test_rows(void **state)
{
    (void)state;
    const char *args[] = {"bench", "attn", "--lengths", "40,70", "--m", "1,3", "--layers", "2",
                          "--shape", "6/2/64", "--trials", "1", NULL};
    int rc = st_run_cli(out, sizeof out, args);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    if (!strstr(out, "6 heads / 2 KV heads x 64, 2 layers")) fail_msg("no header in:\n%s", out);
    int rows = 0;
    for (const char *l = out; (l = strchr(l, '\n')) != NULL; l++) {
        unsigned ctx, m;
        double ms, gbs;
        if (sscanf(l + 1, "%u %u %lf %lf", &ctx, &m, &ms, &gbs) == 4) {
            assert_true((ctx == 40 || ctx == 70) && (m == 1 || m == 3));
            // GB/s is printed to one decimal: a slow trial of these tiny
            // shapes (1 trial, ASan, a busy host) rightly prints 0.0, so
            // check it against the bytes of K and V over the printed time,
            // within the rounding of both (0.05 GB/s; 0.00005 ms).
            double bytes = 2.0 * ctx * 2 * 64 * sizeof(uint16_t); // K and V, 2 KV heads x 64, F16
            double want = bytes / (ms * 1e-3) / 1e9;
            assert_true(ms > 0);
            if (fabs(gbs - want) > 0.05 + want * (0.00005 / ms + 0.001))
                fail_msg("%u positions: %.4f ms and %.1f GB/s, where %.0f bytes give %.3f GB/s", ctx, ms, gbs, bytes,
                         want);
            rows++;
        }
    }
    st_kern_init();
    if (st_kern_ops_get(ST_KERN_LEVEL_AVX2))
        assert_int_equal(rows, 4);
    else
        assert_int_equal(rows, 0);
    if (st_kern_ops_get(ST_KERN_LEVEL_AVX512) && !strstr(out, "avx512/avx2")) fail_msg("no ratio in:\n%s", out);
}

static void test_threads(void **state)
{
    (void)state;
    const char *args[] = {"bench", "attn", "--lengths", "40,1100", "--m", "1", "--layers", "2", "--shape", "6/2/64",
                          "--trials", "1", "--threads", "2", NULL};
    int rc = st_run_cli(out, sizeof out, args);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    if (!strstr(out, "2 threads")) fail_msg("no header in:\n%s", out);
    const char *one = strstr(out, "\n      40   1"), *three = strstr(out, "\n    1100   1");
    if (!one || !three) fail_msg("rows missing in:\n%s", out);
    double h, hg, sgm, sg, ratio;
    assert_int_equal(sscanf(one + 14, "%lf %lf", &h, &hg), 2);
    assert_true(h > 0 && strstr(one, "one segment") < strstr(one + 1, "\n"));
    st_kern_init();
    if (!st_kern_ops_get(ST_KERN_LEVEL_AVX2)) return; // the reference: split by heads only
    assert_int_equal(sscanf(three + 14, "%lf %lf %lf %lf %lfx", &h, &hg, &sgm, &sg, &ratio), 5);
    assert_true(h > 0 && sgm > 0 && ratio > 0);
}

static void test_bad_shapes(void **state)
{
    (void)state;
    const char *bad[][3] = {{"--shape", "6/4/64", NULL}, {"--m", "0", NULL}, {"--lengths", "x", NULL},
                            {"--layers", "0", NULL}, {"--trials", NULL, NULL}, {"--threads", "0", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *args[] = {"bench", "attn", bad[i][0], bad[i][1], NULL};
        assert_int_equal(st_run_cli(out, sizeof out, args), 2);
        char named[64]; // a bad count names its option; the rest print the usage
        snprintf(named, sizeof named, "bench attn: %s: '", bad[i][0]);
        if (!strstr(out, "usage: subternary bench attn") && !strstr(out, named))
            fail_msg("no usage and no error naming %s:\n%s", bad[i][0], out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rows), cmocka_unit_test(test_threads),
                                       cmocka_unit_test(test_bad_shapes)};
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
