// Private to the tokenizer files (tokenizer*.c): the layout of struct
// st_tokenizer and the helpers its algorithms share.  Everyone else uses
// model/tokenizer.h.
#ifndef ST_MODEL_TOKENIZER_IMPL_H
#define ST_MODEL_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/tokenizer.h"

// Token attributes, from tokenizer.ggml.token_type (llama.cpp's
// llama_token_attr), plus the strip flags some special tokens carry.
enum st_tok_attr {
    ST_TOK_ATTR_UNDEFINED = 1u << 0,
    ST_TOK_ATTR_NORMAL = 1u << 1,
    ST_TOK_ATTR_UNKNOWN = 1u << 2,
    ST_TOK_ATTR_CONTROL = 1u << 3,
    ST_TOK_ATTR_USER_DEFINED = 1u << 4,
    ST_TOK_ATTR_UNUSED = 1u << 5,
    ST_TOK_ATTR_BYTE = 1u << 6,
    ST_TOK_ATTR_LSTRIP = 1u << 7, // matched in text: eats whitespace on its left
    ST_TOK_ATTR_RSTRIP = 1u << 8, // ... and on its right
    ST_TOK_ATTR_EOG = 1u << 9,    // ends generation
};

// Open-addressing map from token text to id (linear probing, power-of-two size).
struct st_tok_textmap {
    uint32_t mask;
    int32_t *slot; // [mask + 1] token id, -1 if empty
};

// Open-addressing map from a merge pair (left id, right id) to its rank and
// the id of the token it forms.
struct st_tok_merge {
    uint64_t key; // (uint64_t)left << 32 | right; UINT64_MAX if empty
    int32_t rank;
    int32_t id;
};
struct st_tok_mergemap {
    uint32_t mask;
    struct st_tok_merge *slot; // [mask + 1]
};

#define ST_TOK_MAX_REGEX 6

struct st_tokenizer {
    enum st_tok_kind kind;
    uint32_t n_vocab;

    // Vocabulary.
    char *text;           // all token texts, back to back
    uint32_t *text_off;   // [n_vocab + 1] token i is text[text_off[i] .. text_off[i+1])
    float *score;         // [n_vocab] SPM merge priority (0 if the file has none)
    uint16_t *attr;       // [n_vocab] enum st_tok_attr bits
    struct st_tok_textmap map;

    // Special tokens matched in raw text, longest text first.
    int32_t *special;     // [n_special]
    uint32_t n_special;

    int32_t bos, eos, unk, eot, eom; // -1 if none
    bool add_bos, add_eos, add_space_prefix;

    // SPM: the token for each byte (<0xNN>, else the byte as a one-byte token).
    int32_t byte_token[256];

    // BPE.
    struct st_tok_mergemap merges;
    bool ignore_merges;          // a word that is a whole token is not merged
    char pre_name[64];
    uint32_t n_regex;
    void *regex[ST_TOK_MAX_REGEX]; // pcre2_code_8 *, applied in order
    uint16_t byte_cp[256];       // byte -> code point of the GPT-2 alphabet
    int16_t cp_byte[324];        // inverse: code point (< 324) -> byte, -1 if none
};

// A growable array of ids.
struct st_tok_vec {
    int32_t *v;
    size_t n, cap;
};
int st_tok_vec_push(struct st_tok_vec *a, int32_t id, struct st_error *e);

// A merge candidate: the pair of symbols (left, right) forming token id.
// Candidates pop in order of key, then of left (llama.cpp's order).
struct st_tok_bigram {
    double key;    // SPM: -score; BPE: rank
    int32_t left, right;
    int32_t id;    // token the pair forms
    uint32_t size; // bytes of left + right when the candidate was made
};
struct st_tok_heap {
    struct st_tok_bigram *v;
    size_t n, cap;
};
int st_tok_heap_push(struct st_tok_heap *h, struct st_tok_bigram b, struct st_error *e);
struct st_tok_bigram st_tok_heap_pop(struct st_tok_heap *h); // h->n > 0

// A symbol of a word being merged: bytes [off, off+n) of the word, in a
// doubly linked list; n = 0 once merged into its left neighbour.
struct st_tok_symbol {
    int32_t prev, next;
    uint32_t off, n;
    int32_t id; // BPE: token of these bytes, -1 if none
};

// Maps (tokenizer_map.c).
int st_tok_textmap_build(struct st_tokenizer *t, struct st_error *e);
int32_t st_tok_find(const struct st_tokenizer *t, const char *s, size_t n); // -1 if absent
int st_tok_mergemap_init(struct st_tok_mergemap *m, size_t n_merges, struct st_error *e);
// Inserts unless the pair is present already (the first rank wins).
void st_tok_mergemap_put(struct st_tok_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t id);
const struct st_tok_merge *st_tok_mergemap_get(const struct st_tok_mergemap *m, int32_t left, int32_t right);

static inline const char *st_tok_str(const struct st_tokenizer *t, int32_t id, size_t *len)
{
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

// SPM (tokenizer_spm.c).
void st_tok_spm_init(struct st_tokenizer *t);
// Tokenizes one run of raw text (spaces already escaped to U+2581).
int st_tok_spm_encode(const struct st_tokenizer *t, const char *s, size_t n, struct st_tok_vec *out,
                      struct st_error *e);
int st_tok_spm_piece(const struct st_tokenizer *t, int32_t id, char *buf, size_t cap);

// BPE (tokenizer_bpe.c).
int st_tok_bpe_init(struct st_tokenizer *t, const char *pre, struct st_error *e);
void st_tok_bpe_free(struct st_tokenizer *t);
int st_tok_bpe_encode(const struct st_tokenizer *t, const char *s, size_t n, struct st_tok_vec *out,
                      struct st_error *e);
int st_tok_bpe_piece(const struct st_tokenizer *t, int32_t id, char *buf, size_t cap);

#endif
