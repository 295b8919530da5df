// The server's request logic without an engine or a socket: decoding and
// validation of client messages (pure functions), and the dispatcher and
// scheduler state (the queue, the active requests in round-robin order, the
// finished results kept for retries, the counters behind Stats).  Replies go
// through a send callback and sessions are ended through a release callback,
// so the fuzz target and the unit tests drive exactly the code the server
// runs, with no engine and no ZeroMQ.
#ifndef ST_COORDINATOR_SERVER_CORE_H
#define ST_COORDINATOR_SERVER_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/session.h"
#include "proto/subternary.pb-c.h"
#include "proto/wire.h"

#define ST_SRV_ID_MAX 128          // request id bytes
#define ST_SRV_STOP_MAX 256        // bytes of one stop string
#define ST_SRV_MAX_NODES 16
#define ST_SRV_RATE_BUCKETS 12     // one-second buckets of the tokens/s window

struct st_tokenizer;

struct st_srv_limits {
    uint32_t n_vocab, n_ctx, k_max;
    uint32_t slots;                // concurrent sessions (all nodes)
    uint32_t queue;                // waiting requests beyond the slots
    uint32_t max_tokens_default;   // for max_tokens = 0
    uint32_t max_prompt_bytes;     // longest prompt_text: longer is ERR_TOO_LARGE
    uint32_t finished_cache;       // finished results kept for retries
    uint64_t max_deadline_ms;      // longest deadline accepted
    bool has_draft;
    const struct st_tokenizer *tok; // NULL: prompts as token ids only
};

// One received message as frames: [identity] version payload.  n counts every
// frame received (more than three is malformed; only three are kept).
struct st_srv_frames {
    const uint8_t *f[3];
    size_t len[3];
    int n;
};

enum st_srv_state { ST_SRV_QUEUED = 1, ST_SRV_ACTIVE, ST_SRV_FINISHED };

struct st_srv_req {
    struct st_srv_req *prev, *next;   // in the list of its state
    enum st_srv_state state;
    uint8_t ident[ST_WIRE_MAX_IDENTITY];
    size_t ident_len;
    char id[ST_SRV_ID_MAX + 1];
    uint64_t hash;                    // of the GenerateRequest bytes (a retry must match)
    int fd;                           // connection it came from (disconnect detection), -1 unknown
    struct st_gen_params gp;          // gp.stop[] point into stops[]
    char *stops[ST_SESSION_MAX_STOPS];
    int32_t *prompt;                  // [n_prompt]
    uint32_t n_prompt;
    uint64_t received_ns, deadline_ns, started_ns; // deadline 0: none
    void *session;                    // the server's session while ACTIVE
    bool stepping;                    // inside an engine step right now
    bool solo;                        // runs alone (a batched step it was in failed) until it has stepped
    bool ended;                       // cancelled or dropped during its step
    bool drop;                        // ended without a result to keep (peer gone)
    uint32_t *out;                    // [n_out] ids streamed so far
    uint32_t n_out, out_cap;
    // FINISHED: how it ended, replayed to a retry.
    Subternary__ErrorCode err;        // ERR_NONE: done below
    char err_msg[256];
    Subternary__Done done;            // done.request_id points to id
};

struct st_srv_list {
    struct st_srv_req *head, *tail;
    uint32_t n;
};

// Engine figures for Stats and Health, refreshed by the server.
struct st_srv_view {
    uint32_t workers, workers_ready;
    uint64_t restarts;
    uint32_t n_nodes;
    struct {
        uint32_t workers, workers_ready, sessions, slots;
        uint64_t restarts;
    } node[ST_SRV_MAX_NODES];
    const char *target, *draft;
};

struct st_srv_counters {
    uint64_t done, cancelled, disconnected, rejected, failed, errors;
    uint64_t tokens, drafted, accepted;
    uint64_t steps, step_sessions; // worker-set steps, and the sessions in them summed
    uint32_t sessions_peak;
    uint32_t queued_peak;   // most requests waiting beyond the slots at once
};

// Sends one reply to a peer; returns 0, or -1 with errno (EHOSTUNREACH: the
// peer is gone; EAGAIN: it does not read).
typedef int (*st_srv_send_fn)(void *ctx, const uint8_t *ident, size_t ident_len, const Subternary__Envelope *env);
// Ends the session of an ACTIVE request (r->session); never called while
// r->stepping.
typedef void (*st_srv_release_fn)(void *ctx, struct st_srv_req *r);

struct st_srv_core {
    struct st_srv_limits lim;
    st_srv_send_fn send;
    st_srv_release_fn release;
    void *ctx;
    struct st_srv_list queued, active, finished;
    struct st_srv_req *rr;            // next active request in round-robin order
    struct st_srv_counters c;
    struct st_srv_view view;
    uint64_t started_ns;
    uint64_t rate[ST_SRV_RATE_BUCKETS]; // tokens per one-second bucket
    uint64_t rate_sec;                // second of the newest bucket
};

uint64_t st_srv_now_ns(void);

void st_srv_core_init(struct st_srv_core *c, const struct st_srv_limits *lim, st_srv_send_fn send,
                      st_srv_release_fn release, void *ctx);
// Frees every request; active ones are released (no replies: see st_srv_shutdown).
void st_srv_core_free(struct st_srv_core *c);

// ---- decoding and validation (pure) ----

// Decodes a received message.  Returns ERR_NONE and *env (free with
// subternary__envelope__free_unpacked), or the error code to reply with and a
// message; id gets the request id when one could be read (else "").
Subternary__ErrorCode st_srv_decode(const struct st_srv_frames *f, Subternary__Envelope **env, char *id,
                                    char *msg, size_t cap);
// Checks every field of a GenerateRequest against the limits and fills the
// request's parameters and prompt (text is tokenized here).  Returns ERR_NONE
// or the code, with a message naming the field.
Subternary__ErrorCode st_srv_validate_generate(const Subternary__GenerateRequest *g, const struct st_srv_limits *lim,
                                               struct st_srv_req *r, char *msg, size_t cap);
// Whether a request id is acceptable (1..ST_SRV_ID_MAX bytes of printable UTF-8).
bool st_srv_valid_id(const char *id);

// ---- dispatcher ----

// Handles one received message: replies to errors, stats and health at once,
// queues generate requests (or answers busy, or a retry's known result),
// cancels.  fd is the connection the message came from (-1 unknown).
void st_srv_dispatch(struct st_srv_core *c, const struct st_srv_frames *f, int fd);

// ---- the scheduler's side (the server loop) ----

// The oldest queued request moves to ACTIVE (the caller then gives it a
// session); NULL if the queue is empty or every slot is taken.
struct st_srv_req *st_srv_admit(struct st_srv_core *c);
// The next active request in round-robin order that is not in a step and
// that ok accepts (every one if ok is NULL); NULL if none.
typedef bool (*st_srv_pick_fn)(void *ctx, const struct st_srv_req *r);
struct st_srv_req *st_srv_next(struct st_srv_core *c, st_srv_pick_fn ok, void *ctx);
// After r's step: if r was cancelled or dropped meanwhile, it is retired now
// and this returns true (r is then gone).
bool st_srv_after_step(struct st_srv_core *c, struct st_srv_req *r);
// Streams committed ids: records them (for retries) and sends a TokenChunk.
// Returns 0, or -1 when the peer is gone (the request was dropped: r is gone).
int st_srv_chunk(struct st_srv_core *c, struct st_srv_req *r, const int32_t *ids, uint32_t n, const char *text,
                 size_t text_len);
// Ends r with its summary (request id and wall/queue times are filled here).
void st_srv_finish(struct st_srv_core *c, struct st_srv_req *r, Subternary__Done *done);
// Ends r with an error reply (kept for retries).
void st_srv_fail(struct st_srv_core *c, struct st_srv_req *r, Subternary__ErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Fails queued and active requests past their deadline.
void st_srv_expire(struct st_srv_core *c, uint64_t now_ns);
// A connection closed: its queued and active requests are dropped silently
// (nobody to tell) and forgotten, so a retry after a reconnect runs again.
void st_srv_disconnect(struct st_srv_core *c, int fd);
// Every queued and active request gets ERR_SHUTTING_DOWN and is released.
void st_srv_shutdown(struct st_srv_core *c);
// Adds a round's committed tokens to the throughput window, and its draft
// figures to the acceptance counters.
void st_srv_count_round(struct st_srv_core *c, uint32_t tokens, uint32_t drafted, uint32_t accepted, uint64_t now_ns);
// Counts a worker-set step that carried `sessions` sessions' steps.
void st_srv_count_step(struct st_srv_core *c, uint32_t sessions);

// Fills a Stats or Health reply (nodes[] and node_ptrs[] are the caller's storage).
void st_srv_fill_stats(struct st_srv_core *c, Subternary__Stats *st, Subternary__NodeStats *nodes,
                       Subternary__NodeStats **node_ptrs);
void st_srv_fill_health(const struct st_srv_core *c, Subternary__Health *h);

#endif
