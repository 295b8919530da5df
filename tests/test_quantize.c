// Quantisers: quantise -> dequantise (our reference dequantisers) stays
// within each format's error; inputs already on a format's grid come back
// exactly; re-quantising our own output gives the same bytes; the ternary
// packing covers every trit pattern.  The file quantiser and the CLI: types
// per role, fallbacks, metadata, and clear errors for bad arguments and files.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/test_support.h"

#include "kernels/types.h"
#include "model/gguf.h"
#include "model/quantize.h"
#include "model/synth.h"

static uint64_t rng = 88172645463325252ull;
static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

static const uint32_t all_types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0,
                                     ST_TYPE_Q4_0, ST_TYPE_TQ1_0, ST_TYPE_TQ2_0};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

// Largest relative RMS error for Gaussian rows (the measured value is printed).
static double bound(uint32_t t)
{
    switch (t) {
    case ST_TYPE_F32: return 0;
    case ST_TYPE_F16: return 1e-3;
    case ST_TYPE_BF16: return 5e-3;
    case ST_TYPE_Q8_0: return 0.01;
    case ST_TYPE_Q4_0: return 0.12;
    default: return 0.55; // ternary: three levels per block
    }
}

static double rel_rms(const float *x, const float *y, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        den += (double)x[i] * x[i];
    }
    return sqrt(num / den);
}

static void test_error_bounds(void **state)
{
    (void)state;
    enum { N = 8192 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N * 4);
    for (size_t k = 0; k < N_TYPES; k++) {
        uint32_t t = all_types[k];
        double worst = 0, outl = 0;
        for (int set = 0; set < 4; set++) {
            double scale = set == 0 ? 1.0 : set == 1 ? 1e-3 : 300.0;
            for (int i = 0; i < N; i++) x[i] = (float)(gauss() * scale);
            if (set == 3)
                for (int i = 0; i < N; i += 97) x[i] *= 8; // outliers: twice the bound
            assert_int_equal(st_quantize_row(t, x, q, N), 0);
            assert_int_equal(st_dequant_row(t, q, y, N), 0);
            double r = rel_rms(x, y, N), b = set == 3 ? 2 * bound(t) : bound(t);
            double *w = set == 3 ? &outl : &worst;
            if (r > *w) *w = r;
            if (r > b) fail_msg("%s: relative RMS error %.4f exceeds %.4f (set %d)", st_type_name(t), r, b, set);
        }
        printf("  %-6s relative RMS error %.5f (bound %.3f), with outliers %.5f\n", st_type_name(t), worst, bound(t), outl);
    }
    // A row length that does not fit the block is refused.
    assert_int_equal(st_quantize_row(ST_TYPE_Q8_0, x, q, 33), -1);
    assert_int_equal(st_quantize_row(ST_TYPE_TQ2_0, x, q, 128), -1);
    assert_int_equal(st_quantize_row(ST_TYPE_Q4_K, x, q, 256), -1); // not producible
    free(x);
    free(y);
    free(q);
}

// Values already on the grid of a format come back exactly.
static void test_exact_inputs(void **state)
{
    (void)state;
    enum { N = 2048 };
    float x[N], y[N];
    uint8_t q[N * 4];
    const float scales[] = {0.375f, 3.0f, 1.0f / 1024, 12288.0f};
    for (int s = 0; s < 4; s++) {
        // Ternary: t * d with t in {-1, 0, 1} (every block has a nonzero).
        for (int i = 0; i < N; i++) x[i] = (float)((int)(uniform() * 3) - 1) * scales[s];
        for (int b = 0; b < N; b += 256) x[b] = -scales[s];
        uint32_t tt[2] = {ST_TYPE_TQ1_0, ST_TYPE_TQ2_0};
        for (int k = 0; k < 2; k++) {
            st_quantize_row(tt[k], x, q, N);
            st_dequant_row(tt[k], q, y, N);
            assert_memory_equal(x, y, sizeof x);
        }
        // Q8_0: integers in [-127, 127] times d, with 127 present.
        for (int i = 0; i < N; i++) x[i] = (float)((int)(uniform() * 255) - 127) * scales[s];
        for (int b = 0; b < N; b += 32) x[b] = 127 * scales[s];
        st_quantize_row(ST_TYPE_Q8_0, x, q, N);
        st_dequant_row(ST_TYPE_Q8_0, q, y, N);
        assert_memory_equal(x, y, sizeof x);
        // Q4_0: integers in [-8, 7] times d, with -8 present.
        for (int i = 0; i < N; i++) x[i] = (float)((int)(uniform() * 16) - 8) * scales[s];
        for (int b = 0; b < N; b += 32) x[b + 5] = -8 * scales[s];
        st_quantize_row(ST_TYPE_Q4_0, x, q, N);
        st_dequant_row(ST_TYPE_Q4_0, q, y, N);
        assert_memory_equal(x, y, sizeof x);
    }
    // Zero blocks give zeros in every format (Q4_0's scale is -0, as in ggml).
    memset(x, 0, sizeof x);
    for (size_t k = 0; k < N_TYPES; k++) {
        st_quantize_row(all_types[k], x, q, N);
        st_dequant_row(all_types[k], q, y, N);
        for (int i = 0; i < N; i++) assert_true(y[i] == 0.0f);
    }
}

// quantize(dequantize(q)) == q, byte for byte.
static void test_requantize_stable(void **state)
{
    (void)state;
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N * 4), *q2 = malloc(N * 4);
    const double scales[] = {1.0, 1e-4, 5e3};
    for (size_t k = 0; k < N_TYPES; k++) {
        uint32_t t = all_types[k];
        size_t nb = st_type_row_bytes(t, N);
        for (int s = 0; s < 3; s++) {
            for (int i = 0; i < N; i++) x[i] = (float)(gauss() * scales[s] * (i % 7 == 0 ? 5 : 1));
            st_quantize_row(t, x, q, N);
            st_dequant_row(t, q, y, N);
            st_quantize_row(t, y, q2, N);
            if (memcmp(q, q2, nb)) fail_msg("%s: re-quantising changed the bytes (scale %g)", st_type_name(t), scales[s]);
        }
    }
    free(x);
    free(y);
    free(q);
    free(q2);
}

// Every 5-trit (and 4-trit) byte pattern of TQ1_0 decodes to what was coded.
static void test_tq1_patterns(void **state)
{
    (void)state;
    enum { NB = 64 };
    float x[NB * 256], y[NB * 256];
    struct st_block_tq1_0 q[NB];
    bool seen[243] = {false};
    int n_seen = 0;
    for (int b = 0; b < NB; b++)
        for (int m = 0; m < 32; m++) {
            // Pattern p = b * 32 + m (mod 243) in the 5 trits of qs[m].
            int p = (b * 32 + m) % 243, v = p;
            for (int k = 4; k >= 0; k--, v /= 3) x[b * 256 + 32 * k + m] = (float)(v % 3 - 1);
            if (!seen[p]) n_seen += seen[p] = true;
        }
    // The rest of each block (qs[32..47], qh) cycles too; d is 1, the mean
    // |x| over the nonzero codes.
    for (int b = 0; b < NB; b++)
        for (int e = 160; e < 256; e++) x[b * 256 + e] = (float)((b + e) % 3 - 1);
    assert_int_equal(n_seen, 243);
    st_quantize_row(ST_TYPE_TQ1_0, x, q, NB * 256);
    st_dequant_row(ST_TYPE_TQ1_0, q, y, NB * 256);
    assert_memory_equal(x, y, sizeof x);
}

static void test_plan(void **state)
{
    (void)state;
    assert_int_equal(st_quant_role_of("token_embd.weight", 2), ST_QROLE_EMBD);
    assert_int_equal(st_quant_role_of("output.weight", 2), ST_QROLE_OUTPUT);
    assert_int_equal(st_quant_role_of("blk.3.attn_q.weight", 2), ST_QROLE_ATTN);
    assert_int_equal(st_quant_role_of("blk.3.attn_output.weight", 2), ST_QROLE_ATTN);
    assert_int_equal(st_quant_role_of("blk.10.ffn_down.weight", 2), ST_QROLE_MLP);
    assert_int_equal(st_quant_role_of("blk.0.attn_norm.weight", 1), ST_QROLE_NORM);
    assert_int_equal(st_quant_role_of("output_norm.weight", 1), ST_QROLE_NORM);
    assert_int_equal(st_quant_role_of("something.else", 2), ST_QROLE_OTHER);
    struct st_quant_plan p;
    struct st_error e;
    char note[256];
    st_quant_plan_init(&p, ST_TYPE_TQ2_0);
    assert_int_equal(st_quant_plan_option(&p, "--attn-type", "q8_0", &e), 0);
    assert_int_equal(st_quant_plan_option(&p, "--verbose", "x", &e), 1);
    assert_int_equal(st_quant_plan_option(&p, "--mlp-type", "Q5_K", &e), -1);
    assert_non_null(strstr(e.msg, "'Q5_K'"));
    assert_int_equal(st_quant_plan_option(&p, "--mlp-type", "q4_k", &e), -1); // known, not producible
    assert_int_equal(st_quant_pick(&p, "blk.0.attn_k.weight", 2, 512, note, sizeof note), ST_TYPE_Q8_0);
    assert_int_equal(st_quant_pick(&p, "blk.0.ffn_up.weight", 2, 512, note, sizeof note), ST_TYPE_TQ2_0);
    assert_string_equal(note, "");
    assert_int_equal(st_quant_pick(&p, "token_embd.weight", 2, 512, note, sizeof note), ST_TYPE_Q8_0);
    assert_int_equal(st_quant_pick(&p, "output.weight", 2, 512, note, sizeof note), ST_TYPE_Q8_0);
    assert_int_equal(st_quant_pick(&p, "blk.0.ffn_norm.weight", 1, 512, note, sizeof note), ST_TYPE_F32);
    // Fallbacks: ternary -> Q4_0 -> F16; Q8_0 -> F16.
    assert_int_equal(st_quant_pick(&p, "blk.0.ffn_down.weight", 2, 352, note, sizeof note), ST_TYPE_Q4_0);
    assert_non_null(strstr(note, "blk.0.ffn_down.weight: row length 352 is not a multiple of the tq2_0 block (256): using q4_0"));
    assert_int_equal(st_quant_pick(&p, "blk.0.ffn_down.weight", 2, 100, note, sizeof note), ST_TYPE_F16);
    assert_int_equal(st_quant_pick(&p, "blk.0.attn_q.weight", 2, 48, note, sizeof note), ST_TYPE_F16);
    assert_non_null(strstr(note, "q8_0 block (32): using f16"));
    assert_int_equal(st_quant_plan_option(&p, "--output-type", "f16", &e), 0);
    assert_int_equal(st_quant_pick(&p, "output.weight", 2, 512, note, sizeof note), ST_TYPE_F16);
    assert_int_equal(st_quant_ftype(ST_TYPE_Q8_0), 7);
    assert_int_equal(st_quant_ftype(ST_TYPE_TQ1_0), 36);
    assert_int_equal(st_quant_ftype(ST_TYPE_TQ2_0), 37);
    assert_int_equal(st_quant_ftype(ST_TYPE_Q4_0), 2);
}

// A small synthetic F32 model: dim 256, FFN 352 (fits 32, not 256).
static void make_model(const char *path)
{
    struct st_synth_vocab *v;
    struct st_error e;
    assert_int_equal(st_synth_vocab_build(512, &v, &e), 0);
    struct st_synth_model m = {
        .shape = {"custom", 256, 2, 4, 2, 352, 512, 10000.0f, 1.0f, ST_TYPE_F32, NULL},
        .role = "target", .seed = 7, .gain = 3, .attn_sharpness = 10, .name = "quantize test"};
    st_quant_plan_init(&m.plan, ST_TYPE_F32);
    if (st_synth_write(path, &m, v, false, true, &e)) fail_msg("%s", e.msg);
    st_synth_vocab_free(&v);
}

static void check_close(const struct st_gguf *a, const struct st_gguf *b, double tol_rel)
{
    assert_int_equal(a->n_tensors, b->n_tensors);
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const struct st_gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        assert_string_equal(x->name, y->name);
        uint64_t n = st_gguf_tensor_nelements(x);
        float *fx = malloc(n * sizeof *fx), *fy = malloc(n * sizeof *fy);
        assert_int_equal(st_dequant_row(x->type, x->data, fx, (int64_t)n), 0);
        assert_int_equal(st_dequant_row(y->type, y->data, fy, (int64_t)n), 0);
        double r = rel_rms(fx, fy, (int64_t)n);
        if (r > tol_rel) fail_msg("%s (%s): relative RMS error %.4f > %.4f", y->name, st_type_name(y->type), r, tol_rel);
        free(fx);
        free(fy);
    }
}

static void test_quantize_file(void **state)
{
    (void)state;
    struct st_error e;
    struct st_quant_plan p;
    struct st_quant_report rep;
    struct st_gguf *in, *out;
    make_model(st_tmp("m.f32.gguf"));
    assert_int_equal(st_gguf_open(st_tmp("m.f32.gguf"), &in, &e), 0);
    // Q8_0 everywhere (matrices), norms F32, metadata copied.
    st_quant_plan_init(&p, ST_TYPE_Q8_0);
    if (st_quantize_file(st_tmp("m.f32.gguf"), st_tmp("m.q8_0.gguf"), &p, false, true, &rep, &e)) fail_msg("%s", e.msg);
    assert_int_equal(rep.n_fallback, 0);
    assert_int_equal(rep.n_tensors, in->n_tensors);
    assert_int_equal(st_gguf_open(st_tmp("m.q8_0.gguf"), &out, &e), 0);
    for (uint64_t i = 0; i < out->n_tensors; i++)
        assert_int_equal(out->tensors[i].type, out->tensors[i].n_dims == 1 ? ST_TYPE_F32 : ST_TYPE_Q8_0);
    uint32_t ft;
    assert_int_equal(st_gguf_get_u32(out, "general.file_type", &ft, &e), 0);
    assert_int_equal(ft, 7);
    assert_int_equal(st_gguf_get_u32(out, "general.quantization_version", &ft, &e), 0);
    for (uint64_t i = 0; i < in->n_kv; i++) {
        const struct st_gguf_kv *k = st_gguf_find_kv(out, in->kv[i].key);
        assert_non_null(k);
        if (strcmp(k->key, "general.file_type")) assert_int_equal(k->type, in->kv[i].type);
    }
    const struct st_gguf_kv *ta, *tb;
    assert_int_equal(st_gguf_get_arr(in, "tokenizer.ggml.tokens", ST_GGUF_STRING, &ta, &e), 0);
    assert_int_equal(st_gguf_get_arr(out, "tokenizer.ggml.tokens", ST_GGUF_STRING, &tb, &e), 0);
    assert_int_equal(ta->arr_n, tb->arr_n);
    for (uint64_t i = 0; i < ta->arr_n; i++)
        assert_true(ta->arr_strs[i].len == tb->arr_strs[i].len &&
                    !memcmp(ta->arr_strs[i].ptr, tb->arr_strs[i].ptr, ta->arr_strs[i].len));
    check_close(in, out, 0.01);
    st_gguf_close(&out);
    // Quantising our own Q8_0 output to Q8_0 again gives the same file.
    if (st_quantize_file(st_tmp("m.q8_0.gguf"), st_tmp("m.q8_0b.gguf"), &p, false, true, &rep, &e)) fail_msg("%s", e.msg);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", st_tmp("m.q8_0.gguf"), st_tmp("m.q8_0b.gguf"));
    assert_int_equal(system(cmd), 0);
    // Mixed: MLP ternary, attention 8-bit; ffn_down (rows of 352) falls
    // back to Q4_0; embedding and output default to Q8_0.
    st_quant_plan_init(&p, ST_TYPE_TQ2_0);
    assert_int_equal(st_quant_plan_option(&p, "--attn-type", "Q8_0", &e), 0);
    if (st_quantize_file(st_tmp("m.f32.gguf"), st_tmp("m.mix.gguf"), &p, false, true, &rep, &e)) fail_msg("%s", e.msg);
    assert_int_equal(rep.n_fallback, 2);
    assert_int_equal(st_gguf_open(st_tmp("m.mix.gguf"), &out, &e), 0);
    for (uint64_t i = 0; i < out->n_tensors; i++) {
        const struct st_gguf_tensor *t = &out->tensors[i];
        uint32_t want = t->n_dims == 1                  ? ST_TYPE_F32
                        : strstr(t->name, "ffn_down")   ? ST_TYPE_Q4_0
                        : strstr(t->name, "ffn_")       ? ST_TYPE_TQ2_0
                                                        : ST_TYPE_Q8_0;
        if (t->type != want) fail_msg("%s: %s, expected %s", t->name, st_type_name(t->type), st_type_name(want));
    }
    assert_int_equal(st_gguf_get_u32(out, "general.file_type", &ft, &e), 0);
    assert_int_equal(ft, 37);
    check_close(in, out, 0.55);
    st_gguf_close(&out);
    // From F16 to Q4_0 and TQ1_0.
    st_quant_plan_init(&p, ST_TYPE_F16);
    assert_int_equal(st_quantize_file(st_tmp("m.f32.gguf"), st_tmp("m.f16.gguf"), &p, false, true, &rep, &e), 0);
    st_quant_plan_init(&p, ST_TYPE_Q4_0);
    assert_int_equal(st_quantize_file(st_tmp("m.f16.gguf"), st_tmp("m.q4_0.gguf"), &p, false, true, &rep, &e), 0);
    assert_int_equal(st_gguf_open(st_tmp("m.q4_0.gguf"), &out, &e), 0);
    check_close(in, out, 0.12);
    st_gguf_close(&out);
    st_gguf_close(&in);
}

static void test_bad_files(void **state)
{
    (void)state;
    struct st_error e;
    struct st_quant_plan p;
    struct st_quant_report rep;
    st_quant_plan_init(&p, ST_TYPE_Q8_0);
    assert_int_equal(st_quantize_file(st_tmp("missing.gguf"), st_tmp("o.gguf"), &p, false, true, &rep, &e), -1);
    assert_non_null(strstr(e.msg, "open("));
    FILE *f = fopen(st_tmp("text.gguf"), "w");
    fputs("this is not a model file at all\n", f);
    fclose(f);
    assert_int_equal(st_quantize_file(st_tmp("text.gguf"), st_tmp("o.gguf"), &p, false, true, &rep, &e), -1);
    assert_non_null(strstr(e.msg, "not a GGUF file"));
    // A model cut short: its tensors run past the end.
    make_model(st_tmp("whole.gguf"));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "head -c 100000 '%s' > '%s'", st_tmp("whole.gguf"), st_tmp("cut.gguf"));
    assert_int_equal(system(cmd), 0);
    assert_int_equal(st_quantize_file(st_tmp("cut.gguf"), st_tmp("o.gguf"), &p, false, true, &rep, &e), -1);
    assert_non_null(strstr(e.msg, "past the end"));
    assert_int_equal(st_quantize_file(st_tmp("whole.gguf"), st_tmp("nodir/o.gguf"), &p, false, true, &rep, &e), -1);
    assert_non_null(strstr(e.msg, "open("));
    struct stat st;
    assert_int_equal(stat(st_tmp("o.gguf"), &st), -1);
}

static void test_cli(void **state)
{
    (void)state;
    char out[8192];
    make_model(st_tmp("c.gguf"));
    const char *a1[] = {"model", "quantize", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a1), 2);
    assert_non_null(strstr(out, "expected IN.gguf OUT.gguf TYPE"));
    const char *a2[] = {"model", "quantize", st_tmp("c.gguf"), st_tmp("c2.gguf"), "Q5_K", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a2), 2);
    assert_non_null(strstr(out, "unknown or unsupported tensor type 'Q5_K'"));
    const char *a3[] = {"model", "quantize", st_tmp("c.gguf"), st_tmp("c2.gguf"), "Q8_0", "--frobnicate", "1", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a3), 2);
    assert_non_null(strstr(out, "unknown option '--frobnicate'"));
    const char *a4[] = {"model", "quantize", st_tmp("c.gguf"), st_tmp("c2.gguf"), "Q8_0", "--attn-type", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a4), 2);
    assert_non_null(strstr(out, "needs a value"));
    const char *a5[] = {"model", "quantize", st_tmp("nope.gguf"), st_tmp("c2.gguf"), "Q8_0", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a5), 1);
    assert_non_null(strstr(out, "nope.gguf"));
    const char *a6[] = {"model", "quantize", st_tmp("c.gguf"), st_tmp("c2.gguf"), "Q8_0", "extra", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a6), 2);
    const char *a7[] = {"model", "quantize", "--help", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a7), 0);
    assert_non_null(strstr(out, "--mlp-type"));
    // A mixed file through the CLI: the fallback is announced.
    const char *a8[] = {"model", "quantize", st_tmp("c.gguf"), st_tmp("c2.gguf"), "TQ1_0", "--attn-type", "q8_0", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a8), 0);
    assert_non_null(strstr(out, "note: blk.0.ffn_down.weight: row length 352 is not a multiple of the tq1_0 block (256): using q4_0"));
    const char *a9[] = {"model", "info", st_tmp("c2.gguf"), NULL};
    assert_int_equal(st_run_cli(out, sizeof out, a9), 0);
    assert_non_null(strstr(out, "tq1_0"));
    assert_non_null(strstr(out, "n_embd 256, n_layer 2, n_ff 352"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_bounds),   cmocka_unit_test(test_exact_inputs),
        cmocka_unit_test(test_requantize_stable), cmocka_unit_test(test_tq1_patterns),
        cmocka_unit_test(test_plan),           cmocka_unit_test(test_quantize_file),
        cmocka_unit_test(test_bad_files),      cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
