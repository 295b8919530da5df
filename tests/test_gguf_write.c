// GGUF writer: metadata of every type, arrays, alignment, tensors of every
// type round-trip through our reader; pieces of any size give the same file;
// every llama.cpp-written file in shared/ is reproduced byte for byte from
// what our reader sees; misuse gives errors and never leaves a file behind.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/types.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "tests/support/test_support.h"

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n ? *n : 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

// Deterministic bytes for tensor data.
static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 16);
    }
}

struct spec {
    const char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
};

// Tensors of every type the reader supports, 1-D to 4-D.
static const struct spec specs[] = {
    {"a.f32", ST_TYPE_F32, 1, {7}},
    {"b.f16", ST_TYPE_F16, 2, {3, 5}},
    {"c.bf16", ST_TYPE_BF16, 3, {2, 3, 4}},
    {"d.q8_0", ST_TYPE_Q8_0, 2, {64, 3}},
    {"e.q4_0", ST_TYPE_Q4_0, 4, {32, 2, 1, 3}},
    {"f.q4_k", ST_TYPE_Q4_K, 2, {256, 2}},
    {"g.q6_k", ST_TYPE_Q6_K, 2, {512, 1}},
    {"h.tq1_0", ST_TYPE_TQ1_0, 2, {256, 3}},
    {"i.tq2_0", ST_TYPE_TQ2_0, 2, {768, 2}},
};
#define N_SPECS (sizeof specs / sizeof specs[0])

static size_t spec_bytes(const struct spec *s)
{
    size_t n = st_type_row_bytes(s->type, s->ne[0]);
    for (uint32_t d = 1; d < s->n_dims; d++) n *= (size_t)s->ne[d];
    return n;
}

// Writes a file with every metadata type and every tensor of specs, the
// data in pieces of `piece` bytes (0: whole tensors).
static void write_full(const char *path, uint32_t alignment, size_t piece)
{
    struct st_gguf_writer *w;
    struct st_error e;
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    uint8_t u8 = 200, b = 1;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    uint64_t u64 = 0x123456789abcdefull;
    int64_t i64 = -0x123456789abcdll;
    double f64 = -2.5e300;
    assert_int_equal(st_gguf_writer_set_str(w, "general.architecture", "test"), 0);
    if (alignment) assert_int_equal(st_gguf_writer_set_u32(w, "general.alignment", alignment), 0);
    assert_int_equal(st_gguf_writer_set_scalar(w, "t.u8", ST_GGUF_UINT8, &u8), 0);
    assert_int_equal(st_gguf_writer_set_scalar(w, "t.i8", ST_GGUF_INT8, &i8), 0);
    assert_int_equal(st_gguf_writer_set_scalar(w, "t.u16", ST_GGUF_UINT16, &u16), 0);
    assert_int_equal(st_gguf_writer_set_scalar(w, "t.i16", ST_GGUF_INT16, &i16), 0);
    assert_int_equal(st_gguf_writer_set_u32(w, "t.u32", 4000000000u), 0);
    assert_int_equal(st_gguf_writer_set_i32(w, "t.i32", -2000000000), 0);
    assert_int_equal(st_gguf_writer_set_f32(w, "t.f32", 0.1f), 0);
    assert_int_equal(st_gguf_writer_set_scalar(w, "t.bool", ST_GGUF_BOOL, &b), 0);
    assert_int_equal(st_gguf_writer_set_bool(w, "t.false", false), 0);
    assert_int_equal(st_gguf_writer_set_scalar(w, "t.u64", ST_GGUF_UINT64, &u64), 0);
    assert_int_equal(st_gguf_writer_set_scalar(w, "t.i64", ST_GGUF_INT64, &i64), 0);
    assert_int_equal(st_gguf_writer_set_scalar(w, "t.f64", ST_GGUF_FLOAT64, &f64), 0);
    assert_int_equal(st_gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo"), 0);
    assert_int_equal(st_gguf_writer_set_str(w, "t.empty", ""), 0);
    int16_t a16[3] = {-1, 2, 300};
    float af[2] = {1.5f, -0.25f};
    uint8_t ab[4] = {1, 0, 1, 1};
    uint64_t a64[2] = {1, UINT64_MAX};
    assert_int_equal(st_gguf_writer_set_arr(w, "t.arr_i16", ST_GGUF_INT16, a16, 3), 0);
    assert_int_equal(st_gguf_writer_set_arr(w, "t.arr_f32", ST_GGUF_FLOAT32, af, 2), 0);
    assert_int_equal(st_gguf_writer_set_arr(w, "t.arr_bool", ST_GGUF_BOOL, ab, 4), 0);
    assert_int_equal(st_gguf_writer_set_arr(w, "t.arr_u64", ST_GGUF_UINT64, a64, 2), 0);
    assert_int_equal(st_gguf_writer_set_arr(w, "t.arr_empty", ST_GGUF_INT32, NULL, 0), 0);
    const char *strs[3] = {"ab", "", "\xe2\x96\x81the"};
    assert_int_equal(st_gguf_writer_set_arr_str(w, "t.strs", strs, 3), 0);
    // Replacing keeps the position; removing drops the key.
    assert_int_equal(st_gguf_writer_set_u32(w, "t.replaced", 1), 0);
    assert_int_equal(st_gguf_writer_set_str(w, "t.gone", "x"), 0);
    assert_int_equal(st_gguf_writer_set_f32(w, "t.replaced", 2.0f), 0);
    assert_int_equal(st_gguf_writer_remove(w, "t.gone"), 0);
    assert_int_equal(st_gguf_writer_remove(w, "t.gone"), 1);
    for (size_t i = 0; i < N_SPECS; i++)
        assert_int_equal(st_gguf_writer_add_tensor(w, specs[i].name, specs[i].type, specs[i].n_dims, specs[i].ne), 0);
    if (st_gguf_writer_begin(w, path, &e)) fail_msg("%s", e.msg);
    for (size_t i = 0; i < N_SPECS; i++) {
        size_t n = spec_bytes(&specs[i]);
        uint8_t *d = malloc(n);
        fill(d, n, (uint32_t)i);
        uint32_t type;
        uint64_t nb;
        assert_string_equal(st_gguf_writer_current(w, &type, &nb), specs[i].name);
        assert_int_equal(type, specs[i].type);
        assert_int_equal(nb, n);
        size_t step = piece ? piece : n;
        for (size_t off = 0; off < n; off += step)
            if (st_gguf_writer_write(w, d + off, off + step > n ? n - off : step, &e)) fail_msg("%s", e.msg);
        free(d);
    }
    assert_null(st_gguf_writer_current(w, NULL, NULL));
    if (st_gguf_writer_finish(w, &e)) fail_msg("%s", e.msg);
    st_gguf_writer_free(&w);
}

static void check_full(const char *path, uint32_t alignment)
{
    struct st_gguf *g;
    struct st_error e;
    if (st_gguf_open(path, &g, &e)) fail_msg("%s", e.msg);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, alignment);
    assert_int_equal(g->data_offset % alignment, 0);
    const struct st_gguf_kv *kv;
    assert_non_null(kv = st_gguf_find_kv(g, "t.u8"));
    assert_int_equal(kv->type, ST_GGUF_UINT8);
    assert_int_equal(kv->v.u, 200);
    assert_int_equal(st_gguf_find_kv(g, "t.i8")->v.i, -100);
    assert_int_equal(st_gguf_find_kv(g, "t.u16")->v.u, 60000);
    assert_int_equal(st_gguf_find_kv(g, "t.i16")->v.i, -30000);
    assert_int_equal(st_gguf_find_kv(g, "t.u32")->v.u, 4000000000u);
    assert_int_equal(st_gguf_find_kv(g, "t.i32")->v.i, -2000000000);
    assert_true(st_gguf_find_kv(g, "t.f32")->v.f == (double)0.1f);
    assert_int_equal(st_gguf_find_kv(g, "t.bool")->v.u, 1);
    assert_int_equal(st_gguf_find_kv(g, "t.bool")->type, ST_GGUF_BOOL);
    assert_int_equal(st_gguf_find_kv(g, "t.false")->v.u, 0);
    assert_true(st_gguf_find_kv(g, "t.u64")->v.u == 0x123456789abcdefull);
    assert_true(st_gguf_find_kv(g, "t.i64")->v.i == -0x123456789abcdll);
    assert_true(st_gguf_find_kv(g, "t.f64")->v.f == -2.5e300);
    char s[64];
    assert_int_equal(st_gguf_get_str(g, "t.str", s, sizeof s, &e), 0);
    assert_string_equal(s, "h\xc3\xa9llo");
    assert_int_equal(st_gguf_get_str(g, "t.empty", s, sizeof s, &e), 0);
    assert_string_equal(s, "");
    assert_int_equal(st_gguf_get_arr(g, "t.arr_i16", ST_GGUF_INT16, &kv, &e), 0);
    assert_int_equal(kv->arr_n, 3);
    assert_true(st_gguf_arr_num(kv, 0) == -1 && st_gguf_arr_num(kv, 2) == 300);
    assert_int_equal(st_gguf_get_arr(g, "t.arr_f32", ST_GGUF_FLOAT32, &kv, &e), 0);
    assert_true(st_gguf_arr_num(kv, 1) == -0.25);
    assert_int_equal(st_gguf_get_arr(g, "t.arr_bool", ST_GGUF_BOOL, &kv, &e), 0);
    assert_true(kv->arr_n == 4 && kv->arr_data[1] == 0 && kv->arr_data[3] == 1);
    assert_int_equal(st_gguf_get_arr(g, "t.arr_u64", ST_GGUF_UINT64, &kv, &e), 0);
    uint64_t x;
    memcpy(&x, kv->arr_data + 8, 8);
    assert_true(x == UINT64_MAX);
    assert_int_equal(st_gguf_get_arr(g, "t.arr_empty", ST_GGUF_INT32, &kv, &e), 0);
    assert_int_equal(kv->arr_n, 0);
    assert_int_equal(st_gguf_get_arr(g, "t.strs", ST_GGUF_STRING, &kv, &e), 0);
    assert_int_equal(kv->arr_n, 3);
    assert_true(kv->arr_strs[0].len == 2 && !memcmp(kv->arr_strs[0].ptr, "ab", 2));
    assert_int_equal(kv->arr_strs[1].len, 0);
    assert_true(kv->arr_strs[2].len == 6 && !memcmp(kv->arr_strs[2].ptr, "\xe2\x96\x81the", 6));
    // Order: t.replaced kept its place after t.strs; t.gone is gone.
    assert_null(st_gguf_find_kv(g, "t.gone"));
    assert_string_equal(g->kv[g->n_kv - 1].key, "t.replaced");
    assert_int_equal(g->kv[g->n_kv - 1].type, ST_GGUF_FLOAT32);
    assert_int_equal(g->n_tensors, N_SPECS);
    for (size_t i = 0; i < N_SPECS; i++) {
        const struct st_gguf_tensor *t = &g->tensors[i];
        assert_string_equal(t->name, specs[i].name);
        assert_int_equal(t->type, specs[i].type);
        assert_int_equal(t->n_dims, specs[i].n_dims);
        for (uint32_t d = 0; d < 4; d++) assert_int_equal(t->ne[d], d < specs[i].n_dims ? specs[i].ne[d] : 1);
        assert_int_equal(t->offset % alignment, 0);
        size_t n = spec_bytes(&specs[i]);
        assert_int_equal(t->n_bytes, n);
        uint8_t *d = malloc(n);
        fill(d, n, (uint32_t)i);
        assert_memory_equal(t->data, d, n);
        free(d);
    }
    st_gguf_close(&g);
}

static void test_round_trip(void **state)
{
    (void)state;
    write_full(st_tmp("a.gguf"), 0, 0);
    check_full(st_tmp("a.gguf"), 32);
    assert_false(exists(st_tmp("a.gguf.part")));
    write_full(st_tmp("b.gguf"), 64, 0);
    check_full(st_tmp("b.gguf"), 64);
    write_full(st_tmp("c.gguf"), 4096, 0);
    check_full(st_tmp("c.gguf"), 4096);
}

// The data may come in any pieces: the bytes written do not change.
static void test_pieces(void **state)
{
    (void)state;
    size_t na, nb;
    write_full(st_tmp("whole.gguf"), 0, 0);
    uint8_t *a = slurp(st_tmp("whole.gguf"), &na);
    size_t pieces[] = {1, 7, 33, 1000};
    for (size_t i = 0; i < 4; i++) {
        write_full(st_tmp("pieces.gguf"), 0, pieces[i]);
        uint8_t *b = slurp(st_tmp("pieces.gguf"), &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        free(b);
    }
    free(a);
}

// Copies every key and tensor of a file: the writer must produce the same
// bytes as the writer that made it (llama.cpp's, for the shared files).
static void copy_file(const char *in, const char *out)
{
    struct st_gguf *g;
    struct st_gguf_writer *w;
    struct st_error e;
    if (st_gguf_open(in, &g, &e)) fail_msg("%s", e.msg);
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    for (uint64_t i = 0; i < g->n_kv; i++) assert_int_equal(st_gguf_writer_copy_kv(w, &g->kv[i]), 0);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct st_gguf_tensor *t = &g->tensors[i];
        assert_int_equal(st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne), 0);
    }
    if (st_gguf_writer_begin(w, out, &e)) fail_msg("%s", e.msg);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (st_gguf_writer_write(w, g->tensors[i].data, g->tensors[i].n_bytes, &e)) fail_msg("%s", e.msg);
    if (st_gguf_writer_finish(w, &e)) fail_msg("%s", e.msg);
    st_gguf_writer_free(&w);
    st_gguf_close(&g);
}

static void test_copy_is_identical(void **state)
{
    (void)state;
    const char *files[] = {"models/pico-target.q8_0.gguf", "models/pico-target.q4_k.gguf",
                           "models/pico-draft.tq1_0.gguf", "models/pico-draft.f16.gguf",
                           "models/stories260K.f32.gguf", "vocab/ggml-vocab-llama-spm.gguf",
                           "vocab/ggml-vocab-gpt-2.gguf"};
    int n = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        st_test_shared(files[i], path, sizeof path);
        if (!exists(path)) continue;
        copy_file(path, st_tmp("copy.gguf"));
        size_t na, nb;
        uint8_t *a = slurp(path, &na), *b = slurp(st_tmp("copy.gguf"), &nb);
        if (na != nb || memcmp(a, b, na)) fail_msg("%s: our copy differs from llama.cpp's file", files[i]);
        free(a);
        free(b);
        n++;
    }
    printf("  %d shared files reproduced byte for byte\n", n);
    assert_true(n >= 5);
    // And our own output, read back and copied, is stable.
    write_full(st_tmp("own.gguf"), 64, 0);
    copy_file(st_tmp("own.gguf"), st_tmp("own2.gguf"));
    size_t na, nb;
    uint8_t *a = slurp(st_tmp("own.gguf"), &na), *b = slurp(st_tmp("own2.gguf"), &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
}

static void test_errors(void **state)
{
    (void)state;
    struct st_gguf_writer *w;
    struct st_error e;
    int64_t ne[2] = {33, 2}, ok[2] = {32, 2};
    // A row length that does not fit the block: reported at begin, no file.
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    assert_int_equal(st_gguf_writer_add_tensor(w, "bad", ST_TYPE_Q8_0, 2, ne), -1);
    assert_int_equal(st_gguf_writer_begin(w, st_tmp("e1.gguf"), &e), -1);
    assert_non_null(strstr(e.msg, "not a multiple"));
    assert_false(exists(st_tmp("e1.gguf.part")));
    st_gguf_writer_free(&w);
    // Duplicate tensor names, empty keys, unsupported types.
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    assert_int_equal(st_gguf_writer_add_tensor(w, "t", ST_TYPE_Q8_0, 2, ok), 0);
    assert_int_equal(st_gguf_writer_add_tensor(w, "t", ST_TYPE_F32, 2, ok), -1);
    assert_int_equal(st_gguf_writer_begin(w, st_tmp("e2.gguf"), &e), -1);
    assert_non_null(strstr(e.msg, "duplicate tensor name 't'"));
    st_gguf_writer_free(&w);
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    assert_int_equal(st_gguf_writer_set_u32(w, "", 1), -1);
    assert_int_equal(st_gguf_writer_begin(w, st_tmp("e3.gguf"), &e), -1);
    assert_non_null(strstr(e.msg, "empty metadata key"));
    st_gguf_writer_free(&w);
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    assert_int_equal(st_gguf_writer_add_tensor(w, "t", 3, 2, ok), -1); // Q4_1: not supported
    assert_int_equal(st_gguf_writer_begin(w, st_tmp("e4.gguf"), &e), -1);
    assert_non_null(strstr(e.msg, "unsupported type"));
    st_gguf_writer_free(&w);
    // Alignment that is not a power of two.
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    assert_int_equal(st_gguf_writer_set_u32(w, "general.alignment", 48), 0);
    assert_int_equal(st_gguf_writer_begin(w, st_tmp("e5.gguf"), &e), -1);
    assert_non_null(strstr(e.msg, "power-of-two"));
    st_gguf_writer_free(&w);
    // Too much data, too little data: errors, and nothing at PATH; freeing
    // the writer removes PATH.part.
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    assert_int_equal(st_gguf_writer_add_tensor(w, "t", ST_TYPE_Q8_0, 2, ok), 0);
    assert_int_equal(st_gguf_writer_add_tensor(w, "u", ST_TYPE_F32, 1, ok), 0);
    assert_int_equal(st_gguf_writer_begin(w, st_tmp("e6.gguf"), &e), 0);
    uint8_t buf[256] = {0};
    assert_int_equal(st_gguf_writer_set_u32(w, "late", 1), -1); // after begin
    assert_int_equal(st_gguf_writer_write(w, buf, 69, &e), -1);
    assert_non_null(strstr(e.msg, "tensor 't'"));
    assert_int_equal(st_gguf_writer_write(w, buf, 68, &e), 0);
    assert_int_equal(st_gguf_writer_write(w, buf, 100, &e), 0);
    assert_int_equal(st_gguf_writer_finish(w, &e), -1);
    assert_non_null(strstr(e.msg, "tensor 'u'"));
    assert_true(exists(st_tmp("e6.gguf.part")));
    assert_false(exists(st_tmp("e6.gguf")));
    st_gguf_writer_free(&w);
    assert_false(exists(st_tmp("e6.gguf.part")));
    // An output directory that does not exist.
    assert_int_equal(st_gguf_writer_new(&w, &e), 0);
    assert_int_equal(st_gguf_writer_begin(w, st_tmp("no/such/dir.gguf"), &e), -1);
    assert_non_null(strstr(e.msg, "open("));
    st_gguf_writer_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_pieces),
        cmocka_unit_test(test_copy_is_identical),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
