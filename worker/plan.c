#include "worker/plan.h"

#include <stdlib.h>
#include <string.h>

const char *st_op_name(enum st_op op)
{
    static const char *names[ST_OP_COUNT] = {"embed", "norm", "qkv", "attention", "attn_out",
                                             "ffn_gate_up", "ffn_down", "output", "sample", "barrier"};
    return op < ST_OP_COUNT ? names[op] : "?";
}

static int mat(struct st_kern_weight *w, const struct st_layout_mat *m, const uint8_t *base, uint64_t bytes,
               struct st_error *e)
{
    if (m->offset > bytes || m->bytes > bytes - m->offset)
        return st_error_set(e, "weights directory: matrix at %llu (%llu bytes) is outside the section",
                            (unsigned long long)m->offset, (unsigned long long)m->bytes);
    return st_kern_weight_init(w, m->run_type, m->rows, m->cols, base + m->offset, e);
}

static int vec(const float **out, const struct st_layout_vec *v, const uint8_t *base, uint64_t bytes,
               struct st_error *e)
{
    if (v->offset > bytes || (uint64_t)v->n * 4 > bytes - v->offset)
        return st_error_set(e, "weights directory: vector at %llu is outside the section",
                            (unsigned long long)v->offset);
    *out = (const float *)(base + v->offset);
    return 0;
}

int st_plan_build(struct st_plan *p, const void *weights, uint64_t wbytes, void *scratch, uint64_t scratch_bytes,
                  const struct st_scratch_layout *sl, struct st_kv *kv, struct st_barrier *barrier, uint32_t rank,
                  struct st_error *e)
{
    memset(p, 0, sizeof *p);
    const uint8_t *w = weights;
    const struct st_layout_dir *dir = weights;
    if (wbytes < sizeof *dir || dir->magic != ST_LAYOUT_MAGIC || dir->n_models < 1 ||
        dir->n_models > ST_LAYOUT_MAX_MODELS)
        return st_error_set(e, "weights section has no valid model directory");
    if (sl->total > scratch_bytes || rank >= sl->n_ranks || sl->m_max > 1024)
        return st_error_set(e, "scratch layout (%llu bytes, %u ranks, %u rows) does not fit the section of %llu bytes",
                            (unsigned long long)sl->total, sl->n_ranks, sl->m_max, (unsigned long long)scratch_bytes);
    p->rank = rank;
    p->n_ranks = sl->n_ranks;
    p->n_models = dir->n_models;
    p->sl = *sl;
    p->kv = kv;
    p->barrier = barrier;
    for (uint32_t i = 0; i < dir->n_models; i++) {
        const struct st_layout_model *lm = &dir->model[i];
        struct st_plan_model *pm = &p->model[i];
        pm->lm = lm;
        uint64_t nl = lm->hp.n_layer;
        if (lm->layers_offset > wbytes || nl * sizeof(struct st_layout_layer) > wbytes - lm->layers_offset ||
            lm->embd_offset > wbytes || (uint64_t)lm->hp.n_vocab * lm->embd_row_bytes > wbytes - lm->embd_offset)
            return st_error_set(e, "weights directory of model %u points outside the section", i);
        pm->embd = w + lm->embd_offset;
        if (vec(&pm->output_norm, &lm->output_norm, w, wbytes, e) || vec(&pm->rope, &lm->rope_freqs, w, wbytes, e) ||
            mat(&pm->output, &lm->output, w, wbytes, e))
            return -1;
        pm->layers = calloc(nl, sizeof *pm->layers);
        if (!pm->layers) return st_error_set(e, "plan: out of memory");
        const struct st_layout_layer *ll = (const void *)(w + lm->layers_offset);
        for (uint64_t l = 0; l < nl; l++) {
            struct st_plan_layer *pl = &pm->layers[l];
            if (vec(&pl->attn_norm, &ll[l].attn_norm, w, wbytes, e) || vec(&pl->ffn_norm, &ll[l].ffn_norm, w, wbytes, e) ||
                mat(&pl->wq, &ll[l].wq, w, wbytes, e) || mat(&pl->wk, &ll[l].wk, w, wbytes, e) ||
                mat(&pl->wv, &ll[l].wv, w, wbytes, e) || mat(&pl->wo, &ll[l].wo, w, wbytes, e) ||
                mat(&pl->gate, &ll[l].gate, w, wbytes, e) || mat(&pl->up, &ll[l].up, w, wbytes, e) ||
                mat(&pl->down, &ll[l].down, w, wbytes, e)) {
                st_plan_free(p);
                return -1;
            }
        }
    }
    uint8_t *s = scratch;
    p->x = (float *)(s + sl->x);
    p->tmp = (float *)(s + sl->tmp);
    p->q = (float *)(s + sl->q);
    p->k = (float *)(s + sl->k);
    p->v = (float *)(s + sl->v);
    p->att = (float *)(s + sl->att);
    p->g = (float *)(s + sl->g);
    p->u = (float *)(s + sl->u);
    p->logits = (float *)(s + sl->logits);
    p->partial = (struct st_argmax_partial *)(s + sl->partial);
    p->draft_tokens = (uint32_t *)(s + sl->draft_tokens);
    p->draft_kept = (uint32_t *)(s + sl->draft_kept);
    p->step_ns = (uint64_t *)(s + sl->step_ns);
    p->draft_probs = (float *)(s + sl->draft_probs);
    p->target_argmax = (uint32_t *)(s + sl->target_argmax);
    p->target_probs = (float *)(s + sl->target_probs);
    p->attn_part = (float *)(s + sl->attn_part);
    uint8_t *mine = s + sl->per_rank + sl->per_rank_bytes * rank;
    p->xn = (float *)(mine + sl->rank_xn);
    p->act = mine + sl->rank_act;
    p->attn_scratch = (float *)(mine + sl->rank_attn);
    for (uint32_t i = 0; i < p->n_models; i++)
        if (p->model[i].lm->hp.n_rot > p->n_rot_max) p->n_rot_max = p->model[i].lm->hp.n_rot;
    p->rope_cs = malloc((size_t)sl->m_max * p->n_rot_max * sizeof(float));
    if (!p->rope_cs) {
        st_plan_free(p);
        return st_error_set(e, "plan: out of memory");
    }
    return 0;
}

void st_plan_free(struct st_plan *p)
{
    for (uint32_t i = 0; i < ST_LAYOUT_MAX_MODELS; i++) {
        free(p->model[i].layers);
        p->model[i].layers = NULL;
    }
    free(p->rope_cs);
    p->rope_cs = NULL;
}
