// A server on a bench rig's engine, in this process, with a connected
// client: the benches that measure serving (`bench nodes`, `bench batch`)
// feed it requests over ZeroMQ through the client library.
#ifndef ST_CLI_BENCH_SERVED_H
#define ST_CLI_BENCH_SERVED_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

#include "cli/bench_util.h"
#include "coordinator/server.h"
#include "include/subternary.h"

struct st_bench_served {
    struct st_server *srv;
    struct st_client *c;
    pthread_t thread;
    bool running;
    volatile sig_atomic_t stop;
    uint32_t batch_no;         // names the requests of each st_bench_served_run
};

// The served benches' options: the common ones, --no-draft (target alone)
// and --step-rows; returns as st_bench_common_opt.
int st_bench_served_opt(int argc, char **argv, int *i, struct st_bench_common *b);
// After parsing: --quick's shorter runs, and a context of 2048 by default.
void st_bench_served_defaults(struct st_bench_common *b);

// Serves eng with at most max_batch sessions a step (0: the engine's) and
// step_rows rows a batched forward (0: the server's).
int st_bench_served_open(struct st_bench_served *sv, struct st_engine *eng, void *zctx, uint32_t max_batch,
                         uint32_t step_rows, struct st_error *e);
void st_bench_served_close(struct st_bench_served *sv);

// Runs n identical greedy requests at once (b's tokens, target alone when b
// has no draft; the prompt as ids when ids, else text); returns their
// tokens over the wall time from the first submit to the last final event,
// or -1 (said on stderr, prefixed by `who`).
double st_bench_served_run(struct st_bench_served *sv, const struct st_bench_common *b, const char *text,
                           const uint32_t *ids, size_t n_ids, uint32_t n, const char *who);

// One request decodes (prompt as st_bench_served_run's); once it streams, a
// prompt of n_prompt synthetic ids (vocabulary n_vocab) arrives for one
// token.  *max_gap: the decoder's longest wait between two chunks from that
// submit until the prompt's token came, *ttft: the prompt's time to its
// token, seconds.  The decoder is cancelled then.  Returns 0, or -1 (said
// on stderr, prefixed by `who`).
int st_bench_served_beside(struct st_bench_served *sv, const char *text, const uint32_t *ids, size_t n_ids,
                           uint32_t n_prompt, uint32_t n_vocab, uint32_t max_tokens, double *max_gap, double *ttft,
                           const char *who);

#endif
