// The C client library's calls (include/subternary.h): protobuf-c messages
// framed as [version, payload], to one server or to several (client/routes.c
// places requests; client/recv.c receives).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "client/client.h"
#include "proto/wire.h"

int st_client_send(struct st_client *c, int s, const uint8_t *msg, size_t len)
{
    if (st_wire_send_packed(c->servers[s].sock, NULL, 0, msg, len, c->n > 1 ? ZMQ_DONTWAIT : 0)) {
        if (errno == EAGAIN && c->n == 1)
            return st_client_fail(c, "%s: no connection took the message within %d ms", c->servers[s].endpoint,
                                  c->connect_wait_ms);
        return st_client_fail(c, "zmq_send(%s): %s", c->servers[s].endpoint, zmq_strerror(errno));
    }
    return 0;
}

static int pack(struct st_client *c, const Subternary__Envelope *env, uint8_t **msg, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(&env->base);
    *msg = malloc(*len ? *len : 1);
    if (!*msg) return st_client_fail(c, "out of memory");
    protobuf_c_message_pack(&env->base, *msg);
    return 0;
}

int st_client_submit(struct st_client *c, const struct st_client_request *r)
{
    Subternary__GenerateRequest g = SUBTERNARY__GENERATE_REQUEST__INIT;
    Subternary__Sampling s = SUBTERNARY__SAMPLING__INIT;
    Subternary__Speculation sp = SUBTERNARY__SPECULATION__INIT;
    if (!r->request_id) return st_client_fail(c, "no request id");
    if (r->n_stop > ST_CLIENT_MAX_STOPS)
        return st_client_fail(c, "%zu stop strings: at most %d", r->n_stop, ST_CLIENT_MAX_STOPS);
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
    sp.draft_p_min = r->draft_p_min;
    sp.draft_window = r->draft_window;
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
    uint8_t *msg;
    size_t len;
    if (pack(c, &env, &msg, &len)) return -1;
    int rc = c->n > 1 ? st_client_route_submit(c, r->request_id, msg, len) : st_client_send(c, 0, msg, len);
    free(msg);
    return rc;
}

int st_client_cancel(struct st_client *c, const char *request_id)
{
    if (!request_id) return st_client_fail(c, "no request id");
    Subternary__Cancel m = SUBTERNARY__CANCEL__INIT;
    m.request_id = (char *)request_id;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_CANCEL;
    env.cancel = &m;
    struct st_client_route *r = c->n > 1 ? st_client_route_find(c, request_id) : NULL;
    if (c->n > 1 && !r) { // what a server answers for a request it does not have
        struct st_client_event ev;
        memset(&ev, 0, sizeof ev);
        ev.type = ST_CLIENT_EV_ERROR;
        ev.code = ST_CLIENT_ERR_UNKNOWN_REQUEST;
        ev.server = -1;
        snprintf(ev.request_id, sizeof ev.request_id, "%s", request_id);
        snprintf(ev.message, sizeof ev.message, "no request %s in flight from this client", request_id);
        return st_client_push(c, &ev);
    }
    uint8_t *msg;
    size_t len;
    if (pack(c, &env, &msg, &len)) return -1;
    int rc = st_client_send(c, r ? r->server : 0, msg, len);
    free(msg);
    if (!rc && r) r->cancelled = true;
    return rc;
}

// Sends to every server connected now; if none is, waits up to the connect
// timeout for one.
static int broadcast(struct st_client *c, const Subternary__Envelope *env)
{
    uint8_t *msg;
    size_t len;
    if (pack(c, env, &msg, &len)) return -1;
    int64_t give_up = st_client_now_ms() + c->connect_wait_ms;
    int sent = 0;
    for (;;) {
        for (int s = 0; s < c->n; s++) sent += !c->servers[s].down && st_client_send(c, s, msg, len) == 0;
        int64_t left = give_up - st_client_now_ms();
        if (sent || c->n == 1 || left <= 0 || st_client_wait_writable(c, (int)left) < 0) break;
    }
    free(msg);
    if (!sent && c->n > 1) st_client_fail(c, "none of the %d servers is connected", c->n);
    return sent ? 0 : -1;
}

// The envelope of a stats or health request (m holds its body).
union probe {
    Subternary__StatsRequest stats;
    Subternary__HealthRequest health;
};

static void probe_env(enum st_client_event_type type, union probe *m, Subternary__Envelope *env)
{
    subternary__envelope__init(env);
    if (type == ST_CLIENT_EV_STATS) {
        subternary__stats_request__init(&m->stats);
        env->msg_case = SUBTERNARY__ENVELOPE__MSG_STATS_REQUEST;
        env->stats_request = &m->stats;
    } else {
        subternary__health_request__init(&m->health);
        env->msg_case = SUBTERNARY__ENVELOPE__MSG_HEALTH_REQUEST;
        env->health_request = &m->health;
    }
}

int st_client_request_stats(struct st_client *c)
{
    union probe m;
    Subternary__Envelope env;
    probe_env(ST_CLIENT_EV_STATS, &m, &env);
    return broadcast(c, &env);
}

int st_client_request_health(struct st_client *c)
{
    union probe m;
    Subternary__Envelope env;
    probe_env(ST_CLIENT_EV_HEALTH, &m, &env);
    return broadcast(c, &env);
}

// Asks every server and waits for their replies: *evs (one per server,
// malloc'd) and got[].
static int ask_all(struct st_client *c, enum st_client_event_type type, struct st_client_event **evs, bool *got,
                   int timeout_ms)
{
    union probe m;
    Subternary__Envelope env;
    probe_env(type, &m, &env);
    uint8_t *msg;
    size_t len;
    *evs = calloc((size_t)c->n, sizeof **evs);
    if (!*evs) return st_client_fail(c, "out of memory");
    if (pack(c, &env, &msg, &len)) return -1;
    int rc = st_client_gather(c, msg, len, type, *evs, got, timeout_ms);
    free(msg);
    return rc;
}

int st_client_stats(struct st_client *c, struct st_client_stats *st, int timeout_ms)
{
    struct st_client_event *evs;
    bool got[ST_CLIENT_MAX_SERVERS];
    int rc = ask_all(c, ST_CLIENT_EV_STATS, &evs, got, timeout_ms);
    if (rc == 1) st_client_stats_combine(evs, got, c->n, st);
    free(evs);
    return rc;
}

int st_client_health(struct st_client *c, struct st_client_health *h, int timeout_ms)
{
    struct st_client_event *evs;
    bool got[ST_CLIENT_MAX_SERVERS];
    int rc = ask_all(c, ST_CLIENT_EV_HEALTH, &evs, got, timeout_ms);
    if (rc == 1) st_client_health_combine(evs, got, c->n, h);
    free(evs);
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
