// Which server holds each request in flight, when a client has several: new
// requests go to the server with the fewest of ours (ties round-robin); a
// request refused (busy, shutting down) or lost with its connection before
// any chunk of it came moves, as the same bytes, to a server that has not had
// it.  A request that streamed stays where it is: its chunks cannot be
// replayed elsewhere.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"

static uint64_t fnv64(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

struct st_client_route *st_client_route_find(struct st_client *c, const char *id)
{
    for (struct st_client_route *r = c->routes; r; r = r->next)
        if (!strcmp(r->id, id)) return r;
    return NULL;
}

static void route_remove(struct st_client *c, struct st_client_route *r)
{
    for (struct st_client_route **p = &c->routes; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    c->servers[r->server].in_flight--;
    free(r->msg);
    free(r);
}

void st_client_routes_free(struct st_client *c)
{
    while (c->routes) route_remove(c, c->routes);
}

// The server with the fewest requests in flight among those not in
// `exclude` and not down, the first in round-robin order on a tie; -1 if
// none is left.
static int pick(const struct st_client *c, uint32_t exclude)
{
    int best = -1;
    for (int k = 0; k < c->n; k++) {
        int s = (c->rr + k) % c->n;
        if (exclude >> s & 1 || c->servers[s].down) continue;
        if (best < 0 || c->servers[s].in_flight < c->servers[best].in_flight) best = s;
    }
    return best;
}

// Sends r to the next server it has not been to, leaving `from`; false if
// none takes it (r stays counted on `from`).
static bool move(struct st_client *c, struct st_client_route *r, int from)
{
    r->tried |= 1u << from;
    for (int s; (s = pick(c, r->tried)) >= 0; r->tried |= 1u << s)
        if (st_client_send(c, s, r->msg, r->len) == 0) {
            c->servers[from].in_flight--;
            c->servers[s].in_flight++;
            r->server = s;
            return true;
        }
    return false;
}

int st_client_route_submit(struct st_client *c, const char *id, const uint8_t *msg, size_t len)
{
    struct st_client_route *r = st_client_route_find(c, id);
    if (r) { // a retry, or a reuse the server will refuse: only its server knows
        if (st_client_send(c, r->server, msg, len)) return -1;
        if (fnv64(msg, len) != r->hash) r->dup_sends++;
        return 0;
    }
    if (strlen(id) > ST_CLIENT_ID_MAX)
        return st_client_fail(c, "request id of %zu bytes: at most %d", strlen(id), ST_CLIENT_ID_MAX);
    r = calloc(1, sizeof *r);
    if (!r || !(r->msg = malloc(len ? len : 1))) {
        free(r);
        return st_client_fail(c, "out of memory");
    }
    snprintf(r->id, sizeof r->id, "%s", id);
    memcpy(r->msg, msg, len);
    r->len = len;
    r->hash = fnv64(msg, len);
    // Servers without a live connection fail at once; if all do (just after
    // connect, or all down), wait a while for one to come up.
    int64_t give_up = st_client_now_ms() + c->connect_wait_ms;
    for (uint32_t skip = 0;;) {
        int s = pick(c, skip);
        if (s >= 0 && st_client_send(c, s, msg, len) == 0) {
            r->server = s;
            c->servers[s].in_flight++;
            c->rr = (s + 1) % c->n;
            r->next = c->routes;
            c->routes = r;
            return 0;
        }
        if (s >= 0) {
            skip |= 1u << s;
            continue;
        }
        int64_t left = give_up - st_client_now_ms();
        if (left <= 0 || st_client_wait_writable(c, (int)left) < 0) {
            free(r->msg);
            free(r);
            return st_client_fail(c, "request %s: none of the %d servers is connected (waited %d ms)", id, c->n,
                                  c->connect_wait_ms);
        }
        skip = 0;
    }
}

// Appends to an error message why the library gives up on the request.
static void annotate(struct st_client_event *ev, const char *why)
{
    size_t n = strlen(ev->message);
    snprintf(ev->message + n, sizeof ev->message - n, "%s", why);
}

bool st_client_route_event(struct st_client *c, int s, struct st_client_event *ev)
{
    if (ev->type != ST_CLIENT_EV_CHUNK && ev->type != ST_CLIENT_EV_DONE && ev->type != ST_CLIENT_EV_ERROR)
        return true;
    struct st_client_route *r = st_client_route_find(c, ev->request_id);
    if (!r) return true;              // not in flight: shown as one server's would be
    if (r->server != s) return false; // from a server the request left
    if (ev->type == ST_CLIENT_EV_CHUNK) {
        r->streamed = true;
        free(r->msg);
        r->msg = NULL;
        return true;
    }
    if (ev->type == ST_CLIENT_EV_ERROR) {
        if (ev->code == ST_CLIENT_ERR_DUPLICATE && r->dup_sends) { // the original runs on
            r->dup_sends--;
            return true;
        }
        bool refused = ev->code == ST_CLIENT_ERR_BUSY || ev->code == ST_CLIENT_ERR_SHUTTING_DOWN;
        if (refused && !r->streamed && !r->cancelled) {
            if (move(c, r, s)) return false;
            annotate(ev, ev->code == ST_CLIENT_ERR_BUSY ? " (every server refused the request)"
                                                        : " (no other server could take the request)");
        }
    }
    route_remove(c, r);
    return true;
}

int st_client_route_lost(struct st_client *c, int s)
{
    for (struct st_client_route *r = c->routes, *nx; r; r = nx) {
        nx = r->next;
        if (r->server != s || (!r->streamed && !r->cancelled && move(c, r, s))) continue;
        struct st_client_event ev;
        memset(&ev, 0, sizeof ev);
        ev.type = ST_CLIENT_EV_ERROR;
        // A cancelled request stopped, which is what its caller wanted.
        ev.code = r->cancelled ? ST_CLIENT_ERR_CANCELLED : ST_CLIENT_ERR_SHUTTING_DOWN;
        ev.server = s;
        snprintf(ev.request_id, sizeof ev.request_id, "%s", r->id);
        snprintf(ev.message, sizeof ev.message, "lost the connection to %s %s", c->servers[s].endpoint,
                 r->cancelled   ? "before it confirmed the cancel"
                 : r->streamed ? "while the request streamed"
                               : "and no other server could take the request");
        route_remove(c, r);
        if (st_client_push(c, &ev)) return -1;
    }
    return 0;
}
