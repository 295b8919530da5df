// `subternary bench shm --model F.gguf`: the model loader (region allocated
// first, then read + repack) against `cat F > /dev/null`, cold and warm.
#ifndef ST_CLI_BENCH_LOAD_H
#define ST_CLI_BENCH_LOAD_H

#include "common/error.h"

int st_bench_model_load(const char *path, struct st_error *e);

#endif
