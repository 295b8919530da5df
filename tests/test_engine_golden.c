// The fast path (worker processes, SIMD kernels, shared-memory KV) against
// llama.cpp's logits for every row of shared/golden/manifest.tsv, and greedy
// decoding after p101 for F32/F16/Q8_0 models.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/engine_support.h"
#include "tests/support/test_support.h"

static struct st_golden_row *rows;
static int n_rows;

static void test_engine_logits(void **state)
{
    (void)state;
    for (int i = 0; i < n_rows; i++) {
        const struct st_golden_row *r = &rows[i];
        struct st_test_engine t;
        assert_int_equal(st_test_engine_open(&t, r->model, NULL, 2, 1, 1), 0);
        float *ours = malloc((size_t)r->n_prompt * r->n_vocab * sizeof(float));
        float *gold = st_golden_logits(r);
        struct st_error e;
        if (st_engine_logits(t.eng, 0, r->prompt_ids, r->n_prompt, ours, &e)) fail_msg("%s", e.msg);
        double worst;
        char msg[512];
        int rc = st_golden_check(r, gold, ours, &worst, msg, sizeof msg);
        printf("  %-34s %s  max |diff| / std = %.4f\n", r->model, r->prompt, worst);
        if (rc) fail_msg("%s", msg);
        free(ours);
        free(gold);
        st_test_engine_close(&t);
    }
}

static void test_engine_greedy64(void **state)
{
    (void)state;
    int checked = 0;
    for (int i = 0; i < n_rows; i++) {
        const struct st_golden_row *r = &rows[i];
        if (strcmp(r->prompt, "p101") ||
            !(strstr(r->model, ".f32.") || strstr(r->model, ".f16.") || strstr(r->model, ".q8_0.")))
            continue;
        struct st_test_engine t;
        assert_int_equal(st_test_engine_open(&t, r->model, NULL, 2, 1, 1), 0);
        struct st_gen_params gp = {.max_tokens = r->n_greedy, .speculate = false};
        int32_t *ids;
        uint32_t n;
        assert_int_equal(st_test_generate(t.eng, &gp, r->prompt_ids, r->n_prompt, &ids, &n, NULL), 0);
        assert_int_equal(n, r->n_greedy);
        for (uint32_t k = 0; k < n; k++)
            if (ids[k] != r->greedy[k]) fail_msg("%s: token %u is %d, llama.cpp %d", r->model, k, ids[k], r->greedy[k]);
        printf("  %-34s greedy64 identical\n", r->model);
        free(ids);
        st_test_engine_close(&t);
        checked++;
    }
    assert_true(checked >= 4);
}

int main(void)
{
    n_rows = st_golden_load(&rows);
    if (n_rows <= 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_logits),
        cmocka_unit_test(test_engine_greedy64),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(rows);
    return rc;
}
