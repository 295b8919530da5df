// `subternary bench attn`: the attention kernel of each SIMD level on one
// thread, over a model's worth of layers of F16 KV cache, per context length
// and number of query rows; with --threads N, the level in use shared by N
// threads split by KV heads and by segments of positions.
#ifndef ST_CLI_BENCH_ATTN_H
#define ST_CLI_BENCH_ATTN_H

// argv[0] is "attn"; options: --lengths N,..., --m M,..., --layers L,
// --shape HEADS/KV_HEADS/HEAD_DIM, --trials N, --threads N.  Returns the
// exit code.
int st_bench_attn(int argc, char **argv);

#endif
