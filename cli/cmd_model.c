// `subternary model info|gen|quantize`.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/model_tools.h"
#include "kernels/types.h"
#include "model/gguf.h"
#include "model/llama.h"

static int model_info(const char *path)
{
    struct st_error e;
    struct st_gguf *g;
    if (st_gguf_open(path, &g, &e)) {
        fprintf(stderr, "subternary model info: %s\n", e.msg);
        return 1;
    }
    char arch[64] = "?", name[128] = "";
    st_gguf_get_str(g, "general.architecture", arch, sizeof arch, NULL);
    st_gguf_get_str(g, "general.name", name, sizeof name, NULL);
    printf("file:          %s\n", path);
    printf("gguf version:  %u\n", g->version);
    printf("architecture:  %s\n", arch);
    if (name[0]) printf("name:          %s\n", name);
    printf("metadata keys: %llu\n", (unsigned long long)g->n_kv);
    printf("tensors:       %llu\n", (unsigned long long)g->n_tensors);
    uint64_t bytes[ST_TYPE_COUNT] = {0}, count[ST_TYPE_COUNT] = {0}, total = 0, params = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        bytes[g->tensors[i].type] += g->tensors[i].n_bytes;
        count[g->tensors[i].type]++;
        total += g->tensors[i].n_bytes;
        params += st_gguf_tensor_nelements(&g->tensors[i]);
    }
    printf("parameters:    %llu (%.3f B)\n", (unsigned long long)params, params / 1e9);
    printf("tensor bytes:  %llu (%.1f MiB)\n", (unsigned long long)total, total / 1048576.0);
    printf("types:\n");
    for (int t = 0; t < ST_TYPE_COUNT; t++)
        if (count[t])
            printf("  %-6s %5llu tensors %14llu bytes (%.1f MiB)\n", st_type_name(t),
                   (unsigned long long)count[t], (unsigned long long)bytes[t], bytes[t] / 1048576.0);
    if (!strcmp(arch, "llama")) {
        struct st_llama_model *m;
        if (st_llama_from_gguf(g, &m, &e)) { // takes g
            fprintf(stderr, "subternary model info: %s\n", e.msg);
            return 1;
        }
        const struct st_llama_hparams *hp = &m->hp;
        printf("hyperparameters:\n");
        printf("  n_embd %u, n_layer %u, n_ff %u, n_head %u, n_head_kv %u, head_dim %u\n", hp->n_embd,
               hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv, hp->head_dim);
        printf("  n_vocab %u, n_ctx_train %u, n_rot %u, rope_base %g, rms_eps %g\n", hp->n_vocab,
               hp->n_ctx_train, hp->n_rot, hp->rope_base, hp->rms_eps);
        printf("  output %s, rope frequency factors %s\n", hp->tied_output ? "tied to embedding" : "untied",
               hp->has_rope_freqs ? "yes" : "no");
        st_llama_close(&m);
        return 0;
    }
    st_gguf_close(&g);
    return 0;
}

int st_cmd_model(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "info")) return model_info(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "gen")) return st_model_gen_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "quantize")) return st_model_quantize_main(argc - 1, argv + 1);
    fprintf(stderr, "usage: subternary model info FILE.gguf\n"
                    "       subternary model gen --preset demo|l1b|l3b ... (see model gen --help)\n"
                    "       subternary model quantize IN.gguf OUT.gguf TYPE [--attn-type T ...]\n");
    return 2;
}
