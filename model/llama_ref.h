// The reference forward pass: plain scalar code, dequantise-and-multiply with
// double accumulation, F16 KV cache.  It is the specification the fast worker
// path is checked against, not a serving path.
#ifndef ST_MODEL_LLAMA_REF_H
#define ST_MODEL_LLAMA_REF_H

#include <stdint.h>

#include "model/llama.h"

struct st_ref_state;

int st_ref_new(const struct st_llama_model *m, uint32_t n_ctx, struct st_ref_state **out,
               struct st_error *e);
void st_ref_free(struct st_ref_state **s);

// Evaluates n tokens at positions pos0..pos0+n-1 in one batch, appending their
// K/V to the cache (which must already hold positions < pos0), and writes
// logits[n][n_vocab].
int st_ref_forward(struct st_ref_state *s, const int32_t *tokens, uint32_t n, uint32_t pos0,
                   float *logits, struct st_error *e);

#endif
