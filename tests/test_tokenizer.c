// Tokenizers against llama.cpp's test vectors (shared/vocab: every case of
// every ggml-vocab-NAME.gguf must give exactly the ids of NAME.gguf.out),
// round trips through the decoder, hand-checked merge orders on tiny
// vocabularies, damaged metadata, and encoding speed.
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tests/support/test_support.h"

// The vocabularies the test vectors must cover; any other ggml-vocab-*.gguf
// found beside them is tested too.
static const char *const k_required[] = {"llama-spm", "phi-3", "gpt-2", "falcon", "starcoder", "deepseek-coder"};
#define N_REQUIRED (sizeof k_required / sizeof k_required[0])

// ---------------------------------------------------------------- helpers

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *p = realloc(buf, (cap *= 2) + 1);
            if (!p) free(buf);
            buf = p;
        }
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

// Writes s as a C string literal (escaped, cut at 80 bytes) into out.
static const char *quoted(const char *s, size_t n, char *out, size_t cap)
{
    size_t w = 0;
    out[w++] = '"';
    for (size_t i = 0; i < n && i < 80 && w + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') w += (size_t)snprintf(out + w, cap - w, "\\n");
        else if (c == '\t') w += (size_t)snprintf(out + w, cap - w, "\\t");
        else if (c == '"' || c == '\\') w += (size_t)snprintf(out + w, cap - w, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) w += (size_t)snprintf(out + w, cap - w, "\\x%02x", c);
        else out[w++] = (char)c;
    }
    snprintf(out + w, cap - w, n > 80 ? "\"..." : "\"");
    return out;
}

static void ids_string(const int32_t *ids, size_t n, char *out, size_t cap)
{
    size_t w = 0;
    out[0] = 0;
    for (size_t i = 0; i < n && w + 12 < cap; i++) w += (size_t)snprintf(out + w, cap - w, " %d", ids[i]);
}

static struct st_tokenizer *load_vocab(const char *name)
{
    char rel[256], path[1024];
    struct st_error e = {{0}};
    struct st_gguf *g = NULL;
    struct st_tokenizer *t = NULL;
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    if (st_gguf_open(st_test_shared(rel, path, sizeof path), &g, &e) || st_tok_load(g, &t, &e))
        fail_msg("loading %s: %s", path, e.msg);
    st_gguf_close(&g);
    return t;
}

// The test strings of NAME.gguf.inp: separated by "\n__ggml_vocab_test__\n"
// (the file ends with one), and the expected lines of NAME.gguf.out.
struct vocab_cases {
    char *inp, *out;       // file contents, cut in place
    size_t n;
    char **text;           // [n]
    size_t *len;           // [n]
    char **expect;         // [n] " id id ..." as in the .out file
};

static void load_cases(const char *name, struct vocab_cases *c)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char rel[256], path[1024];
    size_t inp_len, out_len;
    memset(c, 0, sizeof *c);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    c->inp = read_file(st_test_shared(rel, path, sizeof path), &inp_len);
    if (!c->inp) fail_msg("cannot read %s", path);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    c->out = read_file(st_test_shared(rel, path, sizeof path), &out_len);
    if (!c->out) fail_msg("cannot read %s", path);
    size_t cap = 16;
    c->text = malloc(cap * sizeof *c->text);
    c->len = malloc(cap * sizeof *c->len);
    c->expect = calloc(cap, sizeof *c->expect);
    for (char *p = c->inp; p < c->inp + inp_len;) {
        char *s = strstr(p, sep);
        if (!s) fail_msg("%s: text after the last separator", name);
        if (c->n == cap) {
            cap *= 2;
            c->text = realloc(c->text, cap * sizeof *c->text);
            c->len = realloc(c->len, cap * sizeof *c->len);
            c->expect = realloc(c->expect, cap * sizeof *c->expect);
        }
        c->text[c->n] = p;
        c->len[c->n] = (size_t)(s - p);
        c->n++;
        p = s + strlen(sep);
    }
    size_t lines = 0;
    for (char *p = c->out; p < c->out + out_len; lines++) {
        char *nl = strchr(p, '\n');
        if (!nl) fail_msg("%s.out: last line has no newline", name);
        *nl = 0;
        if (lines < c->n) c->expect[lines] = p;
        p = nl + 1;
    }
    if (lines != c->n) fail_msg("%s: %zu test strings but %zu expected lines", name, c->n, lines);
}

static void free_cases(struct vocab_cases *c)
{
    free(c->inp);
    free(c->out);
    free(c->text);
    free(c->len);
    free(c->expect);
}

// Names NAME of every ggml-vocab-NAME.gguf in shared/vocab.
static size_t list_vocabs(char names[][64], size_t cap)
{
    char path[1024];
    DIR *d = opendir(st_test_shared("vocab", path, sizeof path));
    if (!d) fail_msg("cannot open %s (set ST_SHARED)", path);
    size_t n = 0;
    for (struct dirent *de; (de = readdir(d)) && n < cap;) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "ggml-vocab-", 11) || len < 16 || strcmp(de->d_name + len - 5, ".gguf")) continue;
        snprintf(names[n++], 64, "%.*s", (int)(len - 16), de->d_name + 11);
    }
    closedir(d);
    return n;
}

// ---------------------------------------------------------------- vectors

static int check_vocab(const char *name)
{
    struct st_tokenizer *t = load_vocab(name);
    struct vocab_cases c;
    load_cases(name, &c);
    int bad = 0;
    for (size_t i = 0; i < c.n; i++) {
        struct st_error e;
        int32_t *ids;
        size_t n;
        char got[8192], q[512];
        if (st_tok_encode_ex(t, c.text[i], c.len[i], 0, &ids, &n, &e))
            fail_msg("ggml-vocab-%s.gguf case %zu: %s", name, i + 1, e.msg);
        ids_string(ids, n, got, sizeof got);
        if (strcmp(got, c.expect[i])) {
            // stderr directly: cmocka's printers cut long lines.
            fprintf(stderr, "ggml-vocab-%s.gguf case %zu %s:\n  expected:%s\n  got:     %s\n", name, i + 1,
                    quoted(c.text[i], c.len[i], q, sizeof q), c.expect[i], got);
            bad++;
        }
        free(ids);
    }
    print_message("ggml-vocab-%s.gguf: %zu cases, %d differ\n", name, c.n, bad);
    free_cases(&c);
    st_tok_free(&t);
    return bad;
}

static void test_vectors(void **state)
{
    (void)state;
    char names[64][64];
    size_t n = list_vocabs(names, 64);
    int bad = 0;
    for (size_t r = 0; r < N_REQUIRED; r++) {
        size_t k = 0;
        while (k < n && strcmp(names[k], k_required[r])) k++;
        if (k == n) {
            print_error("ggml-vocab-%s.gguf is missing from shared/vocab\n", k_required[r]);
            bad++;
        }
    }
    for (size_t k = 0; k < n; k++) bad += check_vocab(names[k]);
    assert_int_equal(bad, 0);
}

// ---------------------------------------------------------------- decoding

static void expect_roundtrip(const struct st_tokenizer *t, const char *name, const char *s, size_t len, int *bad)
{
    struct st_error e;
    int32_t *ids;
    size_t n;
    if (st_tok_encode_ex(t, s, len, 0, &ids, &n, &e)) fail_msg("%s: %s", name, e.msg);
    int64_t total = st_tok_decode(t, ids, n, NULL, 0);
    char *back = malloc(total > 0 ? (size_t)total : 1);
    assert_int_equal(st_tok_decode(t, ids, n, back, (size_t)total), total);
    if (total != (int64_t)len || memcmp(back, s, len)) {
        char q1[512], q2[512];
        print_error("%s: round trip of %s gave %s\n", name, quoted(s, len, q1, sizeof q1),
                    quoted(back, total > 0 ? (size_t)total : 0, q2, sizeof q2));
        (*bad)++;
    }
    free(back);
    free(ids);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// Valid UTF-8 from several scripts (rare CJK and emoji take the SPM byte
// fallback), with no '<' so that no special token is spelled, and no \x0b,
// for which falcon's vocabulary has no token (llama.cpp drops it too, see
// test_pieces).
static size_t random_utf8(uint64_t *seed, char *buf, size_t n_chars)
{
    static const uint32_t lo[] = {0x20, 0xA0, 0x400, 0x4E00, 0x1F600};
    static const uint32_t span[] = {0x5E, 0x60, 0x50, 0x400, 0x40};
    size_t w = 0;
    for (size_t i = 0; i < n_chars; i++) {
        uint32_t s = (uint32_t)(rng_next(seed) % 6), cp;
        if (s == 5) cp = (uint32_t)"\t\n\f\r"[rng_next(seed) % 4];
        else cp = lo[s] + (uint32_t)(rng_next(seed) % span[s]);
        if (cp == '<') cp = '>';
        if (cp < 0x80) {
            buf[w++] = (char)cp;
        } else if (cp < 0x800) {
            buf[w++] = (char)(0xC0 | cp >> 6);
            buf[w++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            buf[w++] = (char)(0xE0 | cp >> 12);
            buf[w++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            buf[w++] = (char)(0x80 | (cp & 0x3F));
        } else {
            buf[w++] = (char)(0xF0 | cp >> 18);
            buf[w++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            buf[w++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            buf[w++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return w;
}

// Any bytes but '<' (special tokens) and ' ': SentencePiece cuts the text by
// UTF-8 lead bytes after spaces became U+2581, so a broken sequence before a
// space swallows part of that U+2581 and its bytes come back as written
// (llama.cpp does the same).
static size_t random_bytes(uint64_t *seed, char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char ch;
        do ch = (char)(1 + rng_next(seed) % 255);
        while (ch == '<' || ch == ' ');
        buf[i] = ch;
    }
    return n;
}

static void test_roundtrip(void **state)
{
    (void)state;
    int bad = 0;
    for (size_t r = 0; r < N_REQUIRED; r++) {
        const char *name = k_required[r];
        struct st_tokenizer *t = load_vocab(name);
        struct vocab_cases c;
        load_cases(name, &c);
        for (size_t i = 0; i < c.n; i++) expect_roundtrip(t, name, c.text[i], c.len[i], &bad);
        uint64_t seed = 0x9E3779B97F4A7C15ull + r;
        char buf[256];
        for (int k = 0; k < 200; k++) {
            size_t len = random_utf8(&seed, buf, 1 + rng_next(&seed) % 60);
            expect_roundtrip(t, name, buf, len, &bad);
            if (st_tok_kind(t) == ST_TOK_KIND_SPM) {
                len = random_bytes(&seed, buf, 1 + rng_next(&seed) % 60);
                expect_roundtrip(t, name, buf, len, &bad);
            }
        }
        free_cases(&c);
        st_tok_free(&t);
    }
    assert_int_equal(bad, 0);
}

static void expect_piece(const struct st_tokenizer *t, int32_t id, const char *want)
{
    char buf[64];
    int n = st_tok_decode_piece(t, id, buf, sizeof buf);
    assert_int_equal(n, (int)strlen(want));
    assert_memory_equal(buf, want, strlen(want));
}

static int32_t only_token(const struct st_tokenizer *t, const char *text)
{
    struct st_error e;
    int32_t *ids, id;
    size_t n;
    assert_int_equal(st_tok_encode(t, text, strlen(text), false, &ids, &n, &e), 0);
    assert_int_equal(n, 1);
    id = ids[0];
    free(ids);
    return id;
}

static void test_pieces(void **state)
{
    (void)state;
    struct st_tokenizer *t = load_vocab("llama-spm");
    assert_int_equal(st_tok_kind(t), ST_TOK_KIND_SPM);
    assert_int_equal(st_tok_n_vocab(t), 32000);
    assert_int_equal(st_tok_bos(t), 1);
    assert_int_equal(st_tok_eos(t), 2);
    assert_true(st_tok_adds_bos(t));
    assert_true(st_tok_is_eog(t, 2));
    assert_false(st_tok_is_eog(t, 1));
    assert_true(st_tok_is_control(t, 1));
    expect_piece(t, only_token(t, "Hello"), " Hello"); // ▁Hello
    expect_piece(t, 1, "");                            // BOS is no text
    expect_piece(t, 3 + '\n', "\n");                   // <0x0A>
    expect_piece(t, 3 + 0xFF, "\xFF");                 // <0xFF>
    assert_int_equal(st_tok_decode_piece(t, 32000, NULL, 0), -1);
    assert_int_equal(st_tok_decode_piece(t, -1, NULL, 0), -1);
    char two[2];
    assert_int_equal(st_tok_decode_piece(t, only_token(t, "Hello"), two, 2), 6); // full length, cut copy
    assert_memory_equal(two, " H", 2);
    // add_special: BOS in front; decode drops BOS and the prefix space.
    struct st_error e;
    int32_t *ids;
    size_t n;
    assert_int_equal(st_tok_encode(t, "Hello world", 11, true, &ids, &n, &e), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 1);
    char text[32];
    assert_int_equal(st_tok_decode(t, ids, n, text, sizeof text), 11);
    assert_memory_equal(text, "Hello world", 11);
    int32_t badids[] = {1, 40000};
    assert_int_equal(st_tok_decode(t, badids, 2, text, sizeof text), -1);
    free(ids);
    // An empty text gives no ids (only BOS with add_special), never NULL.
    assert_int_equal(st_tok_encode(t, "", 0, false, &ids, &n, &e), 0);
    assert_non_null(ids);
    assert_int_equal(n, 0);
    free(ids);
    assert_int_equal(st_tok_encode(t, "", 0, true, &ids, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    st_tok_free(&t);
    assert_null(t);

    t = load_vocab("gpt-2");
    assert_int_equal(st_tok_kind(t), ST_TOK_KIND_BPE);
    assert_string_equal(st_tok_pre_name(t), "gpt-2");
    assert_int_equal(st_tok_n_vocab(t), 50257);
    assert_true(st_tok_is_eog(t, 50256));
    assert_false(st_tok_adds_bos(t));
    expect_piece(t, only_token(t, " world"), " world"); // Ġworld
    expect_piece(t, only_token(t, "\n"), "\n");         // Ċ
    expect_piece(t, only_token(t, "\xC3\xA9"), "\xC3\xA9");
    expect_piece(t, 50256, "");
    st_tok_free(&t);

    // falcon has no token for byte 0x0B: like llama.cpp, the byte is dropped.
    t = load_vocab("falcon");
    assert_int_equal(st_tok_encode(t, "a\x0b b", 4, false, &ids, &n, &e), 0);
    assert_int_equal(st_tok_decode(t, ids, n, text, sizeof text), 3);
    assert_memory_equal(text, "a b", 3);
    free(ids);
    st_tok_free(&t);

    t = load_vocab("phi-3");
    assert_true(st_tok_is_eog(t, 32000)); // <|endoftext|>, the EOS
    assert_true(st_tok_is_eog(t, 32007)); // <|end|>, recognised by its text
    assert_false(st_tok_is_eog(t, 32001));
    st_tok_free(&t);

    t = load_vocab("deepseek-coder");
    assert_true(st_tok_adds_bos(t));
    expect_piece(t, 32009, "\xC3\xBC"); // user-defined 'ü' is its own text
    assert_true(st_tok_is_eog(t, st_tok_eos(t)));
    st_tok_free(&t);
}

// ---------------------------------------------------------------- specials

static void encode_ok(const struct st_tokenizer *t, const char *s, unsigned flags, int32_t **ids, size_t *n)
{
    struct st_error e;
    if (st_tok_encode_ex(t, s, strlen(s), flags, ids, n, &e)) fail_msg("encode '%s': %s", s, e.msg);
}

static void test_special_tokens(void **state)
{
    (void)state;
    struct st_tokenizer *t = load_vocab("llama-spm");
    int32_t *a, *b;
    size_t na, nb;
    // With parse_special, "<s>" in the text is BOS and the text after it
    // gets the prefix space again.
    encode_ok(t, "<s>Hello", ST_TOK_PARSE_SPECIAL, &a, &na);
    encode_ok(t, "Hello", 0, &b, &nb);
    assert_int_equal(na, 1 + nb);
    assert_int_equal(a[0], 1);
    assert_memory_equal(a + 1, b, nb * sizeof *b);
    free(a);
    free(b);
    // Without it, "<s>" is plain text.
    encode_ok(t, "<s>Hello", 0, &a, &na);
    for (size_t i = 0; i < na; i++) assert_int_not_equal(a[i], 1);
    free(a);
    st_tok_free(&t);

    // phi-3: "</s>" is user-defined, so it is matched even without
    // parse_special, and (llama.cpp's phi-3 rule) eats the spaces after it.
    t = load_vocab("phi-3");
    int32_t *c;
    size_t nc;
    encode_ok(t, "a</s>   b", 0, &a, &na);
    encode_ok(t, "a", 0, &b, &nb);
    encode_ok(t, "b", 0, &c, &nc);
    assert_int_equal(na, nb + 1 + nc);
    assert_memory_equal(a, b, nb * sizeof *b);
    assert_int_equal(a[nb], 2);
    assert_memory_equal(a + nb + 1, c, nc * sizeof *c);
    free(a);
    free(b);
    free(c);
    // <|end|> is control: only with parse_special.
    encode_ok(t, "x<|end|>", ST_TOK_PARSE_SPECIAL, &a, &na);
    assert_int_equal(a[na - 1], 32007);
    free(a);
    encode_ok(t, "x<|end|>", 0, &a, &na);
    for (size_t i = 0; i < na; i++) assert_int_not_equal(a[i], 32007);
    free(a);
    st_tok_free(&t);

    // Byte-level BPE: the control token "<|endoftext|>" with parse_special.
    t = load_vocab("gpt-2");
    encode_ok(t, "Hi<|endoftext|>Hi", ST_TOK_PARSE_SPECIAL, &a, &na);
    encode_ok(t, "Hi", 0, &b, &nb);
    assert_int_equal(na, 2 * nb + 1);
    assert_int_equal(a[nb], 50256);
    free(a);
    free(b);
    st_tok_free(&t);
}

// ---------------------------------------------------------------- tiny vocabularies

// A GGUF built in memory: metadata only.
struct gbuf {
    uint8_t *d;
    size_t n, cap;
    uint64_t n_kv;
};

static void put(struct gbuf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 1024;
        b->d = realloc(b->d, b->cap);
        assert_non_null(b->d);
    }
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void put_u32(struct gbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct gbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct gbuf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }
static void key(struct gbuf *b, const char *k, uint32_t type) { put_str(b, k); put_u32(b, type); b->n_kv++; }
static void kv_str(struct gbuf *b, const char *k, const char *v) { key(b, k, ST_GGUF_STRING); put_str(b, v); }
static void kv_u32(struct gbuf *b, const char *k, uint32_t v) { key(b, k, ST_GGUF_UINT32); put_u32(b, v); }

static void kv_strs(struct gbuf *b, const char *k, const char *const *v, size_t n)
{
    key(b, k, ST_GGUF_ARRAY);
    put_u32(b, ST_GGUF_STRING);
    put_u64(b, n);
    for (size_t i = 0; i < n; i++) put_str(b, v[i]);
}

static void kv_f32s(struct gbuf *b, const char *k, const float *v, size_t n)
{
    key(b, k, ST_GGUF_ARRAY);
    put_u32(b, ST_GGUF_FLOAT32);
    put_u64(b, n);
    put(b, v, 4 * n);
}

static void kv_i32s(struct gbuf *b, const char *k, const int32_t *v, size_t n)
{
    key(b, k, ST_GGUF_ARRAY);
    put_u32(b, ST_GGUF_INT32);
    put_u64(b, n);
    put(b, v, 4 * n);
}

// Parses the metadata in b into a GGUF and loads a tokenizer from it.
static int load_built(struct gbuf *b, struct st_tokenizer **t, struct st_error *e)
{
    struct gbuf f = {0};
    put_u32(&f, ST_GGUF_MAGIC);
    put_u32(&f, 3);
    put_u64(&f, 0);
    put_u64(&f, b->n_kv);
    put(&f, b->d, b->n);
    struct st_gguf *g = NULL;
    int rc = st_gguf_parse(f.d, f.n, "tiny.gguf", &g, e);
    if (rc) fail_msg("the test's own GGUF does not parse: %s", e->msg);
    rc = st_tok_load(g, t, e);
    st_gguf_close(&g);
    free(f.d);
    free(b->d);
    memset(b, 0, sizeof *b);
    return rc;
}

// SPM: <unk> <s> </s>, 256 byte tokens, then a few pieces with scores.
#define SPM_BASE 259
static const char *const spm_pieces[] = {"\xE2\x96\x81", "a", "b", "c", "ab", "bc", "\342\226\201a", "abc"}; // \342\226\201 is U+2581
static const float spm_scores[] = {-1, -2, -3, -4, -5, -0.5f, -6, -7};
#define N_SPM (SPM_BASE + sizeof spm_pieces / sizeof spm_pieces[0])

enum spm_mutation { SPM_OK, SPM_NO_MODEL, SPM_BAD_MODEL, SPM_NO_TOKENS, SPM_INT_TOKENS, SPM_EMPTY_TOKENS,
                    SPM_SHORT_SCORES, SPM_STRING_TYPES, SPM_NAN_SCORE, SPM_BOS_RANGE, SPM_BOS_STRING };

static int build_spm(enum spm_mutation m, struct st_tokenizer **t, struct st_error *e)
{
    static char names[SPM_BASE][8];
    const char *tok[N_SPM];
    float score[N_SPM];
    int32_t type[N_SPM];
    tok[0] = "<unk>", tok[1] = "<s>", tok[2] = "</s>";
    type[0] = 2, type[1] = type[2] = 3;
    for (int i = 3; i < SPM_BASE; i++) {
        snprintf(names[i], sizeof names[i], "<0x%02X>", i - 3);
        tok[i] = names[i];
        type[i] = 6;
    }
    for (size_t i = 0; i < N_SPM; i++) score[i] = 0;
    for (size_t i = SPM_BASE; i < N_SPM; i++) {
        tok[i] = spm_pieces[i - SPM_BASE];
        score[i] = spm_scores[i - SPM_BASE];
        type[i] = 1;
    }
    if (m == SPM_NAN_SCORE) score[SPM_BASE + 2] = NAN;
    struct gbuf b = {0};
    if (m == SPM_BAD_MODEL) kv_str(&b, "tokenizer.ggml.model", "bert");
    else if (m != SPM_NO_MODEL) kv_str(&b, "tokenizer.ggml.model", "llama");
    if (m == SPM_INT_TOKENS) kv_i32s(&b, "tokenizer.ggml.tokens", type, N_SPM);
    else if (m == SPM_EMPTY_TOKENS) kv_strs(&b, "tokenizer.ggml.tokens", tok, 0);
    else if (m != SPM_NO_TOKENS) kv_strs(&b, "tokenizer.ggml.tokens", tok, N_SPM);
    kv_f32s(&b, "tokenizer.ggml.scores", score, m == SPM_SHORT_SCORES ? N_SPM - 1 : N_SPM);
    if (m == SPM_STRING_TYPES) kv_strs(&b, "tokenizer.ggml.token_type", tok, N_SPM);
    else kv_i32s(&b, "tokenizer.ggml.token_type", type, N_SPM);
    if (m == SPM_BOS_RANGE) kv_u32(&b, "tokenizer.ggml.bos_token_id", 5000);
    else if (m == SPM_BOS_STRING) kv_str(&b, "tokenizer.ggml.bos_token_id", "1");
    else kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    return load_built(&b, t, e);
}

static void expect_ids(const struct st_tokenizer *t, const char *text, const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    char got[256], exp[256];
    encode_ok(t, text, 0, &ids, &n);
    ids_string(ids, n, got, sizeof got);
    ids_string(want, n_want, exp, sizeof exp);
    if (strcmp(got, exp)) fail_msg("'%s': expected%s, got%s", text, exp, got);
    free(ids);
}

static void test_tiny_spm(void **state)
{
    (void)state;
    struct st_error e;
    struct st_tokenizer *t;
    if (build_spm(SPM_OK, &t, &e)) fail_msg("%s", e.msg);
    const int32_t SP = SPM_BASE, C = SPM_BASE + 3, BC = SPM_BASE + 5, SPA = SPM_BASE + 6;
    // "▁abc": bc (-0.5) merges first, then ▁a (-6); "abc" (-7) is never
    // formed because its left part was taken by ▁a.
    expect_ids(t, "abc", (const int32_t[]){SPA, BC}, 2);
    // 'x' is no piece: byte fallback to <0x78>.
    expect_ids(t, "ax", (const int32_t[]){SPA, 3 + 'x'}, 2);
    // Spaces: "▁c▁▁a" -> ▁ c ▁ ▁a (▁a beats nothing else).
    expect_ids(t, "c  a", (const int32_t[]){SP, C, SP, SPA}, 4);
    st_tok_free(&t);
}

// BPE: the 256 byte-alphabet characters, then merged tokens.
// 256 ab, 257 bc, 258 Ġa, 259 abc, 260 cab (formed by no merge), 261 12.
static const char *const bpe_extra[] = {"ab", "bc", "\304\240a", "abc", "cab", "12"}; // \304\240 is U+0120
static const char *const bpe_merges_ok[] = {"a b", "b c", "\xC4\xA0 a", "ab c", "1 2"};
#define N_BPE_EXTRA (sizeof bpe_extra / sizeof bpe_extra[0])
#define N_BPE_MERGES (sizeof bpe_merges_ok / sizeof bpe_merges_ok[0])

enum bpe_mutation { BPE_OK, BPE_NO_MERGES, BPE_UNKNOWN_PART, BPE_NO_SPACE, BPE_UNKNOWN_PRE, BPE_UNKNOWN_RESULT };

static int build_bpe(enum bpe_mutation m, const char *pre, struct st_tokenizer **t, struct st_error *e)
{
    static char alpha[256][4];
    const char *tok[256 + N_BPE_EXTRA];
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        unsigned cp = printable ? (unsigned)b : (unsigned)next++;
        if (cp < 0x80) alpha[b][0] = (char)cp, alpha[b][1] = 0;
        else alpha[b][0] = (char)(0xC0 | cp >> 6), alpha[b][1] = (char)(0x80 | (cp & 0x3F)), alpha[b][2] = 0;
        tok[b] = alpha[b];
    }
    for (size_t i = 0; i < N_BPE_EXTRA; i++) tok[256 + i] = bpe_extra[i];
    const char *merges[N_BPE_MERGES];
    memcpy(merges, bpe_merges_ok, sizeof merges);
    if (m == BPE_UNKNOWN_PART) merges[1] = "b q\xC3\xBF";
    if (m == BPE_NO_SPACE) merges[2] = "abc";
    if (m == BPE_UNKNOWN_RESULT) merges[3] = "c a";
    struct gbuf b = {0};
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    kv_str(&b, "tokenizer.ggml.pre", m == BPE_UNKNOWN_PRE ? "no-such-pre" : pre);
    kv_strs(&b, "tokenizer.ggml.tokens", tok, 256 + N_BPE_EXTRA);
    if (m != BPE_NO_MERGES) kv_strs(&b, "tokenizer.ggml.merges", merges, N_BPE_MERGES);
    return load_built(&b, t, e);
}

static void test_tiny_bpe(void **state)
{
    (void)state;
    struct st_error e;
    struct st_tokenizer *t;
    if (build_bpe(BPE_OK, "gpt-2", &t, &e)) fail_msg("%s", e.msg);
    // "abc": a+b (rank 0) before b+c (rank 1), then ab+c (rank 3).
    expect_ids(t, "abc", (const int32_t[]){259}, 1);
    // " abc": Ġ+a is rank 2, a+b rank 0 goes first; Ġ+ab is no merge.
    // (Token b is the alphabet character of byte b, so Ġ is token ' '.)
    expect_ids(t, " abc", (const int32_t[]){' ', 259}, 2);
    // "bc a": words "bc" and " a" -> bc, Ġa.
    expect_ids(t, "bc a", (const int32_t[]){257, 258}, 2);
    // GPT-2 keeps digit runs whole and merges "cab" from c + ab.
    expect_ids(t, "1212", (const int32_t[]){261, 261}, 2);
    expect_ids(t, "cab", (const int32_t[]){'c', 256}, 2);
    st_tok_free(&t);

    // Llama 3: digits in groups of three, and a word that is a token stays whole.
    if (build_bpe(BPE_OK, "llama-bpe", &t, &e)) fail_msg("%s", e.msg);
    // llama3 vocabularies add BOS by default (id 11 here: llama.cpp's default
    // for a gpt2 vocabulary without tokenizer.ggml.bos_token_id).
    assert_true(st_tok_adds_bos(t));
    assert_int_equal(st_tok_bos(t), 11);
    expect_ids(t, "1212", (const int32_t[]){261, '1', '2'}, 3);
    expect_ids(t, "cab", (const int32_t[]){260}, 1);
    st_tok_free(&t);

    // Every known pre-tokenizer compiles and round-trips mixed text.
    static const char *const pres[] = {"default", "", "gpt-2", "llama3", "llama-bpe", "dbrx", "qwen2",
                                       "falcon", "starcoder", "deepseek-coder", "mpt", "refact"};
    static const char mixed[] = "Hello, y'all! 3333 \xE6\x88\x91\xE6\x83\xB3 \t\n  x=1;\r\n";
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++) {
        int bad = 0;
        if (build_bpe(BPE_OK, pres[i], &t, &e)) fail_msg("pre '%s': %s", pres[i], e.msg);
        expect_roundtrip(t, pres[i], mixed, sizeof mixed - 1, &bad);
        assert_int_equal(bad, 0);
        st_tok_free(&t);
    }
}

static void expect_load_error(int rc, struct st_tokenizer *t, const struct st_error *e, const char *want)
{
    assert_int_equal(rc, -1);
    assert_null(t);
    if (!strstr(e->msg, want)) fail_msg("error '%s' does not mention '%s'", e->msg, want);
    print_message("  ok: %s\n", e->msg);
}

static void test_bad_metadata(void **state)
{
    (void)state;
    static const struct {
        enum spm_mutation m;
        const char *want;
    } spm[] = {
        {SPM_NO_MODEL, "tokenizer.ggml.model"},
        {SPM_BAD_MODEL, "'bert' is not supported"},
        {SPM_NO_TOKENS, "no tokenizer.ggml.tokens"},
        {SPM_INT_TOKENS, "tokenizer.ggml.tokens"},
        {SPM_EMPTY_TOKENS, "tokenizer.ggml.tokens has 0 entries"},
        {SPM_SHORT_SCORES, "tokenizer.ggml.scores has 266 entries but tokenizer.ggml.tokens has 267"},
        {SPM_STRING_TYPES, "tokenizer.ggml.token_type is array of string, expected an array of numbers"},
        {SPM_NAN_SCORE, "scores[261] is NaN"},
        {SPM_BOS_RANGE, "bos_token_id = 5000 is past the vocabulary"},
        {SPM_BOS_STRING, "bos_token_id"},
    };
    for (size_t i = 0; i < sizeof spm / sizeof spm[0]; i++) {
        struct st_error e = {{0}};
        struct st_tokenizer *t = (struct st_tokenizer *)&e; // must come back NULL
        int rc = build_spm(spm[i].m, &t, &e);
        expect_load_error(rc, t, &e, spm[i].want);
    }
    static const struct {
        enum bpe_mutation m;
        const char *want;
    } bpe[] = {
        {BPE_NO_MERGES, "no tokenizer.ggml.merges"},
        {BPE_UNKNOWN_PART, "merges[1] 'b q\xC3\xBF' names 'q\xC3\xBF', which is not a token"},
        {BPE_NO_SPACE, "merges[2] 'abc' is not two tokens"},
        {BPE_UNKNOWN_RESULT, "merges[3] 'c a' names 'ca', which is not a token"},
        {BPE_UNKNOWN_PRE, "'no-such-pre' is not a known pre-tokenizer"},
    };
    for (size_t i = 0; i < sizeof bpe / sizeof bpe[0]; i++) {
        struct st_error e = {{0}};
        struct st_tokenizer *t = (struct st_tokenizer *)&e;
        int rc = build_bpe(bpe[i].m, "gpt-2", &t, &e);
        expect_load_error(rc, t, &e, bpe[i].want);
    }
    struct st_tokenizer *none = NULL;
    st_tok_free(&none); // freeing nothing is a no-op
}

// ---------------------------------------------------------------- speed

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_speed(void **state)
{
    (void)state;
    // 16 KB of mixed text: the test strings over and over.
    struct vocab_cases c;
    load_cases("gpt-2", &c);
    size_t cap = 16384, len = 0;
    char *text = malloc(cap);
    for (size_t i = 0; len < cap; i = (i + 1) % c.n)
        for (size_t j = 0; j < c.len[i] && len < cap; j++) text[len++] = c.text[i][j];
    free_cases(&c);
    for (size_t r = 0; r < N_REQUIRED; r++) {
        struct st_tokenizer *t = load_vocab(k_required[r]);
        int32_t *ids;
        size_t n;
        struct st_error e;
        double t0 = now();
        if (st_tok_encode(t, text, len, true, &ids, &n, &e)) fail_msg("%s", e.msg);
        double dt = now() - t0;
        print_message("%-15s %zu bytes -> %zu tokens in %.1f ms\n", k_required[r], len, n, 1e3 * dt);
        if (dt > 1.0) fail_msg("%s: encoding %zu bytes took %.2f s", k_required[r], len, dt);
        free(ids);
        st_tok_free(&t);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),      cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_pieces),       cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_tiny_spm),     cmocka_unit_test(test_tiny_bpe),
        cmocka_unit_test(test_bad_metadata), cmocka_unit_test(test_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
