// Receiving: events from every server's DEALER (and, with several servers,
// their disconnects from the monitors), the list of events kept for
// st_client_next, and waiting for one reply per server to a stats or health
// request.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "client/client.h"
#include "proto/wire.h"

enum { RECV_FAIL = -1, RECV_TIMEOUT, RECV_EVENT, RECV_CHANGED, RECV_WRITABLE };

int st_client_push(struct st_client *c, struct st_client_event *ev)
{
    struct st_client_pending *p = malloc(sizeof *p);
    if (!p) {
        st_client_event_clear(ev);
        return st_client_fail(c, "out of memory");
    }
    p->ev = *ev;
    p->next = NULL;
    if (c->tail) c->tail->next = p;
    else c->head = p;
    c->tail = p;
    return 0;
}

static bool pop(struct st_client *c, struct st_client_event *ev)
{
    struct st_client_pending *p = c->head;
    if (!p) return false;
    c->head = p->next;
    if (!c->head) c->tail = NULL;
    *ev = p->ev;
    free(p);
    return true;
}

// One message from server s, without waiting.  Returns 1 with *ev for the
// caller, 0 if there is nothing for the caller in it (not a valid server
// message, or one of a request that moved), -1 if nothing was there.
static int take(struct st_client *c, int s, struct st_client_event *ev)
{
    struct st_wire_msg m;
    if (st_wire_recv(c->servers[s].sock, false, &m, ZMQ_DONTWAIT)) return -1;
    Subternary__Envelope *env =
        m.shape_ok && m.version_ok ? subternary__envelope__unpack(NULL, m.payload_len, m.payload) : NULL;
    st_wire_msg_clear(&m);
    if (!env) return 0;
    bool ok = st_client_event_of(env, ev);
    subternary__envelope__free_unpacked(env, NULL);
    if (!ok) return 0;
    ev->server = s;
    if (ev->type == ST_CLIENT_EV_STATS)
        for (uint32_t i = 0; i < ev->stats.n_nodes; i++) ev->stats.node_server[i] = (uint32_t)s;
    if (c->n > 1 && !st_client_route_event(c, s, ev)) {
        st_client_event_clear(ev);
        return 0;
    }
    return 1;
}

// A message of server s's monitor.  A handshake makes the server usable
// again; on a disconnect, first what the server sent before it went (it may
// hold final events), then its requests move or fail.  Returns 1 if the
// server's state changed, 0 if not, -1 on failure.
static int on_monitor(struct st_client *c, int s)
{
    struct st_client_server *sv = &c->servers[s];
    uint16_t event = 0;
    for (int more = 1, first = 1; more; first = 0) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, sv->monitor, first ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&f);
            return 0;
        }
        if (first && zmq_msg_size(&f) >= sizeof event) memcpy(&event, zmq_msg_data(&f), sizeof event);
        more = zmq_msg_more(&f);
        zmq_msg_close(&f);
    }
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        sv->down = false;
        return 1;
    }
    if (event != ZMQ_EVENT_DISCONNECTED) return 0;
    sv->down = true;
    sv->losses++;
    // ZMQ_EVENTS makes the socket take its pending commands unthrottled, so
    // the messages the server sent before the end are readable now.
    int events;
    size_t size = sizeof events;
    zmq_getsockopt(sv->sock, ZMQ_EVENTS, &events, &size);
    struct st_client_event ev;
    for (int got; (got = take(c, s, &ev)) >= 0;)
        if (got == 1 && st_client_push(c, &ev)) return -1;
    return st_client_route_lost(c, s) ? -1 : 1;
}

// Waits up to timeout_ms for the next event from the sockets (not the
// pending list); also returns when a server connected or disconnected (which
// may have queued events: RECV_CHANGED) or a server in want_out (bit per
// server) can take a message.
static int recv_event(struct st_client *c, struct st_client_event *ev, int timeout_ms, uint32_t want_out)
{
    int64_t deadline = timeout_ms < 0 ? -1 : st_client_now_ms() + timeout_ms;
    int n = c->n, items = n > 1 ? 2 * n : n;
    for (;;) {
        zmq_pollitem_t it[2 * ST_CLIENT_MAX_SERVERS];
        for (int s = 0; s < n; s++) {
            it[s] = (zmq_pollitem_t){c->servers[s].sock, 0, ZMQ_POLLIN | (want_out >> s & 1 ? ZMQ_POLLOUT : 0), 0};
            it[n + s] = (zmq_pollitem_t){c->servers[s].monitor, 0, ZMQ_POLLIN, 0};
        }
        int64_t left = deadline < 0 ? -1 : deadline - st_client_now_ms();
        int rc = zmq_poll(it, items, left < 0 && deadline >= 0 ? 0 : (long)left);
        if (rc < 0) {
            if (errno == EINTR) return st_client_fail(c, "interrupted");
            return st_client_fail(c, "zmq_poll: %s", zmq_strerror(errno));
        }
        if (rc == 0) return RECV_TIMEOUT;
        bool changed = false;
        for (int s = 0; items > n && s < n; s++) {
            int got = it[n + s].revents & ZMQ_POLLIN ? on_monitor(c, s) : 0;
            if (got < 0) return RECV_FAIL;
            changed |= got;
        }
        if (changed) return RECV_CHANGED;
        for (int k = 0; k < n; k++) { // servers in turn, so a busy one cannot starve the others
            int s = (c->rx + k) % n;
            if (!(it[s].revents & ZMQ_POLLIN) || take(c, s, ev) != 1) continue;
            c->rx = (s + 1) % n;
            return RECV_EVENT;
        }
        for (int s = 0; s < n; s++)
            if (it[s].revents & ZMQ_POLLOUT) return RECV_WRITABLE;
    }
}

int st_client_next(struct st_client *c, struct st_client_event *ev, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : st_client_now_ms() + timeout_ms;
    memset(ev, 0, sizeof *ev); // empty unless filled: clearing it is always safe
    for (;;) {
        if (pop(c, ev)) return 1;
        int64_t left = deadline < 0 ? -1 : deadline - st_client_now_ms();
        int rc = recv_event(c, ev, left < 0 && deadline >= 0 ? 0 : (int)left, 0);
        if (rc != RECV_CHANGED) return rc;
    }
}

int st_client_wait_writable(struct st_client *c, int timeout_ms)
{
    int64_t deadline = st_client_now_ms() + timeout_ms;
    for (;;) {
        uint32_t want_out = 0;
        for (int s = 0; s < c->n; s++) want_out |= (uint32_t)!c->servers[s].down << s;
        int64_t left = deadline - st_client_now_ms();
        if (left <= 0) return 0;
        struct st_client_event ev;
        int rc = recv_event(c, &ev, (int)left, want_out);
        if (rc == RECV_WRITABLE || rc == RECV_FAIL) return rc == RECV_WRITABLE ? 1 : -1;
        if (rc == RECV_EVENT && st_client_push(c, &ev)) return -1;
    }
}

int st_client_gather(struct st_client *c, const uint8_t *msg, size_t len, enum st_client_event_type type,
                     struct st_client_event *evs, bool *got, int timeout_ms)
{
    int64_t start = st_client_now_ms(), deadline = timeout_ms < 0 ? -1 : start + timeout_ms;
    int64_t connect_by = start + c->connect_wait_ms;
    if (deadline >= 0 && connect_by > deadline) connect_by = deadline;
    bool sent[ST_CLIENT_MAX_SERVERS] = {0};
    uint32_t losses[ST_CLIENT_MAX_SERVERS];
    int answered = 0;
    memset(got, 0, (size_t)c->n * sizeof *got);
    for (bool first = true;; first = false) {
        int64_t now = st_client_now_ms();
        uint32_t want_out = 0;
        bool open = false, connecting = false;
        for (int s = 0; s < c->n; s++) {
            bool waiting = false; // for a connection
            if (!sent[s] && (first || now <= connect_by)) {
                if (!c->servers[s].down && st_client_send(c, s, msg, len) == 0) {
                    sent[s] = true;
                    losses[s] = c->servers[s].losses;
                } else if (c->n == 1) {
                    return -1; // one server: a send fails only for a real error
                } else {
                    waiting = true;
                    want_out |= (uint32_t)!c->servers[s].down << s; // a down one: its handshake wakes us
                }
            }
            // Still waited for: not connected yet, or asked and neither answered nor lost.
            open |= waiting || (sent[s] && !got[s] && c->servers[s].losses == losses[s]);
            connecting |= waiting;
        }
        if (!open || (deadline >= 0 && now >= deadline)) break;
        int64_t until = connecting && (deadline < 0 || connect_by < deadline) ? connect_by : deadline;
        struct st_client_event ev;
        int rc = recv_event(c, &ev, until < 0 ? -1 : (int)(until > now ? until - now : 0), want_out);
        if (rc == RECV_FAIL) return -1; // (stats and health events own no memory)
        if (rc != RECV_EVENT) continue;
        int s = ev.server;
        if (ev.type == type && s >= 0 && s < c->n && sent[s] && !got[s]) {
            evs[s] = ev;
            got[s] = true;
            answered++;
        } else if (st_client_push(c, &ev)) {
            return -1;
        }
    }
    return answered > 0;
}
