// Server statistics as Prometheus text exposition (format 0.0.4): one
// "# HELP" and one "# TYPE" line per metric family, then its samples.
// Counters end in _total; per-node figures carry a node label (and a server
// label when the figures add up several servers).
#include <stdarg.h>
#include <stdio.h>

#include "include/subternary.h"

struct out {
    char *buf;
    size_t cap, len;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->len < o->cap ? o->buf + o->len : NULL, o->len < o->cap ? o->cap - o->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP subternary_%s %s\n# TYPE subternary_%s %s\n", name, help, name, type);
}

static void gauge(struct out *o, const char *name, const char *help, double v)
{
    family(o, name, "gauge", help);
    put(o, "subternary_%s %.17g\n", name, v);
}

static void counter(struct out *o, const char *name, const char *help, uint64_t v)
{
    family(o, name, "counter", help);
    put(o, "subternary_%s %llu\n", name, (unsigned long long)v);
}

// The labels of nodes[i]: with several servers also which server it is on.
static const char *label(const struct st_client_stats *st, uint32_t i, char *buf)
{
    if (st->servers > 1) snprintf(buf, 64, "server=\"%u\",node=\"%u\"", st->node_server[i], st->nodes[i].node);
    else snprintf(buf, 64, "node=\"%u\"", st->nodes[i].node);
    return buf;
}

size_t st_client_prometheus(const struct st_client_stats *st, char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    char l[64];
    if (cap) buf[0] = 0;
    gauge(&o, "sessions", "Generation sessions running now.", st->sessions);
    gauge(&o, "sessions_peak", "Most sessions running at once since start.", st->sessions_peak);
    gauge(&o, "slots", "KV slots: the most sessions that can run at once.", st->slots);
    gauge(&o, "queued", "Requests waiting for a slot.", st->queued);
    gauge(&o, "queued_peak", "Most requests waiting at once since start.", st->queued_peak);
    gauge(&o, "queue_limit", "Requests that may wait; beyond, requests are refused as busy.", st->queue_limit);
    counter(&o, "requests_done_total", "Requests that finished with a summary.", st->requests_done);
    counter(&o, "requests_cancelled_total", "Requests cancelled by their client.", st->requests_cancelled);
    counter(&o, "requests_disconnected_total", "Requests dropped because their client went away.",
            st->requests_disconnected);
    counter(&o, "requests_rejected_total", "Requests refused because the queue was full.", st->requests_rejected);
    counter(&o, "requests_failed_total", "Requests ended by an internal error or their deadline.",
            st->requests_failed);
    counter(&o, "errors_total", "Error replies of any kind (including malformed messages).", st->errors);
    counter(&o, "tokens_generated_total", "Tokens committed and streamed.", st->tokens_generated);
    gauge(&o, "tokens_per_second", "Tokens committed per second over the last ten seconds.", st->tokens_per_second);
    counter(&o, "draft_tokens_total", "Draft tokens proposed.", st->drafted);
    counter(&o, "accepted_tokens_total", "Draft tokens accepted by the target.", st->accepted);
    gauge(&o, "acceptance", "Accepted over proposed draft tokens since start.", st->acceptance);
    counter(&o, "steps_total", "Worker-set steps run for requests.", st->steps);
    counter(&o, "step_sessions_total", "Sessions carried by those steps, summed (over steps_total: batching).",
            st->step_sessions);
    counter(&o, "worker_restarts_total", "Worker processes replaced after a crash or a hang.", st->worker_restarts);
    gauge(&o, "uptime_seconds", "Seconds since the server started.", st->uptime_seconds);
    if (st->servers > 1) {
        gauge(&o, "servers", "Servers behind this client.", st->servers);
        gauge(&o, "servers_answered", "Servers whose figures are summed here.", st->servers_answered);
    }
    family(&o, "node_sessions", "gauge", "Sessions placed on a node now.");
    for (uint32_t i = 0; i < st->n_nodes; i++)
        put(&o, "subternary_node_sessions{%s} %u\n", label(st, i, l), st->nodes[i].sessions);
    family(&o, "node_slots", "gauge", "KV slots of a node.");
    for (uint32_t i = 0; i < st->n_nodes; i++)
        put(&o, "subternary_node_slots{%s} %u\n", label(st, i, l), st->nodes[i].slots);
    family(&o, "node_workers", "gauge", "Worker processes of a node.");
    for (uint32_t i = 0; i < st->n_nodes; i++)
        put(&o, "subternary_node_workers{%s} %u\n", label(st, i, l), st->nodes[i].workers);
    family(&o, "node_workers_ready", "gauge", "Worker processes of a node that are ready.");
    for (uint32_t i = 0; i < st->n_nodes; i++)
        put(&o, "subternary_node_workers_ready{%s} %u\n", label(st, i, l), st->nodes[i].workers_ready);
    family(&o, "node_worker_restarts_total", "counter", "Worker processes of a node replaced.");
    for (uint32_t i = 0; i < st->n_nodes; i++)
        put(&o, "subternary_node_worker_restarts_total{%s} %llu\n", label(st, i, l),
            (unsigned long long)st->nodes[i].worker_restarts);
    return o.len;
}
