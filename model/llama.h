// Llama-architecture model description: hyperparameters from `llama.*` keys
// and the weight tensors of a GGUF file, every shape checked at open.
#ifndef ST_MODEL_LLAMA_H
#define ST_MODEL_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "model/gguf.h"

struct st_llama_hparams {
    uint32_t n_embd;      // model dimension
    uint32_t n_layer;
    uint32_t n_ff;        // FFN hidden size
    uint32_t n_head;
    uint32_t n_head_kv;   // grouped-query attention: n_head % n_head_kv == 0
    uint32_t head_dim;    // n_embd / n_head unless llama.attention.key_length says otherwise
    uint32_t n_rot;       // RoPE dimensions (<= head_dim)
    uint32_t n_vocab;
    uint32_t n_ctx_train; // llama.context_length
    float rope_base;      // llama.rope.freq_base
    float rms_eps;
    bool has_rope_freqs;  // rope_freqs.weight present (Llama 3.x)
    bool tied_output;     // no output.weight: the embedding is the head
};

struct st_llama_layer {
    const struct st_gguf_tensor *attn_norm; // [n_embd]
    const struct st_gguf_tensor *wq;        // [n_head*head_dim rows][n_embd]
    const struct st_gguf_tensor *wk;        // [n_head_kv*head_dim][n_embd]
    const struct st_gguf_tensor *wv;        // [n_head_kv*head_dim][n_embd]
    const struct st_gguf_tensor *wo;        // [n_embd][n_head*head_dim]
    const struct st_gguf_tensor *ffn_norm;  // [n_embd]
    const struct st_gguf_tensor *ffn_gate;  // [n_ff][n_embd]
    const struct st_gguf_tensor *ffn_up;    // [n_ff][n_embd]
    const struct st_gguf_tensor *ffn_down;  // [n_embd][n_ff]
};

struct st_llama_model {
    struct st_gguf *gguf;                     // owned
    struct st_llama_hparams hp;
    const struct st_gguf_tensor *tok_embd;    // [n_vocab][n_embd]
    const struct st_gguf_tensor *output_norm; // [n_embd]
    const struct st_gguf_tensor *output;      // [n_vocab][n_embd] (tok_embd when tied)
    const struct st_gguf_tensor *rope_freqs;  // [n_rot/2] or NULL
    struct st_llama_layer *layers;            // [n_layer]
};

int st_llama_open(const char *path, struct st_llama_model **out, struct st_error *e);
// Takes ownership of g (closed by st_llama_close, also on failure).
int st_llama_from_gguf(struct st_gguf *g, struct st_llama_model **out, struct st_error *e);
void st_llama_close(struct st_llama_model **m);

// Per-dimension inverse frequencies for RoPE ([n_rot/2]), frequency factors
// applied: theta_i(pos) = pos * freqs[i].
void st_llama_rope_freqs(const struct st_llama_model *m, float *freqs);

#endif
