// Building a tokenizer from GGUF metadata.  Every array is checked against
// the token list before use, so a damaged file gives an error naming the key.
// Defaults and special cases follow llama.cpp's vocabulary loader.
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/tokenizer_impl.h"

#define KEY "tokenizer.ggml."

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
static uint16_t attr_of_type(double type)
{
    switch ((int)type) {
    case 1: return ST_TOK_ATTR_NORMAL;
    case 2: return ST_TOK_ATTR_UNKNOWN;
    case 3: return ST_TOK_ATTR_CONTROL;
    case 4: return ST_TOK_ATTR_USER_DEFINED;
    case 5: return ST_TOK_ATTR_UNUSED;
    case 6: return ST_TOK_ATTR_BYTE;
    default: return ST_TOK_ATTR_UNDEFINED;
    }
}

static int load_tokens(struct st_tokenizer *t, const struct st_gguf *g, struct st_error *e)
{
    const struct st_gguf_kv *kv;
    int rc = st_gguf_get_arr(g, KEY "tokens", ST_GGUF_STRING, &kv, e);
    if (rc < 0) return -1;
    if (rc == 1) return st_error_set(e, "%s: no " KEY "tokens (the file has no vocabulary)", g->path);
    if (kv->arr_n == 0 || kv->arr_n > INT32_MAX - 1)
        return st_error_set(e, "%s: " KEY "tokens has %llu entries", g->path, (unsigned long long)kv->arr_n);
    t->n_vocab = (uint32_t)kv->arr_n;
    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) total += kv->arr_strs[i].len;
    if (total >= UINT32_MAX)
        return st_error_set(e, "%s: " KEY "tokens holds %llu bytes of text", g->path, (unsigned long long)total);
    t->text = malloc(total + 1);
    t->text_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->text_off);
    t->score = calloc(t->n_vocab, sizeof *t->score);
    t->attr = malloc(t->n_vocab * sizeof *t->attr);
    if (!t->text || !t->text_off || !t->score || !t->attr)
        return st_error_set(e, "%s: out of memory for %u tokens", g->path, t->n_vocab);
    uint32_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        t->text_off[i] = off;
        if (kv->arr_strs[i].len) memcpy(t->text + off, kv->arr_strs[i].ptr, kv->arr_strs[i].len);
        off += (uint32_t)kv->arr_strs[i].len;
        t->attr[i] = ST_TOK_ATTR_NORMAL; // when the file has no token types
    }
    t->text_off[t->n_vocab] = off;
    t->text[off] = 0;
    return 0;
}

// An optional numeric array with one entry per token; NULL if absent.
static int per_token_array(const struct st_tokenizer *t, const struct st_gguf *g, const char *key,
                           const struct st_gguf_kv **out, struct st_error *e)
{
    const struct st_gguf_kv *kv = st_gguf_find_kv(g, key);
    *out = NULL;
    if (!kv) return 0;
    if (kv->type != ST_GGUF_ARRAY || kv->arr_type == ST_GGUF_STRING || kv->arr_type == ST_GGUF_ARRAY)
        return st_error_set(e, "%s: %s is %s%s%s, expected an array of numbers", g->path, key,
                            st_gguf_vtype_name(kv->type), kv->type == ST_GGUF_ARRAY ? " of " : "",
                            kv->type == ST_GGUF_ARRAY ? st_gguf_vtype_name(kv->arr_type) : "");
    if (kv->arr_n != t->n_vocab)
        return st_error_set(e, "%s: %s has %llu entries but " KEY "tokens has %u", g->path, key,
                            (unsigned long long)kv->arr_n, t->n_vocab);
    *out = kv;
    return 0;
}

static int load_scores_and_types(struct st_tokenizer *t, const struct st_gguf *g, struct st_error *e)
{
    const struct st_gguf_kv *scores, *types;
    if (per_token_array(t, g, KEY "scores", &scores, e) || per_token_array(t, g, KEY "token_type", &types, e))
        return -1;
    for (uint32_t i = 0; scores && i < t->n_vocab; i++) {
        t->score[i] = (float)st_gguf_arr_num(scores, i);
        if (isnan(t->score[i])) return st_error_set(e, "%s: " KEY "scores[%u] is NaN", g->path, i);
    }
    for (uint32_t i = 0; types && i < t->n_vocab; i++) t->attr[i] = attr_of_type(st_gguf_arr_num(types, i));
    return 0;
}

// A special token id key.  UINT32_MAX means "none"; other values past the
// vocabulary are an error.
static int read_id(const struct st_tokenizer *t, const struct st_gguf *g, const char *key, int32_t *id,
                   struct st_error *e)
{
    uint32_t v;
    int rc = st_gguf_get_u32(g, key, &v, e);
    if (rc != 0) return rc < 0 ? -1 : 0;
    if (v == UINT32_MAX) {
        *id = -1;
        return 0;
    }
    if (v >= t->n_vocab)
        return st_error_set(e, "%s: %s = %u is past the vocabulary (%u tokens)", g->path, key, v, t->n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int read_flag(const struct st_gguf *g, const char *key, bool *flag, struct st_error *e)
{
    return st_gguf_get_bool(g, key, flag, e) < 0 ? -1 : 0;
}

static int load_merges(struct st_tokenizer *t, const struct st_gguf *g, struct st_error *e)
{
    const struct st_gguf_kv *kv;
    int rc = st_gguf_get_arr(g, KEY "merges", ST_GGUF_STRING, &kv, e);
    if (rc < 0) return -1;
    if (rc == 1) return st_error_set(e, "%s: no " KEY "merges (a gpt2 tokenizer needs them)", g->path);
    if (kv->arr_n > INT32_MAX)
        return st_error_set(e, "%s: " KEY "merges has %llu entries", g->path, (unsigned long long)kv->arr_n);
    if (st_tok_mergemap_init(&t->merges, kv->arr_n, e)) return -1;
    char *joined = NULL;
    size_t joined_cap = 0;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        const char *s = kv->arr_strs[i].ptr;
        size_t n = kv->arr_strs[i].len;
        // "left right"; the search starts at 1 as in llama.cpp, so a left
        // part may begin with a space.
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) {
            free(joined);
            return st_error_set(e, "%s: " KEY "merges[%llu] '%.*s' is not two tokens separated by a space",
                                g->path, (unsigned long long)i, (int)(n > 64 ? 64 : n), s);
        }
        size_t ln = (size_t)(sp - s), rn = n - ln - 1;
        if (n > joined_cap) {
            joined_cap = 2 * n;
            char *p = realloc(joined, joined_cap);
            if (!p) {
                free(joined);
                return st_error_set(e, "%s: out of memory reading merges", g->path);
            }
            joined = p;
        }
        memcpy(joined, s, ln);
        memcpy(joined + ln, sp + 1, rn);
        int32_t l = st_tok_find(t, s, ln), r = st_tok_find(t, sp + 1, rn), id = st_tok_find(t, joined, ln + rn);
        if (l < 0 || r < 0 || id < 0) {
            const char *what = l < 0 ? s : r < 0 ? sp + 1 : joined;
            size_t wn = l < 0 ? ln : r < 0 ? rn : ln + rn;
            st_error_set(e, "%s: " KEY "merges[%llu] '%.*s' names '%.*s', which is not a token", g->path,
                         (unsigned long long)i, (int)(n > 64 ? 64 : n), s, (int)(wn > 64 ? 64 : wn), what);
            free(joined);
            return -1;
        }
        st_tok_mergemap_put(&t->merges, l, r, (int32_t)i, id);
    }
    free(joined);
    return 0;
}

static bool text_is(const struct st_tokenizer *t, int32_t id, const char *s)
{
    size_t n;
    const char *txt = st_tok_str(t, id, &n);
    return n == strlen(s) && !memcmp(txt, s, n);
}

// End-of-generation tokens: EOS, EOT, EOM and, as llama.cpp does, tokens
// recognised by their text, which are made control tokens.
static void mark_eog(struct st_tokenizer *t)
{
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
        "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
        "<\357\275\234end\342\226\201of\342\226\201sentence\357\275\234>", // DeepSeek, in octal
    };
    for (size_t k = 0; k < sizeof eog_texts / sizeof eog_texts[0]; k++) {
        int32_t id = st_tok_find(t, eog_texts[k], strlen(eog_texts[k]));
        if (id >= 0) t->attr[id] = ST_TOK_ATTR_CONTROL | ST_TOK_ATTR_EOG;
    }
    int32_t ids[] = {t->eos, t->eot, t->eom};
    for (size_t k = 0; k < 3; k++)
        if (ids[k] >= 0) t->attr[ids[k]] |= ST_TOK_ATTR_EOG;
}

struct by_len {
    uint32_t len;
    int32_t id;
};

static int longest_first(const void *a, const void *b)
{
    const struct by_len *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

// The tokens matched in raw text before tokenizing, longest text first.
static int build_special_list(struct st_tokenizer *t, struct st_error *e)
{
    const uint16_t special = ST_TOK_ATTR_CONTROL | ST_TOK_ATTR_USER_DEFINED | ST_TOK_ATTR_UNKNOWN;
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if ((t->attr[i] & special) && t->text_off[i + 1] > t->text_off[i]) n++;
    struct by_len *v = malloc((n ? n : 1) * sizeof *v);
    t->special = malloc((n ? n : 1) * sizeof *t->special);
    if (!v || !t->special) {
        free(v);
        return st_error_set(e, "tokenizer: out of memory for %u special tokens", n);
    }
    n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if ((t->attr[i] & special) && t->text_off[i + 1] > t->text_off[i])
            v[n++] = (struct by_len){t->text_off[i + 1] - t->text_off[i], (int32_t)i};
    qsort(v, n, sizeof *v, longest_first);
    for (uint32_t i = 0; i < n; i++) t->special[i] = v[i].id;
    t->n_special = n;
    free(v);
    return 0;
}

// llama.cpp's per-model strip attributes for special tokens matched in text.
static void set_strip_attrs(struct st_tokenizer *t, const struct st_gguf *g)
{
    char name[256] = "";
    const struct st_gguf_kv *kv = st_gguf_find_kv(g, "general.name");
    if (kv && kv->type == ST_GGUF_STRING) // only a hint: any other type is ignored
        snprintf(name, sizeof name, "%.*s", (int)(kv->v.s.len < 255 ? kv->v.s.len : 255), kv->v.s.ptr);
    for (char *p = name; *p; p++) *p = (char)tolower((unsigned char)*p);
    if (!strncmp(t->pre_name, "jina-v2-", 8)) {
        int32_t id = st_tok_find(t, "<mask>", 6);
        if (id >= 0) t->attr[id] |= ST_TOK_ATTR_LSTRIP;
    } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (uint32_t i = 0; i < t->n_special; i++) t->attr[t->special[i]] |= ST_TOK_ATTR_RSTRIP;
        int32_t id = st_tok_find(t, "</s>", 4);
        if (id >= 0) t->attr[id] |= ST_TOK_ATTR_RSTRIP;
        for (uint32_t i = 0; i < t->n_vocab; i++)
            if (text_is(t, (int32_t)i, "<unk>") || text_is(t, (int32_t)i, "<s>") ||
                text_is(t, (int32_t)i, "<|endoftext|>"))
                t->attr[i] &= (uint16_t)~ST_TOK_ATTR_RSTRIP;
    }
}

int st_tok_load(const struct st_gguf *g, struct st_tokenizer **out, struct st_error *e)
{
    *out = NULL;
    char model[64], pre[64] = "";
    struct st_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return st_error_set(e, "%s: out of memory for a tokenizer", g->path);
    t->bos = t->eos = t->unk = t->eot = t->eom = -1;
    int rc = st_gguf_get_str(g, KEY "model", model, sizeof model, e);
    if (rc < 0) goto fail;
    if (rc == 1) {
        st_error_set(e, "%s: no " KEY "model (the file has no tokenizer)", g->path);
        goto fail;
    }
    if (!strcmp(model, "llama")) {
        t->kind = ST_TOK_KIND_SPM;
    } else if (!strcmp(model, "gpt2")) {
        t->kind = ST_TOK_KIND_BPE;
    } else {
        st_error_set(e, "%s: " KEY "model '%s' is not supported (llama, gpt2)", g->path, model);
        goto fail;
    }
    if (load_tokens(t, g, e) || load_scores_and_types(t, g, e) || st_tok_textmap_build(t, e)) goto fail;

    // llama.cpp's defaults, then the file's keys.
    if (t->kind == ST_TOK_KIND_SPM) {
        t->bos = 1 < t->n_vocab ? 1 : -1;
        t->eos = 2 < t->n_vocab ? 2 : -1;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
        st_tok_spm_init(t);
    } else {
        t->bos = t->eos = 11 < t->n_vocab ? 11 : -1;
        if (st_gguf_get_str(g, KEY "pre", pre, sizeof pre, e) < 0) goto fail;
        if (st_tok_bpe_init(t, pre, e)) {
            st_error_wrap(e, "%s", g->path);
            goto fail;
        }
        if (load_merges(t, g, e)) goto fail;
    }
    if (read_id(t, g, KEY "bos_token_id", &t->bos, e) || read_id(t, g, KEY "eos_token_id", &t->eos, e) ||
        read_id(t, g, KEY "unknown_token_id", &t->unk, e) || read_id(t, g, KEY "eot_token_id", &t->eot, e) ||
        read_id(t, g, KEY "eom_token_id", &t->eom, e) || read_flag(g, KEY "add_bos_token", &t->add_bos, e) ||
        read_flag(g, KEY "add_eos_token", &t->add_eos, e) ||
        read_flag(g, KEY "add_space_prefix", &t->add_space_prefix, e))
        goto fail;
    if (t->add_bos && t->bos < 0) t->add_bos = false;
    if (t->add_eos && t->eos < 0) t->add_eos = false;
    mark_eog(t);
    if (build_special_list(t, e)) goto fail;
    set_strip_attrs(t, g);
    *out = t;
    return 0;
fail:
    st_tok_free(&t);
    return -1;
}

void st_tok_free(struct st_tokenizer **tp)
{
    struct st_tokenizer *t = *tp;
    if (!t) return;
    st_tok_bpe_free(t);
    free(t->text);
    free(t->text_off);
    free(t->score);
    free(t->attr);
    free(t->map.slot);
    free(t->merges.slot);
    free(t->special);
    free(t);
    *tp = NULL;
}
