// `bench spec --compare-llamacpp DIR`: llama.cpp's llama-bench and
// llama-speculative, from a build directory outside the project, on the same
// files and prompt, interleaved with our own runs so that noise hits all alike.
#ifndef ST_CLI_BENCH_LLAMACPP_H
#define ST_CLI_BENCH_LLAMACPP_H

#include <stdio.h>

#include "cli/bench_util.h"

#define ST_LLAMACPP_MAX_K 8

struct st_llamacpp_opts {
    const char *dir;                 // llama.cpp's bin folder; NULL: no comparison
    uint32_t ks[ST_LLAMACPP_MAX_K];  // llama-speculative --draft-max values
    int nk;
    uint32_t our_k;                  // our K in the comparison (0: adaptive)
};
void st_llamacpp_opts_defaults(struct st_llamacpp_opts *o);
// --compare-llamacpp DIR, --llamacpp-draft 3,5,8, --compare-k K.  Returns 1
// if argv[*i] was one (and moves *i past its value), 0 if not, -1 on error.
int st_llamacpp_opt(int argc, char **argv, int *i, struct st_llamacpp_opts *o);

// The comparison's outputs in the results folder: NAME.csv, and NAME.log
// with the children's command lines and output.
struct st_llamacpp_cmp {
    struct st_llamacpp_opts o;
    FILE *csv, *log;
    char log_path[1024];
    const char *prompt;              // the text our runs encode
};
int st_llamacpp_cmp_open(struct st_llamacpp_cmp *m, const struct st_llamacpp_opts *o,
                         const struct st_bench_common *c, const char *name);
void st_llamacpp_cmp_close(struct st_llamacpp_cmp *m);

// c->runs repetitions of (ours AR, ours speculative, llama-bench,
// llama-speculative per K) for one draft on an open rig; prints the table and
// writes the CSV rows.  A llama.cpp failure is reported and leaves a gap;
// returns -1 only if our own runs fail.
int st_bench_llamacpp(struct st_llamacpp_cmp *m, struct st_bench_rig *rig, const struct st_bench_common *c,
                      const char *draft);

#endif
