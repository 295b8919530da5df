// A real `subternary serve` process for the server tests: started from the
// build tree's binary with the shared pico pair on a free tcp port of
// 127.0.0.1 (or any endpoint), ready when it printed "listening on ...";
// stopped with SIGTERM.  Also reference outputs from `subternary generate`.
#ifndef ST_TESTS_SERVER_SUPPORT_H
#define ST_TESTS_SERVER_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ST_TEST_PROMPT "1,300,436,102,468,497,279,476,186,242,27"

struct st_test_server {
    pid_t pid;
    char endpoint[256];
    char log[600];     // the server's stderr
    char tmp[512];     // a private directory for the test (removed by stop)
};

// Starts the server with the pico target + draft, 2 workers and the extra
// arguments (NULL-terminated; they may set --listen, --slots, ...).  Returns
// 0 when it listens, -1 (log printed) otherwise.
int st_test_server_start(struct st_test_server *s, const char *const *extra);
// SIGTERM, wait (SIGKILL after 10 s); returns the exit status (-1 if killed).
int st_test_server_stop(struct st_test_server *s);
// Whether the process still runs.
int st_test_server_alive(const struct st_test_server *s);
void st_test_server_print_log(const struct st_test_server *s);

// `subternary generate` with the pico pair and the given arguments after the
// models (NULL-terminated; add "--ids"): the last stdout line parsed as ids
// (malloc'd).  Returns the count, or -1.
int st_test_reference(const char *const *args, uint32_t **ids);
// The four prompts of the server tests (ST_TEST_PROMPT with other last
// tokens) and the greedy reference of each, up to `tokens` ids (ref[i]
// malloc'd).  Returns 0, or -1 (said on stderr).
#define ST_TEST_N_PROMPTS 4
int st_test_prompts(char prompts[ST_TEST_N_PROMPTS][128], uint32_t **ref, int *n_ref, int tokens);
// Runs a command line of the subternary binary (args NULL-terminated), its
// stdout into out (NUL-terminated, truncated to cap); returns the exit status.
int st_test_run(const char *const *args, char *out, size_t cap);

// Milliseconds on the monotonic clock.
int64_t st_test_now_ms(void);

// Child processes of pid whose command line contains `match` (NULL: any).
int st_test_children(pid_t pid, const char *match, pid_t *out, int cap);

// ---- collecting one request's events through the client library ----

#include "include/subternary.h"

#define ST_TEST_MAX_IDS 4096

struct st_test_result {
    uint32_t ids[ST_TEST_MAX_IDS];
    size_t n;
    int chunks;
    int gaps;          // chunks whose offset did not continue the ids received
    int finals;        // Done or Error events (exactly one is right)
    bool finished;
    int code;          // 0: Done; else the Error code
    struct st_client_done done;
    char message[512];
    int server;        // the endpoint index its last event came from
};

// Handles one event of any of the n requests ids[] into rs[] (events of
// other requests are dropped).  Returns 1 if an event was handled, 0 on
// timeout, -1 on failure.
int st_test_pump_any(struct st_client *c, const char *const *ids, struct st_test_result *rs, int n, int timeout_ms);
// Handles one event of request `id` (other requests' events are dropped).
// Returns 1 if an event was handled, 0 on timeout, -1 on failure.
int st_test_pump(struct st_client *c, const char *id, struct st_test_result *r, int timeout_ms);
// Pumps until the request finished; 0, or -1 on timeout (timeout_ms in all).
int st_test_wait(struct st_client *c, const char *id, struct st_test_result *r, int timeout_ms);
// Connects a client to the test server (plain, no CURVE) and waits until a
// health request gets its answer (so the connection is up).
struct st_client *st_test_client(const struct st_test_server *s, const char *identity);
// The ids of a comma-separated list, at most cap of them; returns how many.
size_t st_test_parse_ids(const char *s, uint32_t *ids, size_t cap);
// Greedy request on token ids (a comma-separated list).
int st_test_submit(struct st_client *c, const char *id, const char *prompt, uint32_t max_tokens, bool ignore_eos);
// Whether r's ids are the first min(max_tokens, n_ref) of ref.
bool st_test_prefix_of(const struct st_test_result *r, const uint32_t *ref, int n_ref, uint32_t max_tokens);

#endif
