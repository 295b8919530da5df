// The client library's own state and the calls its files share (not public:
// callers see include/subternary.h).
#ifndef ST_CLIENT_CLIENT_H
#define ST_CLIENT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/subternary.h"
#include "proto/subternary.pb-c.h"

#define ST_CLIENT_CONNECT_WAIT_MS 2000

// A request in flight with several servers: which server holds it and what
// is needed to move it to another.
struct st_client_route {
    char id[ST_CLIENT_ID_MAX + 1];
    int server;                // endpoint index of the server that holds it
    uint32_t tried;            // bit i: server i refused it, lost it or could not take it
    bool streamed;             // a chunk came: it can no longer move
    bool cancelled;            // the caller cancelled it: it does not move either
    uint32_t dup_sends;        // resends with other content: each gets ERR_DUPLICATE alone
    uint64_t hash;             // of msg
    uint8_t *msg;              // [len] the encoded Envelope to resend (freed once streamed)
    size_t len;
    struct st_client_route *next;
};

struct st_client_server {
    void *sock;                // DEALER
    void *monitor;             // PAIR receiving sock's disconnects (several servers only)
    char *endpoint;
    uint32_t in_flight;        // routes held by this server
    uint32_t losses;           // connections lost so far
    bool down;                 // lost its connection and not connected again yet
};

struct st_client_pending {
    struct st_client_event ev;
    struct st_client_pending *next;
};

struct st_client {
    void *zctx;
    struct st_client_server servers[ST_CLIENT_MAX_SERVERS];
    int n;                     // servers
    int rr;                    // where the next round-robin turn starts
    int rx;                    // the server whose messages are read first next time
    int connect_wait_ms;
    struct st_client_route *routes; // several servers only
    char err[512];
    struct st_client_pending *head, *tail; // events for st_client_next before the sockets'
};

int st_client_fail(struct st_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int64_t st_client_now_ms(void);

// Sends an encoded Envelope to server s: with several servers without
// waiting (a server without a live connection fails at once, EAGAIN).
int st_client_send(struct st_client *c, int s, const uint8_t *msg, size_t len);
// Waits up to timeout_ms until some server can take a message (reading what
// arrives meanwhile); 1 if one can, 0 if none, -1 on failure.
int st_client_wait_writable(struct st_client *c, int timeout_ms);
// Appends an event for st_client_next (taking over its buffers).
int st_client_push(struct st_client *c, struct st_client_event *ev);

// Sends msg to every server (each as soon as it is connected) and waits up
// to timeout_ms for a reply of `type` from each that got it (evs[i], got[i]);
// returns 1 if any answered, 0 if none, -1 on failure.  Other events are
// kept for st_client_next.
int st_client_gather(struct st_client *c, const uint8_t *msg, size_t len, enum st_client_event_type type,
                     struct st_client_event *evs, bool *got, int timeout_ms);

// Converts one server message; false if it is not one a server sends.
bool st_client_event_of(const Subternary__Envelope *m, struct st_client_event *ev);

// Routes (client/routes.c), several servers only.
// Places a new request (or sends a retry of one in flight to its server).
int st_client_route_submit(struct st_client *c, const char *id, const uint8_t *msg, size_t len);
struct st_client_route *st_client_route_find(struct st_client *c, const char *id);
// Bookkeeping for an event from server s; false if the caller must not see
// it (the request moved to another server).
bool st_client_route_event(struct st_client *c, int s, struct st_client_event *ev);
// Server s lost its connection: its requests move or end with an error event.
int st_client_route_lost(struct st_client *c, int s);
void st_client_routes_free(struct st_client *c);

// The combined view of the servers that answered (got[i]) (client/combine.c).
void st_client_stats_combine(const struct st_client_event *evs, const bool *got, int n, struct st_client_stats *st);
void st_client_health_combine(const struct st_client_event *evs, const bool *got, int n,
                              struct st_client_health *h);

#endif
