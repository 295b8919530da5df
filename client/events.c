// Server messages as client events: decoded protobuf-c Envelopes copied
// into the plain structs of include/subternary.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"

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
    st->steps = m->steps;
    st->step_sessions = m->step_sessions;
    st->worker_restarts = m->worker_restarts;
    st->tokens_per_second = m->tokens_per_second;
    st->acceptance = m->acceptance;
    st->uptime_seconds = m->uptime_seconds;
    st->servers = st->servers_answered = 1;
    for (size_t i = 0; i < m->n_nodes && st->n_nodes < ST_CLIENT_MAX_NODES; i++) {
        const Subternary__NodeStats *n = m->nodes[i];
        st->nodes[st->n_nodes++] = (struct st_client_node_stats){n->node, n->workers, n->workers_ready, n->sessions,
                                                                 n->slots, n->worker_restarts};
    }
}

bool st_client_event_of(const Subternary__Envelope *m, struct st_client_event *ev)
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
            .queue_seconds = d->queue_seconds, .wall_seconds = d->wall_seconds, .seed = d->seed};
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
        ev->health.servers = ev->health.servers_answered = 1;
        return true;
    }
    default: return false;
    }
}
