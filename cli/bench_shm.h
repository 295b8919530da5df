// `subternary bench shm`: barrier round trip, KV rollback latency, and model
// load throughput (io_uring against a plain read() loop, cold and warm).
#ifndef ST_CLI_BENCH_SHM_H
#define ST_CLI_BENCH_SHM_H

#include <stdint.h>

#include "common/error.h"

// argv[0] is "shm"; options: --file F, --model F.gguf, --size MIB, --iters N, --qd N, --io-kib N.
int st_bench_shm(int argc, char **argv);

// Evicts a file from the page cache (best effort).
void st_bench_make_cold(const char *path);
// dst NULL: `cat FILE > /dev/null` (128 KiB reads into one small buffer);
// else 2 MiB reads into dst, window bytes reused.
int st_bench_read_loop(const char *path, uint8_t *dst, uint64_t window, double *gbps, struct st_error *e);

#endif
