// `subternary bench kernels`: matrix-product throughput per weight format and
// activation count M, against the machine's streaming read bandwidth measured
// in the same run with the same threads.
#ifndef ST_CLI_BENCH_KERNELS_H
#define ST_CLI_BENCH_KERNELS_H

// argv[0] is "kernels"; options: --threads T, --json, --quick,
// --shapes RxC[,RxC...], --types q8_0,q4_0,ternary-mask,..., --m 1,2,...,
// --trials N, --level scalar|avx2|avx512|amx.  Returns the exit code.
int st_bench_kernels(int argc, char **argv);

// The machine's streaming read bandwidth in GB/s now: the best of `trials`
// passes of `threads` threads (clamped to what bench kernels allows) over a
// buffer of 8x the LLC; 0 if it cannot allocate the buffer or start the
// threads.
double st_bench_read_probe(int threads, int trials);

#endif
