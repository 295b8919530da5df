// Synthetic models at small shapes: the vocabulary, the successor map, files
// that load and say what was asked, the no-layer model predicting succ(x),
// greedy acceptance that falls as eps grows, and the gen CLI's errors.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/types.h"
#include "model/llama.h"
#include "model/llama_ref.h"
#include "model/synth.h"
#include "tests/support/test_support.h"

#define SPACE "\xe2\x96\x81"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_vocab(void **state)
{
    (void)state;
    struct st_synth_vocab *v;
    struct st_error e;
    assert_int_equal(st_synth_vocab_build(ST_SYNTH_VOCAB_MIN - 1, &v, &e), -1);
    assert_non_null(strstr(e.msg, "vocabulary size"));
    uint32_t sizes[] = {512, 32000};
    for (int s = 0; s < 2; s++) {
        assert_int_equal(st_synth_vocab_build(sizes[s], &v, &e), 0);
        assert_int_equal(v->n, sizes[s]);
        assert_string_equal(v->tokens[0], "<unk>");
        assert_int_equal(v->types[0], ST_SYNTH_TOKEN_UNKNOWN);
        assert_string_equal(v->tokens[1], "<s>");
        assert_string_equal(v->tokens[2], "</s>");
        assert_int_equal(v->types[2], ST_SYNTH_TOKEN_CONTROL);
        assert_int_equal(v->bos, 1);
        for (int b = 0; b < 256; b++) {
            char want[8];
            snprintf(want, sizeof want, "<0x%02X>", b);
            assert_string_equal(v->tokens[3 + b], want);
            assert_int_equal(v->types[3 + b], ST_SYNTH_TOKEN_BYTE);
        }
        // Unique; every printable character and the common words present;
        // every piece's prefix (one character shorter) present; longer
        // pieces score higher.
        char **sorted = malloc(v->n * sizeof *sorted);
        memcpy(sorted, v->tokens, v->n * sizeof *sorted);
        qsort(sorted, v->n, sizeof *sorted, cmp_str);
        for (uint32_t i = 1; i < v->n; i++) assert_string_not_equal(sorted[i - 1], sorted[i]);
        float max_score[64] = {0}, min_score[64];
        for (int i = 0; i < 64; i++) min_score[i] = 1e30f;
        bool have_the = false, have_space = false;
        int printable = 0;
        for (uint32_t i = 0; i < v->n; i++) {
            if (v->types[i] != ST_SYNTH_TOKEN_NORMAL) continue;
            const char *t = v->tokens[i];
            size_t len = strlen(t);
            int chars = 0;
            for (size_t k = 0; k < len; k++) chars += ((uint8_t)t[k] & 0xc0) != 0x80;
            have_the |= !strcmp(t, SPACE "the");
            have_space |= !strcmp(t, SPACE);
            printable += len == 1 && t[0] > 0x20 && t[0] < 0x7f;
            if (chars > 1) {
                char prefix[64];
                size_t cut = len - 1;
                while (((uint8_t)t[cut] & 0xc0) == 0x80) cut--;
                memcpy(prefix, t, cut);
                prefix[cut] = 0;
                const char *key = prefix;
                if (!bsearch(&key, sorted, v->n, sizeof *sorted, cmp_str)) fail_msg("token '%s' has no prefix token", t);
            }
            assert_true(chars < 64);
            if (v->scores[i] > max_score[chars]) max_score[chars] = v->scores[i];
            if (v->scores[i] < min_score[chars]) min_score[chars] = v->scores[i];
        }
        free(sorted);
        assert_true(have_the && have_space);
        assert_int_equal(printable, 94);
        for (int c = 1; c + 1 < 64 && min_score[c + 1] < 1e30f; c++) assert_true(max_score[c] < min_score[c + 1]);
        st_synth_vocab_free(&v);
    }
}

static void test_successors(void **state)
{
    (void)state;
    struct st_synth_vocab *v;
    struct st_error e;
    assert_int_equal(st_synth_vocab_build(512, &v, &e), 0);
    uint32_t *s1 = malloc(v->n * sizeof *s1), *s2 = malloc(v->n * sizeof *s2);
    bool *seen = calloc(v->n, 1);
    assert_int_equal(st_synth_successors(v, 1, s1, &e), 0);
    uint32_t n_normal = 0, start = 0;
    for (uint32_t x = 0; x < v->n; x++) {
        assert_int_equal(v->types[s1[x]], ST_SYNTH_TOKEN_NORMAL); // never a special or byte token
        if (v->types[x] == ST_SYNTH_TOKEN_NORMAL) n_normal++, start = x;
    }
    // One cycle through every normal token.
    uint32_t x = start;
    for (uint32_t i = 0; i < n_normal; i++) {
        assert_false(seen[x]);
        seen[x] = true;
        x = s1[x];
    }
    assert_int_equal(x, start);
    assert_int_equal(st_synth_successors(v, 1, s2, &e), 0);
    assert_memory_equal(s1, s2, v->n * sizeof *s1);
    assert_int_equal(st_synth_successors(v, 2, s2, &e), 0);
    assert_memory_not_equal(s1, s2, v->n * sizeof *s1);
    free(s1);
    free(s2);
    free(seen);
    st_synth_vocab_free(&v);
}

static struct st_synth_model tiny(const char *role, uint32_t dim, float eps, int type)
{
    struct st_synth_model m = {.shape = {"tiny", dim, 2, 4, 2, 2 * dim, 256, 10000.0f, eps, type, NULL},
                               .role = role, .seed = 3, .gain = 3, .attn_sharpness = 10};
    snprintf(m.name, sizeof m.name, "tiny %s", role);
    st_quant_plan_init(&m.plan, type);
    return m;
}

static void write_model(const char *path, const struct st_synth_model *m, const struct st_synth_vocab *v)
{
    struct st_error e;
    if (st_synth_write(path, m, v, false, true, &e)) fail_msg("%s", e.msg);
}

static int32_t argmax(const float *x, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int32_t)b;
}

// With eps = 0 the layers add nothing: every position predicts succ(token),
// in F32 and after 4-bit quantisation.
static void test_no_layers_follow_successor(void **state)
{
    (void)state;
    struct st_synth_vocab *v;
    struct st_error e;
    assert_int_equal(st_synth_vocab_build(512, &v, &e), 0);
    uint32_t *succ = malloc(v->n * sizeof *succ);
    assert_int_equal(st_synth_successors(v, 3, succ, &e), 0);
    int types[2] = {ST_TYPE_F32, ST_TYPE_Q4_0};
    for (int k = 0; k < 2; k++) {
        struct st_synth_model m = tiny("target", 128, 0.0f, types[k]);
        write_model(st_tmp("eps0.gguf"), &m, v);
        struct st_llama_model *lm;
        struct st_ref_state *s;
        if (st_llama_open(st_tmp("eps0.gguf"), &lm, &e)) fail_msg("%s", e.msg);
        enum { N = 64 };
        int32_t tok[N];
        for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919 + 1) % v->n); // includes byte and control tokens
        float *logits = malloc((size_t)N * v->n * sizeof *logits);
        assert_int_equal(st_ref_new(lm, N, &s, &e), 0);
        assert_int_equal(st_ref_forward(s, tok, N, 0, logits, &e), 0);
        for (int i = 0; i < N; i++)
            if (argmax(logits + (size_t)i * v->n, v->n) != (int32_t)succ[tok[i]])
                fail_msg("%s: position %d: token %d predicts %d, successor %u", st_type_name(types[k]), i, tok[i],
                         argmax(logits + (size_t)i * v->n, v->n), succ[tok[i]]);
        free(logits);
        st_ref_free(&s);
        st_llama_close(&lm);
    }
    free(succ);
    st_synth_vocab_free(&v);
}

static double acceptance(const struct st_synth_vocab *v, float eps_t, float eps_d, int32_t *tokens)
{
    struct st_synth_model t = tiny("target", 128, eps_t, ST_TYPE_F32), d = tiny("draft", 64, eps_d, ST_TYPE_F32);
    write_model(st_tmp("acc-t.gguf"), &t, v);
    write_model(st_tmp("acc-d.gguf"), &d, v);
    struct st_llama_model *tm, *dm;
    struct st_error e;
    struct st_synth_accept r;
    if (st_llama_open(st_tmp("acc-t.gguf"), &tm, &e) || st_llama_open(st_tmp("acc-d.gguf"), &dm, &e)) fail_msg("%s", e.msg);
    int32_t prompt[4] = {1, 300, 301, 302};
    if (st_synth_acceptance(tm, dm, prompt, 4, 100, 4, tokens, &r, &e)) fail_msg("%s", e.msg);
    assert_true(r.n_generated >= 100 && r.n_generated <= 104);
    assert_int_equal(r.n_drafted, 4ull * r.n_rounds);
    st_llama_close(&tm);
    st_llama_close(&dm);
    return r.rate;
}

static void test_acceptance_falls_with_eps(void **state)
{
    (void)state;
    struct st_synth_vocab *v;
    struct st_error e;
    assert_int_equal(st_synth_vocab_build(512, &v, &e), 0);
    int32_t tokens[104];
    const float eps[4] = {0.0f, 0.5f, 1.0f, 2.0f};
    double rate[4];
    for (int i = 0; i < 4; i++) {
        rate[i] = acceptance(v, eps[i], eps[i] * 0.7f, tokens);
        printf("  eps %.1f (target) / %.2f (draft): greedy acceptance %.3f at K=4\n", eps[i], eps[i] * 0.7f, rate[i]);
    }
    assert_true(rate[0] == 1.0);
    assert_true(rate[1] > 0.85);
    for (int i = 0; i + 1 < 4; i++) assert_true(rate[i] > rate[i + 1]);
    assert_true(rate[3] < 0.5);
    // The speculative output is the target's plain greedy decoding.
    rate[2] = acceptance(v, 2.0f, 1.4f, tokens);
    struct st_llama_model *tm;
    struct st_ref_state *s;
    assert_int_equal(st_llama_open(st_tmp("acc-t.gguf"), &tm, &e), 0);
    assert_int_equal(st_ref_new(tm, 110, &s, &e), 0);
    float *logits = malloc(4 * v->n * sizeof *logits);
    int32_t prompt[4] = {1, 300, 301, 302};
    assert_int_equal(st_ref_forward(s, prompt, 4, 0, logits, &e), 0);
    int32_t tok = argmax(logits + 3 * v->n, v->n);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(tok, tokens[i]);
        assert_int_equal(st_ref_forward(s, &tok, 1, 4 + i, logits, &e), 0);
        tok = argmax(logits, v->n);
    }
    free(logits);
    st_ref_free(&s);
    st_llama_close(&tm);
    st_synth_vocab_free(&v);
}

static void test_files(void **state)
{
    (void)state;
    struct st_synth_vocab *v;
    struct st_error e;
    assert_int_equal(st_synth_vocab_build(512, &v, &e), 0);
    struct st_synth_model m = tiny("draft", 256, 1.5f, ST_TYPE_Q8_0);
    m.shape.n_ff = 352; // not a multiple of 256
    assert_int_equal(st_quant_plan_option(&m.plan, "--mlp-type", "TQ2_0", &e), 0);
    write_model(st_tmp("f1.gguf"), &m, v);
    write_model(st_tmp("f2.gguf"), &m, v);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", st_tmp("f1.gguf"), st_tmp("f2.gguf"));
    assert_int_equal(system(cmd), 0); // reproducible
    struct st_llama_model *lm;
    if (st_llama_open(st_tmp("f1.gguf"), &lm, &e)) fail_msg("%s", e.msg);
    const struct st_llama_hparams *hp = &lm->hp;
    assert_int_equal(hp->n_embd, 256);
    assert_int_equal(hp->n_layer, 2);
    assert_int_equal(hp->n_head, 4);
    assert_int_equal(hp->n_head_kv, 2);
    assert_int_equal(hp->n_ff, 352);
    assert_int_equal(hp->n_vocab, 512);
    assert_int_equal(hp->n_ctx_train, 256);
    assert_false(hp->tied_output);
    assert_int_equal(lm->layers[0].ffn_up->type, ST_TYPE_TQ2_0);
    assert_int_equal(lm->layers[0].ffn_down->type, ST_TYPE_Q4_0); // fallback
    assert_int_equal(lm->layers[1].wq->type, ST_TYPE_Q8_0);
    assert_int_equal(lm->layers[1].attn_norm->type, ST_TYPE_F32);
    assert_int_equal(lm->output->type, ST_TYPE_Q8_0);
    struct st_gguf *g = lm->gguf;
    char s[64];
    assert_int_equal(st_gguf_get_str(g, "tokenizer.ggml.model", s, sizeof s, &e), 0);
    assert_string_equal(s, "llama");
    assert_int_equal(st_gguf_get_str(g, "subternary.synth.role", s, sizeof s, &e), 0);
    assert_string_equal(s, "draft");
    uint32_t ft;
    assert_int_equal(st_gguf_get_u32(g, "general.file_type", &ft, &e), 0);
    assert_int_equal(ft, 7);
    const struct st_gguf_kv *toks;
    assert_int_equal(st_gguf_get_arr(g, "tokenizer.ggml.tokens", ST_GGUF_STRING, &toks, &e), 0);
    assert_int_equal(toks->arr_n, 512);
    // The embedding rows have norm sqrt(dim).
    float row[256];
    st_dequant_row(lm->tok_embd->type, (const uint8_t *)lm->tok_embd->data + 100 * st_type_row_bytes(lm->tok_embd->type, 256), row, 256);
    double ss = 0;
    for (int i = 0; i < 256; i++) ss += (double)row[i] * row[i];
    assert_true(ss > 256 * 0.98 && ss < 256 * 1.02);
    st_llama_close(&lm);
    // Bad shapes are refused.
    m.shape.n_head = 5;
    assert_int_equal(st_synth_write(st_tmp("bad.gguf"), &m, v, false, true, &e), -1);
    assert_non_null(strstr(e.msg, "multiple of heads"));
    st_synth_vocab_free(&v);
    // A tokenizer copied from another file.
    char path[1024];
    st_test_shared("vocab/ggml-vocab-gpt-2.gguf", path, sizeof path);
    struct stat st;
    if (stat(path, &st)) return;
    assert_int_equal(st_synth_vocab_from(path, &v, &e), 0);
    struct st_synth_model m2 = tiny("target", 64, 1.0f, ST_TYPE_F16);
    write_model(st_tmp("bpe.gguf"), &m2, v);
    struct st_gguf *src;
    assert_int_equal(st_gguf_open(path, &src, &e), 0);
    if (st_llama_open(st_tmp("bpe.gguf"), &lm, &e)) fail_msg("%s", e.msg);
    assert_int_equal(lm->hp.n_vocab, v->n);
    for (uint64_t i = 0; i < src->n_kv; i++) {
        if (strncmp(src->kv[i].key, "tokenizer.", 10)) continue;
        const struct st_gguf_kv *a = &src->kv[i], *b = st_gguf_find_kv(lm->gguf, a->key);
        assert_non_null(b);
        assert_int_equal(a->type, b->type);
        if (a->type == ST_GGUF_ARRAY) assert_int_equal(a->arr_n, b->arr_n);
    }
    st_llama_close(&lm);
    st_gguf_close(&src);
    st_synth_vocab_free(&v);
    assert_int_equal(st_synth_vocab_from(st_tmp("nope.gguf"), &v, &e), -1);
    assert_non_null(strstr(e.msg, "nope.gguf"));
}

#define SMALL "--vocab", "512", "--target-dim", "128", "--target-layers", "2", "--target-heads", "4", \
              "--target-kv-heads", "2", "--target-ffn", "256", "--draft-dim", "64", "--draft-layers", "1", \
              "--draft-heads", "2", "--draft-kv-heads", "1", "--draft-ffn", "128", "--ctx", "512"

static void test_cli(void **state)
{
    (void)state;
    char out[8192];
    const char *a1[] = {"model", "gen", "--preset", "demo", SMALL, "--type", "F32", "--draft-type", "q8_0",
                        "--eps", "0.5", "--measure", "40", "--quiet", "--out-target", st_tmp("t.gguf"),
                        "--out-draft", st_tmp("d.gguf"), NULL};
    if (st_run_cli(out, sizeof out, a1)) fail_msg("%s", out);
    assert_non_null(strstr(out, "greedy acceptance at K=4 over"));
    const char *a2[] = {"model", "info", st_tmp("t.gguf"), NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a2), 0);
    assert_non_null(strstr(out, "n_embd 128, n_layer 2, n_ff 256, n_head 4, n_head_kv 2, head_dim 32"));
    assert_non_null(strstr(out, "n_vocab 512, n_ctx_train 512"));
    assert_non_null(strstr(out, "f32 "));
    assert_non_null(strstr(out, "output untied"));
    const char *a3[] = {"model", "info", st_tmp("d.gguf"), NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a3), 0);
    assert_non_null(strstr(out, "n_embd 64, n_layer 1, n_ff 128, n_head 2, n_head_kv 1"));
    assert_non_null(strstr(out, "q8_0 "));
    // A model written alone is the one written with its partner.
    const char *a4[] = {"model", "gen", "--preset", "demo", SMALL, "--type", "F32", "--eps", "0.5", "--quiet",
                        "--out-target", st_tmp("t2.gguf"), NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a4), 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", st_tmp("t.gguf"), st_tmp("t2.gguf"));
    assert_int_equal(system(cmd), 0);
    // Errors.
    struct {
        const char *args[12];
        int rc;
        const char *msg;
    } bad[] = {
        {{"model", "gen", "--preset", "l7b", "--out-target", "x.gguf"}, 2, "unknown preset 'l7b'"},
        {{"model", "gen", "--preset", "demo"}, 2, "nothing to write"},
        {{"model", "gen", "--frob", "1", "--out-target", "x.gguf"}, 2, "unknown option '--frob'"},
        {{"model", "gen", "--vocab", "12x", "--out-target", "x.gguf"}, 2, "'12x' is not an integer in"},
        {{"model", "gen", "--vocab", "100", "--out-target", "x.gguf"}, 2, "vocabulary size 100"},
        {{"model", "gen", "--target-heads", "5", "--out-target", "x.gguf"}, 2, "multiple of heads 5"},
        {{"model", "gen", "--type", "Q3_K", "--out-target", "x.gguf"}, 2, "tensor type 'Q3_K'"},
        {{"model", "gen", "--eps", "-1", "--out-target", "x.gguf"}, 2, "eps -1"},
        {{"model", "gen", "--measure", "10", "--out-target", "x.gguf"}, 2, "--measure needs both"},
        {{"model", "gen", "--draft-shape", "l9b", "--out-target", "x.gguf"}, 2, "unknown draft shape 'l9b'"},
        {{"model", "gen", "--vocab-from", "/nonexistent.gguf", "--out-target", "x.gguf"}, 1, "nonexistent.gguf"},
        {{"model", "gen", "--out-target"}, 2, "needs a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = st_run_cli(out, sizeof out, bad[i].args);
        if (rc != bad[i].rc || !strstr(out, bad[i].msg))
            fail_msg("case %zu: exit %d (want %d), output: %s", i, rc, bad[i].rc, out);
    }
    struct stat st;
    assert_int_equal(stat("x.gguf", &st), -1);
    const char *help[] = {"model", "gen", "--help", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, help), 0);
    assert_non_null(strstr(out, "--vocab-from"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab),
        cmocka_unit_test(test_successors),
        cmocka_unit_test(test_no_layers_follow_successor),
        cmocka_unit_test(test_acceptance_falls_with_eps),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
