// Opening and closing a client: one DEALER per endpoint of the list, all
// with one routing id; with several servers each also gets ZMQ_IMMEDIATE (a
// send to a server without a live connection fails instead of queueing) and
// a monitor that reports its disconnects and handshakes.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <zmq.h>

#include "client/client.h"

int st_client_fail(struct st_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *st_client_error(const struct st_client *c) { return c ? c->err : "out of memory"; }

int64_t st_client_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool z85_key(const char *k) { return k && strlen(k) == 40; }

// Splits the comma-separated list into c->servers[].endpoint.
static int split_endpoints(struct st_client *c, const char *list)
{
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t')) p++, len--;
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
        if (!len) return st_client_fail(c, "endpoint list '%s': an empty entry", list);
        if (c->n == ST_CLIENT_MAX_SERVERS)
            return st_client_fail(c, "endpoint list '%s': more than %d servers", list, ST_CLIENT_MAX_SERVERS);
        char *ep = strndup(p, len);
        if (!ep) return st_client_fail(c, "out of memory");
        for (int i = 0; i < c->n; i++)
            if (!strcmp(c->servers[i].endpoint, ep)) {
                st_client_fail(c, "endpoint list '%s': %s twice", list, ep);
                free(ep);
                return -1;
            }
        c->servers[c->n++].endpoint = ep;
        if (!end) return 0;
        p = end + 1;
    }
}

// A routing id of our own (printable, never starting with a zero byte,
// which ZeroMQ reserves) lets a server recognise our retries even over a new
// connection.
static void make_identity(const struct st_client_options *o, const void *salt, char *ident, size_t cap)
{
    if (o->identity) {
        snprintf(ident, cap, "%s", o->identity);
        return;
    }
    uint8_t rnd[12];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t t = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)salt << 16);
        memcpy(rnd, &t, 8);
        memset(rnd + 8, 0x5a, 4);
    }
    int n = snprintf(ident, cap, "c-");
    for (size_t i = 0; i < sizeof rnd; i++) n += snprintf(ident + n, cap - (size_t)n, "%02x", rnd[i]);
}

static int set_curve(struct st_client *c, void *sock, const struct st_client_options *o)
{
    char pub[41], sec[41];
    if (!z85_key(o->server_key)) return st_client_fail(c, "server key must be 40 Z85 characters");
    if (o->public_key || o->secret_key) {
        if (!z85_key(o->public_key) || !z85_key(o->secret_key))
            return st_client_fail(c, "client public and secret keys must both be 40 Z85 characters");
        memcpy(pub, o->public_key, 41);
        memcpy(sec, o->secret_key, 41);
    } else if (zmq_curve_keypair(pub, sec)) {
        return st_client_fail(c, "zmq_curve_keypair: %s", zmq_strerror(errno));
    }
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, o->server_key, 41) ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 41) || zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 41))
        return st_client_fail(c, "CURVE keys: %s", zmq_strerror(errno));
    return 0;
}

// Server s's DEALER, and with several servers its disconnect monitor.
static int open_server(struct st_client *c, int s, const struct st_client_options *o, const char *ident)
{
    struct st_client_server *sv = &c->servers[s];
    sv->sock = zmq_socket(c->zctx, ZMQ_DEALER);
    if (!sv->sock) return st_client_fail(c, "zmq_socket(DEALER): %s", zmq_strerror(errno));
    int linger = 200, one = 1;
    zmq_setsockopt(sv->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_setsockopt(sv->sock, ZMQ_ROUTING_ID, ident, strlen(ident)))
        return st_client_fail(c, "identity '%s': %s", ident, zmq_strerror(errno));
    if (o->server_key && set_curve(c, sv->sock, o)) return -1;
    if (c->n > 1) {
        char mon[64];
        snprintf(mon, sizeof mon, "inproc://st-client-monitor-%d", s);
        if (zmq_setsockopt(sv->sock, ZMQ_IMMEDIATE, &one, sizeof one) ||
            zmq_socket_monitor(sv->sock, mon, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED))
            return st_client_fail(c, "monitor of %s: %s", sv->endpoint, zmq_strerror(errno));
        sv->monitor = zmq_socket(c->zctx, ZMQ_PAIR);
        int zero = 0;
        if (!sv->monitor || zmq_setsockopt(sv->monitor, ZMQ_LINGER, &zero, sizeof zero) ||
            zmq_connect(sv->monitor, mon))
            return st_client_fail(c, "monitor of %s: %s", sv->endpoint, zmq_strerror(errno));
    }
    // One server: a send queues on the connection's pipe, and blocks only
    // while there is none (a refused CURVE handshake drops it until the
    // reconnect); bounded, so no call of the library hangs.
    int wait = c->connect_wait_ms;
    if (c->n == 1) zmq_setsockopt(sv->sock, ZMQ_SNDTIMEO, &wait, sizeof wait);
    if (zmq_connect(sv->sock, sv->endpoint))
        return st_client_fail(c, "zmq_connect(%s): %s", sv->endpoint, zmq_strerror(errno));
    return 0;
}

int st_client_connect(const struct st_client_options *o, struct st_client **out)
{
    struct st_client *c = calloc(1, sizeof *c);
    *out = c;
    if (!c) return -1;
    if (!o->endpoint) return st_client_fail(c, "no endpoint");
    c->connect_wait_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : ST_CLIENT_CONNECT_WAIT_MS;
    if (split_endpoints(c, o->endpoint)) return -1;
    c->zctx = zmq_ctx_new();
    if (!c->zctx) return st_client_fail(c, "zmq_ctx_new: %s", zmq_strerror(errno));
    char ident[64];
    make_identity(o, c, ident, sizeof ident);
    if (!ident[0]) return st_client_fail(c, "identity '': empty");
    for (int s = 0; s < c->n; s++)
        if (open_server(c, s, o, ident)) return -1;
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
        struct st_client_pending *p = c->head;
        c->head = p->next;
        st_client_event_clear(&p->ev);
        free(p);
    }
    st_client_routes_free(c);
    for (int s = 0; s < c->n; s++) {
        struct st_client_server *sv = &c->servers[s];
        if (sv->sock) zmq_close(sv->sock);
        if (sv->monitor) zmq_close(sv->monitor);
        free(sv->endpoint);
    }
    if (c->zctx) zmq_ctx_term(c->zctx);
    free(c);
    *cp = NULL;
}
