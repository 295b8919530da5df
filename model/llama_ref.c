#include "model/llama_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"

struct st_ref_state {
    const struct st_llama_model *m;
    uint32_t n_ctx;
    uint16_t *k_cache; // [n_layer][n_ctx][n_head_kv*head_dim] F16
    uint16_t *v_cache; // same
    float *rope;       // [n_rot/2] inverse frequencies
};

int st_ref_new(const struct st_llama_model *m, uint32_t n_ctx, struct st_ref_state **out,
               struct st_error *e)
{
    const struct st_llama_hparams *hp = &m->hp;
    struct st_ref_state *s = calloc(1, sizeof *s);
    size_t kv = (size_t)hp->n_layer * n_ctx * hp->n_head_kv * hp->head_dim;
    if (!s) return st_error_set(e, "out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    s->k_cache = calloc(kv, sizeof(uint16_t));
    s->v_cache = calloc(kv, sizeof(uint16_t));
    s->rope = calloc(hp->n_rot / 2 + 1, sizeof(float));
    if (!s->k_cache || !s->v_cache || !s->rope) {
        st_ref_free(&s);
        return st_error_set(e, "reference state for %u positions: out of memory", n_ctx);
    }
    st_llama_rope_freqs(m, s->rope);
    *out = s;
    return 0;
}

void st_ref_free(struct st_ref_state **sp)
{
    struct st_ref_state *s = *sp;
    if (!s) return;
    free(s->k_cache);
    free(s->v_cache);
    free(s->rope);
    free(s);
    *sp = NULL;
}

// Dequantises a whole [rows][cols] tensor to float.
static float *dequant_all(const struct st_gguf_tensor *t)
{
    int64_t cols = t->ne[0], rows = (int64_t)st_gguf_tensor_nrows(t);
    size_t rb = st_type_row_bytes(t->type, cols);
    float *w = malloc((size_t)rows * cols * sizeof(float));
    if (!w) return NULL;
    for (int64_t r = 0; r < rows; r++)
        st_dequant_row(t->type, (const uint8_t *)t->data + r * rb, w + r * cols, cols);
    return w;
}

// y[n][rows] = x[n][cols] * W^T, W a GGUF tensor of `rows` rows.
static int matmul(const struct st_gguf_tensor *t, const float *x, uint32_t n, float *y)
{
    int64_t cols = t->ne[0], rows = t->ne[1];
    float *w = dequant_all(t);
    if (!w) return -1;
    for (uint32_t i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++) {
            const float *wr = w + r * cols, *xi = x + (size_t)i * cols;
            double acc = 0;
            for (int64_t c = 0; c < cols; c++) acc += (double)wr[c] * xi[c];
            y[(size_t)i * rows + r] = (float)acc;
        }
    free(w);
    return 0;
}

static void rmsnorm(float *out, const float *x, const float *w, uint32_t d, float eps)
{
    double ss = 0;
    for (uint32_t i = 0; i < d; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / d + eps));
    for (uint32_t i = 0; i < d; i++) out[i] = x[i] * scale * w[i];
}

// Rotates adjacent pairs (llama's "normal" RoPE mode) of every head.
static void rope(float *v, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, const float *freqs, uint32_t pos)
{
    for (uint32_t h = 0; h < n_heads; h++)
        for (uint32_t i = 0; i < n_rot / 2; i++) {
            double theta = (double)pos * freqs[i];
            double c = cos(theta), s = sin(theta);
            float *p = v + (size_t)h * head_dim + 2 * i;
            double a = p[0], b = p[1];
            p[0] = (float)(a * c - b * s);
            p[1] = (float)(a * s + b * c);
        }
}

int st_ref_forward(struct st_ref_state *s, const int32_t *tokens, uint32_t n, uint32_t pos0,
                   float *logits, struct st_error *e)
{
    const struct st_llama_model *m = s->m;
    const struct st_llama_hparams *hp = &m->hp;
    uint32_t d = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
    if (n == 0 || pos0 > s->n_ctx || n > s->n_ctx - pos0)
        return st_error_set(e, "reference forward: %u tokens at position %u exceed the context of %u", n, pos0,
                            s->n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= hp->n_vocab)
            return st_error_set(e, "reference forward: token id %d out of range (vocabulary %u)", tokens[i],
                                hp->n_vocab);
    size_t nd = (size_t)n * d;
    float *x = malloc(nd * sizeof(float));        // [n][d] residual stream
    float *xn = malloc(nd * sizeof(float));       // [n][d] normalised
    float *q = malloc((size_t)n * qd * sizeof(float));   // [n][qd]
    float *k = malloc((size_t)n * kvd * sizeof(float));  // [n][kvd]
    float *v = malloc((size_t)n * kvd * sizeof(float));  // [n][kvd]
    float *att = malloc((size_t)n * qd * sizeof(float)); // [n][qd]
    float *tmp = malloc(nd * sizeof(float));             // [n][d]
    float *g = malloc((size_t)n * hp->n_ff * sizeof(float)); // [n][n_ff]
    float *u = malloc((size_t)n * hp->n_ff * sizeof(float)); // [n][n_ff]
    float *norm_w = malloc(d * sizeof(float));
    double *sc = malloc(((size_t)pos0 + n) * sizeof(double)); // attention scores
    int rc = -1;
    if (!x || !xn || !q || !k || !v || !att || !tmp || !g || !u || !norm_w || !sc) {
        st_error_set(e, "reference forward of %u tokens: out of memory", n);
        goto out;
    }
    size_t erb = st_type_row_bytes(m->tok_embd->type, d);
    for (uint32_t i = 0; i < n; i++)
        st_dequant_row(m->tok_embd->type, (const uint8_t *)m->tok_embd->data + (size_t)tokens[i] * erb,
                       x + (size_t)i * d, d);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct st_llama_layer *L = &m->layers[l];
        uint16_t *kc = s->k_cache + (size_t)l * s->n_ctx * kvd, *vc = s->v_cache + (size_t)l * s->n_ctx * kvd;
        st_dequant_row(L->attn_norm->type, L->attn_norm->data, norm_w, d);
        for (uint32_t i = 0; i < n; i++) rmsnorm(xn + (size_t)i * d, x + (size_t)i * d, norm_w, d, hp->rms_eps);
        if (matmul(L->wq, xn, n, q) || matmul(L->wk, xn, n, k) || matmul(L->wv, xn, n, v)) goto oom;
        for (uint32_t i = 0; i < n; i++) {
            rope(q + (size_t)i * qd, hp->n_head, hd, hp->n_rot, s->rope, pos0 + i);
            rope(k + (size_t)i * kvd, hp->n_head_kv, hd, hp->n_rot, s->rope, pos0 + i);
            for (uint32_t j = 0; j < kvd; j++) {
                kc[(size_t)(pos0 + i) * kvd + j] = st_f32_to_f16(k[(size_t)i * kvd + j]);
                vc[(size_t)(pos0 + i) * kvd + j] = st_f32_to_f16(v[(size_t)i * kvd + j]);
            }
        }
        uint32_t group = hp->n_head / hp->n_head_kv;
        double scale = 1.0 / sqrt((double)hd);
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t h = 0; h < hp->n_head; h++) {
                const float *qh = q + (size_t)i * qd + (size_t)h * hd;
                uint32_t kvh = h / group, npos = pos0 + i + 1;
                double mx = -INFINITY, sum = 0;
                for (uint32_t p = 0; p < npos; p++) {
                    const uint16_t *kp = kc + (size_t)p * kvd + (size_t)kvh * hd;
                    double dot = 0;
                    for (uint32_t j = 0; j < hd; j++) dot += (double)qh[j] * st_f16_to_f32(kp[j]);
                    sc[p] = dot * scale;
                    if (sc[p] > mx) mx = sc[p];
                }
                for (uint32_t p = 0; p < npos; p++) sum += (sc[p] = exp(sc[p] - mx));
                float *o = att + (size_t)i * qd + (size_t)h * hd;
                for (uint32_t j = 0; j < hd; j++) {
                    double acc = 0;
                    for (uint32_t p = 0; p < npos; p++)
                        acc += sc[p] * st_f16_to_f32(vc[(size_t)p * kvd + (size_t)kvh * hd + j]);
                    o[j] = (float)(acc / sum);
                }
            }
        if (matmul(L->wo, att, n, tmp)) goto oom;
        for (size_t i = 0; i < nd; i++) x[i] += tmp[i];
        st_dequant_row(L->ffn_norm->type, L->ffn_norm->data, norm_w, d);
        for (uint32_t i = 0; i < n; i++) rmsnorm(xn + (size_t)i * d, x + (size_t)i * d, norm_w, d, hp->rms_eps);
        if (matmul(L->ffn_gate, xn, n, g) || matmul(L->ffn_up, xn, n, u)) goto oom;
        for (size_t i = 0; i < (size_t)n * hp->n_ff; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        if (matmul(L->ffn_down, g, n, tmp)) goto oom;
        for (size_t i = 0; i < nd; i++) x[i] += tmp[i];
    }
    st_dequant_row(m->output_norm->type, m->output_norm->data, norm_w, d);
    for (uint32_t i = 0; i < n; i++) rmsnorm(xn + (size_t)i * d, x + (size_t)i * d, norm_w, d, hp->rms_eps);
    if (matmul(m->output, xn, n, logits)) goto oom;
    rc = 0;
    goto out;
oom:
    st_error_set(e, "reference forward: out of memory");
out:
    free(x); free(xn); free(q); free(k); free(v); free(att); free(tmp); free(g); free(u);
    free(norm_w); free(sc);
    return rc;
}
