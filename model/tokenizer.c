// Encoding and decoding common to both tokenizer kinds: special tokens
// written in the text are cut out first (llama.cpp's partition), then each
// run of plain text goes to the SPM or BPE algorithm.
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_impl.h"

// A piece of the input: a special token, or a run of raw text.
struct frag {
    int32_t id; // token, or -1 for text[off, off + len)
    size_t off, len;
};

struct frag_list {
    struct frag *v;
    size_t n, cap;
};

static int frag_push(struct frag_list *l, struct frag f, struct st_error *e)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct frag *v = realloc(l->v, cap * sizeof *v);
        if (!v) return st_error_set(e, "tokenizer: out of memory for %zu text fragments", cap);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = f;
    return 0;
}

static bool is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

// Cuts every occurrence of special token id out of the raw fragments of in,
// left to right, into out.  Strip attributes eat the whitespace beside it.
static int cut_token(const struct st_tokenizer *t, int32_t id, const char *text, const struct frag_list *in,
                     struct frag_list *out, struct st_error *e)
{
    size_t sn;
    const char *s = st_tok_str(t, id, &sn);
    uint16_t a = t->attr[id];
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        struct frag f = in->v[k];
        if (f.id >= 0) {
            if (frag_push(out, f, e)) return -1;
            continue;
        }
        size_t base = f.off, len = f.len;
        while (len > 0) {
            const char *m = memmem(text + base, len, s, sn);
            if (!m) {
                if (frag_push(out, (struct frag){-1, base, len}, e)) return -1;
                break;
            }
            size_t at = (size_t)(m - text), left = at - base;
            if (a & ST_TOK_ATTR_LSTRIP)
                while (left > 0 && is_space(text[base + left - 1])) left--;
            if (left > 0 && frag_push(out, (struct frag){-1, base, left}, e)) return -1;
            if (frag_push(out, (struct frag){id, 0, 0}, e)) return -1;
            size_t r_off = at + sn, r_len = base + len - r_off;
            if (a & ST_TOK_ATTR_RSTRIP)
                while (r_len > 0 && is_space(text[r_off])) r_off++, r_len--;
            base = r_off;
            len = r_len;
        }
    }
    return 0;
}

// Which bytes and which pairs of adjacent bytes occur in a text: a special
// token whose first two bytes never occur is skipped without a search, so
// vocabularies with thousands of added tokens stay cheap.
struct byte_pairs {
    uint64_t byte[4];      // bit b: byte b occurs
    uint64_t pair[1024];   // bit (a << 8 | b): "ab" occurs
};

static void byte_pairs_scan(struct byte_pairs *bp, const char *text, size_t len)
{
    memset(bp, 0, sizeof *bp);
    for (size_t i = 0; i < len; i++) {
        unsigned a = (uint8_t)text[i];
        bp->byte[a >> 6] |= 1ull << (a & 63);
        if (i + 1 < len) {
            unsigned ab = a << 8 | (uint8_t)text[i + 1];
            bp->pair[ab >> 6] |= 1ull << (ab & 63);
        }
    }
}

static bool may_occur(const struct byte_pairs *bp, const char *s, size_t n)
{
    unsigned a = (uint8_t)s[0];
    if (n == 1) return bp->byte[a >> 6] >> (a & 63) & 1;
    unsigned ab = a << 8 | (uint8_t)s[1];
    return bp->pair[ab >> 6] >> (ab & 63) & 1;
}

static int partition(const struct st_tokenizer *t, const char *text, size_t len, bool parse_special,
                     struct frag_list *out, struct st_error *e)
{
    struct frag_list tmp = {0};
    int rc = -1;
    struct byte_pairs *bp = malloc(sizeof *bp);
    if (!bp) {
        st_error_set(e, "tokenizer: out of memory");
        goto fail;
    }
    byte_pairs_scan(bp, text, len);
    if (frag_push(out, (struct frag){-1, 0, len}, e)) goto fail;
    for (uint32_t i = 0; i < t->n_special; i++) {
        int32_t id = t->special[i];
        if (!parse_special && (t->attr[id] & (ST_TOK_ATTR_CONTROL | ST_TOK_ATTR_UNKNOWN))) continue;
        size_t sn;
        const char *s = st_tok_str(t, id, &sn);
        if (!may_occur(bp, s, sn)) continue;
        if (cut_token(t, id, text, out, &tmp, e)) goto fail;
        struct frag_list swap = *out;
        *out = tmp;
        tmp = swap;
    }
    rc = 0;
fail:
    free(bp);
    free(tmp.v);
    return rc;
}

// SPM: a space in front of text that starts the input or follows a special
// token (add_space_prefix), and every space written as U+2581.
static int spm_fragment(const struct st_tokenizer *t, const char *s, size_t n, bool prefix, struct st_tok_vec *out,
                        struct st_error *e)
{
    char *buf = malloc(3 * n + 3);
    if (!buf) return st_error_set(e, "tokenizer: out of memory for a text of %zu bytes", n);
    size_t w = 0;
    if (prefix) {
        memcpy(buf, "\xE2\x96\x81", 3);
        w = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(buf + w, "\xE2\x96\x81", 3);
            w += 3;
        } else {
            buf[w++] = s[i];
        }
    }
    int rc = st_tok_spm_encode(t, buf, w, out, e);
    free(buf);
    return rc;
}

int st_tok_encode_ex(const struct st_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                     size_t *n, struct st_error *e)
{
    struct st_tok_vec out = {0};
    struct frag_list frags = {0};
    bool add_special = flags & ST_TOK_ADD_SPECIAL;
    *ids = NULL;
    *n = 0;
    if (add_special && t->add_bos && st_tok_vec_push(&out, t->bos, e)) goto fail;
    if (len > 0 && partition(t, text, len, flags & ST_TOK_PARSE_SPECIAL, &frags, e)) goto fail;
    bool prev_special = true;
    for (size_t k = 0; k < frags.n; k++) {
        const struct frag *f = &frags.v[k];
        int rc;
        if (f->id >= 0) {
            rc = st_tok_vec_push(&out, f->id, e);
            prev_special = true;
        } else if (t->kind == ST_TOK_KIND_SPM) {
            rc = spm_fragment(t, text + f->off, f->len, t->add_space_prefix && prev_special, &out, e);
            prev_special = false;
        } else {
            rc = st_tok_bpe_encode(t, text + f->off, f->len, &out, e);
        }
        if (rc) goto fail;
    }
    if (add_special && t->add_eos && st_tok_vec_push(&out, t->eos, e)) goto fail;
    size_t count = out.n;
    if (count == 0 && st_tok_vec_push(&out, -1, e)) goto fail; // so *ids is never NULL on success
    free(frags.v);
    *ids = out.v;
    *n = count;
    return 0;
fail:
    free(frags.v);
    free(out.v);
    return -1;
}

int st_tok_encode(const struct st_tokenizer *t, const char *text, size_t len, bool add_bos, int32_t **ids,
                  size_t *n, struct st_error *e)
{
    return st_tok_encode_ex(t, text, len, add_bos ? ST_TOK_ADD_SPECIAL : 0, ids, n, e);
}

int st_tok_decode_piece(const struct st_tokenizer *t, int32_t id, char *buf, size_t cap)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab) return -1;
    return t->kind == ST_TOK_KIND_SPM ? st_tok_spm_piece(t, id, buf, cap) : st_tok_bpe_piece(t, id, buf, cap);
}

int64_t st_tok_decode(const struct st_tokenizer *t, const int32_t *ids, size_t n, char *buf, size_t cap)
{
    bool strip = t->kind == ST_TOK_KIND_SPM && t->add_space_prefix;
    char small[256], *piece = small;
    size_t piece_cap = sizeof small;
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int len = st_tok_decode_piece(t, ids[i], NULL, 0);
        if (len < 0) {
            total = -1;
            break;
        }
        if (len == 0) continue;
        if ((size_t)len > piece_cap) {
            char *p = piece == small ? malloc((size_t)len) : realloc(piece, (size_t)len);
            if (!p) {
                total = -1;
                break;
            }
            piece = p;
            piece_cap = (size_t)len;
        }
        st_tok_decode_piece(t, ids[i], piece, piece_cap);
        const char *p = piece;
        size_t pn = (size_t)len;
        if (strip) { // the space add_space_prefix put in front of the text
            strip = false;
            if (*p == ' ') p++, pn--;
        }
        if ((uint64_t)total < cap) memcpy(buf + total, p, pn < cap - (size_t)total ? pn : cap - (size_t)total);
        total += (int64_t)pn;
    }
    if (piece != small) free(piece);
    return total;
}

enum st_tok_kind st_tok_kind(const struct st_tokenizer *t) { return t->kind; }
uint32_t st_tok_n_vocab(const struct st_tokenizer *t) { return t->n_vocab; }
int32_t st_tok_bos(const struct st_tokenizer *t) { return t->bos; }
int32_t st_tok_eos(const struct st_tokenizer *t) { return t->eos; }
bool st_tok_adds_bos(const struct st_tokenizer *t) { return t->add_bos; }
const char *st_tok_pre_name(const struct st_tokenizer *t) { return t->pre_name; }

bool st_tok_is_eog(const struct st_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab && (t->attr[id] & ST_TOK_ATTR_EOG);
}

bool st_tok_is_control(const struct st_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab && (t->attr[id] & ST_TOK_ATTR_CONTROL);
}

const char *st_tok_text(const struct st_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    return st_tok_str(t, id, len);
}
