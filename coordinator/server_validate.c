// Decoding and validation of client messages: pure functions of the bytes
// received and the server's limits.  Nothing here trusts a length, a count or
// a number from the wire before checking it.
#include "coordinator/server_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"

#define MSG(...) snprintf(msg, cap, __VA_ARGS__)

// Strict UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF) with no
// control characters: the id is echoed in every reply, and clients such as
// Python's protobuf refuse strings that are not valid UTF-8.
static bool printable_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f) return false;
            i++;
            continue;
        }
        size_t k;
        unsigned cp;
        if (c >= 0xc2 && c <= 0xdf) k = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) k = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) k = 3, cp = c & 0x07;
        else return false;
        if (i + k >= n) return false; // truncated sequence
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        if (cp >= 0x80 && cp < 0xa0) return false; // C1 controls
        i += k + 1;
    }
    return true;
}

bool st_srv_valid_id(const char *id)
{
    if (!id) return false;
    size_t n = strnlen(id, ST_SRV_ID_MAX + 1);
    return n >= 1 && n <= ST_SRV_ID_MAX && printable_utf8((const unsigned char *)id, n);
}

Subternary__ErrorCode st_srv_decode(const struct st_srv_frames *f, Subternary__Envelope **env, char *id, char *msg,
                                    size_t cap)
{
    *env = NULL;
    id[0] = 0;
    msg[0] = 0;
    // The version frame comes first: a peer speaking another version may
    // frame its messages differently, so it is told that before anything else.
    if (f->n >= 2 && (f->len[1] != ST_WIRE_VERSION_LEN || memcmp(f->f[1], ST_WIRE_VERSION, ST_WIRE_VERSION_LEN))) {
        MSG("unsupported protocol version frame (%zu bytes): this server speaks %s", f->len[1], ST_WIRE_VERSION);
        return SUBTERNARY__ERROR_CODE__ERR_UNSUPPORTED_VERSION;
    }
    if (f->n != 3) {
        MSG("a message is 2 frames (version, payload); got %d", f->n - 1);
        return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    }
    Subternary__Envelope *m = subternary__envelope__unpack(NULL, f->len[2], f->f[2]);
    if (!m) {
        MSG("payload of %zu bytes is not a subternary.Envelope", f->len[2]);
        return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    }
    const char *rid = NULL;
    switch (m->msg_case) {
    case SUBTERNARY__ENVELOPE__MSG_GENERATE: rid = m->generate->request_id; break;
    case SUBTERNARY__ENVELOPE__MSG_CANCEL: rid = m->cancel->request_id; break;
    case SUBTERNARY__ENVELOPE__MSG_STATS_REQUEST:
    case SUBTERNARY__ENVELOPE__MSG_HEALTH_REQUEST: *env = m; return SUBTERNARY__ERROR_CODE__ERR_NONE;
    case SUBTERNARY__ENVELOPE__MSG__NOT_SET:
        MSG("empty Envelope: no message set");
        subternary__envelope__free_unpacked(m, NULL);
        return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    default:
        MSG("Envelope field %d is a server message, not a request", (int)m->msg_case);
        subternary__envelope__free_unpacked(m, NULL);
        return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    }
    if (!st_srv_valid_id(rid)) {
        MSG("request_id must be 1..%d bytes of printable UTF-8", ST_SRV_ID_MAX);
        subternary__envelope__free_unpacked(m, NULL);
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    }
    snprintf(id, ST_SRV_ID_MAX + 1, "%s", rid);
    *env = m;
    return SUBTERNARY__ERROR_CODE__ERR_NONE;
}

static bool in_range(float x, float lo, float hi) { return isfinite(x) && x >= lo && x <= hi; }

static void free_params(struct st_srv_req *r)
{
    free(r->prompt);
    r->prompt = NULL;
    r->n_prompt = 0;
    for (uint32_t i = 0; i < ST_SESSION_MAX_STOPS; i++) {
        free(r->stops[i]);
        r->stops[i] = NULL;
    }
    r->gp.n_stop = 0;
}

static Subternary__ErrorCode prompt_of(const Subternary__GenerateRequest *g, const struct st_srv_limits *lim,
                                       struct st_srv_req *r, char *msg, size_t cap)
{
    bool text = g->prompt_text && g->prompt_text[0];
    if (text && g->n_prompt_ids) {
        MSG("give prompt_text or prompt_ids, not both");
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    }
    if (text) {
        size_t len = strlen(g->prompt_text);
        if (len > lim->max_prompt_bytes) {
            MSG("prompt_text of %zu bytes is over the limit of %u", len, lim->max_prompt_bytes);
            return SUBTERNARY__ERROR_CODE__ERR_TOO_LARGE;
        }
        if (!lim->tok) {
            MSG("prompt_text: the model has no tokenizer; send prompt_ids");
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        struct st_error e;
        if (st_tok_encode(lim->tok, g->prompt_text, len, g->add_bos, &ids, &n, &e)) {
            MSG("prompt_text: %s", e.msg);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        if (n == 0) {
            free(ids);
            MSG("prompt_text gives no tokens");
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        if (n + 1 > lim->n_ctx) {
            free(ids);
            MSG("prompt of %zu tokens does not fit the context of %u", n, lim->n_ctx);
            return SUBTERNARY__ERROR_CODE__ERR_PROMPT_TOO_LONG;
        }
        r->prompt = ids;
        r->n_prompt = (uint32_t)n;
        return SUBTERNARY__ERROR_CODE__ERR_NONE;
    }
    if (!g->n_prompt_ids) {
        MSG("no prompt: give prompt_text or prompt_ids");
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    }
    // One position stays free for the first generated token.
    if (g->n_prompt_ids + 1 > lim->n_ctx) {
        MSG("prompt of %zu tokens does not fit the context of %u", g->n_prompt_ids, lim->n_ctx);
        return SUBTERNARY__ERROR_CODE__ERR_PROMPT_TOO_LONG;
    }
    for (size_t i = 0; i < g->n_prompt_ids; i++)
        if (g->prompt_ids[i] >= lim->n_vocab) {
            MSG("prompt_ids[%zu] = %u is out of range (vocabulary of %u)", i, g->prompt_ids[i], lim->n_vocab);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
    r->prompt = malloc(g->n_prompt_ids * sizeof *r->prompt);
    if (!r->prompt) {
        MSG("out of memory for %zu prompt ids", g->n_prompt_ids);
        return SUBTERNARY__ERROR_CODE__ERR_INTERNAL;
    }
    for (size_t i = 0; i < g->n_prompt_ids; i++) r->prompt[i] = (int32_t)g->prompt_ids[i];
    r->n_prompt = (uint32_t)g->n_prompt_ids;
    return SUBTERNARY__ERROR_CODE__ERR_NONE;
}

static Subternary__ErrorCode params_of(const Subternary__GenerateRequest *g, const struct st_srv_limits *lim,
                                       struct st_srv_req *r, char *msg, size_t cap)
{
    struct st_gen_params *gp = &r->gp;
    memset(gp, 0, sizeof *gp);
    gp->max_tokens = g->max_tokens ? g->max_tokens : lim->max_tokens_default;
    if (gp->max_tokens > lim->n_ctx) {
        if (g->max_tokens) {
            MSG("max_tokens %u is over the context of %u", g->max_tokens, lim->n_ctx);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        gp->max_tokens = lim->n_ctx;
    }
    const Subternary__Sampling *s = g->sampling;
    if (s) {
        if (!in_range(s->temperature, 0, 100)) {
            MSG("sampling.temperature %g is not in [0, 100]", (double)s->temperature);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        if (s->top_k > lim->n_vocab) {
            MSG("sampling.top_k %u is over the vocabulary of %u", s->top_k, lim->n_vocab);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        if (!in_range(s->top_p, 0, 1)) {
            MSG("sampling.top_p %g is not in [0, 1]", (double)s->top_p);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        if (!in_range(s->min_p, 0, 1)) {
            MSG("sampling.min_p %g is not in [0, 1]", (double)s->min_p);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        gp->sampling = (struct st_sampling){s->temperature, s->top_k, s->top_p, s->min_p};
        gp->seed = s->seed;
    }
    const Subternary__Speculation *sp = g->speculation;
    gp->speculate = lim->has_draft && !(sp && sp->disable);
    gp->governor = !(sp && sp->no_governor);
    if (sp) {
        if (sp->k > lim->k_max) {
            MSG("speculation.k %u is over the server's longest draft of %u", sp->k, lim->k_max);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        if (!in_range(sp->governor_threshold, 0, 1)) {
            MSG("speculation.governor_threshold %g is not in [0, 1]", (double)sp->governor_threshold);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        if (!in_range(sp->draft_p_min, 0, 1) || sp->draft_p_min == 1) {
            MSG("speculation.draft_p_min %g is not in [0, 1)", (double)sp->draft_p_min);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        gp->k = sp->k;
        gp->governor_threshold = sp->governor_threshold;
        gp->draft_p_min = sp->draft_p_min;
        gp->draft_window = sp->draft_window;
    }
    gp->stop_at_eos = !g->ignore_eos;
    if (g->n_stop > ST_SESSION_MAX_STOPS) {
        MSG("%zu stop strings: at most %d", g->n_stop, ST_SESSION_MAX_STOPS);
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    }
    if (g->n_stop && !lim->tok) {
        MSG("stop strings need a tokenizer and the model has none");
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    }
    for (size_t i = 0; i < g->n_stop; i++) {
        size_t n = g->stop[i] ? strnlen(g->stop[i], ST_SRV_STOP_MAX + 1) : 0;
        if (n == 0 || n > ST_SRV_STOP_MAX) {
            MSG("stop[%zu] must be 1..%d bytes", i, ST_SRV_STOP_MAX);
            return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
        }
        if (!(r->stops[i] = strdup(g->stop[i]))) {
            MSG("out of memory");
            return SUBTERNARY__ERROR_CODE__ERR_INTERNAL;
        }
        gp->stop[i] = r->stops[i];
        gp->n_stop = (uint32_t)i + 1;
    }
    if (g->deadline_ms > lim->max_deadline_ms) {
        MSG("deadline_ms %llu is over the limit of %llu", (unsigned long long)g->deadline_ms,
            (unsigned long long)lim->max_deadline_ms);
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    }
    return SUBTERNARY__ERROR_CODE__ERR_NONE;
}

Subternary__ErrorCode st_srv_validate_generate(const Subternary__GenerateRequest *g, const struct st_srv_limits *lim,
                                               struct st_srv_req *r, char *msg, size_t cap)
{
    msg[0] = 0;
    if (!st_srv_valid_id(g->request_id)) {
        MSG("request_id must be 1..%d bytes of printable UTF-8", ST_SRV_ID_MAX);
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    }
    // Cheap checks first: a bad field costs no tokenization.
    Subternary__ErrorCode code = params_of(g, lim, r, msg, cap);
    if (!code) code = prompt_of(g, lim, r, msg, cap);
    if (code) free_params(r);
    return code;
}
