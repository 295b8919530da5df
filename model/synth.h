// Synthetic Llama-architecture models: target/draft pairs with random
// full-size weights whose agreement is set by one number per model (eps).
//
// Construction.  Both models of a pair share a hidden successor map `succ`
// of the vocabulary (from the pair's seed): a single random cycle over the
// normal tokens; every other token (control, unknown, byte) maps to some
// normal token, so nothing ever predicts </s>.  Each model has its own
// weights (seeded by pair seed and role):
//   - token embedding rows e_x: random, scaled to norm sqrt(dim);
//   - untied output head: row y = gain / sqrt(dim) * sum of e_x over the x
//     with succ(x) = y (rows nobody maps to are zero), so with no layers the
//     logit of succ(x) is gain * sqrt(dim) and every other is gain * N(0, 1):
//     the model predicts succ(current token);
//   - layers: every matrix N(0, 1/fan_in); the two that write into the
//     residual stream (attn_output, ffn_down) are scaled by eps/sqrt(n_layer),
//     so a larger eps moves each model further from succ, independently of
//     the other: agreement falls as eps grows.  Norm weights are 1.
//   - attn_q and attn_k are further scaled by sqrt(attn_sharpness), so that
//     attention scores have that standard deviation (default 10): each head
//     attends to a few earlier tokens picked by content.  With plain
//     N(0, 1/fan_in) weights (sharpness 1) attention spreads evenly over the
//     context, its output shrinks as the context grows, and agreement climbs
//     from ~0.7 over the first 150 tokens to ~0.95 later; sharp attention
//     keeps the perturbation, and so the acceptance rate, steady over long
//     generations, as with real pairs.
// Greedy decoding does not depend on gain; sampling does (gain 3: the
// successor gets most of the probability, not all).
//
// Normals come from a counter-based generator (splitmix64 of seed and
// element index, sum of four 16-bit uniforms), so every element is a pure
// function of (seed, role, tensor, index) and files are reproducible.
#ifndef ST_MODEL_SYNTH_H
#define ST_MODEL_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/llama.h"
#include "model/quantize.h"

// ---- vocabulary (model/vocab_synth.c) ----

#define ST_SYNTH_TOKEN_NORMAL 1
#define ST_SYNTH_TOKEN_UNKNOWN 2
#define ST_SYNTH_TOKEN_CONTROL 3
#define ST_SYNTH_TOKEN_BYTE 6

struct st_synth_vocab {
    uint32_t n;
    int32_t *types;     // [n] token types (1 normal, 2 unknown, 3 control, 6 byte, ...)
    uint32_t bos;       // for prompts
    // Our own vocabulary (src == NULL):
    char **tokens;      // [n] UTF-8, spaces as U+2581
    float *scores;      // [n]
    // Copied from a file (--vocab-from): its tokenizer.* keys are written.
    struct st_gguf *src;
};

// SentencePiece-style ("llama") vocabulary of n tokens: <unk>, <s>, </s>, the
// 256 byte tokens <0x00>..<0xFF>, every printable ASCII character and U+2581,
// then word pieces (common English words with U+2581, their prefixes, common
// suffixes, letter n-grams) until n.  Any text tokenises (byte fallback).
// Scores favour longer pieces.
#define ST_SYNTH_VOCAB_MIN 384
int st_synth_vocab_build(uint32_t n, struct st_synth_vocab **out, struct st_error *e);
// The tokenizer of any GGUF file (tokenizer.ggml.tokens is required).
int st_synth_vocab_from(const char *path, struct st_synth_vocab **out, struct st_error *e);
void st_synth_vocab_free(struct st_synth_vocab **v);
// Adds the tokenizer.* metadata.
int st_synth_vocab_write(const struct st_synth_vocab *v, struct st_gguf_writer *w);

// ---- models (model/synth.c) ----

struct st_synth_shape {
    const char *name;
    uint32_t dim, n_layer, n_head, n_head_kv, n_ff;
    uint32_t n_ctx;       // llama.context_length
    float rope_base;
    float eps;            // default perturbation (calibrated, see synth.c)
    int type;             // default base tensor type
    const char *draft;    // the shape of the draft this one is paired with as a target
};
const struct st_synth_shape *st_synth_shape_find(const char *name);
// "demo, demo-draft, l3b, l1b", for messages.
const char *st_synth_shape_list(void);

struct st_synth_model {
    struct st_synth_shape shape; // dims, eps
    const char *role;            // "target" or "draft": selects the weights' seed
    uint64_t seed;               // the pair's seed
    float gain;                  // output head gain (default 3)
    float attn_sharpness;        // standard deviation of attention scores (default 10)
    struct st_quant_plan plan;   // tensor types
    char name[96];               // general.name
};

// Checks dimensions and types; e says what is wrong.
int st_synth_check(const struct st_synth_model *m, const struct st_synth_vocab *v, struct st_error *e);

// The pair's successor map: succ[x] for every token x ([v->n]).
int st_synth_successors(const struct st_synth_vocab *v, uint64_t seed, uint32_t *succ, struct st_error *e);

// Writes one model to path, tensor by tensor (memory: a few rows at a time
// plus the successor map).  progress: a progress bar if stderr is a TTY.
// Fallback notes (a row length that does not fit a type) go to stderr
// unless quiet.
int st_synth_write(const char *path, const struct st_synth_model *m, const struct st_synth_vocab *v,
                   bool progress, bool quiet, struct st_error *e);

// ---- acceptance (model/synth_accept.c) ----

struct st_synth_accept {
    uint32_t k;             // drafts per round
    uint32_t n_generated;   // tokens produced (>= the number asked)
    uint32_t n_rounds;
    uint64_t n_drafted, n_accepted;
    double rate;            // n_accepted / n_drafted
};

// Greedy speculative decoding with the reference forward pass: after the
// prompt, each round the draft proposes k tokens greedily, the target checks
// them in one batch of k+1 rows, the longest agreeing prefix is kept plus the
// target's own next token.  Runs until n_gen tokens are produced; the output
// equals the target's plain greedy decoding.  tokens (optional, [n_gen + k])
// receives the generated tokens.
int st_synth_acceptance(const struct st_llama_model *target, const struct st_llama_model *draft,
                        const int32_t *prompt, uint32_t n_prompt, uint32_t n_gen, uint32_t k,
                        int32_t *tokens, struct st_synth_accept *res, struct st_error *e);

#endif
