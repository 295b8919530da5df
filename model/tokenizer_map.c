// The tokenizers' containers: text -> id and merge-pair maps (so encoding
// never scans the vocabulary), a growable id array and the merge candidate
// heap.
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_impl.h"

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint32_t table_size(size_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n) cap <<= 1; // load factor at most 1/2
    return cap;
}

int st_tok_textmap_build(struct st_tokenizer *t, struct st_error *e)
{
    uint32_t cap = table_size(t->n_vocab);
    t->map.mask = cap - 1;
    t->map.slot = malloc((size_t)cap * sizeof *t->map.slot);
    if (!t->map.slot) return st_error_set(e, "tokenizer: out of memory for a %u-entry token map", cap);
    memset(t->map.slot, 0xff, (size_t)cap * sizeof *t->map.slot);
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = st_tok_str(t, (int32_t)id, &n);
        uint32_t i = (uint32_t)hash_bytes(s, n) & t->map.mask;
        for (;; i = (i + 1) & t->map.mask) {
            int32_t o = t->map.slot[i];
            if (o < 0) break;
            size_t on;
            const char *os = st_tok_str(t, o, &on);
            if (on == n && !memcmp(os, s, n)) break; // duplicate text: the later id wins, as in llama.cpp
        }
        t->map.slot[i] = (int32_t)id;
    }
    return 0;
}

int32_t st_tok_find(const struct st_tokenizer *t, const char *s, size_t n)
{
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & t->map.mask;; i = (i + 1) & t->map.mask) {
        int32_t id = t->map.slot[i];
        if (id < 0) return -1;
        size_t len;
        const char *txt = st_tok_str(t, id, &len);
        if (len == n && !memcmp(txt, s, n)) return id;
    }
}

static uint32_t hash_pair(uint64_t key, uint32_t mask)
{
    key *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(key >> 32) & mask;
}

int st_tok_mergemap_init(struct st_tok_mergemap *m, size_t n_merges, struct st_error *e)
{
    uint32_t cap = table_size(n_merges);
    m->mask = cap - 1;
    m->slot = malloc((size_t)cap * sizeof *m->slot);
    if (!m->slot) return st_error_set(e, "tokenizer: out of memory for a %u-entry merge map", cap);
    for (uint32_t i = 0; i < cap; i++) m->slot[i].key = UINT64_MAX;
    return 0;
}

void st_tok_mergemap_put(struct st_tok_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t id)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint32_t i = hash_pair(key, m->mask);
    while (m->slot[i].key != UINT64_MAX) {
        if (m->slot[i].key == key) return;
        i = (i + 1) & m->mask;
    }
    m->slot[i] = (struct st_tok_merge){.key = key, .rank = rank, .id = id};
}

const struct st_tok_merge *st_tok_mergemap_get(const struct st_tok_mergemap *m, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint32_t i = hash_pair(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->slot[i].key == key) return &m->slot[i];
        if (m->slot[i].key == UINT64_MAX) return NULL;
    }
}

int st_tok_vec_push(struct st_tok_vec *a, int32_t id, struct st_error *e)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return st_error_set(e, "tokenizer: out of memory for %zu token ids", cap);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

static bool before(const struct st_tok_bigram *a, const struct st_tok_bigram *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

int st_tok_heap_push(struct st_tok_heap *h, struct st_tok_bigram b, struct st_error *e)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        struct st_tok_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return st_error_set(e, "tokenizer: out of memory for %zu merge candidates", cap);
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return 0;
}

struct st_tok_bigram st_tok_heap_pop(struct st_tok_heap *h)
{
    ST_ASSERT(h->n > 0);
    struct st_tok_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c])) c++;
        if (!before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}
