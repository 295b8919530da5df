#include "model/llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"

static int get_required_u32(const struct st_gguf *g, const char *key, uint32_t *v, struct st_error *e)
{
    int rc = st_gguf_get_u32(g, key, v, e);
    if (rc == 1) return st_error_set(e, "%s: missing required key '%s'", g->path, key);
    if (rc == 0 && *v == 0) return st_error_set(e, "%s: key '%s' must be positive", g->path, key);
    return rc;
}

// Finds a tensor and checks its shape: ne0 x ne1 (ne1 = 0: a 1-D tensor).
static int want(const struct st_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                const struct st_gguf_tensor **out, bool optional, struct st_error *e)
{
    const struct st_gguf_tensor *t = st_gguf_find_tensor(g, name);
    *out = t;
    if (!t) return optional ? 0 : st_error_set(e, "%s: missing tensor '%s'", g->path, name);
    int64_t want1 = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1)
        return st_error_set(e, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                            g->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                            (long long)t->ne[3], (long long)ne0, (long long)want1);
    return 0;
}

static int read_hparams(const struct st_gguf *g, struct st_llama_hparams *hp, struct st_error *e)
{
    char arch[64] = "";
    if (st_gguf_get_str(g, "general.architecture", arch, sizeof arch, e) < 0) return -1;
    if (strcmp(arch, "llama"))
        return st_error_set(e, "%s: general.architecture is '%s', only 'llama' is supported", g->path,
                            arch[0] ? arch : "(missing)");
    if (get_required_u32(g, "llama.embedding_length", &hp->n_embd, e) ||
        get_required_u32(g, "llama.block_count", &hp->n_layer, e) ||
        get_required_u32(g, "llama.feed_forward_length", &hp->n_ff, e) ||
        get_required_u32(g, "llama.attention.head_count", &hp->n_head, e))
        return -1;
    hp->n_head_kv = hp->n_head;
    if (st_gguf_get_u32(g, "llama.attention.head_count_kv", &hp->n_head_kv, e) < 0) return -1;
    if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv)
        return st_error_set(e, "%s: head_count %u is not a multiple of head_count_kv %u", g->path,
                            hp->n_head, hp->n_head_kv);
    if (hp->n_embd % hp->n_head)
        return st_error_set(e, "%s: embedding_length %u is not a multiple of head_count %u", g->path,
                            hp->n_embd, hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    if (st_gguf_get_u32(g, "llama.attention.key_length", &hp->head_dim, e) < 0) return -1;
    hp->n_rot = hp->head_dim;
    if (st_gguf_get_u32(g, "llama.rope.dimension_count", &hp->n_rot, e) < 0) return -1;
    if (hp->head_dim == 0 || hp->head_dim > 1024 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return st_error_set(e, "%s: head dimension %u / rope dimension %u are not usable", g->path,
                            hp->head_dim, hp->n_rot);
    hp->n_ctx_train = 2048;
    if (st_gguf_get_u32(g, "llama.context_length", &hp->n_ctx_train, e) < 0) return -1;
    hp->rope_base = 10000.0f;
    if (st_gguf_get_f32(g, "llama.rope.freq_base", &hp->rope_base, e) < 0) return -1;
    hp->rms_eps = 1e-5f;
    if (st_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &hp->rms_eps, e) < 0) return -1;
    if (!(hp->rope_base > 0) || !(hp->rms_eps > 0) || !isfinite(hp->rope_base))
        return st_error_set(e, "%s: rope.freq_base %g / rms epsilon %g must be positive", g->path,
                            hp->rope_base, hp->rms_eps);
    if (hp->n_layer > 4096 || hp->n_embd > (1u << 20) || hp->n_ff > (1u << 22) || hp->n_head > 4096)
        return st_error_set(e, "%s: hyperparameters out of range (embd %u, layers %u, ffn %u, heads %u)",
                            g->path, hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head);
    return 0;
}

int st_llama_from_gguf(struct st_gguf *g, struct st_llama_model **out, struct st_error *e)
{
    *out = NULL;
    struct st_llama_model *m = calloc(1, sizeof *m);
    if (!m) {
        st_gguf_close(&g);
        return st_error_set(e, "out of memory");
    }
    m->gguf = g;
    struct st_llama_hparams *hp = &m->hp;
    if (read_hparams(g, hp, e)) goto fail;
    const struct st_gguf_tensor *te = st_gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        st_error_set(e, "%s: missing tensor 'token_embd.weight'", g->path);
        goto fail;
    }
    hp->n_vocab = (uint32_t)te->ne[1];
    uint32_t nv;
    int rc = st_gguf_get_u32(g, "llama.vocab_size", &nv, e);
    if (rc < 0) goto fail;
    if (rc == 0 && nv != hp->n_vocab) {
        st_error_set(e, "%s: llama.vocab_size %u differs from token_embd rows %u", g->path, nv, hp->n_vocab);
        goto fail;
    }
    int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    if (want(g, "token_embd.weight", d, hp->n_vocab, &m->tok_embd, false, e) ||
        want(g, "output_norm.weight", d, 0, &m->output_norm, false, e) ||
        want(g, "output.weight", d, hp->n_vocab, &m->output, true, e) ||
        want(g, "rope_freqs.weight", hp->n_rot / 2, 0, &m->rope_freqs, true, e))
        goto fail;
    hp->tied_output = m->output == NULL;
    if (hp->tied_output) m->output = m->tok_embd;
    hp->has_rope_freqs = m->rope_freqs != NULL;
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        st_error_set(e, "out of memory");
        goto fail;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        struct st_llama_layer *L = &m->layers[l];
        char n[9][64];
        const char *suffix[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                 "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
        for (int i = 0; i < 9; i++) snprintf(n[i], sizeof n[i], "blk.%u.%s.weight", l, suffix[i]);
        if (want(g, n[0], d, 0, &L->attn_norm, false, e) || want(g, n[1], d, qd, &L->wq, false, e) ||
            want(g, n[2], d, kvd, &L->wk, false, e) || want(g, n[3], d, kvd, &L->wv, false, e) ||
            want(g, n[4], qd, d, &L->wo, false, e) || want(g, n[5], d, 0, &L->ffn_norm, false, e) ||
            want(g, n[6], d, hp->n_ff, &L->ffn_gate, false, e) ||
            want(g, n[7], d, hp->n_ff, &L->ffn_up, false, e) ||
            want(g, n[8], hp->n_ff, d, &L->ffn_down, false, e))
            goto fail;
    }
    *out = m;
    return 0;
fail:
    st_llama_close(&m);
    return -1;
}

int st_llama_open(const char *path, struct st_llama_model **out, struct st_error *e)
{
    struct st_gguf *g;
    *out = NULL;
    if (st_gguf_open(path, &g, e)) return -1;
    return st_llama_from_gguf(g, out, e);
}

void st_llama_close(struct st_llama_model **mp)
{
    struct st_llama_model *m = *mp;
    if (!m) return;
    st_gguf_close(&m->gguf);
    free(m->layers);
    free(m);
    *mp = NULL;
}

void st_llama_rope_freqs(const struct st_llama_model *m, float *freqs)
{
    const struct st_llama_hparams *hp = &m->hp;
    float ff[4096];
    int half = (int)hp->n_rot / 2;
    if (m->rope_freqs) st_dequant_row(m->rope_freqs->type, m->rope_freqs->data, ff, half);
    for (int i = 0; i < half; i++) {
        float f = powf(hp->rope_base, -2.0f * (float)i / (float)hp->n_rot);
        freqs[i] = m->rope_freqs ? f / ff[i] : f;
    }
}
