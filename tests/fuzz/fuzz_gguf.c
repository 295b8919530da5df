// libFuzzer target: the GGUF reader, the Llama loader and the dequantisers
// on arbitrary bytes.  Built by scripts/fuzz.sh with clang.
#include <stdint.h>
#include <stdlib.h>

#include "kernels/types.h"
#include "model/gguf.h"
#include "model/llama.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_gguf *g;
    struct st_error e;
    if (st_gguf_parse(data, size, "fuzz", &g, &e)) return 0;
    // Touch every tensor's first row through its dequantiser.
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct st_gguf_tensor *t = &g->tensors[i];
        if (t->ne[0] > 4096) continue;
        float row[4096];
        st_dequant_row(t->type, t->data, row, t->ne[0]);
    }
    struct st_llama_model *m;
    if (st_llama_from_gguf(g, &m, &e) == 0) st_llama_close(&m);
    return 0;
}
