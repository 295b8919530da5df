#include "coordinator/server.h"

#include <errno.h>
#include <stdatomic.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "coordinator/server_core.h"
#include "coordinator/session.h"
#include "proto/wire.h"

#define RECV_BATCH 256          // messages handled per wake-up before work resumes
#define SERVICE_EVERY_NS 20000000u // worker liveness checks while busy
#define IDLE_POLL_MS 20
#define STEP_POLL_MS 20         // the longest wait while steps run (their liveness checks)

// The step in flight on one node's worker set.  Sets on different nodes run
// steps side by side; the loop below waits on all of them and the clients.
// A step carries one session's step, or the rounds of up to n_lanes
// sessions of the node as one batched step (their forwards read the weights
// once for all of them).
struct node_step {
    uint32_t n;                 // sessions in the step (0: the set is free)
    struct st_srv_req *r[ST_ENGINE_MAX_LANES];
    Subternary__StepCommand *lane[ST_ENGINE_MAX_LANES];
    uint32_t drafted[ST_ENGINE_MAX_LANES], accepted[ST_ENGINE_MAX_LANES]; // the sessions' counts before the step
    Subternary__StepCommand batch;
    struct st_step_result res;
};

struct st_server {
    struct st_server_config cfg;
    struct st_engine *eng;
    void *zctx;
    void *sock;                 // ROUTER, clients
    void *mon;                  // PAIR, the ROUTER's disconnect events
    char mon_ep[64];
    struct st_zap *zap;
    char endpoint[512];
    struct st_srv_core core;
    int32_t *ids;               // [ids_cap] one round's committed tokens
    uint32_t ids_cap;
    char *text;                 // [text_cap] their pieces
    size_t text_cap;
    uint32_t prefill_slice;
    uint32_t step_rows;         // rows a forward of a batched step takes at most
    uint32_t lanes;             // sessions a step carries at most
    uint64_t next_service_ns;
    struct node_step step[ST_ENGINE_MAX_NODES];
    char target_name[256], draft_name[256];
};

static int send_cb(void *ctx, const uint8_t *ident, size_t ident_len, const Subternary__Envelope *env)
{
    struct st_server *s = ctx;
    return st_wire_send(s->sock, ident, ident_len, &env->base, ZMQ_DONTWAIT);
}

static void release_cb(void *ctx, struct st_srv_req *r)
{
    (void)ctx;
    struct st_session *ses = r->session;
    st_session_end(&ses);
    r->session = NULL;
}

static void refresh_view(struct st_server *s)
{
    struct st_srv_view *v = &s->core.view;
    const struct st_engine *eng = s->eng;
    v->workers = st_engine_workers(eng, &v->workers_ready);
    v->restarts = st_engine_restarts(eng);
    v->n_nodes = eng->n_nodes < ST_SRV_MAX_NODES ? eng->n_nodes : ST_SRV_MAX_NODES;
    for (uint32_t i = 0; i < v->n_nodes; i++) {
        const struct st_engine_node *nd = &eng->node[i];
        v->node[i].workers = st_pool_ranks(nd->pool);
        v->node[i].workers_ready = st_pool_ready(nd->pool);
        v->node[i].sessions = nd->sessions;
        v->node[i].slots = eng->cfg.n_slots;
        v->node[i].restarts = st_pool_restarts(nd->pool);
    }
}

// Receives one whole message without copying and dispatches it.  Returns
// false when nothing was waiting.
static bool recv_dispatch(struct st_server *s)
{
    zmq_msg_t f[3];
    int kept = 0, total = 0, fd = -1, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s->sock, total ? 0 : ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            if (!total) return false;
            break;
        }
        // The connection a frame came from: the only link between a ROUTER
        // peer and the monitor's disconnect events (deprecated in libzmq, still served).
        int sfd = zmq_msg_get(&m, ZMQ_SRCFD);
        if (sfd >= 0) fd = sfd;
        more = zmq_msg_more(&m);
        if (kept < 3) {
            zmq_msg_init(&f[kept]);
            zmq_msg_move(&f[kept++], &m);
        }
        zmq_msg_close(&m);
        total++;
    }
    struct st_srv_frames fr = {.n = total};
    for (int i = 0; i < kept; i++) {
        fr.f[i] = zmq_msg_data(&f[i]);
        fr.len[i] = zmq_msg_size(&f[i]);
    }
    refresh_view(s);
    st_srv_dispatch(&s->core, &fr, fd);
    for (int i = 0; i < kept; i++) zmq_msg_close(&f[i]);
    return true;
}

static void drain_clients(struct st_server *s)
{
    for (int k = 0; k < RECV_BATCH && recv_dispatch(s); k++) {}
}

// The pool calls this while a step runs and a client message is waiting.
static void on_idle(void *ctx) { drain_clients(ctx); }

static void drain_monitor(struct st_server *s)
{
    for (;;) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, s->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        zmq_msg_init(&addr);
        if (zmq_msg_more(&ev)) zmq_msg_recv(&addr, s->mon, 0);
        if (zmq_msg_size(&ev) >= 6) {
            uint16_t event;
            uint32_t value;
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
            if (event == ZMQ_EVENT_DISCONNECTED) st_srv_disconnect(&s->core, (int)value);
        }
        zmq_msg_close(&ev);
        zmq_msg_close(&addr);
    }
}

// A request without a seed gets its own: from the kernel's random source,
// else the clock and a count (requests must not share samples by default).
static uint64_t fresh_seed(void)
{
    static uint64_t count;
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x || !x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (++count * 0x9e3779b97f4a7c15ull);
    }
    return x ? x : 1;
}

static void admit(struct st_server *s)
{
    struct st_srv_req *r;
    while ((r = st_srv_admit(&s->core))) {
        struct st_session *ses;
        struct st_error e;
        if (!r->gp.seed) r->gp.seed = fresh_seed();
        if (st_session_new(s->eng, &r->gp, r->prompt, r->n_prompt, ++s->eng->next_session, &ses, &e)) {
            fprintf(stderr, "serve: request %s: %s\n", r->id, e.msg);
            st_srv_fail(&s->core, r, SUBTERNARY__ERROR_CODE__ERR_INTERNAL, "starting the session: %s", e.msg);
            continue;
        }
        r->session = ses;
    }
}

static void fill_done(Subternary__Done *d, enum st_finish fin, const struct st_session_stats *st)
{
    subternary__done__init(d);
    d->reason = (Subternary__FinishReason)fin; // the enums share their values
    d->prompt_tokens = st->prompt_tokens;
    d->tokens = st->tokens;
    d->rounds = st->rounds;
    d->drafted = st->drafted;
    d->accepted = st->accepted;
    d->prompt_seconds = st->prompt_seconds;
    d->seconds = st->seconds;
    uint32_t spec_rounds = st->rounds - st->suspended_rounds;
    d->mean_k = st->drafted && spec_rounds ? st->k_sum / spec_rounds : 0;
    d->draft_seconds = st->draft_seconds;
    d->verify_seconds = st->verify_seconds;
    d->worker_restarts = st->restarts;
}

static size_t round_text(struct st_server *s, const int32_t *ids, int n)
{
    size_t at = 0;
    if (!s->eng->tok) return 0;
    for (int i = 0; i < n; i++) {
        char piece[256];
        int k = st_tok_decode_piece(s->eng->tok, ids[i], piece, sizeof piece);
        if (k <= 0) continue;
        size_t len = (size_t)k < sizeof piece ? (size_t)k : sizeof piece;
        if (at + len > s->text_cap) break;
        memcpy(s->text + at, piece, len);
        at += len;
    }
    return at;
}

// After a step of r's (n: the tokens a round committed, -1 on error;
// drafted, accepted: the session's counts before it): its tokens stream
// out, and the request ends if the session did.
static void step_finished(struct st_server *s, struct st_srv_req *r, uint32_t drafted, uint32_t accepted, int n,
                          enum st_finish fin, const struct st_error *e)
{
    if (st_srv_after_step(&s->core, r)) return; // cancelled or its client left meanwhile
    if (n < 0) {
        fprintf(stderr, "serve: request %s failed: %s\n", r->id, e->msg);
        st_srv_fail(&s->core, r, SUBTERNARY__ERROR_CODE__ERR_INTERNAL, "%s", e->msg);
        return;
    }
    const struct st_session_stats *st = st_session_stats(r->session);
    st_srv_count_round(&s->core, (uint32_t)n, st->drafted - drafted, st->accepted - accepted, st_srv_now_ns());
    if (n > 0 && st_srv_chunk(&s->core, r, s->ids, (uint32_t)n, s->text, round_text(s, s->ids, n))) return;
    if (fin != ST_FINISH_NONE) {
        Subternary__Done d;
        fill_done(&d, fin, st);
        if (!s->cfg.quiet)
            fprintf(stderr, "serve: request %s: %u tokens in %.3f s, %u rounds, acceptance %.2f, node %u\n", r->id,
                    st->tokens, st->seconds, st->rounds, st->drafted ? (double)st->accepted / st->drafted : 0.0,
                    st_session_node(r->session));
        st_srv_finish(&s->core, r, &d);
    }
}

static bool on_node(void *ctx, const struct st_srv_req *r)
{
    return r->session && st_session_node(r->session) == *(const uint32_t *)ctx;
}

// Plans r's next step (a prompt slice of at most max_rows tokens, 0: the
// engine's batch; the draft's backlog; or a round) as lane j.  A session
// that ends without a step, or cannot plan one, ends here: NULL.
static Subternary__StepCommand *plan_step(struct st_server *s, struct node_step *ns, uint32_t j, struct st_srv_req *r,
                                          uint32_t max_rows)
{
    struct st_error e = {{0}};
    enum st_finish fin;
    Subternary__StepCommand *cmd;
    const struct st_session_stats *st = st_session_stats(r->session);
    ns->drafted[j] = st->drafted;
    ns->accepted[j] = st->accepted;
    r->stepping = true;
    int rc = st_session_plan(r->session, s->prefill_slice, max_rows, &cmd, &fin, &e);
    if (rc == 1) return cmd;
    step_finished(s, r, ns->drafted[j], ns->accepted[j], rc == 0 ? 0 : -1, fin, &e);
    return NULL;
}

// Adds the rows step c puts in a batched step's draft forward (a round's
// unseen tokens, a draft prompt slice) and in its target forward (verify
// rows, a target prompt slice); false for a step that cannot be batched.
static bool step_rows(const Subternary__StepCommand *c, uint32_t *draft, uint32_t *verify)
{
    switch (c->kind) {
    case SUBTERNARY__STEP_KIND__STEP_ROUND:
        *draft += (uint32_t)c->n_tokens;
        *verify += c->k + 1;
        return true;
    case SUBTERNARY__STEP_KIND__STEP_VERIFY: *verify += (uint32_t)c->n_tokens + 1; return true;
    case SUBTERNARY__STEP_KIND__STEP_PREFILL:
        if (c->want_logits) return false;
        *(c->model == ST_MODEL_DRAFT ? draft : verify) += (uint32_t)c->n_tokens;
        return true;
    default: return false;
    }
}

static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

// Other sessions of the node join the step while lanes last and each
// forward keeps within `limit` rows: their rounds, and (take_prefill) one
// prompt slice in the rows left, if at least a quarter of a forward.  The
// others take their step back for later.  A session marked solo (a batched
// step it was in failed) runs alone, so a request that crashes the workers
// fails by itself.
static void gather(struct st_server *s, uint32_t node, struct node_step *ns, uint32_t *draft, uint32_t *verify,
                   uint32_t limit, bool take_prefill)
{
    uint32_t min_slice = s->step_rows / 4 ? s->step_rows / 4 : 1;
    for (struct st_srv_req *q = s->core.active.head, *nx; q && ns->n < s->lanes; q = nx) {
        nx = q->next;
        if (q->stepping || q->solo || !on_node(&node, q)) continue;
        if (max_u32(*draft, *verify) >= limit) return; // e.g. a round whose draft catches up on many tokens
        uint32_t room = limit - max_u32(*draft, *verify);
        bool slice_fits = take_prefill && room >= min_slice;
        Subternary__StepCommand *c = plan_step(s, ns, ns->n, q, slice_fits ? room : 0);
        if (!c) continue;
        uint32_t d = *draft, v = *verify;
        bool prefill = c->kind == SUBTERNARY__STEP_KIND__STEP_PREFILL;
        if ((prefill && !slice_fits) || !step_rows(c, &d, &v) || d > limit || v > limit) {
            st_session_unplan(q->session);
            q->stepping = false;
            continue;
        }
        take_prefill &= !prefill;
        *draft = d, *verify = v;
        ns->r[ns->n] = q;
        ns->lane[ns->n++] = c;
    }
}

// Starts node i's next step: r's, batched with other sessions' steps of the
// node.  A round takes along the others' rounds and one prompt slice; a
// prompt slice takes along the others' rounds in half the rows and itself
// fills the rest (alone, it runs whole: a prefill batch of forwards).  So a
// long prompt does not stall the sessions decoding beside it.
static void start_step(struct st_server *s, uint32_t i, struct st_srv_req *r)
{
    struct node_step *ns = &s->step[i];
    struct st_error e = {{0}};
    ns->n = 0;
    Subternary__StepCommand *cmd = plan_step(s, ns, 0, r, 0), *step = cmd;
    if (!cmd) return;
    ns->r[0] = r;
    ns->lane[0] = cmd;
    ns->n = 1;
    uint32_t draft = 0, verify = 0, m = s->step_rows;
    if (!r->solo && s->lanes > 1 && cmd->kind == SUBTERNARY__STEP_KIND__STEP_PREFILL && !cmd->want_logits) {
        gather(s, i, ns, &draft, &verify, m / 2, false);
        if (ns->n > 1) { // the slice again, in the rows the rounds left
            st_session_unplan(r->session);
            ns->lane[0] = step = cmd = plan_step(s, ns, 0, r, m - max_u32(draft, verify));
            if (!cmd) { // cannot happen: the same slice, shorter; the rounds go on without it
                ns->r[0] = ns->r[--ns->n];
                ns->lane[0] = ns->lane[ns->n];
                ns->drafted[0] = ns->drafted[ns->n];
                ns->accepted[0] = ns->accepted[ns->n];
                step = ns->lane[0];
            }
        }
    } else if (!r->solo && s->lanes > 1 && step_rows(cmd, &draft, &verify)) {
        gather(s, i, ns, &draft, &verify, m, true);
    }
    if (ns->n > 1) {
        subternary__step_command__init(&ns->batch);
        ns->batch.kind = SUBTERNARY__STEP_KIND__STEP_BATCH;
        ns->batch.n_lanes = ns->n;
        ns->batch.lanes = ns->lane;
        for (uint32_t j = 0; j < ns->n; j++) ns->batch.want_timings |= ns->lane[j]->want_timings;
        step = &ns->batch;
    }
    if (st_pool_submit(s->eng->node[i].pool, step, &ns->res, &e) == 0) {
        st_srv_count_step(&s->core, ns->n);
        return;
    }
    uint32_t n = ns->n;
    ns->n = 0;
    for (uint32_t j = 0; j < n; j++) {
        st_session_unplan(ns->r[j]->session);
        step_finished(s, ns->r[j], ns->drafted[j], ns->accepted[j], -1, ST_FINISH_NONE, &e);
    }
}

// Handles node i's set for up to timeout_ms; finishes its step when done.
static void progress_step(struct st_server *s, uint32_t i, int timeout_ms)
{
    struct node_step *ns = &s->step[i];
    struct st_error e = {{0}};
    int rc = st_pool_progress(s->eng->node[i].pool, timeout_ms, &e);
    if (rc == 0) return;
    uint32_t n = ns->n;
    ns->n = 0;
    if (rc < 0 && n > 1) {
        // Which session's rows crashed the workers is not known: each takes
        // its round back and runs alone until it has stepped.
        fprintf(stderr, "serve: a step of %u sessions failed (%s): each runs alone now\n", n, e.msg);
        for (uint32_t j = 0; j < n; j++) {
            st_session_unplan(ns->r[j]->session);
            ns->r[j]->solo = true;
            st_srv_after_step(&s->core, ns->r[j]);
        }
        return;
    }
    for (uint32_t j = 0; j < n; j++) {
        struct st_srv_req *r = ns->r[j];
        enum st_finish fin = ST_FINISH_NONE;
        struct st_step_result res = ns->res;
        res.lane = j;
        if (rc > 0) r->solo = false;
        int k = rc < 0 ? -1 : st_session_step_done(r->session, &res, s->ids, s->ids_cap, &fin, &e);
        step_finished(s, r, ns->drafted[j], ns->accepted[j], k, fin, &e);
    }
}

// Gives every free set the next request placed on its node.
static void start_free_sets(struct st_server *s)
{
    for (uint32_t i = 0; i < s->eng->n_nodes; i++) {
        if (s->step[i].n) continue;
        struct st_srv_req *r = st_srv_next(&s->core, on_node, &i);
        if (r) start_step(s, i, r);
    }
}

static bool any_step(const struct st_server *s)
{
    for (uint32_t i = 0; i < s->eng->n_nodes; i++)
        if (s->step[i].n) return true;
    return false;
}

// Lets the steps in flight end (a step ends, is replayed, or fails within
// the sets' liveness limits), so no session is released under a step.
static void finish_steps(struct st_server *s)
{
    for (uint32_t i = 0; i < s->eng->n_nodes; i++)
        while (s->step[i].n) progress_step(s, i, STEP_POLL_MS);
}

// ipc endpoints must live in a directory only we can enter: anyone who can
// reach the socket file can talk to the server.
static int check_ipc(const char *ep, struct st_error *e)
{
    const char *path = ep + strlen("ipc://");
    if (path[0] == '@' || !path[0])
        return st_error_set(e, "%s: abstract or empty ipc endpoints have no permissions; use a path in a 0700 directory",
                            ep);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    const char *dir = dirname(buf);
    struct stat sb;
    if (stat(dir, &sb)) {
        if (errno != ENOENT || mkdir(dir, 0700))
            return st_error_set(e, "ipc endpoint directory %s: %s", dir, strerror(errno));
        return 0;
    }
    if (!S_ISDIR(sb.st_mode)) return st_error_set(e, "ipc endpoint directory %s is not a directory", dir);
    if (sb.st_uid != geteuid() || (sb.st_mode & 077))
        return st_error_set(e, "ipc endpoint directory %s has mode %03o (owner %u): it must be ours with mode 0700",
                            dir, (unsigned)(sb.st_mode & 0777), (unsigned)sb.st_uid);
    return 0;
}

static int open_socket(struct st_server *s, struct st_error *e)
{
    const struct st_server_config *c = &s->cfg;
    s->sock = zmq_socket(s->zctx, ZMQ_ROUTER);
    if (!s->sock) return st_error_set(e, "zmq_socket(ROUTER): %s", zmq_strerror(errno));
    int one = 1, zero = 0, hwm = 100000;
    int64_t maxmsg = c->max_msg_bytes;
    // MANDATORY: a send to a peer that left fails (EHOSTUNREACH) instead of
    // vanishing, which is how a disconnected stream is noticed.  HANDOVER: a
    // client that reconnects with its identity takes it over (its retries).
    zmq_setsockopt(s->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(s->sock, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(s->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->sock, ZMQ_LINGER, &zero, sizeof zero);
    if (c->curve_secret) {
        if (strlen(c->curve_secret) != 40) return st_error_set(e, "CURVE secret key must be 40 Z85 characters");
        zmq_setsockopt(s->sock, ZMQ_CURVE_SERVER, &one, sizeof one);
        if (zmq_setsockopt(s->sock, ZMQ_CURVE_SECRETKEY, c->curve_secret, 41))
            return st_error_set(e, "zmq_setsockopt(CURVE_SECRETKEY): %s", zmq_strerror(errno));
        // A domain makes libzmq consult the ZAP handler for every handshake.
        zmq_setsockopt(s->sock, ZMQ_ZAP_DOMAIN, "subternary", strlen("subternary"));
    }
    // A name of its own: a closed server's inproc endpoint may linger in
    // the context while the next one (perhaps at the same address) opens.
    static _Atomic unsigned seq;
    snprintf(s->mon_ep, sizeof s->mon_ep, "inproc://st-server-monitor-%p-%u", (void *)s, ++seq);
    if (zmq_socket_monitor(s->sock, s->mon_ep, ZMQ_EVENT_DISCONNECTED))
        return st_error_set(e, "zmq_socket_monitor: %s", zmq_strerror(errno));
    s->mon = zmq_socket(s->zctx, ZMQ_PAIR);
    if (s->mon) zmq_setsockopt(s->mon, ZMQ_LINGER, &zero, sizeof zero);
    if (!s->mon || zmq_connect(s->mon, s->mon_ep))
        return st_error_set(e, "monitor socket %s: %s", s->mon_ep, zmq_strerror(errno));
    if (!strncmp(c->listen, "ipc://", 6) && check_ipc(c->listen, e)) return -1;
    if (zmq_bind(s->sock, c->listen)) return st_error_set(e, "zmq_bind(%s): %s", c->listen, zmq_strerror(errno));
    size_t len = sizeof s->endpoint;
    if (zmq_getsockopt(s->sock, ZMQ_LAST_ENDPOINT, s->endpoint, &len))
        snprintf(s->endpoint, sizeof s->endpoint, "%s", c->listen);
    return 0;
}

void st_server_rows(const struct st_server_config *cfg, uint32_t m_max, uint32_t *step_rows,
                    uint32_t *prefill_slice)
{
    *step_rows = cfg->step_rows ? cfg->step_rows : ST_SERVER_STEP_ROWS;
    if (*step_rows > m_max) *step_rows = m_max;
    *prefill_slice = cfg->prefill_slice ? cfg->prefill_slice : m_max > 512 ? m_max : 512;
}

int st_server_open(const struct st_server_config *cfg, struct st_engine *eng, void *zctx, struct st_server **out,
                   struct st_error *e)
{
    *out = NULL;
    if (!cfg->listen) return st_error_set(e, "no endpoint to listen on");
    if (cfg->curve_secret && !strncmp(cfg->listen, "ipc://", 6))
        return st_error_set(e, "CURVE is for tcp endpoints; %s is protected by its 0700 directory", cfg->listen);
    struct st_server *s = calloc(1, sizeof *s);
    if (!s) return st_error_set(e, "out of memory");
    s->cfg = *cfg;
    s->eng = eng;
    s->zctx = zctx;
    if (!s->cfg.max_msg_bytes) s->cfg.max_msg_bytes = 1u << 20;
    if (!s->cfg.max_prompt_bytes) s->cfg.max_prompt_bytes = 256u << 10;
    if (!s->cfg.max_tokens_default) s->cfg.max_tokens_default = 256;
    if (!s->cfg.finished_cache) s->cfg.finished_cache = 1024;
    if (!s->cfg.max_deadline_ms) s->cfg.max_deadline_ms = 86400000u;
    st_server_rows(cfg, eng->m_max, &s->step_rows, &s->prefill_slice);
    s->lanes = cfg->max_batch && cfg->max_batch < eng->n_lanes ? cfg->max_batch : eng->n_lanes;
    s->ids_cap = eng->k_max + 2;
    s->text_cap = (size_t)s->ids_cap * 256;
    s->ids = malloc(s->ids_cap * sizeof *s->ids);
    s->text = malloc(s->text_cap);
    struct st_srv_limits lim = {
        .n_vocab = eng->n_vocab, .n_ctx = eng->n_ctx, .k_max = eng->k_max,
        .slots = eng->cfg.n_slots * eng->n_nodes, .queue = s->cfg.queue,
        .max_tokens_default = s->cfg.max_tokens_default, .max_prompt_bytes = s->cfg.max_prompt_bytes,
        .finished_cache = s->cfg.finished_cache, .max_deadline_ms = s->cfg.max_deadline_ms,
        .has_draft = eng->draft != NULL, .tok = eng->tok};
    st_srv_core_init(&s->core, &lim, send_cb, release_cb, s);
    // Copies: the engine's configuration may point at its caller's buffers.
    const char *tn = cfg->target_name ? cfg->target_name : eng->cfg.target_path;
    const char *dn = cfg->draft_name ? cfg->draft_name : eng->cfg.draft_path;
    snprintf(s->target_name, sizeof s->target_name, "%s", tn ? tn : "");
    snprintf(s->draft_name, sizeof s->draft_name, "%s", dn ? dn : "");
    s->core.view.target = s->target_name;
    s->core.view.draft = s->draft_name;
    if (!s->ids || !s->text) {
        st_error_set(e, "out of memory");
        goto fail;
    }
    // The ZAP handler must be up before the first handshake.
    if (cfg->curve_secret && st_zap_start(zctx, cfg->allow, cfg->n_allow, &s->zap, e)) goto fail;
    if (open_socket(s, e)) goto fail;
    for (uint32_t i = 0; i < eng->n_nodes; i++) st_pool_set_idle(eng->node[i].pool, on_idle, s, s->sock);
    refresh_view(s);
    *out = s;
    return 0;
fail:
    st_server_close(&s);
    return -1;
}

const char *st_server_endpoint(const struct st_server *s) { return s->endpoint; }

int st_server_run(struct st_server *s, volatile sig_atomic_t *stop, struct st_error *e)
{
    struct st_srv_core *c = &s->core;
    while (!*stop) {
        uint64_t now = st_srv_now_ns();
        st_srv_expire(c, now);
        admit(s);
        start_free_sets(s);
        bool busy = any_step(s);
        // A request that is neither stepping nor waiting for a set can only
        // be one that start_free_sets just ended or could not place: look again at once.
        bool more = c->active.n && !busy;
        zmq_pollitem_t it[2 + ST_ENGINE_MAX_NODES * ST_POOL_POLLITEMS] = {{s->sock, 0, ZMQ_POLLIN, 0},
                                                                           {s->mon, 0, ZMQ_POLLIN, 0}};
        int n_it = 2;
        for (uint32_t i = 0; i < s->eng->n_nodes; i++)
            if (s->step[i].n)
                n_it += st_pool_pollitems(s->eng->node[i].pool, it + n_it);
        if (zmq_poll(it, n_it, more ? 0 : busy ? STEP_POLL_MS : IDLE_POLL_MS) < 0 && errno != EINTR) {
            st_error_set(e, "zmq_poll(%s): %s", s->endpoint, zmq_strerror(errno));
            finish_steps(s);
            st_srv_shutdown(c);
            return -1;
        }
        drain_monitor(s);
        drain_clients(s);
        for (uint32_t i = 0; i < s->eng->n_nodes; i++)
            if (s->step[i].n) progress_step(s, i, 0);
        now = st_srv_now_ns();
        if (!busy || now >= s->next_service_ns) {
            // Heartbeats, and workers that died between steps are replaced
            // (a set with a step in flight watches its workers itself).
            for (uint32_t i = 0; i < s->eng->n_nodes; i++)
                if (!s->step[i].n) st_pool_service(s->eng->node[i].pool, 0);
            s->next_service_ns = now + SERVICE_EVERY_NS;
        }
    }
    finish_steps(s);
    st_srv_shutdown(c);
    return 0;
}

void st_server_close(struct st_server **sp)
{
    struct st_server *s = *sp;
    if (!s) return;
    if (s->eng)
        for (uint32_t i = 0; i < s->eng->n_nodes; i++)
            if (s->eng->node[i].pool) st_pool_set_idle(s->eng->node[i].pool, NULL, NULL, NULL);
    st_srv_core_free(&s->core);
    if (s->sock) {
        zmq_socket_monitor(s->sock, NULL, 0);
        zmq_close(s->sock);
        // libzmq leaves the socket file of a bound ipc endpoint behind.
        if (!strncmp(s->endpoint, "ipc://", 6) && s->endpoint[6] != '@') unlink(s->endpoint + 6);
    }
    if (s->mon) zmq_close(s->mon);
    st_zap_stop(&s->zap);
    free(s->ids);
    free(s->text);
    free(s);
    *sp = NULL;
}
