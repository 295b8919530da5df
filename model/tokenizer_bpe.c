// Byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp does it:
//  1. a pre-tokenizer cuts the text into words with a list of regexes, each
//     applied to every piece the previous ones left (the matches and the
//     gaps between them both become pieces);
//  2. each word's bytes are written in GPT-2's printable alphabet
//     (bytes_to_unicode: space -> U+0120 'Ġ', ...);
//  3. the adjacent pair with the lowest merge rank is merged, again and
//     again (leftmost first among equal ranks).
// The regexes run in PCRE2 with UTF and UCP, so \p{L} and \p{N} are Unicode's
// letters and numbers.  \s is spelled out as llama.cpp's whitespace set.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_impl.h"
#include "model/unicode.h"

// llama.cpp's whitespace (Unicode White_Space), for use inside [...].
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
#define RE_GPT2 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])"
// Llama 3, with its case-insensitive contractions spelled out; numbers in
// groups of up to three.
#define RE_LLAMA3_(NUM)                                                                              \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" NUM \
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"
#define RE_LLAMA3 RE_LLAMA3_("\\p{N}{1,3}")
#define RE_QWEN2 RE_LLAMA3_("\\p{N}")

struct pre_tokenizer {
    const char *names[12];  // tokenizer.ggml.pre values
    bool ignore_merges;     // a word that is a whole token stays whole
    bool add_bos;           // default of tokenizer.ggml.add_bos_token
    const char *regex[ST_TOK_MAX_REGEX];
};

static const struct pre_tokenizer pre_tokenizers[] = {
    {{"default", ""}, false, false,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, true, true, {RE_LLAMA3}},
    {{"dbrx", "smaug-bpe"}, false, false, {RE_LLAMA3}},
    {{"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez"}, false, false, {RE_QWEN2}},
    {{"deepseek-coder"}, false, false,
     {"[\\r\\n]", "[" WS "]?\\p{L}+", "[" WS "]?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
      "\\p{N}"}},
    {{"falcon"}, false, false, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, false, false,
     {"\\p{N}", RE_GPT2}},
    {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es",
      "jina-v2-de", "jina-v2-code"},
     false, false, {RE_GPT2}},
};

static const struct pre_tokenizer *find_pre(const char *name)
{
    for (size_t i = 0; i < sizeof pre_tokenizers / sizeof pre_tokenizers[0]; i++)
        for (size_t j = 0; j < 12 && pre_tokenizers[i].names[j]; j++)
            if (!strcmp(pre_tokenizers[i].names[j], name)) return &pre_tokenizers[i];
    return NULL;
}

int st_tok_bpe_init(struct st_tokenizer *t, const char *pre, struct st_error *e)
{
    const struct pre_tokenizer *p = find_pre(pre);
    if (!p)
        return st_error_set(e, "tokenizer.ggml.pre '%s' is not a known pre-tokenizer (known: default, gpt-2, "
                               "llama-bpe, falcon, starcoder, deepseek-coder, qwen2, dbrx, ...)", pre);
    snprintf(t->pre_name, sizeof t->pre_name, "%s", *pre ? pre : "default");
    t->ignore_merges = p->ignore_merges;
    t->add_bos = p->add_bos;
    for (uint32_t i = 0; i < ST_TOK_MAX_REGEX && p->regex[i]; i++) {
        int err;
        PCRE2_SIZE at;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)p->regex[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &at, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(err, msg, sizeof msg);
            return st_error_set(e, "pcre2_compile(pre-tokenizer '%s', regex %u, offset %zu): %s", t->pre_name, i,
                                (size_t)at, (const char *)msg);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // optional: without JIT the interpreter runs
        t->regex[t->n_regex++] = re;
    }
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
    // themselves, the others take code points from 256 on, in byte order.
    int next = 256;
    for (int i = 0; i < 324; i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        t->byte_cp[b] = (uint16_t)(printable ? b : next++);
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
    return 0;
}

void st_tok_bpe_free(struct st_tokenizer *t)
{
    for (uint32_t i = 0; i < t->n_regex; i++) pcre2_code_free(t->regex[i]);
    t->n_regex = 0;
}

struct span {
    size_t off, len;
};

// Scratch memory of one encode call, sized for the whole fragment.
struct bpe_work {
    char *clean;               // the fragment as valid UTF-8
    size_t n_clean;
    struct span *words, *next; // [n_clean] pieces before and after a regex
    size_t n_words;
    char *enc;                 // [2 * n_clean] a word in the byte alphabet
    struct st_tok_symbol *sym; // [2 * n_clean]
    struct st_tok_heap heap;
    pcre2_match_data *md;
};

// Applies one regex to every piece: matches and the gaps between them
// become pieces, in order.  A piece is matched on its own (lookaheads do
// not see past its end), as llama.cpp does.
static int split(const pcre2_code *re, struct bpe_work *w, struct st_error *e)
{
    size_t n_next = 0;
    for (size_t k = 0; k < w->n_words; k++) {
        const char *sub = w->clean + w->words[k].off;
        size_t len = w->words[k].len, prev = 0, start = 0;
        while (start < len) {
            int rc = pcre2_match(re, (PCRE2_SPTR)sub, len, start, PCRE2_NO_UTF_CHECK, w->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return st_error_set(e, "pcre2_match(piece of %zu bytes): %s", len, (const char *)msg);
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
            size_t ms = ov[0], me = ov[1];
            if (me <= ms) { // an empty match cuts nothing: try the next character
                if (ms >= len) break;
                start = ms + st_utf8_seq_len((uint8_t)sub[ms]);
                continue;
            }
            if (ms > prev) w->next[n_next++] = (struct span){w->words[k].off + prev, ms - prev};
            w->next[n_next++] = (struct span){w->words[k].off + ms, me - ms};
            prev = start = me;
        }
        if (prev < len) w->next[n_next++] = (struct span){w->words[k].off + prev, len - prev};
    }
    struct span *tmp = w->words;
    w->words = w->next;
    w->next = tmp;
    w->n_words = n_next;
    return 0;
}

static int try_pair(const struct st_tokenizer *t, struct bpe_work *w, int32_t left, int32_t right,
                    struct st_error *e)
{
    if (left < 0 || right < 0 || w->sym[left].id < 0 || w->sym[right].id < 0) return 0;
    const struct st_tok_merge *m = st_tok_mergemap_get(&t->merges, w->sym[left].id, w->sym[right].id);
    if (!m) return 0;
    struct st_tok_bigram b = {
        .key = m->rank, .left = left, .right = right, .id = m->id, .size = w->sym[left].n + w->sym[right].n};
    return st_tok_heap_push(&w->heap, b, e);
}

static int encode_word(const struct st_tokenizer *t, struct bpe_work *w, const struct span *word,
                       struct st_tok_vec *out, struct st_error *e)
{
    size_t n = 0;
    for (size_t i = 0; i < word->len; i++)
        n += st_utf8_encode(t->byte_cp[(uint8_t)w->clean[word->off + i]], w->enc + n);
    const char *s = w->enc;
    if (t->ignore_merges) {
        int32_t id = st_tok_find(t, s, n);
        if (id >= 0) return st_tok_vec_push(out, id, e);
    }
    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t len = st_utf8_seq_len((uint8_t)s[off]); // the alphabet is valid UTF-8
        w->sym[n_sym] = (struct st_tok_symbol){.prev = n_sym - 1,
                                               .next = off + len == n ? -1 : n_sym + 1,
                                               .off = (uint32_t)off,
                                               .n = (uint32_t)len,
                                               .id = st_tok_find(t, s + off, len)};
        n_sym++;
        off += len;
    }
    w->heap.n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if (try_pair(t, w, i - 1, i, e)) return -1;
    while (w->heap.n > 0) {
        struct st_tok_bigram b = st_tok_heap_pop(&w->heap);
        struct st_tok_symbol *l = &w->sym[b.left], *r = &w->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; // stale
        l->n += r->n;
        l->id = b.id;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = b.left;
        if (try_pair(t, w, l->prev, b.left, e) || try_pair(t, w, b.left, l->next, e)) return -1;
    }
    for (int32_t i = 0; i != -1 && n_sym > 0; i = w->sym[i].next) {
        const struct st_tok_symbol *y = &w->sym[i];
        if (y->id >= 0) {
            if (st_tok_vec_push(out, y->id, e)) return -1;
            continue;
        }
        // No token for this character: its single bytes, where they are tokens.
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t id = st_tok_find(t, s + y->off + j, 1);
            if (id >= 0 && st_tok_vec_push(out, id, e)) return -1;
        }
    }
    return 0;
}

int st_tok_bpe_encode(const struct st_tokenizer *t, const char *s, size_t n, struct st_tok_vec *out,
                      struct st_error *e)
{
    if (n == 0) return 0;
    if (n > (UINT32_MAX - 16) / 6) return st_error_set(e, "tokenizer: text of %zu bytes is too long", n);
    struct bpe_work w = {0};
    int rc = -1;
    // Malformed UTF-8 becomes U+FFFD (3 bytes for each bad byte at most).
    w.clean = malloc(3 * n);
    w.words = malloc(3 * n * sizeof *w.words);
    w.next = malloc(3 * n * sizeof *w.next);
    w.enc = malloc(6 * n);
    w.sym = malloc(6 * n * sizeof *w.sym);
    w.md = pcre2_match_data_create(1, NULL); // only the whole match is read
    if (!w.clean || !w.words || !w.next || !w.enc || !w.sym || !w.md) {
        st_error_set(e, "tokenizer: out of memory for a text of %zu bytes", n);
        goto fail;
    }
    for (size_t i = 0; i < n;) w.n_clean += st_utf8_encode(st_utf8_decode(s, n, &i), w.clean + w.n_clean);
    w.words[0] = (struct span){0, w.n_clean};
    w.n_words = 1;
    for (uint32_t r = 0; r < t->n_regex; r++)
        if (split(t->regex[r], &w, e)) goto fail;
    for (size_t k = 0; k < w.n_words; k++)
        if (encode_word(t, &w, &w.words[k], out, e)) goto fail;
    rc = 0;
fail:
    pcre2_match_data_free(w.md);
    free(w.clean);
    free(w.words);
    free(w.next);
    free(w.enc);
    free(w.sym);
    free(w.heap.v);
    return rc;
}

static size_t put(char *buf, size_t cap, size_t at, const char *s, size_t n)
{
    if (at < cap) memcpy(buf + at, s, n < cap - at ? n : cap - at);
    return n;
}

int st_tok_bpe_piece(const struct st_tokenizer *t, int32_t id, char *buf, size_t cap)
{
    size_t n;
    const char *s = st_tok_str(t, id, &n);
    uint16_t a = t->attr[id];
    if (a & ST_TOK_ATTR_USER_DEFINED) return (int)put(buf, cap, 0, s, n);
    if (!(a & ST_TOK_ATTR_NORMAL)) return 0;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t i0 = i;
        uint32_t cp = st_utf8_decode(s, n, &i);
        if (cp < 324 && t->cp_byte[cp] >= 0) {
            char b = (char)t->cp_byte[cp];
            w += put(buf, cap, w, &b, 1);
        } else {
            w += put(buf, cap, w, s + i0, i - i0); // outside the byte alphabet: as written
        }
    }
    return (int)w;
}
