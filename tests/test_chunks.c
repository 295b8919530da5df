// The chunk schedule of the workers' matrix products (worker/chunks.h):
// every row of every matrix lands in exactly one chunk, in order, cut at
// whole pairs of q8_0x8 groups; decode and verify chunks shrink as the op
// runs down to the minimum, so the last ones are small; prefill's are equal;
// seeking from any claimed index gives the same chunk as walking to it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "worker/chunks.h"

static struct st_kern_weight weight(uint32_t type, int64_t rows, int64_t cols)
{
    return (struct st_kern_weight){.type = type, .rows = rows, .cols = cols, .group = 8};
}

// Walks every chunk; checks coverage and alignment; returns the sizes.
static int walk(const struct st_kern_weight *const *ws, int n_w, int share, uint32_t M, uint32_t ranks,
                int64_t *sizes, int max)
{
    struct st_chunks c;
    st_chunks_plan(&c, ws, n_w, share, M, ranks);
    assert_true(c.count >= 1 && c.count <= (uint64_t)max);
    int w = 0;
    int64_t next = 0;
    for (uint64_t i = 0; i < c.count; i++) {
        st_chunks_seek(&c, i);
        assert_true(c.index == i);
        if (c.w != w) {
            assert_int_equal(next, ws[w]->rows); // the matrix before was finished
            assert_int_equal(c.w, w + 1);
            w = c.w, next = 0;
        }
        assert_int_equal(c.r0, next);
        assert_true(c.r1 > c.r0 && c.r1 <= ws[w]->rows);
        assert_true(c.r0 % 16 == 0 && (c.r1 % 16 == 0 || c.r1 == ws[w]->rows));
        sizes[i] = c.r1 - c.r0;
        next = c.r1;
    }
    assert_int_equal(w, n_w - 1);
    assert_int_equal(next, ws[w]->rows);
    return (int)c.count;
}

static void test_decode_chunks_shrink(void **state)
{
    (void)state;
    // l3b's FFN gate and up (8192 x 3072 Q8_0, read together), 2 ranks.
    struct st_kern_weight g = weight(ST_KERN_RUN_Q8_0X8, 8192, 3072);
    const struct st_kern_weight *ws[] = {&g};
    int64_t s[4096];
    int n = walk(ws, 1, 2, 1, 2, s, 4096);
    assert_true(n >= 8 && n <= 40);
    assert_true(s[0] >= 8192 / 4 - 16 && s[0] <= 8192 / 4 + 16); // a quarter first
    for (int i = 1; i < n; i++) assert_true(s[i] <= s[i - 1]);
    // The tail: the last chunks are about 512 KiB of gate and up rows.
    int64_t row_bytes = (int64_t)st_kern_run_size(g.type, g.rows, g.cols) / g.rows * 2;
    assert_true(s[n - 2] * row_bytes <= (768 << 10));
    assert_true(s[n - 2] * row_bytes >= (512 << 10));
}

static void test_concatenated_matrices(void **state)
{
    (void)state;
    // q, k and v walked as one row space: the big chunks go first, the
    // tail lands in v.
    struct st_kern_weight q = weight(ST_KERN_RUN_Q8_0X8, 3072, 3072), k = weight(ST_KERN_RUN_Q8_0X8, 1024, 3072),
                          v = weight(ST_KERN_RUN_Q8_0X8, 1024, 3072);
    const struct st_kern_weight *ws[] = {&q, &k, &v};
    int64_t s[4096];
    int n = walk(ws, 3, 1, 5, 2, s, 4096);
    assert_true(s[0] >= 5120 / 4 - 16 && s[0] <= 5120 / 4 + 16);
    assert_true(s[n - 1] < s[0] / 4);
    // Odd sizes and one rank, many ranks, matrices smaller than a chunk.
    struct st_kern_weight a = weight(ST_KERN_RUN_Q8_0X8, 1000, 256), b = weight(ST_KERN_RUN_Q8_0X8, 8, 256),
                          c = weight(ST_KERN_RUN_Q8_0X8, 32001, 4096);
    const struct st_kern_weight *odd[] = {&a, &b, &c};
    for (uint32_t ranks = 1; ranks <= 64; ranks *= 4) {
        walk(odd, 3, 1, 1, ranks, s, 4096);
        walk(odd, 3, 1, 16, ranks, s, 4096);
        walk(odd, 3, 1, 17, ranks, s, 4096);
    }
}

static void test_prefill_chunks_equal(void **state)
{
    (void)state;
    struct st_kern_weight g = weight(ST_KERN_RUN_Q8_0X8, 8192, 3072);
    const struct st_kern_weight *ws[] = {&g};
    int64_t s[4096];
    int n = walk(ws, 1, 2, 64, 2, s, 4096);
    assert_int_equal(n, 16); // 8 a rank
    for (int i = 0; i < n; i++) assert_int_equal(s[i], 512);
}

static void test_seek_forward_only(void **state)
{
    (void)state;
    struct st_kern_weight g = weight(ST_KERN_RUN_Q4_0X8, 5632, 2048);
    const struct st_kern_weight *ws[] = {&g};
    struct st_chunks a, b;
    st_chunks_plan(&a, ws, 1, 1, 1, 3);
    for (uint64_t i = 0; i < a.count; i += 3) {
        st_chunks_plan(&b, ws, 1, 1, 1, 3);
        st_chunks_seek(&b, i); // straight there
        st_chunks_seek(&a, i); // in steps
        assert_true(a.r0 == b.r0 && a.r1 == b.r1 && a.w == b.w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_chunks_shrink),
        cmocka_unit_test(test_concatenated_matrices),
        cmocka_unit_test(test_prefill_chunks_equal),
        cmocka_unit_test(test_seek_forward_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
