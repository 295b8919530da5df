// `subternary tokenize -m MODEL.gguf [--no-bos] [--special]`: reads all of
// stdin as text and prints its token ids on one line, space separated.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

static int read_all(FILE *f, char **out, size_t *n, struct st_error *e)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf) return st_error_set(e, "out of memory reading stdin");
    for (;;) {
        if (len == cap) {
            char *p = realloc(buf, cap *= 2);
            if (!p) {
                free(buf);
                return st_error_set(e, "out of memory reading stdin (%zu bytes so far)", len);
            }
            buf = p;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return st_error_set(e, "reading stdin failed after %zu bytes", len);
    }
    *out = buf;
    *n = len;
    return 0;
}

int st_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    unsigned flags = ST_TOK_ADD_SPECIAL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--no-bos")) flags &= ~(unsigned)ST_TOK_ADD_SPECIAL;
        else if (!strcmp(argv[i], "--special")) flags |= ST_TOK_PARSE_SPECIAL;
        else {
            fprintf(stderr, "subternary tokenize: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "usage: subternary tokenize -m MODEL.gguf [--no-bos] [--special] < text\n"
                        "  --no-bos   add no BOS/EOS even if the vocabulary asks for them\n"
                        "  --special  control tokens written in the text (\"<s>\") become those tokens\n");
        return 2;
    }
    struct st_error e;
    struct st_gguf *g = NULL;
    struct st_tokenizer *t = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n = 0;
    int rc = 1;
    if (st_gguf_open(model, &g, &e) || st_tok_load(g, &t, &e)) goto fail;
    st_gguf_close(&g);
    if (read_all(stdin, &text, &len, &e) || st_tok_encode_ex(t, text, len, flags, &ids, &n, &e)) goto fail;
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    if (fflush(stdout)) {
        st_error_set(&e, "writing stdout failed");
        goto fail;
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "subternary tokenize: %s\n", e.msg);
    free(ids);
    free(text);
    st_tok_free(&t);
    st_gguf_close(&g);
    return rc;
}
