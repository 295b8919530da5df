// The figures behind Stats and Health: counters kept by the dispatcher, a
// tokens-per-second window of one-second buckets, and the engine's view.
#include "coordinator/server_core.h"

void st_srv_count_step(struct st_srv_core *c, uint32_t sessions)
{
    c->c.steps++;
    c->c.step_sessions += sessions;
}

void st_srv_count_round(struct st_srv_core *c, uint32_t tokens, uint32_t drafted, uint32_t accepted, uint64_t now_ns)
{
    c->c.tokens += tokens;
    c->c.drafted += drafted;
    c->c.accepted += accepted;
    uint64_t sec = now_ns / 1000000000u;
    if (sec != c->rate_sec) {
        for (uint64_t s = c->rate_sec + 1; s <= sec && s <= c->rate_sec + ST_SRV_RATE_BUCKETS; s++)
            c->rate[s % ST_SRV_RATE_BUCKETS] = 0;
        c->rate_sec = sec;
    }
    c->rate[sec % ST_SRV_RATE_BUCKETS] += tokens;
}

void st_srv_fill_stats(struct st_srv_core *c, Subternary__Stats *st, Subternary__NodeStats *nodes,
                       Subternary__NodeStats **node_ptrs)
{
    uint64_t now = st_srv_now_ns();
    st_srv_count_round(c, 0, 0, 0, now); // clears the buckets of seconds gone by
    // Throughput over the last RATE_WINDOW seconds, the current one partial.
    enum { RATE_WINDOW = ST_SRV_RATE_BUCKETS - 2 };
    uint64_t sum = 0, sec = now / 1000000000u;
    for (uint64_t k = 0; k < RATE_WINDOW; k++)
        sum += c->rate[(sec % ST_SRV_RATE_BUCKETS + ST_SRV_RATE_BUCKETS - k) % ST_SRV_RATE_BUCKETS];
    double up = (now - c->started_ns) * 1e-9;
    double span = (RATE_WINDOW - 1) + (now % 1000000000u) * 1e-9;
    if (up < span) span = up;
    subternary__stats__init(st);
    st->sessions = c->active.n;
    st->queued = c->queued.n;
    st->requests_done = c->c.done;
    st->tokens_generated = c->c.tokens;
    st->tokens_per_second = span > 0 ? sum / span : 0;
    st->acceptance = c->c.drafted ? (double)c->c.accepted / c->c.drafted : 0;
    st->worker_restarts = c->view.restarts;
    st->errors = c->c.errors;
    st->slots = c->lim.slots;
    st->sessions_peak = c->c.sessions_peak;
    st->queue_limit = c->lim.queue;
    st->requests_cancelled = c->c.cancelled;
    st->requests_disconnected = c->c.disconnected;
    st->requests_rejected = c->c.rejected;
    st->requests_failed = c->c.failed;
    st->drafted = c->c.drafted;
    st->accepted = c->c.accepted;
    st->uptime_seconds = up;
    st->queued_peak = c->c.queued_peak;
    st->steps = c->c.steps;
    st->step_sessions = c->c.step_sessions;
    uint32_t n = c->view.n_nodes < ST_SRV_MAX_NODES ? c->view.n_nodes : ST_SRV_MAX_NODES;
    for (uint32_t i = 0; i < n; i++) {
        subternary__node_stats__init(&nodes[i]);
        nodes[i].node = i;
        nodes[i].workers = c->view.node[i].workers;
        nodes[i].workers_ready = c->view.node[i].workers_ready;
        nodes[i].sessions = c->view.node[i].sessions;
        nodes[i].slots = c->view.node[i].slots;
        nodes[i].worker_restarts = c->view.node[i].restarts;
        node_ptrs[i] = &nodes[i];
    }
    st->nodes = node_ptrs;
    st->n_nodes = n;
}

void st_srv_fill_health(const struct st_srv_core *c, Subternary__Health *h)
{
    subternary__health__init(h);
    h->ok = c->view.workers > 0 && c->view.workers_ready == c->view.workers;
    h->workers_ready = c->view.workers_ready;
    h->workers_total = c->view.workers;
    h->target = (char *)(c->view.target ? c->view.target : "");
    h->draft = (char *)(c->view.draft ? c->view.draft : "");
    h->sessions = c->active.n;
    h->queued = c->queued.n;
}
