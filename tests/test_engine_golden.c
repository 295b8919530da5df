// The fast path (worker processes, SIMD kernels, shared-memory KV) against
// llama.cpp's logits for every row of shared/golden/manifest.tsv, greedy
// decoding after p101 for F32/F16/Q8_0 models, and a context longer than one
// attention segment against the reference forward.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/llama_ref.h"
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
        char msg[512];
        if (st_golden_report(r, gold, ours, NULL, msg, sizeof msg)) fail_msg("%s", msg);
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

// 1000 positions, fed 9 rows at a time (k_max + 1, as decode and verify
// steps are) to 3 ranks, more than the models' 2 KV heads: past position
// 512 the ranks split attention by segments of positions and fold the
// partials.  The reference forward (float64, one batch) is the independent
// side, held to the README's bounds.
static void test_engine_long_context(void **state)
{
    (void)state;
    static const char *models[] = {"models/pico-target.f16.gguf", "models/pico-target.q8_0.gguf",
                                   "models/pico-draft.f16.gguf"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        struct st_golden_row *r = calloc(1, sizeof *r);
        assert_non_null(r);
        snprintf(r->model, sizeof r->model, "%s", models[i]);
        snprintf(r->prompt, sizeof r->prompt, "long1000");
        char path[1024];
        struct st_error e;
        struct st_llama_model *m;
        if (st_llama_open(st_test_shared(r->model, path, sizeof path), &m, &e)) fail_msg("%s", e.msg);
        r->n_vocab = m->hp.n_vocab;
        r->n_prompt = 1000;
        uint32_t x = 12345;
        r->prompt_ids[0] = 1;
        for (uint32_t k = 1; k < r->n_prompt; k++) {
            x = x * 1103515245u + 12345u;
            r->prompt_ids[k] = (int32_t)((x >> 8) % r->n_vocab);
        }
        size_t n = (size_t)r->n_prompt * r->n_vocab;
        float *ref = malloc(n * sizeof(float)), *ours = malloc(n * sizeof(float));
        assert_non_null(ref);
        assert_non_null(ours);
        struct st_ref_state *s;
        assert_int_equal(st_ref_new(m, r->n_prompt, &s, &e), 0);
        assert_int_equal(st_ref_forward(s, r->prompt_ids, r->n_prompt, 0, ref, &e), 0);
        st_ref_free(&s);
        st_llama_close(&m);
        struct st_test_engine t;
        assert_int_equal(st_test_engine_open(&t, r->model, NULL, 3, 1, 1), 0);
        if (st_engine_logits(t.eng, 0, r->prompt_ids, r->n_prompt, ours, &e)) fail_msg("%s", e.msg);
        st_test_engine_close(&t);
        char msg[512];
        if (st_golden_report(r, ref, ours, "the reference forward", msg, sizeof msg)) fail_msg("%s", msg);
        free(ref);
        free(ours);
        free(r);
    }
}

int main(void)
{
    n_rows = st_golden_load(&rows);
    if (n_rows <= 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_logits),
        cmocka_unit_test(test_engine_greedy64),
        cmocka_unit_test(test_engine_long_context),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(rows);
    return rc;
}
