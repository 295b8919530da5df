// Reads the figures out of what llama.cpp's benchmark programs print, for
// `bench spec --compare-llamacpp`.  Nothing of llama.cpp is linked or built.
#ifndef ST_CLI_LLAMACPP_PARSE_H
#define ST_CLI_LLAMACPP_PARSE_H

#include <stdint.h>

#include "common/error.h"

// llama-bench -o json: the tokens/s of its text-generation test (the object
// with "n_prompt": 0 and "n_gen" > 0).  Returns 0 or -1.
int st_llamacpp_parse_bench(const char *json, double *tps, struct st_error *e);

struct st_llamacpp_spec_figures {
    uint32_t tokens;        // "decoded N tokens in S seconds, speed: X t/s"
    double seconds, tps;
    double accept;          // "accept = P%" as a fraction; -1 if not printed
};
// llama-speculative's summary (its stderr).  Returns 0 or -1.
int st_llamacpp_parse_spec(const char *text, struct st_llamacpp_spec_figures *f, struct st_error *e);

#endif
