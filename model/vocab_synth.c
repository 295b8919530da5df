// Our own SentencePiece-style vocabulary, and tokenizers copied from files.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/synth.h"

#define SPACE "\xe2\x96\x81" // U+2581, SentencePiece's word boundary

// Common English words, most frequent first.
static const char *const words[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are",
    "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by",
    "not", "word", "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when",
    "up", "use", "your", "how", "said", "an", "each", "she", "which", "do", "their", "time", "if",
    "will", "way", "about", "many", "then", "them", "write", "would", "like", "so", "these", "her",
    "long", "make", "thing", "see", "him", "two", "has", "look", "more", "day", "could", "go", "come",
    "did", "number", "sound", "no", "most", "people", "my", "over", "know", "water", "than", "call",
    "first", "who", "may", "down", "side", "been", "now", "find", "any", "new", "work", "part", "take",
    "get", "place", "made", "live", "where", "after", "back", "little", "only", "round", "man", "year",
    "came", "show", "every", "good", "me", "give", "our", "under", "name", "very", "through", "just",
    "form", "sentence", "great", "think", "say", "help", "low", "line", "differ", "turn", "cause",
    "much", "mean", "before", "move", "right", "boy", "old", "too", "same", "tell", "does", "set",
    "three", "want", "air", "well", "also", "play", "small", "end", "put", "home", "read", "hand",
    "port", "large", "spell", "add", "even", "land", "here", "must", "big", "high", "such", "follow",
    "act", "why", "ask", "men", "change", "went", "light", "kind", "off", "need", "house", "picture",
    "try", "us", "again", "animal", "point", "mother", "world", "near", "build", "self", "earth",
    "father", "head", "stand", "own", "page", "should", "country", "found", "answer", "school", "grow",
    "study", "still", "learn", "plant", "cover", "food", "sun", "four", "between", "state", "keep",
    "eye", "never", "last", "let", "thought", "city", "tree", "cross", "farm", "hard", "start", "might",
    "story", "saw", "far", "sea", "draw", "left", "late", "run", "while", "press", "close", "night",
    "real", "life", "few", "north", "open", "seem", "together", "next", "white", "children", "begin",
    "got", "walk", "example", "ease", "paper", "group", "always", "music", "those", "both", "mark",
    "often", "letter", "until", "mile", "river", "car", "feet", "care", "second", "book", "carry",
    "took", "science", "eat", "room", "friend", "began", "idea", "fish", "mountain", "stop", "once",
    "base", "hear", "horse", "cut", "sure", "watch", "color", "face", "wood", "main", "enough",
    "plain", "girl", "usual", "young", "ready", "above", "ever", "red", "list", "though", "feel",
    "talk", "bird", "soon", "body", "dog", "family", "direct", "pose", "leave", "song", "measure",
    "door", "product", "black", "short", "numeral", "class", "wind", "question", "happen", "complete",
    "ship", "area", "half", "rock", "order", "fire", "south", "problem", "piece", "told", "knew",
    "pass", "since", "top", "whole", "king", "space", "heard", "best", "hour", "better", "true",
    "during", "hundred", "five", "remember", "step", "early", "hold", "west", "ground", "interest",
    "reach", "fast", "verb", "sing", "listen", "six", "table", "travel", "less", "morning", "ten",
    "simple", "several", "vowel", "toward", "war", "lay", "against", "pattern", "slow", "center",
    "love", "person", "money", "serve", "appear", "road", "map", "rain", "rule", "govern", "pull",
    "cold", "notice", "voice", "unit", "power", "town", "fine", "certain", "fly", "fall", "lead",
    "cry", "dark", "machine", "note", "wait", "plan", "figure", "star", "box", "noun", "field", "rest",
    "correct", "able", "pound", "done", "beauty", "drive", "stood", "contain", "front", "teach",
    "week", "final", "gave", "green", "oh", "quick", "develop", "ocean", "warm", "free", "minute",
    "strong", "special", "mind", "behind", "clear", "tail", "produce", "fact", "street", "inch",
    "multiply", "nothing", "course", "stay", "wheel", "full", "force", "blue", "object", "decide",
    "surface", "deep", "moon", "island", "foot", "system", "busy", "test", "record", "boat", "common",
    "gold", "possible", "plane", "stead", "dry", "wonder", "laugh", "thousand", "ago", "ran", "check",
    "game", "shape", "equate", "hot", "miss", "brought", "heat", "snow", "tire", "bring", "yes",
    "distant", "fill", "east", "paint", "language", "among", "model", "data", "token", "speed",
    "draft", "target", "server", "memory", "process", "compute", "network", "value", "result",
    "because", "another", "small", "people", "government", "company", "information", "however",
    "something", "nothing", "everything", "without", "within", "around", "being", "going", "really",
};

// Common word endings and stems, attached to the previous piece.
static const char *const subwords[] = {
    "s", "ed", "ing", "er", "ly", "es", "tion", "ment", "ness", "est", "al", "ic", "ous", "ive",
    "able", "ful", "less", "ity", "ize", "ers", "ings", "ation", "ions", "ies", "y", "en", "ent",
    "ant", "ance", "ence", "ism", "ist", "ure", "age", "ship", "hood", "ward", "ial", "ian", "ical",
    "ible", "ise", "ish", "ory", "ary", "ted", "ting", "ded", "ding", "ning", "red", "ring",
    "led", "ling", "th", "ch", "sh", "st", "nd", "ng", "re", "un", "in", "de", "pre", "con", "com",
    "pro", "dis", "ex", "per", "trans", "inter", "over", "under", "sub",
};

// Letters by English frequency: n-grams of frequent letters come first.
static const char letters[] = "etaoinshrdlcumwfgypbvkjxqz";

struct builder {
    uint32_t cap, n;
    char **tok;
    float *score;
    int32_t *type;
    uint32_t *slot;  // hash set of indices + 1, [hcap]
    uint32_t hcap;
};

static uint32_t fnv(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static bool has(const struct builder *b, const char *s)
{
    for (uint32_t i = fnv(s) & (b->hcap - 1);; i = (i + 1) & (b->hcap - 1)) {
        if (!b->slot[i]) return false;
        if (!strcmp(b->tok[b->slot[i] - 1], s)) return true;
    }
}

static uint32_t utf8_len(const char *s)
{
    uint32_t n = 0;
    for (; *s; s++) n += ((uint8_t)*s & 0xc0) != 0x80;
    return n;
}

// Adds s if new and there is room.  Returns -1 on out of memory, 0 otherwise.
static int add(struct builder *b, const char *s, int32_t type)
{
    if (b->n == b->cap || has(b, s)) return 0;
    char *c = strdup(s);
    if (!c) return -1;
    uint32_t i = fnv(s) & (b->hcap - 1);
    while (b->slot[i]) i = (i + 1) & (b->hcap - 1);
    b->slot[i] = b->n + 1;
    b->tok[b->n] = c;
    b->type[b->n] = type;
    // Longer pieces score higher; among equal lengths, earlier (commoner)
    // pieces do.  Special and byte tokens score 0.
    b->score[b->n] = type == ST_SYNTH_TOKEN_NORMAL ? (float)utf8_len(s) - (float)b->n / (float)b->cap : 0.0f;
    b->n++;
    return 0;
}

// Adds a piece after its prefixes (whole UTF-8 characters), so that pairwise
// merging can reach it one character at a time.
static int add_piece(struct builder *b, const char *s)
{
    char buf[64];
    size_t len = strlen(s);
    if (len >= sizeof buf) return 0;
    for (size_t i = 1; i <= len; i++) {
        if (i < len && ((uint8_t)s[i] & 0xc0) == 0x80) continue; // inside a character
        memcpy(buf, s, i);
        buf[i] = 0;
        if (add(b, buf, ST_SYNTH_TOKEN_NORMAL)) return -1;
    }
    return 0;
}

// Letter n-grams in frequency order, with and without the word boundary.
static int add_ngrams(struct builder *b, int len)
{
    uint64_t total = 1;
    for (int i = 0; i < len; i++) total *= 26;
    char buf[16];
    for (uint64_t c = 0; c < total && b->n < b->cap; c++) {
        uint64_t x = c;
        for (int i = len - 1; i >= 0; i--, x /= 26) buf[3 + i] = letters[x % 26];
        buf[3 + len] = 0;
        memcpy(buf, SPACE, 3);
        if (add(b, buf, ST_SYNTH_TOKEN_NORMAL) || add(b, buf + 3, ST_SYNTH_TOKEN_NORMAL)) return -1;
    }
    return 0;
}

static int build(struct builder *b)
{
    char buf[64];
    if (add(b, "<unk>", ST_SYNTH_TOKEN_UNKNOWN) || add(b, "<s>", ST_SYNTH_TOKEN_CONTROL) ||
        add(b, "</s>", ST_SYNTH_TOKEN_CONTROL))
        return -1;
    for (int i = 0; i < 256; i++) {
        snprintf(buf, sizeof buf, "<0x%02X>", i);
        if (add(b, buf, ST_SYNTH_TOKEN_BYTE)) return -1;
    }
    if (add(b, SPACE, ST_SYNTH_TOKEN_NORMAL)) return -1;
    for (int c = 0x21; c < 0x7f; c++) {
        buf[0] = (char)c;
        buf[1] = 0;
        if (add(b, buf, ST_SYNTH_TOKEN_NORMAL)) return -1;
    }
    size_t nw = sizeof words / sizeof words[0];
    for (size_t i = 0; i < nw; i++) {
        snprintf(buf, sizeof buf, SPACE "%s", words[i]);
        if (add_piece(b, buf)) return -1;
    }
    for (size_t i = 0; i < sizeof subwords / sizeof subwords[0]; i++)
        if (add_piece(b, subwords[i])) return -1;
    // Capitalised words (sentence starts), digits pairs, then n-grams.
    for (size_t i = 0; i < nw; i++) {
        snprintf(buf, sizeof buf, SPACE "%s", words[i]);
        if (buf[3] >= 'a' && buf[3] <= 'z') buf[3] = (char)(buf[3] - 'a' + 'A');
        if (add_piece(b, buf)) return -1;
    }
    for (int d = 0; d < 100; d++) {
        snprintf(buf, sizeof buf, "%02d", d);
        if (add(b, buf, ST_SYNTH_TOKEN_NORMAL)) return -1;
        snprintf(buf, sizeof buf, SPACE "%d", d);
        if (add_piece(b, buf)) return -1;
    }
    for (int len = 1; len <= 5 && b->n < b->cap; len++)
        if (add_ngrams(b, len)) return -1;
    return 0;
}

void st_synth_vocab_free(struct st_synth_vocab **vp)
{
    struct st_synth_vocab *v = *vp;
    if (!v) return;
    if (v->tokens)
        for (uint32_t i = 0; i < v->n; i++) free(v->tokens[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    st_gguf_close(&v->src);
    free(v);
    *vp = NULL;
}

int st_synth_vocab_build(uint32_t n, struct st_synth_vocab **out, struct st_error *e)
{
    *out = NULL;
    // 26^5 five-letter n-grams and more: far above any real vocabulary.
    if (n < ST_SYNTH_VOCAB_MIN || n > (1u << 22))
        return st_error_set(e, "vocabulary size %u: must be between %u and %u", n, ST_SYNTH_VOCAB_MIN, 1u << 22);
    struct st_synth_vocab *v = calloc(1, sizeof *v);
    struct builder b = {.cap = n};
    for (b.hcap = 1; b.hcap < 2 * n; b.hcap *= 2) {}
    b.tok = calloc(n, sizeof *b.tok);
    b.score = calloc(n, sizeof *b.score);
    b.type = calloc(n, sizeof *b.type);
    b.slot = calloc(b.hcap, sizeof *b.slot);
    if (v) {
        v->tokens = b.tok;
        v->scores = b.score;
        v->types = b.type;
    }
    if (!v || !b.tok || !b.score || !b.type || !b.slot || build(&b)) {
        free(b.slot);
        if (v) {
            v->n = b.n;
            st_synth_vocab_free(&v);
        } else {
            free(b.tok);
            free(b.score);
            free(b.type);
        }
        return st_error_set(e, "building a vocabulary of %u tokens: out of memory", n);
    }
    free(b.slot);
    ST_ASSERT(b.n == n);
    v->n = n;
    v->bos = 1;
    *out = v;
    return 0;
}

int st_synth_vocab_from(const char *path, struct st_synth_vocab **out, struct st_error *e)
{
    *out = NULL;
    struct st_synth_vocab *v = calloc(1, sizeof *v);
    if (!v) return st_error_set(e, "out of memory");
    const struct st_gguf_kv *toks, *types = NULL;
    if (st_gguf_open(path, &v->src, e)) goto fail;
    int rc = st_gguf_get_arr(v->src, "tokenizer.ggml.tokens", ST_GGUF_STRING, &toks, e);
    if (rc) {
        if (rc > 0) st_error_set(e, "%s: no tokenizer (tokenizer.ggml.tokens is missing)", path);
        goto fail;
    }
    if (toks->arr_n < 2 || toks->arr_n > (1u << 22)) {
        st_error_set(e, "%s: tokenizer.ggml.tokens has %llu tokens", path, (unsigned long long)toks->arr_n);
        goto fail;
    }
    v->n = (uint32_t)toks->arr_n;
    if (!(v->types = malloc(v->n * sizeof *v->types))) {
        st_error_set(e, "out of memory");
        goto fail;
    }
    const struct st_gguf_kv *tt = st_gguf_find_kv(v->src, "tokenizer.ggml.token_type");
    if (tt && tt->type == ST_GGUF_ARRAY && tt->arr_n == v->n && tt->arr_strs == NULL && tt->arr_type != ST_GGUF_STRING)
        types = tt;
    for (uint32_t i = 0; i < v->n; i++)
        v->types[i] = types ? (int32_t)st_gguf_arr_num(types, i) : ST_SYNTH_TOKEN_NORMAL;
    // Without token types, the special ids named by the file are not normal.
    const char *special[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                             "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"};
    v->bos = 1;
    for (int s = 0; s < 4; s++) {
        uint32_t id;
        if (st_gguf_get_u32(v->src, special[s], &id, NULL) == 0 && id < v->n) {
            if (!types) v->types[id] = ST_SYNTH_TOKEN_CONTROL;
            if (s == 0) v->bos = id;
        }
    }
    *out = v;
    return 0;
fail:
    st_synth_vocab_free(&v);
    return -1;
}

int st_synth_vocab_write(const struct st_synth_vocab *v, struct st_gguf_writer *w)
{
    if (v->src) {
        int rc = 0;
        for (uint64_t i = 0; i < v->src->n_kv; i++)
            if (!strncmp(v->src->kv[i].key, "tokenizer.", 10)) rc |= st_gguf_writer_copy_kv(w, &v->src->kv[i]);
        return rc;
    }
    int rc = st_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    rc |= st_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n);
    rc |= st_gguf_writer_set_arr(w, "tokenizer.ggml.scores", ST_GGUF_FLOAT32, v->scores, v->n);
    rc |= st_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", ST_GGUF_INT32, v->types, v->n);
    rc |= st_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    rc |= st_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    rc |= st_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    rc |= st_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    rc |= st_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    return rc ? -1 : 0;
}
