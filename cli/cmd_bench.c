// `subternary bench SUITE`: one entry point for every benchmark suite.
#include <stdio.h>
#include <string.h>

#include "cli/bench_attn.h"
#include "cli/bench_kernels.h"
#include "cli/bench_shm.h"
#include "cli/bench_suites.h"
#include "cli/commands.h"

struct suite {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct suite suites[] = {
    {"kernels", st_bench_kernels, "GEMV/GEMM per type and M, against the measured read bandwidth"},
    {"attn", st_bench_attn, "attention per SIMD level, context length and query rows, one thread"},
    {"shm", st_bench_shm, "barrier round trip, rollback latency, model load throughput"},
    {"spec", st_bench_spec, "autoregressive vs speculative, per draft, K sweep and adaptive, optionally vs llama.cpp"},
    {"ctx", st_bench_ctx, "tokens/s and rollback cost at context lengths 128 .. 8192"},
    {"contention", st_bench_contention, "the same with a CPU hog on one core"},
    {"governor", st_bench_governor, "matching vs non-matching draft, governor on/off"},
    {"profile", st_bench_profile, "per-op attribution of one generation"},
    {"nodes", st_bench_nodes, "a server's worker sets side by side: one request alone vs one a node at once"},
    {"batch", st_bench_batch, "sessions' rounds batched in one step: N requests at once, batched vs one a step"},
    {"all", st_bench_all, "every suite (--quick: a short version of each; --compare-llamacpp DIR goes to spec)"},
    {NULL, NULL, NULL},
};

int st_cmd_bench(int argc, char **argv)
{
    if (argc >= 2)
        for (const struct suite *s = suites; s->name; s++)
            if (!strcmp(argv[1], s->name)) return s->run(argc - 1, argv + 1);
    fprintf(stderr, "usage: subternary bench SUITE [options]\nsuites:\n");
    for (const struct suite *s = suites; s->name; s++) fprintf(stderr, "  %-10s %s\n", s->name, s->help);
    return 2;
}
