// GGUF reader: well-formed files of every value type, and hostile files:
// every mutation must give an error that names the problem, never a crash.
// Also replays the fuzz corpus in tests/corpus/gguf.
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/types.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "tests/support/test_support.h"

// A little-endian byte builder for hand-made files.
struct buf {
    uint8_t d[1 << 16];
    size_t n;
};
static void put(struct buf *b, const void *p, size_t n) { memcpy(b->d + b->n, p, n); b->n += n; }
static void u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void str(struct buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }

// A valid file: 5 keys of several types, 2 tensors (f32 [4], q8_0 [32 x 2]).
// Offsets of interesting fields are returned for mutation.
struct layout {
    size_t n_tensors, n_kv, arr_n, t0_dims, t0_ne0, t1_ne0, t1_type, t1_offset, t1_name;
};
static void build_valid(struct buf *b, struct layout *L)
{
    b->n = 0;
    u32(b, ST_GGUF_MAGIC);
    u32(b, 3);
    L->n_tensors = b->n; u64(b, 2);
    L->n_kv = b->n; u64(b, 5);
    str(b, "general.architecture"); u32(b, ST_GGUF_STRING); str(b, "test");
    str(b, "general.alignment"); u32(b, ST_GGUF_UINT32); u32(b, 64);
    str(b, "x.f"); u32(b, ST_GGUF_FLOAT32); float f = 1.5f; put(b, &f, 4);
    str(b, "x.arr"); u32(b, ST_GGUF_ARRAY); u32(b, ST_GGUF_INT16); L->arr_n = b->n; u64(b, 3);
    int16_t a[3] = {-1, 2, 300}; put(b, a, 6);
    str(b, "x.strs"); u32(b, ST_GGUF_ARRAY); u32(b, ST_GGUF_STRING); u64(b, 2); str(b, "ab"); str(b, "");
    str(b, "t0"); L->t0_dims = b->n; u32(b, 1); L->t0_ne0 = b->n; u64(b, 4); u32(b, ST_TYPE_F32); u64(b, 0);
    L->t1_name = b->n; str(b, "t1"); u32(b, 2); L->t1_ne0 = b->n; u64(b, 32); u64(b, 2); L->t1_type = b->n; u32(b, ST_TYPE_Q8_0);
    L->t1_offset = b->n; u64(b, 64);
    while (b->n % 64) b->d[b->n++] = 0;
    float t0[4] = {1, 2, 3, 4};
    put(b, t0, 16);
    while (b->n % 64) b->d[b->n++] = 0;
    struct st_block_q8_0 q[2] = {{st_f32_to_f16(0.5f), {0}}, {st_f32_to_f16(2.0f), {0}}};
    q[0].qs[1] = 3;
    q[1].qs[31] = -4;
    put(b, q, sizeof q);
}

static void test_valid(void **state)
{
    (void)state;
    struct buf *b = malloc(sizeof *b);
    struct layout L;
    build_valid(b, &L);
    struct st_gguf *g;
    struct st_error e;
    if (st_gguf_parse(b->d, b->n, "valid", &g, &e)) fail_msg("%s", e.msg);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 64);
    char s[32];
    assert_int_equal(st_gguf_get_str(g, "general.architecture", s, sizeof s, &e), 0);
    assert_string_equal(s, "test");
    float f;
    assert_int_equal(st_gguf_get_f32(g, "x.f", &f, &e), 0);
    assert_true(f == 1.5f);
    uint32_t u;
    assert_int_equal(st_gguf_get_u32(g, "missing", &u, &e), 1);
    assert_int_equal(st_gguf_get_u32(g, "x.f", &u, &e), -1); // wrong type
    const struct st_gguf_kv *kv;
    assert_int_equal(st_gguf_get_arr(g, "x.arr", ST_GGUF_INT16, &kv, &e), 0);
    assert_int_equal(kv->arr_n, 3);
    assert_true(st_gguf_arr_num(kv, 0) == -1 && st_gguf_arr_num(kv, 2) == 300);
    assert_int_equal(st_gguf_get_arr(g, "x.strs", ST_GGUF_STRING, &kv, &e), 0);
    assert_int_equal(kv->arr_strs[0].len, 2);
    assert_memory_equal(kv->arr_strs[0].ptr, "ab", 2);
    const struct st_gguf_tensor *t1 = st_gguf_find_tensor(g, "t1");
    assert_non_null(t1);
    assert_int_equal(t1->n_bytes, 68);
    float y[64];
    assert_int_equal(st_dequant_row(t1->type, t1->data, y, 64), 0);
    assert_true(y[1] == 1.5f && y[63] == -8.0f && y[0] == 0.0f);
    const struct st_gguf_tensor *t0 = st_gguf_find_tensor(g, "t0");
    assert_true(((const float *)t0->data)[3] == 4.0f);
    st_gguf_close(&g);
    assert_null(g);
    free(b);
}

// Applies a mutation to a valid file and expects an error containing `want`.
static void expect_error(void (*mutate)(struct buf *, const struct layout *), const char *want)
{
    struct buf *b = malloc(sizeof *b);
    struct layout L;
    build_valid(b, &L);
    mutate(b, &L);
    struct st_gguf *g = NULL;
    struct st_error e = {{0}};
    int rc = st_gguf_parse(b->d, b->n, "bad.gguf", &g, &e);
    if (rc == 0) fail_msg("mutation accepted, wanted error '%s'", want);
    assert_null(g);
    if (!strstr(e.msg, want)) fail_msg("error '%s' does not mention '%s'", e.msg, want);
    if (!strstr(e.msg, "bad.gguf")) fail_msg("error '%s' does not name the file", e.msg);
    free(b);
}

static void m_magic(struct buf *b, const struct layout *L) { (void)L; b->d[0] = 'X'; }
static void m_version(struct buf *b, const struct layout *L) { (void)L; b->d[4] = 9; }
static void m_truncate_header(struct buf *b, const struct layout *L) { b->n = L->n_kv + 4; }
static void m_truncate_data(struct buf *b, const struct layout *L) { (void)L; b->n -= 10; }
static void m_huge_kv(struct buf *b, const struct layout *L) { uint64_t v = 1ull << 60; memcpy(b->d + L->n_kv, &v, 8); }
static void m_huge_tensors(struct buf *b, const struct layout *L) { uint64_t v = ~0ull; memcpy(b->d + L->n_tensors, &v, 8); }
static void m_huge_array(struct buf *b, const struct layout *L) { uint64_t v = 1ull << 62; memcpy(b->d + L->arr_n, &v, 8); }
static void m_dims(struct buf *b, const struct layout *L) { uint32_t v = 7; memcpy(b->d + L->t0_dims, &v, 4); }
static void m_zero_dim(struct buf *b, const struct layout *L) { uint64_t v = 0; memcpy(b->d + L->t0_ne0, &v, 8); }
static void m_overflow_dim(struct buf *b, const struct layout *L) { uint64_t v = 1ull << 61; memcpy(b->d + L->t0_ne0, &v, 8); }
static void m_type(struct buf *b, const struct layout *L) { uint32_t v = 99; memcpy(b->d + L->t1_type, &v, 4); }
static void m_past_end(struct buf *b, const struct layout *L) { uint64_t v = 1u << 20; memcpy(b->d + L->t1_offset, &v, 8); }
static void m_misaligned(struct buf *b, const struct layout *L) { uint64_t v = 65; memcpy(b->d + L->t1_offset, &v, 8); }
static void m_dup_name(struct buf *b, const struct layout *L) { b->d[L->t1_name + 9] = '0'; }
static void m_block(struct buf *b, const struct layout *L) { uint64_t ne = 33; memcpy(b->d + L->t1_ne0, &ne, 8); }

static void test_hostile(void **state)
{
    (void)state;
    expect_error(m_magic, "not a GGUF file");
    expect_error(m_version, "unsupported GGUF version");
    expect_error(m_truncate_header, "truncated");
    expect_error(m_truncate_data, "runs past the end");
    expect_error(m_huge_kv, "more than");
    expect_error(m_huge_tensors, "more than");
    expect_error(m_huge_array, "x.arr");
    expect_error(m_dims, "n_dims");
    expect_error(m_zero_dim, "dimension");
    expect_error(m_overflow_dim, "t0");
    expect_error(m_type, "unsupported tensor type 99");
    expect_error(m_past_end, "runs past the end");
    expect_error(m_misaligned, "not aligned");
    expect_error(m_dup_name, "duplicate tensor name 't0'");
    expect_error(m_block, "not a multiple of the q8_0 block");
}

// Every prefix of a valid file is an error, never a crash.
static void test_every_truncation(void **state)
{
    (void)state;
    struct buf *b = malloc(sizeof *b);
    struct layout L;
    build_valid(b, &L);
    for (size_t n = 0; n < b->n; n++) {
        uint8_t *copy = malloc(n ? n : 1); // exact size so ASan sees any overrun
        memcpy(copy, b->d, n);
        struct st_gguf *g;
        struct st_error e;
        assert_int_equal(st_gguf_parse(copy, n, "prefix", &g, &e), -1);
        free(copy);
    }
    free(b);
}

// Missing required Llama keys and wrong shapes name the key or the tensor.
static void test_llama_missing_key(void **state)
{
    (void)state;
    struct buf *b = malloc(sizeof *b);
    struct layout L;
    build_valid(b, &L);
    struct st_gguf *g;
    struct st_error e;
    assert_int_equal(st_gguf_parse(b->d, b->n, "notllama.gguf", &g, &e), 0);
    struct st_llama_model *m;
    assert_int_equal(st_llama_from_gguf(g, &m, &e), -1);
    assert_non_null(strstr(e.msg, "only 'llama' is supported"));
    free(b);
}

// Replays every file of the fuzz corpus: parse must return (0 or -1) cleanly.
static void test_corpus(void **state)
{
    (void)state;
    DIR *d = opendir("tests/corpus/gguf");
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "tests/corpus/gguf/%s", de->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *p = malloc(sz ? (size_t)sz : 1);
        assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
        fclose(f);
        struct st_gguf *g = NULL;
        struct st_error e;
        if (st_gguf_parse(p, (size_t)sz, path, &g, &e) == 0) {
            struct st_llama_model *m;
            if (st_llama_from_gguf(g, &m, &e) == 0) st_llama_close(&m);
        }
        free(p);
        n++;
    }
    closedir(d);
    printf("  replayed %d corpus files\n", n);
    assert_true(n > 0);
}

// The shared models open and describe themselves.
static void test_shared_models(void **state)
{
    (void)state;
    const char *names[] = {"models/pico-target.q4_k.gguf", "models/pico-draft.tq1_0.gguf",
                           "models/stories260K.f32.gguf"};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        struct st_llama_model *m;
        struct st_error e;
        if (st_llama_open(st_test_shared(names[i], path, sizeof path), &m, &e)) fail_msg("%s", e.msg);
        assert_int_equal(m->hp.n_vocab, 512);
        st_llama_close(&m);
    }
    struct st_gguf *g;
    struct st_error e;
    assert_int_equal(st_gguf_open("/nonexistent/x.gguf", &g, &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/x.gguf"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_llama_missing_key),
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_shared_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
