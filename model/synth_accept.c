// Greedy speculative decoding with the reference forward pass, to measure
// how often a target accepts its draft's tokens.  The KV caches follow the
// design's transactional rule: each model's cache is valid below its
// committed length, and a step simply overwrites what lies past it.
#include <stdlib.h>

#include "model/llama_ref.h"
#include "model/synth.h"

static int32_t argmax(const float *v, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return (int32_t)b;
}

int st_synth_acceptance(const struct st_llama_model *target, const struct st_llama_model *draft,
                        const int32_t *prompt, uint32_t n_prompt, uint32_t n_gen, uint32_t k,
                        int32_t *tokens, struct st_synth_accept *res, struct st_error *e)
{
    uint32_t nv = target->hp.n_vocab;
    if (draft->hp.n_vocab != nv)
        return st_error_set(e, "acceptance: target vocabulary %u differs from the draft's %u", nv,
                            draft->hp.n_vocab);
    if (!n_prompt || !n_gen || !k || k > 64)
        return st_error_set(e, "acceptance: need a prompt, n_gen > 0 and 1 <= k <= 64 (got %u, %u, %u)", n_prompt,
                            n_gen, k);
    uint32_t n_ctx = n_prompt + n_gen + k + 1;
    struct st_ref_state *ts = NULL, *ds = NULL;
    int32_t *seq = malloc(n_ctx * sizeof *seq); // prompt, then generated tokens
    // [rows][nv]: the draft's first batch is the prompt plus the pending token.
    float *logits = malloc((size_t)(n_prompt + 1 > k + 1 ? n_prompt + 1 : k + 1) * nv * sizeof *logits);
    int rc = -1;
    *res = (struct st_synth_accept){.k = k};
    if (!seq || !logits) {
        st_error_set(e, "acceptance: out of memory");
        goto out;
    }
    if (st_ref_new(target, n_ctx, &ts, e) || st_ref_new(draft, n_ctx, &ds, e)) goto out;
    for (uint32_t i = 0; i < n_prompt; i++) seq[i] = prompt[i];
    // The target reads the prompt; its last row gives the first token, which
    // is pending (position t, not yet in either cache).
    if (st_ref_forward(ts, seq, n_prompt, 0, logits, e)) goto out;
    uint32_t t = n_prompt, d_len = 0;
    seq[t] = argmax(logits + (size_t)(n_prompt - 1) * nv, nv);
    uint32_t produced = 1;
    while (produced < n_gen) {
        // Draft: catch up on unseen tokens up to and including the pending
        // one, then propose k tokens greedily.
        int32_t y[65];
        if (st_ref_forward(ds, seq + d_len, t + 1 - d_len, d_len, logits, e)) goto out;
        y[1] = argmax(logits + (size_t)(t - d_len) * nv, nv);
        for (uint32_t i = 2; i <= k; i++) {
            if (st_ref_forward(ds, &y[i - 1], 1, t + i - 1, logits, e)) goto out;
            y[i] = argmax(logits, nv);
        }
        // Target: verify [pending, y_1..y_k] in one batch.
        int32_t batch[65];
        batch[0] = seq[t];
        for (uint32_t i = 1; i <= k; i++) batch[i] = y[i];
        if (st_ref_forward(ts, batch, k + 1, t, logits, e)) goto out;
        uint32_t m = 0;
        while (m < k && argmax(logits + (size_t)m * nv, nv) == y[m + 1]) m++;
        int32_t z = argmax(logits + (size_t)m * nv, nv); // correction, or the bonus token
        for (uint32_t i = 1; i <= m; i++) seq[t + i] = y[i];
        seq[t + m + 1] = z;
        // Commit: the draft's cache holds pending..y_{k-1} at t..t+k-1.
        d_len = t + m + 1 < t + k ? t + m + 1 : t + k;
        t += m + 1;
        produced += m + 1;
        res->n_rounds++;
        res->n_drafted += k;
        res->n_accepted += m;
    }
    res->n_generated = produced;
    res->rate = res->n_drafted ? (double)res->n_accepted / res->n_drafted : 0.0;
    if (tokens)
        for (uint32_t i = 0; i < produced; i++) tokens[i] = seq[n_prompt + i];
    rc = 0;
out:
    st_ref_free(&ts);
    st_ref_free(&ds);
    free(seq);
    free(logits);
    return rc;
}
