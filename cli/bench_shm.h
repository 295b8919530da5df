// `subternary bench shm`: barrier round trip, KV rollback latency, and model
// load throughput (io_uring against a plain read() loop, cold and warm).
#ifndef ST_CLI_BENCH_SHM_H
#define ST_CLI_BENCH_SHM_H

// argv[0] is "shm"; options: --file F, --size MIB, --iters N, --qd N, --io-kib N.
int st_bench_shm(int argc, char **argv);

#endif
