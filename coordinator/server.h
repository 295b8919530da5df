// The server: a ZeroMQ ROUTER socket for clients (tcp:// or ipc://, optional
// CURVE with an allow-list checked by a ZAP handler) in front of an engine.
// One thread runs one event loop: receive and dispatch client messages, admit
// queued requests into free KV slots, and keep every node's worker set busy
// with one step of the active sessions placed on that node: the turn's
// session (round-robin) with its prefill slice, draft backlog or round, and
// beside it the other sessions' rounds and a slice, batched (max_batch).
// Sets on different nodes run their steps side by side; the loop waits on
// the clients and on every set at once, and streams each round's tokens as
// one TokenChunk.  A worker replacement inside a step still calls back into
// the server to serve the client socket.
#ifndef ST_COORDINATOR_SERVER_H
#define ST_COORDINATOR_SERVER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "coordinator/engine.h"

#define ST_SERVER_KEY_BYTES 32
#define ST_SERVER_STEP_ROWS 64

struct st_server_config {
    const char *listen;            // tcp://HOST:PORT (PORT "*": any free port) or ipc://PATH
    uint32_t queue;                // requests waiting beyond the slots (0: none may wait)
    uint32_t max_tokens_default;   // for requests with max_tokens 0 (0: 256)
    uint32_t prefill_slice;        // prompt tokens per scheduling turn (0: 512, or the prefill chunk if more)
    uint32_t step_rows;            // rows a forward of a batched step takes: rounds, and a prompt
                                   // slice in what they leave (0: ST_SERVER_STEP_ROWS; at most the
                                   // prefill chunk).  More: a prompt beside decoding sessions gets
                                   // its first token sooner, they wait longer between tokens
    uint32_t max_batch;            // sessions' rounds one step carries at most (0: the engine's n_lanes)
    uint32_t max_msg_bytes;        // ZMQ_MAXMSGSIZE: larger messages are dropped (0: 1 MiB)
    uint32_t max_prompt_bytes;     // longest prompt_text (0: 256 KiB)
    uint32_t finished_cache;       // finished results kept for retries (0: 1024)
    uint64_t max_deadline_ms;      // (0: one day)
    const char *curve_secret;      // Z85 server secret key; NULL: no CURVE
    const uint8_t (*allow)[ST_SERVER_KEY_BYTES]; // client public keys let in (CURVE)
    size_t n_allow;
    bool quiet;                    // no per-request log lines on stderr
    const char *target_name, *draft_name; // model names for Health (NULL: the engine's paths)
};

struct st_server;

// The rows of a batched step's forward and the prompt tokens of a scheduling
// turn that cfg gives on an engine of m_max rows a forward.
void st_server_rows(const struct st_server_config *cfg, uint32_t m_max, uint32_t *step_rows,
                    uint32_t *prefill_slice);

// Binds the socket (checking that an ipc endpoint's directory is 0700) and
// starts the ZAP handler when CURVE is on.  The engine stays the caller's.
int st_server_open(const struct st_server_config *cfg, struct st_engine *eng, void *zctx, struct st_server **out,
                   struct st_error *e);
// The bound endpoint, with the port a "*" resolved to.
const char *st_server_endpoint(const struct st_server *s);
// Serves until *stop becomes non-zero; then every unfinished request gets
// ERR_SHUTTING_DOWN.  Returns 0, or -1 if the socket failed.
int st_server_run(struct st_server *s, volatile sig_atomic_t *stop, struct st_error *e);
void st_server_close(struct st_server **s);

// The ZAP handler (RFC 27) on inproc://zeromq.zap.01 of zctx: CURVE clients
// whose public key is in keys[] are let in, all others refused; other
// mechanisms (the workers' NULL ipc sockets) pass.
struct st_zap;
int st_zap_start(void *zctx, const uint8_t (*keys)[ST_SERVER_KEY_BYTES], size_t n, struct st_zap **out,
                 struct st_error *e);
void st_zap_stop(struct st_zap **z);
// Handshakes refused so far.
uint64_t st_zap_denied(const struct st_zap *z);

#endif
