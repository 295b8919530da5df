// The reference forward pass against llama.cpp's logits for every row of
// shared/golden/manifest.tsv, and greedy decoding after p101 for the F32, F16
// and Q8_0 models.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/llama.h"
#include "model/llama_ref.h"
#include "tests/support/test_support.h"

static struct st_golden_row *rows;
static int n_rows;

static void test_logits(void **state)
{
    (void)state;
    assert_true(n_rows >= 20);
    for (int i = 0; i < n_rows; i++) {
        const struct st_golden_row *r = &rows[i];
        char path[1024];
        struct st_error e;
        struct st_llama_model *m;
        struct st_ref_state *s;
        if (st_llama_open(st_test_shared(r->model, path, sizeof path), &m, &e)) fail_msg("%s", e.msg);
        assert_int_equal(m->hp.n_vocab, r->n_vocab);
        assert_int_equal(st_ref_new(m, r->n_prompt, &s, &e), 0);
        float *ours = malloc((size_t)r->n_prompt * r->n_vocab * sizeof(float));
        float *gold = st_golden_logits(r);
        assert_non_null(ours);
        assert_non_null(gold);
        assert_int_equal(st_ref_forward(s, r->prompt_ids, r->n_prompt, 0, ours, &e), 0);
        char msg[512];
        if (st_golden_report(r, gold, ours, NULL, msg, sizeof msg)) fail_msg("%s", msg);
        free(ours);
        free(gold);
        st_ref_free(&s);
        st_llama_close(&m);
    }
}

static int argmax(const float *v, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return (int)b;
}

static void test_greedy64(void **state)
{
    (void)state;
    int checked = 0;
    for (int i = 0; i < n_rows; i++) {
        const struct st_golden_row *r = &rows[i];
        if (strcmp(r->prompt, "p101") ||
            !(strstr(r->model, ".f32.") || strstr(r->model, ".f16.") || strstr(r->model, ".q8_0.")))
            continue;
        char path[1024];
        struct st_error e;
        struct st_llama_model *m;
        struct st_ref_state *s;
        if (st_llama_open(st_test_shared(r->model, path, sizeof path), &m, &e)) fail_msg("%s", e.msg);
        assert_int_equal(st_ref_new(m, r->n_prompt + 64, &s, &e), 0);
        float *logits = malloc((size_t)r->n_prompt * r->n_vocab * sizeof(float));
        assert_int_equal(st_ref_forward(s, r->prompt_ids, r->n_prompt, 0, logits, &e), 0);
        int32_t tok = argmax(logits + (size_t)(r->n_prompt - 1) * r->n_vocab, r->n_vocab);
        for (uint32_t k = 0; k < r->n_greedy; k++) {
            if (tok != r->greedy[k]) fail_msg("%s: greedy token %u is %d, llama.cpp %d", r->model, k, tok, r->greedy[k]);
            if (k + 1 == r->n_greedy) break;
            assert_int_equal(st_ref_forward(s, &tok, 1, r->n_prompt + k, logits, &e), 0);
            tok = argmax(logits, r->n_vocab);
        }
        printf("  %-34s greedy64 identical\n", r->model);
        checked++;
        free(logits);
        st_ref_free(&s);
        st_llama_close(&m);
    }
    assert_true(checked >= 4);
}

int main(void)
{
    n_rows = st_golden_load(&rows);
    if (n_rows <= 0) {
        fprintf(stderr, "cannot read golden/manifest.tsv under $ST_SHARED\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits),
        cmocka_unit_test(test_greedy64),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(rows);
    return rc;
}
