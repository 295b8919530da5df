// SubTernary client library: talks to `subternary serve` over ZeroMQ (a
// DEALER socket; tcp:// with optional CURVE, or ipc://).  Submit generate
// requests, receive their streamed tokens and final summaries as events,
// cancel, ask for stats and health.  Single-threaded: one st_client per
// thread.  Functions return 0 on success and -1 on failure, with the reason in
// st_client_error().
//
// Several servers behind one client: give `endpoint` as a comma-separated
// list (at most ST_CLIENT_MAX_SERVERS).  The client keeps one DEALER per
// server, all with the same routing id, and places each new request on the
// server with the fewest of its requests in flight (ties round-robin),
// skipping servers it has no live connection to (ZMQ_IMMEDIATE).  It
// remembers which server holds a request until its Done or Error arrives, so
// a cancel or a retry of the same id reaches that server; a retry after the
// final event may run again on another server.  A request that a server
// refuses with ERR_BUSY or ERR_SHUTTING_DOWN before any chunk of it came (or
// whose server's connection drops before then) is sent again, the same bytes,
// to the next server that has not had it; the caller sees the refusal only
// when every server refused ("every server refused" in its message).  A
// request whose server's connection drops after it streamed ends with an
// ERR_SHUTTING_DOWN event made by the library ("lost the connection to ..."),
// or ERR_CANCELLED if the caller had cancelled it.  With CURVE every server
// must use the same key pair (server_key).  One endpoint behaves as before:
// one socket, no resubmission, sends queue until the connection is up.
#ifndef SUBTERNARY_H
#define SUBTERNARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ST_CLIENT_ID_MAX 128
#define ST_CLIENT_MAX_NODES 16
#define ST_CLIENT_MAX_STOPS 8
#define ST_CLIENT_MAX_SERVERS 16

struct st_client_options {
    const char *endpoint;      // e.g. "tcp://127.0.0.1:5555", "ipc:///run/subternary/sock",
                               // or several: "tcp://10.0.0.1:5555,tcp://10.0.0.2:5555"
    const char *server_key;    // Z85 server public key: turns CURVE on (NULL: off)
    const char *public_key;    // Z85 client key pair for CURVE (NULL: a fresh one,
    const char *secret_key;    //   which a server with an allow-list refuses)
    const char *identity;      // routing id (NULL: random).  The server knows a
                               // retry by (identity, request id).
    int connect_timeout_ms;    // several servers: how long a submit or a stats or health
                               // request waits for a connection to some server; one
                               // server: how long a send waits while there is no
                               // connection to queue on (0: 2000)
};

struct st_client_request {
    const char *request_id;    // 1..128 bytes of printable UTF-8, unique per client
    const char *prompt_text;   // or:
    const uint32_t *prompt_ids;
    size_t n_prompt_ids;
    bool add_bos;              // for prompt_text
    uint32_t max_tokens;       // 0: the server's default
    float temperature;         // 0: greedy
    uint32_t top_k;
    float top_p, min_p;
    uint64_t seed;             // 0: a fresh one per request; else the same request samples the same
                               // tokens again (with a draft: at a fixed k and no_governor, since
                               // adaptive K and the governor choose rounds by measured time)
    bool no_speculation;       // target alone
    uint32_t k;                // draft length; 0: adaptive
    bool no_governor;
    float governor_threshold;  // 0: the server's default
    float draft_p_min;         // stop a round's drafting below this confidence, [0, 1) (0: never)
    uint32_t draft_window;     // the draft attends the first 512 positions and the last this many
                               // (0: every position)
    const char *const *stop;   // [n_stop] stop strings
    size_t n_stop;
    uint64_t deadline_ms;      // 0: none
    bool ignore_eos;
};

enum st_client_event_type {
    ST_CLIENT_EV_NONE = 0,
    ST_CLIENT_EV_CHUNK,
    ST_CLIENT_EV_DONE,
    ST_CLIENT_EV_ERROR,
    ST_CLIENT_EV_STATS,
    ST_CLIENT_EV_HEALTH,
};

// Values of the protocol's FinishReason and ErrorCode.
enum st_client_finish {
    ST_CLIENT_FINISH_NONE = 0, ST_CLIENT_FINISH_LENGTH, ST_CLIENT_FINISH_EOS, ST_CLIENT_FINISH_STOP,
    ST_CLIENT_FINISH_CONTEXT,
};
enum st_client_code {
    ST_CLIENT_ERR_NONE = 0, ST_CLIENT_ERR_MALFORMED, ST_CLIENT_ERR_UNSUPPORTED_VERSION, ST_CLIENT_ERR_TOO_LARGE,
    ST_CLIENT_ERR_INVALID_FIELD, ST_CLIENT_ERR_PROMPT_TOO_LONG, ST_CLIENT_ERR_BUSY, ST_CLIENT_ERR_CANCELLED,
    ST_CLIENT_ERR_DEADLINE_EXCEEDED, ST_CLIENT_ERR_INTERNAL, ST_CLIENT_ERR_DUPLICATE, ST_CLIENT_ERR_SHUTTING_DOWN,
    ST_CLIENT_ERR_UNKNOWN_REQUEST,
};

struct st_client_done {
    int reason;                // enum st_client_finish
    uint32_t prompt_tokens, tokens, rounds, drafted, accepted, worker_restarts;
    double acceptance, mean_k;
    double prompt_seconds, seconds, draft_seconds, verify_seconds, queue_seconds, wall_seconds;
    uint64_t seed;             // the seed it sampled with: the request's, or the fresh one the server drew
};

struct st_client_node_stats {
    uint32_t node, workers, workers_ready, sessions, slots;
    uint64_t worker_restarts;
};

struct st_client_stats {
    uint32_t sessions, sessions_peak, slots, queued, queued_peak, queue_limit;
    uint64_t requests_done, requests_cancelled, requests_disconnected, requests_rejected, requests_failed, errors;
    uint64_t tokens_generated, drafted, accepted, worker_restarts;
    uint64_t steps, step_sessions; // worker-set steps, and the sessions they carried summed (batching)
    double tokens_per_second, acceptance, uptime_seconds;
    struct st_client_node_stats nodes[ST_CLIENT_MAX_NODES];
    uint32_t n_nodes;
    // Several servers (st_client_stats): the sum over the servers that
    // answered (peaks and limits summed too, uptime the longest, acceptance
    // from the summed drafted and accepted), nodes of all of them in endpoint
    // order up to ST_CLIENT_MAX_NODES.  One server: its figures as they are.
    uint32_t servers, servers_answered;
    uint32_t node_server[ST_CLIENT_MAX_NODES]; // the server (endpoint index) of nodes[i]
};

struct st_client_health {
    bool ok;
    uint32_t workers_ready, workers_total, sessions, queued;
    char target[256], draft[256];
    // Several servers (st_client_health): ok only if every server answered
    // ok; counts summed over those that answered; target and draft of the
    // first that answered.
    uint32_t servers, servers_answered;
};

struct st_client_event {
    enum st_client_event_type type;
    char request_id[ST_CLIENT_ID_MAX + 1];
    // CHUNK: ids[offset .. offset + n_ids) of the request's output, and their text.
    uint32_t *ids;
    size_t n_ids;
    uint32_t offset;
    char *text;                // text_len bytes (may end inside a UTF-8 character)
    size_t text_len;
    struct st_client_done done;     // DONE
    int code;                  // ERROR: enum st_client_code
    char message[512];
    struct st_client_stats stats;   // STATS
    struct st_client_health health; // HEALTH
    int server;                // the endpoint index of the server that sent it;
                               // -1: made by the library (see st_client_cancel)
};

struct st_client;

int st_client_connect(const struct st_client_options *o, struct st_client **out);
// The reason of the last failure (also for a failed connect: then *out holds
// a client only good for this call and st_client_close).
const char *st_client_error(const struct st_client *c);
void st_client_close(struct st_client **c);

int st_client_submit(struct st_client *c, const struct st_client_request *r);
// Sends the cancel to the server that holds the request.  With several
// servers, an id not in flight (unknown, or its final event came already)
// gets an ERR_UNKNOWN_REQUEST event made by the library (server -1), as one
// server would answer; -1 if the holding server cannot be reached.
int st_client_cancel(struct st_client *c, const char *request_id);
// Ask every server; st_client_next then returns one STATS or HEALTH event
// per server that answers, each with its `server` index and that server's
// own figures (servers = servers_answered = 1).
int st_client_request_stats(struct st_client *c);
int st_client_request_health(struct st_client *c);

// Waits up to timeout_ms (-1: forever) for the next event.  Returns 1 with
// *ev filled (release it with st_client_event_clear), 0 on timeout, -1 on
// failure (*ev then empty: clearing it does nothing).  Messages that are not
// valid server messages are skipped.
int st_client_next(struct st_client *c, struct st_client_event *ev, int timeout_ms);
void st_client_event_clear(struct st_client_event *ev);

// Request and wait for the reply; events of requests that arrive meanwhile
// are kept for st_client_next.  Returns 1, 0 on timeout, -1 on failure.
// Several servers: waits for each server until it answered, its connection
// dropped, or the timeout (a server never connected: the connect timeout at
// most); returns 1 with the combined view if at least one answered.
int st_client_stats(struct st_client *c, struct st_client_stats *st, int timeout_ms);
int st_client_health(struct st_client *c, struct st_client_health *h, int timeout_ms);

// Prometheus text exposition (format 0.0.4) of stats into buf (NUL-terminated
// when cap > 0); returns the length the whole text needs.
size_t st_client_prometheus(const struct st_client_stats *st, char *buf, size_t cap);

const char *st_client_code_name(int code);     // "busy", "cancelled", ...
const char *st_client_finish_name(int reason); // "length", "eos", ...

#ifdef __cplusplus
}
#endif

#endif
