// Shared pieces of the benchmark suites: statistics over repeated runs, a
// prefilled session that is rewound between runs (so runs alternate and
// compare the same work), CSV files and gnuplot plots in the results folder.
#ifndef ST_CLI_BENCH_UTIL_H
#define ST_CLI_BENCH_UTIL_H

#include <stdbool.h>
#include <stdio.h>

#include "coordinator/engine.h"
#include "coordinator/session.h"

#define ST_BENCH_MAX_RUNS 64
// The prompt of every suite unless -p, --tokens or --prompt-len says otherwise.
#define ST_BENCH_PROMPT "Once upon a time, in a small village by the sea, there lived"

struct st_bench_stat {
    double v[ST_BENCH_MAX_RUNS];
    int n;
};
void st_bench_add(struct st_bench_stat *s, double v);
double st_bench_mean(const struct st_bench_stat *s);
double st_bench_std(const struct st_bench_stat *s);

// An engine with a prefilled session over a prompt.
struct st_bench_rig {
    struct st_engine *eng;
    struct st_session *s;
    void *zctx;
    char dir[512];
    char exe[1024];
    double steal; // share of the CPU time stolen by the hypervisor during the last run; NAN: unknown
};

struct st_bench_opts {
    const char *target, *draft;
    const char *prompt_text;   // or
    const char *prompt_ids;
    uint32_t prompt_len;       // > 0: a synthetic prompt of this many ids
    uint32_t n_ctx;
    const char *cpus;
    uint32_t n_nodes, workers;
    uint32_t n_slots;          // KV slots per node (0: 1)
    uint32_t k_max;            // the engine's longest draft: at least this, and ST_ENGINE_K_DEFAULT
    uint32_t prefill_chunk;    // rows of a prefill forward (0: the engine's)
    uint32_t step_rows;        // served benches: rows of a batched step's forward (0: the server's)
};

int st_bench_rig_open(struct st_bench_rig *r, const struct st_bench_opts *o);
// n deterministic pseudo-random ids below n_vocab (a synthetic prompt; the
// same every time).
void st_bench_synthetic_ids(uint32_t *ids, size_t n, uint32_t n_vocab);
// The engine alone (r->s stays NULL): for a benchmark that runs its own
// sessions, e.g. through a server.  st_bench_rig_close closes it.
int st_bench_rig_engine(struct st_bench_rig *r, const struct st_bench_opts *o, struct st_error *e);
void st_bench_rig_close(struct st_bench_rig *r);
// One generation from the prefilled prompt; fills *st and r->steal.
// Returns 0 or -1.
int st_bench_rig_run(struct st_bench_rig *r, const struct st_gen_params *gp, struct st_session_stats *st);

// results/NAME.csv opened for writing (the folder is created); NULL on error.
FILE *st_bench_csv(const char *dir, const char *name);
// Draws a PNG with gnuplot from a script body, if gnuplot is installed.
void st_bench_plot(const char *dir, const char *name, const char *script);

// The file name of a path, for table rows.
const char *st_bench_basename(const char *path);

// Bytes of the target's matrices in the rig's region: what one
// autoregressive step streams from memory, KV aside.
double st_bench_target_weight_bytes(const struct st_bench_rig *r);

// Seconds on the monotonic clock, for timing a measured loop.
double st_bench_seconds(void);
// n bytes (rounded up to 2 MiB) on a 2 MiB boundary, with transparent huge
// pages asked for, as the server's regions have huge pages where offered;
// free() releases it.  NULL on failure.
void *st_bench_huge_alloc(size_t n);

// Parses "1,2,4" into values (at most cap); returns the count or -1.
int st_bench_parse_list(const char *s, uint32_t *v, int cap);

// Common options: -m -d -p --tokens --prompt-len -n --runs --results --quick
// --cpus --nodes --workers --ctx --prefill-chunk.  Returns 1 if argv[*i] was one, 0 if not, -1 on error.
struct st_bench_common {
    struct st_bench_opts o;
    uint32_t n_tokens;
    int runs;
    const char *results;
    bool quick;
};
void st_bench_common_defaults(struct st_bench_common *c);
int st_bench_common_opt(int argc, char **argv, int *i, struct st_bench_common *c);

#endif
