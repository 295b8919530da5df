// `subternary bench shm --model F.gguf`: the model loader (region allocated
// first, then read + repack) against `cat F > /dev/null`, cold and warm.
// Cold runs from two states of the VM's memory (see bench_load.c); quick
// runs only the first, the second waits seconds before every read.
#ifndef ST_CLI_BENCH_LOAD_H
#define ST_CLI_BENCH_LOAD_H

#include <stdbool.h>

#include "common/error.h"

int st_bench_model_load(const char *path, bool quick, struct st_error *e);

#endif
