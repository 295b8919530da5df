// The C client library (include/subternary.h): one DEALER socket, protobuf-c
// messages framed as [version, payload].
#include "include/subternary.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <zmq.h>

#include "proto/subternary.pb-c.h"
#include "proto/wire.h"

struct pending {
    struct st_client_event ev;
    struct pending *next;
};

struct st_client {
    void *zctx;
    void *sock;                 // DEALER
    char err[512];
    struct pending *head, *tail; // events that arrived while waiting for a stats or health reply
};

static int fail(struct st_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct st_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *st_client_error(const struct st_client *c) { return c ? c->err : "out of memory"; }

static bool z85_key(const char *k) { return k && strlen(k) == 40; }

int st_client_connect(const struct st_client_options *o, struct st_client **out)
{
    struct st_client *c = calloc(1, sizeof *c);
    *out = c;
    if (!c) return -1;
    if (!o->endpoint) return fail(c, "no endpoint");
    c->zctx = zmq_ctx_new();
    c->sock = c->zctx ? zmq_socket(c->zctx, ZMQ_DEALER) : NULL;
    if (!c->sock) return fail(c, "zmq_socket(DEALER): %s", zmq_strerror(errno));
    int linger = 200;
    zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
    // A routing id of our own (printable, never starting with a zero byte,
    // which ZeroMQ reserves) lets the server recognise our retries even over
    // a new connection.
    char ident[64];
    if (o->identity) {
        snprintf(ident, sizeof ident, "%s", o->identity);
    } else {
        uint8_t rnd[12];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
            uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)c << 16);
            memcpy(rnd, &t, 8);
            memset(rnd + 8, 0x5a, 4);
        }
        int n = snprintf(ident, sizeof ident, "c-");
        for (size_t i = 0; i < sizeof rnd; i++) n += snprintf(ident + n, sizeof ident - (size_t)n, "%02x", rnd[i]);
    }
    if (!ident[0] || zmq_setsockopt(c->sock, ZMQ_ROUTING_ID, ident, strlen(ident)))
        return fail(c, "identity '%s': %s", ident, ident[0] ? zmq_strerror(errno) : "empty");
    if (o->server_key) {
        char pub[41], sec[41];
        if (!z85_key(o->server_key)) return fail(c, "server key must be 40 Z85 characters");
        if (o->public_key || o->secret_key) {
            if (!z85_key(o->public_key) || !z85_key(o->secret_key))
                return fail(c, "client public and secret keys must both be 40 Z85 characters");
            memcpy(pub, o->public_key, 41);
            memcpy(sec, o->secret_key, 41);
        } else if (zmq_curve_keypair(pub, sec)) {
            return fail(c, "zmq_curve_keypair: %s", zmq_strerror(errno));
        }
        if (zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, o->server_key, 41) ||
            zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, pub, 41) || zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, sec, 41))
            return fail(c, "CURVE keys: %s", zmq_strerror(errno));
    }
    if (zmq_connect(c->sock, o->endpoint)) return fail(c, "zmq_connect(%s): %s", o->endpoint, zmq_strerror(errno));
    return 0;
}

void st_client_event_clear(struct st_client_event *ev)
{
    free(ev->ids);
    free(ev->text);
    memset(ev, 0, sizeof *ev);
}

void st_client_close(struct st_client **cp)
{
    struct st_client *c = *cp;
    if (!c) return;
    while (c->head) {
        struct pending *p = c->head;
        c->head = p->next;
        st_client_event_clear(&p->ev);
        free(p);
    }
    if (c->sock) zmq_close(c->sock);
    if (c->zctx) zmq_ctx_term(c->zctx);
    free(c);
    *cp = NULL;
}

static int send_env(struct st_client *c, Subternary__Envelope *env)
{
    if (st_wire_send(c->sock, NULL, 0, &env->base, 0)) return fail(c, "zmq_send: %s", zmq_strerror(errno));
    return 0;
}

int st_client_submit(struct st_client *c, const struct st_client_request *r)
{
    Subternary__GenerateRequest g = SUBTERNARY__GENERATE_REQUEST__INIT;
    Subternary__Sampling s = SUBTERNARY__SAMPLING__INIT;
    Subternary__Speculation sp = SUBTERNARY__SPECULATION__INIT;
    if (!r->request_id) return fail(c, "no request id");
    if (r->n_stop > ST_CLIENT_MAX_STOPS) return fail(c, "%zu stop strings: at most %d", r->n_stop, ST_CLIENT_MAX_STOPS);
    g.request_id = (char *)r->request_id;
    if (r->prompt_text) g.prompt_text = (char *)r->prompt_text;
    g.prompt_ids = (uint32_t *)r->prompt_ids;
    g.n_prompt_ids = r->n_prompt_ids;
    g.add_bos = r->add_bos;
    g.max_tokens = r->max_tokens;
    s.temperature = r->temperature;
    s.top_k = r->top_k;
    s.top_p = r->top_p;
    s.min_p = r->min_p;
    s.seed = r->seed;
    g.sampling = &s;
    sp.disable = r->no_speculation;
    sp.k = r->k;
    sp.no_governor = r->no_governor;
    sp.governor_threshold = r->governor_threshold;
    g.speculation = &sp;
    char *stops[ST_CLIENT_MAX_STOPS];
    for (size_t i = 0; i < r->n_stop; i++) stops[i] = (char *)r->stop[i];
    g.stop = stops;
    g.n_stop = r->n_stop;
    g.deadline_ms = r->deadline_ms;
    g.ignore_eos = r->ignore_eos;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_GENERATE;
    env.generate = &g;
    return send_env(c, &env);
}

int st_client_cancel(struct st_client *c, const char *request_id)
{
    Subternary__Cancel m = SUBTERNARY__CANCEL__INIT;
    m.request_id = (char *)request_id;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_CANCEL;
    env.cancel = &m;
    return send_env(c, &env);
}

int st_client_request_stats(struct st_client *c)
{
    Subternary__StatsRequest m = SUBTERNARY__STATS_REQUEST__INIT;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_STATS_REQUEST;
    env.stats_request = &m;
    return send_env(c, &env);
}

int st_client_request_health(struct st_client *c)
{
    Subternary__HealthRequest m = SUBTERNARY__HEALTH_REQUEST__INIT;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_HEALTH_REQUEST;
    env.health_request = &m;
    return send_env(c, &env);
}

static void copy_str(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src ? src : ""); }

static void stats_of(const Subternary__Stats *m, struct st_client_stats *st)
{
    memset(st, 0, sizeof *st);
    st->sessions = m->sessions;
    st->sessions_peak = m->sessions_peak;
    st->slots = m->slots;
    st->queued = m->queued;
    st->queued_peak = m->queued_peak;
    st->queue_limit = m->queue_limit;
    st->requests_done = m->requests_done;
    st->requests_cancelled = m->requests_cancelled;
    st->requests_disconnected = m->requests_disconnected;
    st->requests_rejected = m->requests_rejected;
    st->requests_failed = m->requests_failed;
    st->errors = m->errors;
    st->tokens_generated = m->tokens_generated;
    st->drafted = m->drafted;
    st->accepted = m->accepted;
    st->worker_restarts = m->worker_restarts;
    st->tokens_per_second = m->tokens_per_second;
    st->acceptance = m->acceptance;
    st->uptime_seconds = m->uptime_seconds;
    for (size_t i = 0; i < m->n_nodes && st->n_nodes < ST_CLIENT_MAX_NODES; i++) {
        const Subternary__NodeStats *n = m->nodes[i];
        st->nodes[st->n_nodes++] = (struct st_client_node_stats){n->node, n->workers, n->workers_ready, n->sessions,
                                                                 n->slots, n->worker_restarts};
    }
}

// Converts one server message; false if it is not one a server sends.
static bool event_of(const Subternary__Envelope *m, struct st_client_event *ev)
{
    memset(ev, 0, sizeof *ev);
    switch (m->msg_case) {
    case SUBTERNARY__ENVELOPE__MSG_CHUNK: {
        const Subternary__TokenChunk *ch = m->chunk;
        ev->type = ST_CLIENT_EV_CHUNK;
        copy_str(ev->request_id, sizeof ev->request_id, ch->request_id);
        ev->ids = malloc((ch->n_ids ? ch->n_ids : 1) * sizeof *ev->ids);
        ev->text = malloc(ch->text.len + 1);
        if (!ev->ids || !ev->text) {
            st_client_event_clear(ev);
            return false;
        }
        if (ch->n_ids) memcpy(ev->ids, ch->ids, ch->n_ids * sizeof *ev->ids);
        ev->n_ids = ch->n_ids;
        ev->offset = ch->offset;
        if (ch->text.len) memcpy(ev->text, ch->text.data, ch->text.len);
        ev->text[ch->text.len] = 0;
        ev->text_len = ch->text.len;
        return true;
    }
    case SUBTERNARY__ENVELOPE__MSG_DONE: {
        const Subternary__Done *d = m->done;
        ev->type = ST_CLIENT_EV_DONE;
        copy_str(ev->request_id, sizeof ev->request_id, d->request_id);
        ev->done = (struct st_client_done){
            .reason = d->reason, .prompt_tokens = d->prompt_tokens, .tokens = d->tokens, .rounds = d->rounds,
            .drafted = d->drafted, .accepted = d->accepted, .worker_restarts = d->worker_restarts,
            .acceptance = d->acceptance, .mean_k = d->mean_k, .prompt_seconds = d->prompt_seconds,
            .seconds = d->seconds, .draft_seconds = d->draft_seconds, .verify_seconds = d->verify_seconds,
            .queue_seconds = d->queue_seconds, .wall_seconds = d->wall_seconds};
        return true;
    }
    case SUBTERNARY__ENVELOPE__MSG_ERROR:
        ev->type = ST_CLIENT_EV_ERROR;
        copy_str(ev->request_id, sizeof ev->request_id, m->error->request_id);
        ev->code = m->error->code;
        copy_str(ev->message, sizeof ev->message, m->error->message);
        return true;
    case SUBTERNARY__ENVELOPE__MSG_STATS:
        ev->type = ST_CLIENT_EV_STATS;
        stats_of(m->stats, &ev->stats);
        return true;
    case SUBTERNARY__ENVELOPE__MSG_HEALTH: {
        const Subternary__Health *h = m->health;
        ev->type = ST_CLIENT_EV_HEALTH;
        ev->health.ok = h->ok;
        ev->health.workers_ready = h->workers_ready;
        ev->health.workers_total = h->workers_total;
        ev->health.sessions = h->sessions;
        ev->health.queued = h->queued;
        copy_str(ev->health.target, sizeof ev->health.target, h->target);
        copy_str(ev->health.draft, sizeof ev->health.draft, h->draft);
        return true;
    }
    default: return false;
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// The next event from the socket (not the pending list).
static int recv_event(struct st_client *c, struct st_client_event *ev, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    for (;;) {
        int left = deadline < 0 ? -1 : (int)(deadline - now_ms() > 0 ? deadline - now_ms() : 0);
        zmq_pollitem_t it = {c->sock, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&it, 1, left);
        if (rc < 0) {
            if (errno == EINTR) return fail(c, "interrupted");
            return fail(c, "zmq_poll: %s", zmq_strerror(errno));
        }
        if (rc == 0) return 0;
        struct st_wire_msg m;
        if (st_wire_recv(c->sock, false, &m, ZMQ_DONTWAIT)) continue;
        Subternary__Envelope *env =
            m.shape_ok && m.version_ok ? subternary__envelope__unpack(NULL, m.payload_len, m.payload) : NULL;
        st_wire_msg_clear(&m);
        if (!env) continue;
        bool ok = event_of(env, ev);
        subternary__envelope__free_unpacked(env, NULL);
        if (ok) return 1;
    }
}

int st_client_next(struct st_client *c, struct st_client_event *ev, int timeout_ms)
{
    if (c->head) {
        struct pending *p = c->head;
        c->head = p->next;
        if (!c->head) c->tail = NULL;
        *ev = p->ev;
        free(p);
        return 1;
    }
    return recv_event(c, ev, timeout_ms);
}

// Waits for an event of one type, keeping the others for st_client_next.
static int wait_for(struct st_client *c, enum st_client_event_type type, struct st_client_event *ev, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    for (;;) {
        int left = deadline < 0 ? -1 : (int)(deadline - now_ms() > 0 ? deadline - now_ms() : 0);
        int rc = recv_event(c, ev, left);
        if (rc <= 0) return rc;
        if (ev->type == type) return 1;
        struct pending *p = malloc(sizeof *p);
        if (!p) {
            st_client_event_clear(ev);
            return fail(c, "out of memory");
        }
        p->ev = *ev;
        p->next = NULL;
        if (c->tail) c->tail->next = p;
        else c->head = p;
        c->tail = p;
    }
}

int st_client_stats(struct st_client *c, struct st_client_stats *st, int timeout_ms)
{
    if (st_client_request_stats(c)) return -1;
    struct st_client_event ev;
    int rc = wait_for(c, ST_CLIENT_EV_STATS, &ev, timeout_ms);
    if (rc == 1) *st = ev.stats;
    if (rc == 1) st_client_event_clear(&ev);
    return rc;
}

int st_client_health(struct st_client *c, struct st_client_health *h, int timeout_ms)
{
    if (st_client_request_health(c)) return -1;
    struct st_client_event ev;
    int rc = wait_for(c, ST_CLIENT_EV_HEALTH, &ev, timeout_ms);
    if (rc == 1) *h = ev.health;
    if (rc == 1) st_client_event_clear(&ev);
    return rc;
}

const char *st_client_code_name(int code)
{
    static const char *names[] = {"none", "malformed", "unsupported version", "too large", "invalid field",
                                  "prompt too long", "busy", "cancelled", "deadline exceeded", "internal",
                                  "duplicate", "shutting down", "unknown request"};
    return code >= 0 && code < (int)(sizeof names / sizeof names[0]) ? names[code] : "unknown error";
}

const char *st_client_finish_name(int reason)
{
    static const char *names[] = {"none", "length", "eos", "stop", "context"};
    return reason >= 0 && reason < (int)(sizeof names / sizeof names[0]) ? names[reason] : "unknown";
}
