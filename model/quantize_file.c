// `subternary model quantize` as a library call: GGUF in, GGUF out, one
// tensor at a time through a row buffer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "model/gguf.h"
#include "model/gguf_write.h"
#include "model/quantize.h"

// Rows r_first + [0, n) of a tensor converted into buf, split across threads.
struct piece {
    const struct st_gguf_tensor *t;
    uint32_t type;
    uint64_t r_first;
    uint8_t *buf;
    bool oom;
};

static void piece_rows(void *arg, int64_t r0, int64_t r1)
{
    struct piece *p = arg;
    int64_t n = p->t->ne[0];
    size_t in_rb = st_type_row_bytes(p->t->type, n), out_rb = st_type_row_bytes(p->type, n);
    float *row = malloc((size_t)n * sizeof *row);
    if (!row) {
        __atomic_store_n(&p->oom, true, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        st_dequant_row(p->t->type, (const uint8_t *)p->t->data + (p->r_first + (uint64_t)r) * in_rb, row, n);
        st_quantize_row(p->type, row, p->buf + (size_t)r * out_rb, n);
    }
    free(row);
}

// Tensor t converted to `type`, written in pieces of about 8 MiB.
static int convert(struct st_gguf_writer *w, const struct st_gguf_tensor *t, uint32_t type, struct st_error *e)
{
    if (t->type == type) return st_gguf_writer_write(w, t->data, t->n_bytes, e);
    uint64_t rows = st_gguf_tensor_nrows(t);
    size_t out_rb = st_type_row_bytes(type, t->ne[0]);
    size_t per = (8u << 20) / out_rb;
    if (per < 1) per = 1;
    struct piece p = {t, type, 0, malloc(per * out_rb), false};
    int rc = -1;
    if (!p.buf) {
        st_error_set(e, "tensor '%s': out of memory", t->name);
        goto out;
    }
    for (p.r_first = 0; p.r_first < rows; p.r_first += per) {
        uint64_t nr = rows - p.r_first < per ? rows - p.r_first : per;
        st_quant_parallel((int64_t)nr, piece_rows, &p);
        if (p.oom) {
            st_error_set(e, "tensor '%s': out of memory", t->name);
            goto out;
        }
        if (st_gguf_writer_write(w, p.buf, nr * out_rb, e)) goto out;
    }
    rc = 0;
out:
    free(p.buf);
    return rc;
}

int st_quantize_file(const char *in, const char *out, const struct st_quant_plan *p, bool progress, bool quiet,
                     struct st_quant_report *rep, struct st_error *e)
{
    struct st_gguf *g = NULL;
    struct st_gguf_writer *w = NULL;
    uint32_t *types = NULL;
    int rc = -1;
    *rep = (struct st_quant_report){0};
    if (st_gguf_open(in, &g, e)) return -1;
    if (!(types = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *types))) {
        st_error_set(e, "%s: out of memory", in);
        goto out;
    }
    if (st_gguf_writer_new(&w, e)) goto out;
    for (uint64_t i = 0; i < g->n_kv; i++) st_gguf_writer_copy_kv(w, &g->kv[i]);
    st_gguf_writer_set_u32(w, "general.file_type", st_quant_ftype((uint32_t)p->base));
    if (st_type_get((uint32_t)p->base)->block_elems > 1)
        st_gguf_writer_set_u32(w, "general.quantization_version", 2);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct st_gguf_tensor *t = &g->tensors[i];
        char note[256];
        types[i] = st_quant_pick(p, t->name, t->n_dims, t->ne[0], note, sizeof note);
        if (note[0]) {
            rep->n_fallback++;
            if (!quiet) fprintf(stderr, "note: %s\n", note);
        }
        st_gguf_writer_add_tensor(w, t->name, types[i], t->n_dims, t->ne);
        rep->in_bytes += t->n_bytes;
        rep->out_bytes += st_type_row_bytes(types[i], t->ne[0]) * st_gguf_tensor_nrows(t);
    }
    if (progress) {
        const char *b = strrchr(out, '/');
        st_gguf_writer_progress(w, b ? b + 1 : out);
    }
    if (st_gguf_writer_begin(w, out, e)) goto out;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (convert(w, &g->tensors[i], types[i], e)) goto out;
    if (st_gguf_writer_finish(w, e)) goto out;
    rep->n_tensors = g->n_tensors;
    rc = 0;
out:
    st_gguf_writer_free(&w);
    st_gguf_close(&g);
    free(types);
    return rc;
}
