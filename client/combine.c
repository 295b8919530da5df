// One view of several servers: the stats and health replies of those that
// answered, added up.  With one server its reply is passed on unchanged, so
// a single endpoint reads exactly what its server says.
#include <string.h>

#include "client/client.h"

static void add_stats(struct st_client_stats *t, const struct st_client_stats *a)
{
    t->sessions += a->sessions;
    t->sessions_peak += a->sessions_peak;
    t->slots += a->slots;
    t->queued += a->queued;
    t->queued_peak += a->queued_peak;
    t->queue_limit += a->queue_limit;
    t->requests_done += a->requests_done;
    t->requests_cancelled += a->requests_cancelled;
    t->requests_disconnected += a->requests_disconnected;
    t->requests_rejected += a->requests_rejected;
    t->requests_failed += a->requests_failed;
    t->errors += a->errors;
    t->tokens_generated += a->tokens_generated;
    t->drafted += a->drafted;
    t->accepted += a->accepted;
    t->steps += a->steps;
    t->step_sessions += a->step_sessions;
    t->worker_restarts += a->worker_restarts;
    t->tokens_per_second += a->tokens_per_second;
    if (a->uptime_seconds > t->uptime_seconds) t->uptime_seconds = a->uptime_seconds;
    for (uint32_t i = 0; i < a->n_nodes && t->n_nodes < ST_CLIENT_MAX_NODES; i++) {
        t->node_server[t->n_nodes] = a->node_server[i];
        t->nodes[t->n_nodes++] = a->nodes[i];
    }
}

void st_client_stats_combine(const struct st_client_event *evs, const bool *got, int n, struct st_client_stats *st)
{
    memset(st, 0, sizeof *st);
    int answered = 0, one = -1;
    for (int s = 0; s < n; s++)
        if (got[s]) {
            answered++;
            one = s;
            add_stats(st, &evs[s].stats);
        }
    if (answered == 1) *st = evs[one].stats; // its own acceptance, to the last bit
    else st->acceptance = st->drafted ? (double)st->accepted / (double)st->drafted : 0;
    st->servers = (uint32_t)n;
    st->servers_answered = (uint32_t)answered;
}

void st_client_health_combine(const struct st_client_event *evs, const bool *got, int n, struct st_client_health *h)
{
    memset(h, 0, sizeof *h);
    int answered = 0;
    bool ok = true;
    for (int s = 0; s < n; s++) {
        if (!got[s]) continue;
        const struct st_client_health *a = &evs[s].health;
        if (!answered) { // target and draft of the first
            *h = *a;
        } else {
            h->workers_ready += a->workers_ready;
            h->workers_total += a->workers_total;
            h->sessions += a->sessions;
            h->queued += a->queued;
        }
        ok &= a->ok;
        answered++;
    }
    h->ok = ok && answered == n;
    h->servers = (uint32_t)n;
    h->servers_answered = (uint32_t)answered;
}
