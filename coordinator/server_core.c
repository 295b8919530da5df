// The dispatcher and the scheduler state of the server: requests move
// QUEUED -> ACTIVE -> FINISHED (a bounded cache that answers retries), or are
// forgotten when their client went away.  No engine, no socket: replies go
// through c->send, sessions end through c->release.
#include "coordinator/server_core.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/tokenizer.h"

uint64_t st_srv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// ---------------------------------------------------------------- lists

static void list_push(struct st_srv_list *l, struct st_srv_req *r)
{
    r->prev = l->tail;
    r->next = NULL;
    if (l->tail) l->tail->next = r;
    else l->head = r;
    l->tail = r;
    l->n++;
}

static void list_remove(struct st_srv_list *l, struct st_srv_req *r)
{
    if (r->prev) r->prev->next = r->next;
    else l->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else l->tail = r->prev;
    r->prev = r->next = NULL;
    ST_ASSERT(l->n > 0);
    l->n--;
}

static struct st_srv_list *list_of(struct st_srv_core *c, const struct st_srv_req *r)
{
    return r->state == ST_SRV_QUEUED ? &c->queued : r->state == ST_SRV_ACTIVE ? &c->active : &c->finished;
}

static void req_free(struct st_srv_req *r)
{
    free(r->prompt);
    for (uint32_t i = 0; i < ST_SESSION_MAX_STOPS; i++) free(r->stops[i]);
    free(r->out);
    free(r);
}

// Takes r out of its list (fixing the round-robin cursor) and ends its session.
static void unlink_req(struct st_srv_core *c, struct st_srv_req *r)
{
    if (r->state == ST_SRV_ACTIVE) {
        if (c->rr == r) c->rr = r->next;
        ST_ASSERT(!r->stepping);
        if (r->session && c->release) c->release(c->ctx, r);
        r->session = NULL;
    }
    list_remove(list_of(c, r), r);
}

static struct st_srv_req *find(struct st_srv_core *c, const uint8_t *ident, size_t ident_len, const char *id)
{
    struct st_srv_list *lists[3] = {&c->active, &c->queued, &c->finished};
    for (int k = 0; k < 3; k++)
        for (struct st_srv_req *r = lists[k]->head; r; r = r->next)
            if (!r->drop && r->ident_len == ident_len && !memcmp(r->ident, ident, ident_len) && !strcmp(r->id, id))
                return r;
    return NULL;
}

void st_srv_core_init(struct st_srv_core *c, const struct st_srv_limits *lim, st_srv_send_fn send,
                      st_srv_release_fn release, void *ctx)
{
    memset(c, 0, sizeof *c);
    c->lim = *lim;
    c->send = send;
    c->release = release;
    c->ctx = ctx;
    c->started_ns = st_srv_now_ns();
    c->view.target = c->view.draft = "";
}

void st_srv_core_free(struct st_srv_core *c)
{
    struct st_srv_list *lists[3] = {&c->active, &c->queued, &c->finished};
    for (int k = 0; k < 3; k++)
        while (lists[k]->head) {
            struct st_srv_req *r = lists[k]->head;
            r->stepping = false;
            unlink_req(c, r);
            req_free(r);
        }
    c->rr = NULL;
}

// ---------------------------------------------------------------- replies

static int send_env(struct st_srv_core *c, const uint8_t *ident, size_t ident_len, Subternary__Envelope *env)
{
    return c->send ? c->send(c->ctx, ident, ident_len, env) : 0;
}

static void send_error(struct st_srv_core *c, const uint8_t *ident, size_t ident_len, const char *id,
                       Subternary__ErrorCode code, const char *msg)
{
    // Messages may quote what a client sent: only printable ASCII goes back,
    // so every client's protobuf library accepts the string.
    char clean[256];
    size_t n = 0;
    for (; msg[n] && n + 1 < sizeof clean; n++)
        clean[n] = msg[n] >= 0x20 && msg[n] < 0x7f ? msg[n] : '?';
    clean[n] = 0;
    Subternary__Error err = SUBTERNARY__ERROR__INIT;
    err.request_id = (char *)id;
    err.code = code;
    err.message = clean;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_ERROR;
    env.error = &err;
    c->c.errors++;
    send_env(c, ident, ident_len, &env);
}

// The text of ids: the tokenizer's pieces, concatenated (bytes; may split a
// UTF-8 character between chunks).  *len 0 without a tokenizer.
static char *pieces(const struct st_tokenizer *tok, const uint32_t *ids, uint32_t n, size_t *len)
{
    *len = 0;
    if (!tok || !n) return NULL;
    size_t cap = (size_t)n * 16 + 64, at = 0;
    char *buf = malloc(cap);
    for (uint32_t i = 0; buf && i < n; i++) {
        int k = st_tok_decode_piece(tok, (int32_t)ids[i], buf + at, cap - at);
        if (k < 0) continue;
        if ((size_t)k > cap - at) { // grow and decode this piece again
            cap = (cap + (size_t)k) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) break;
            buf = nb;
            k = st_tok_decode_piece(tok, (int32_t)ids[i], buf + at, cap - at);
        }
        at += (size_t)k;
    }
    if (!buf) return NULL;
    *len = at;
    return buf;
}

static int send_chunk(struct st_srv_core *c, const struct st_srv_req *r, uint32_t offset, const uint32_t *ids,
                      uint32_t n, const char *text, size_t text_len)
{
    Subternary__TokenChunk ch = SUBTERNARY__TOKEN_CHUNK__INIT;
    ch.request_id = (char *)r->id;
    ch.ids = (uint32_t *)ids;
    ch.n_ids = n;
    ch.text.data = (uint8_t *)text;
    ch.text.len = text_len;
    ch.offset = offset;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_CHUNK;
    env.chunk = &ch;
    return send_env(c, r->ident, r->ident_len, &env);
}

static void send_final(struct st_srv_core *c, struct st_srv_req *r)
{
    if (r->err) {
        send_error(c, r->ident, r->ident_len, r->id, r->err, r->err_msg);
        return;
    }
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_DONE;
    env.done = &r->done;
    r->done.request_id = r->id;
    send_env(c, r->ident, r->ident_len, &env);
}

// ---------------------------------------------------------------- endings

// Moves r to the finished cache (its result stays for retries), evicting
// the oldest entries beyond the cache size.
static void retire(struct st_srv_core *c, struct st_srv_req *r)
{
    unlink_req(c, r);
    free(r->prompt);
    r->prompt = NULL;
    for (uint32_t i = 0; i < ST_SESSION_MAX_STOPS; i++) {
        free(r->stops[i]);
        r->stops[i] = NULL;
        r->gp.stop[i] = NULL;
    }
    r->state = ST_SRV_FINISHED;
    list_push(&c->finished, r);
    while (c->finished.n > c->lim.finished_cache) {
        struct st_srv_req *old = c->finished.head;
        list_remove(&c->finished, old);
        req_free(old);
    }
}

// Forgets r: its client is gone, nothing is kept.
static void drop(struct st_srv_core *c, struct st_srv_req *r)
{
    unlink_req(c, r);
    req_free(r);
}

static void end_with_error(struct st_srv_core *c, struct st_srv_req *r, Subternary__ErrorCode code, const char *msg)
{
    r->err = code;
    snprintf(r->err_msg, sizeof r->err_msg, "%s", msg);
    // In a step, the reply waits for its end (st_srv_after_step), so that a
    // client that got its error finds the slot free.
    if (r->stepping) {
        r->ended = true;
        return;
    }
    send_error(c, r->ident, r->ident_len, r->id, code, r->err_msg);
    retire(c, r);
}

void st_srv_fail(struct st_srv_core *c, struct st_srv_req *r, Subternary__ErrorCode code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (code == SUBTERNARY__ERROR_CODE__ERR_INTERNAL || code == SUBTERNARY__ERROR_CODE__ERR_DEADLINE_EXCEEDED)
        c->c.failed++;
    end_with_error(c, r, code, msg);
}

void st_srv_finish(struct st_srv_core *c, struct st_srv_req *r, Subternary__Done *done)
{
    uint64_t now = st_srv_now_ns();
    r->done = *done;
    r->done.request_id = r->id;
    r->done.queue_seconds = r->started_ns > r->received_ns ? (r->started_ns - r->received_ns) * 1e-9 : 0;
    r->done.wall_seconds = (now - r->received_ns) * 1e-9;
    r->done.acceptance = done->drafted ? (double)done->accepted / done->drafted : 0;
    r->done.seed = r->gp.seed;
    r->err = SUBTERNARY__ERROR_CODE__ERR_NONE;
    c->c.done++;
    send_final(c, r);
    retire(c, r);
}

bool st_srv_after_step(struct st_srv_core *c, struct st_srv_req *r)
{
    r->stepping = false;
    if (!r->ended) return false;
    if (r->drop) {
        drop(c, r);
    } else {
        // The session ends first; then the client hears of it.
        if (r->session && c->release) c->release(c->ctx, r);
        r->session = NULL;
        send_final(c, r);
        retire(c, r);
    }
    return true;
}

// ---------------------------------------------------------------- streaming

static int record(struct st_srv_req *r, const int32_t *ids, uint32_t n)
{
    if (r->n_out + n > r->out_cap) {
        uint32_t cap = (r->n_out + n) * 2 + 16;
        uint32_t *o = realloc(r->out, cap * sizeof *o);
        if (!o) return -1;
        r->out = o;
        r->out_cap = cap;
    }
    for (uint32_t i = 0; i < n; i++) r->out[r->n_out + i] = (uint32_t)ids[i];
    r->n_out += n;
    return 0;
}

int st_srv_chunk(struct st_srv_core *c, struct st_srv_req *r, const int32_t *ids, uint32_t n, const char *text,
                 size_t text_len)
{
    uint32_t offset = r->n_out;
    if (record(r, ids, n)) {
        st_srv_fail(c, r, SUBTERNARY__ERROR_CODE__ERR_INTERNAL, "out of memory recording %u ids", r->n_out + n);
        return -1;
    }
    if (send_chunk(c, r, offset, r->out + offset, n, text, text_len) == 0) return 0;
    // EHOSTUNREACH: the ROUTER no longer knows the peer (it disconnected);
    // EAGAIN: it stopped reading and its queue is full.  Either way nobody
    // will read this stream: the session ends and its slot frees now.
    c->c.disconnected++;
    if (r->stepping) r->ended = r->drop = true;
    else drop(c, r);
    return -1;
}

// ---------------------------------------------------------------- dispatcher

static uint64_t fnv64(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void on_generate(struct st_srv_core *c, const struct st_srv_frames *f, const Subternary__GenerateRequest *g,
                        int fd)
{
    const uint8_t *ident = f->f[0];
    size_t ident_len = f->len[0] < ST_WIRE_MAX_IDENTITY ? f->len[0] : ST_WIRE_MAX_IDENTITY;
    uint64_t hash = fnv64(f->f[2], f->len[2]);
    struct st_srv_req *r = find(c, ident, ident_len, g->request_id);
    if (r) { // a retry: the running stream or the finished result, never a second run
        if (r->hash != hash) {
            char msg[256];
            snprintf(msg, sizeof msg, "request id %s is in use with different content", r->id);
            send_error(c, ident, ident_len, r->id, SUBTERNARY__ERROR_CODE__ERR_DUPLICATE, msg);
            return;
        }
        r->fd = fd; // it may come over a new connection
        if (r->n_out) {
            size_t len;
            char *text = pieces(c->lim.tok, r->out, r->n_out, &len);
            send_chunk(c, r, 0, r->out, r->n_out, text, len);
            free(text);
        }
        if (r->state == ST_SRV_FINISHED || r->ended) send_final(c, r);
        return;
    }
    r = calloc(1, sizeof *r);
    char msg[256];
    if (!r) {
        send_error(c, ident, ident_len, g->request_id, SUBTERNARY__ERROR_CODE__ERR_INTERNAL, "out of memory");
        return;
    }
    Subternary__ErrorCode code = st_srv_validate_generate(g, &c->lim, r, msg, sizeof msg);
    if (!code && c->queued.n + c->active.n >= c->lim.slots + c->lim.queue) {
        code = SUBTERNARY__ERROR_CODE__ERR_BUSY;
        snprintf(msg, sizeof msg, "busy: %u sessions and %u queued requests", c->active.n, c->queued.n);
        c->c.rejected++;
    }
    if (code) {
        send_error(c, ident, ident_len, g->request_id, code, msg);
        req_free(r);
        return;
    }
    memcpy(r->ident, ident, ident_len);
    r->ident_len = ident_len;
    snprintf(r->id, sizeof r->id, "%s", g->request_id);
    r->hash = hash;
    r->fd = fd;
    r->received_ns = st_srv_now_ns();
    r->deadline_ns = g->deadline_ms ? r->received_ns + g->deadline_ms * 1000000u : 0;
    r->state = ST_SRV_QUEUED;
    list_push(&c->queued, r);
    // Waiting means beyond the slots: requests queued while slots are free
    // start at the scheduler's next turn.
    uint32_t waiting = c->queued.n + c->active.n > c->lim.slots ? c->queued.n + c->active.n - c->lim.slots : 0;
    if (waiting > c->c.queued_peak) c->c.queued_peak = waiting;
}

static void on_cancel(struct st_srv_core *c, const struct st_srv_frames *f, const char *id)
{
    size_t ident_len = f->len[0] < ST_WIRE_MAX_IDENTITY ? f->len[0] : ST_WIRE_MAX_IDENTITY;
    struct st_srv_req *r = find(c, f->f[0], ident_len, id);
    if (!r) {
        char msg[256];
        snprintf(msg, sizeof msg, "no request %s from this client", id);
        send_error(c, f->f[0], ident_len, id, SUBTERNARY__ERROR_CODE__ERR_UNKNOWN_REQUEST, msg);
        return;
    }
    if (r->state == ST_SRV_FINISHED || r->ended) return; // its result was sent already
    c->c.cancelled++;
    end_with_error(c, r, SUBTERNARY__ERROR_CODE__ERR_CANCELLED, "cancelled by the client");
}

void st_srv_dispatch(struct st_srv_core *c, const struct st_srv_frames *f, int fd)
{
    if (f->n < 1) return; // a ROUTER always gives the identity frame
    size_t ident_len = f->len[0] < ST_WIRE_MAX_IDENTITY ? f->len[0] : ST_WIRE_MAX_IDENTITY;
    Subternary__Envelope *env;
    char id[ST_SRV_ID_MAX + 1], msg[256];
    Subternary__ErrorCode code = st_srv_decode(f, &env, id, msg, sizeof msg);
    if (code) {
        send_error(c, f->f[0], ident_len, id, code, msg);
        return;
    }
    Subternary__Envelope out = SUBTERNARY__ENVELOPE__INIT;
    switch (env->msg_case) {
    case SUBTERNARY__ENVELOPE__MSG_GENERATE: on_generate(c, f, env->generate, fd); break;
    case SUBTERNARY__ENVELOPE__MSG_CANCEL: on_cancel(c, f, id); break;
    case SUBTERNARY__ENVELOPE__MSG_STATS_REQUEST: {
        Subternary__Stats st;
        Subternary__NodeStats nodes[ST_SRV_MAX_NODES], *ptrs[ST_SRV_MAX_NODES];
        st_srv_fill_stats(c, &st, nodes, ptrs);
        out.msg_case = SUBTERNARY__ENVELOPE__MSG_STATS;
        out.stats = &st;
        send_env(c, f->f[0], ident_len, &out);
        break;
    }
    case SUBTERNARY__ENVELOPE__MSG_HEALTH_REQUEST: {
        Subternary__Health h;
        st_srv_fill_health(c, &h);
        out.msg_case = SUBTERNARY__ENVELOPE__MSG_HEALTH;
        out.health = &h;
        send_env(c, f->f[0], ident_len, &out);
        break;
    }
    default: ST_ASSERT(!"st_srv_decode let a server message through");
    }
    subternary__envelope__free_unpacked(env, NULL);
}

// ---------------------------------------------------------------- scheduler

struct st_srv_req *st_srv_admit(struct st_srv_core *c)
{
    struct st_srv_req *r = c->queued.head;
    if (!r || c->active.n >= c->lim.slots) return NULL;
    list_remove(&c->queued, r);
    r->state = ST_SRV_ACTIVE;
    r->started_ns = st_srv_now_ns();
    list_push(&c->active, r);
    if (c->active.n > c->c.sessions_peak) c->c.sessions_peak = c->active.n;
    return r;
}

struct st_srv_req *st_srv_next(struct st_srv_core *c, st_srv_pick_fn ok, void *ctx)
{
    struct st_srv_req *r = c->rr ? c->rr : c->active.head;
    for (uint32_t k = 0; r && k < c->active.n; k++, r = r->next ? r->next : c->active.head)
        if (!r->stepping && (!ok || ok(ctx, r))) {
            c->rr = r->next;
            return r;
        }
    return NULL;
}

void st_srv_expire(struct st_srv_core *c, uint64_t now_ns)
{
    struct st_srv_list *lists[2] = {&c->active, &c->queued};
    for (int k = 0; k < 2; k++)
        for (struct st_srv_req *r = lists[k]->head, *nx; r; r = nx) {
            nx = r->next;
            if (r->deadline_ns && now_ns > r->deadline_ns && !r->ended)
                st_srv_fail(c, r, SUBTERNARY__ERROR_CODE__ERR_DEADLINE_EXCEEDED,
                            "deadline exceeded after %u tokens", r->n_out);
        }
}

void st_srv_disconnect(struct st_srv_core *c, int fd)
{
    if (fd < 0) return;
    struct st_srv_list *lists[2] = {&c->active, &c->queued};
    for (int k = 0; k < 2; k++)
        for (struct st_srv_req *r = lists[k]->head, *nx; r; r = nx) {
            nx = r->next;
            if (r->fd != fd || r->ended) continue;
            c->c.disconnected++;
            if (r->stepping) r->ended = r->drop = true;
            else drop(c, r);
        }
}

void st_srv_shutdown(struct st_srv_core *c)
{
    struct st_srv_list *lists[2] = {&c->active, &c->queued};
    for (int k = 0; k < 2; k++)
        while (lists[k]->head) {
            struct st_srv_req *r = lists[k]->head;
            r->stepping = false;
            if (!r->ended)
                send_error(c, r->ident, r->ident_len, r->id, SUBTERNARY__ERROR_CODE__ERR_SHUTTING_DOWN,
                           "the server is shutting down");
            drop(c, r);
        }
}
