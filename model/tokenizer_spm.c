// SentencePiece-style tokenization (tokenizer.ggml.model = "llama"), as
// llama.cpp does it: the text is cut into UTF-8 characters, then the adjacent
// pair that forms the highest-scoring token is merged, again and again
// (leftmost first among equal scores).  A final piece that is no token is
// written as byte tokens.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_impl.h"
#include "model/unicode.h"

void st_tok_spm_init(struct st_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char name[8], raw = (char)b;
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = st_tok_find(t, name, 6);
        t->byte_token[b] = id >= 0 ? id : st_tok_find(t, &raw, 1);
    }
}

// Queues the merge of symbols left and right if their bytes form a token.
static int try_pair(const struct st_tokenizer *t, const char *s, const struct st_tok_symbol *sym, int32_t left,
                    int32_t right, struct st_tok_heap *h, struct st_error *e)
{
    if (left < 0 || right < 0) return 0;
    uint32_t size = sym[left].n + sym[right].n;
    int32_t id = st_tok_find(t, s + sym[left].off, size);
    if (id < 0) return 0;
    struct st_tok_bigram b = {.key = -(double)t->score[id], .left = left, .right = right, .id = id, .size = size};
    return st_tok_heap_push(h, b, e);
}

static int emit(const struct st_tokenizer *t, const char *s, const struct st_tok_symbol *y, struct st_tok_vec *out,
                struct st_error *e)
{
    int32_t id = st_tok_find(t, s + y->off, y->n);
    if (id >= 0) return st_tok_vec_push(out, id, e);
    for (uint32_t j = 0; j < y->n; j++) {
        uint8_t b = (uint8_t)s[y->off + j];
        id = t->byte_token[b] >= 0 ? t->byte_token[b] : t->unk;
        if (id < 0)
            return st_error_set(e, "tokenizer: byte 0x%02X has no token (no <0x%02X>, no unknown token)", b, b);
        if (st_tok_vec_push(out, id, e)) return -1;
    }
    return 0;
}

int st_tok_spm_encode(const struct st_tokenizer *t, const char *s, size_t n, struct st_tok_vec *out,
                      struct st_error *e)
{
    if (n == 0) return 0;
    if (n > INT32_MAX) return st_error_set(e, "tokenizer: text of %zu bytes is too long", n);
    struct st_tok_symbol *sym = malloc(n * sizeof *sym);
    struct st_tok_heap h = {0};
    int rc = -1;
    if (!sym) {
        st_error_set(e, "tokenizer: out of memory for %zu symbols", n);
        goto fail;
    }
    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t len = st_utf8_seq_len((uint8_t)s[off]);
        if (len > n - off) len = n - off;
        sym[n_sym] = (struct st_tok_symbol){
            .prev = n_sym - 1, .next = off + len == n ? -1 : n_sym + 1, .off = (uint32_t)off, .n = (uint32_t)len};
        n_sym++;
        off += len;
    }
    for (int32_t i = 1; i < n_sym; i++)
        if (try_pair(t, s, sym, i - 1, i, &h, e)) goto fail;
    while (h.n > 0) {
        struct st_tok_bigram b = st_tok_heap_pop(&h);
        struct st_tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        // Stale: one side was merged away or has grown since.
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (try_pair(t, s, sym, l->prev, b.left, &h, e) || try_pair(t, s, sym, b.left, l->next, &h, e)) goto fail;
    }
    for (int32_t i = 0; i != -1; i = sym[i].next)
        if (emit(t, s, &sym[i], out, e)) goto fail;
    rc = 0;
fail:
    free(sym);
    free(h.v);
    return rc;
}

static int copy_out(char *buf, size_t cap, size_t at, const char *s, size_t n)
{
    if (at < cap) memcpy(buf + at, s, n < cap - at ? n : cap - at);
    return (int)n;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int st_tok_spm_piece(const struct st_tokenizer *t, int32_t id, char *buf, size_t cap)
{
    size_t n;
    const char *s = st_tok_str(t, id, &n);
    uint16_t a = t->attr[id];
    if (a & ST_TOK_ATTR_USER_DEFINED) return copy_out(buf, cap, 0, s, n);
    if (a & ST_TOK_ATTR_BYTE) {
        int hi, lo;
        if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && (hi = hex_digit(s[3])) >= 0 &&
            (lo = hex_digit(s[4])) >= 0) {
            char b = (char)(hi << 4 | lo);
            return copy_out(buf, cap, 0, &b, 1);
        }
        return copy_out(buf, cap, 0, s, n);
    }
    if (!(a & ST_TOK_ATTR_NORMAL)) return 0; // control, unknown, unused: not text
    // U+2581 (E2 96 81) stands for a space.
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            w += (size_t)copy_out(buf, cap, w, " ", 1);
            i += 3;
        } else {
            w += (size_t)copy_out(buf, cap, w, s + i, 1);
            i++;
        }
    }
    return (int)w;
}
