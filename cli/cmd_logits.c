// `subternary logits -m MODEL --tokens 1,2,3 -o OUT.f32`: one batch through the
// reference forward pass, float32 little-endian logits [n_tokens][n_vocab].
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/args.h"
#include "model/llama.h"
#include "model/llama_ref.h"

int st_cmd_logits(int argc, char **argv)
{
    const char *model = NULL, *ids = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) ids = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else {
            fprintf(stderr, "subternary logits: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!model || !ids || !out) {
        fprintf(stderr, "usage: subternary logits -m MODEL.gguf --tokens 1,2,3 -o OUT.f32\n");
        return 2;
    }
    struct st_error e;
    int32_t *tok = NULL;
    size_t n = 0;
    if (st_args_parse_ids(ids, &tok, &n, &e)) {
        fprintf(stderr, "subternary logits: --tokens: %s\n", e.msg);
        return 2;
    }
    struct st_llama_model *m = NULL;
    struct st_ref_state *s = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    int rc = 1;
    if (st_llama_open(model, &m, &e) || st_ref_new(m, (uint32_t)n, &s, &e)) goto fail;
    logits = malloc(n * m->hp.n_vocab * sizeof(float));
    if (!logits) {
        st_error_set(&e, "out of memory");
        goto fail;
    }
    if (st_ref_forward(s, tok, (uint32_t)n, 0, logits, &e)) goto fail;
    if (!(f = fopen(out, "wb"))) {
        st_error_set(&e, "fopen(%s): cannot create", out);
        goto fail;
    }
    if (fwrite(logits, sizeof(float), n * m->hp.n_vocab, f) != n * m->hp.n_vocab || fclose(f)) {
        f = NULL;
        st_error_set(&e, "writing %s failed", out);
        goto fail;
    }
    f = NULL;
    rc = 0;
fail:
    if (rc) fprintf(stderr, "subternary logits: %s\n", e.msg);
    if (f) fclose(f);
    free(logits);
    free(tok);
    st_ref_free(&s);
    st_llama_close(&m);
    return rc;
}
