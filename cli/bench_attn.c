// `subternary bench attn` (see cli/bench_attn.h).
//
// Each layer has its own K and V arrays, as in a model, so that at long
// contexts they come from memory and at short ones from the caches they
// would be in; they sit in huge pages, as the server's KV cache does (small
// pages would add a TLB miss every other position); the rows see every position (a decode at the end of the
// context, or a verify of its last M positions).  Each figure is the best
// of --trials passes over all layers; within a trial the levels run in
// turn, so that their ratio compares runs that saw the same machine.
#include "cli/bench_attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench_attn_ranks.h"
#include "cli/bench_util.h"
#include "kernels/kernels.h"

#define MAX_LIST 16

struct attn_opts {
    uint32_t lengths[MAX_LIST], ms[MAX_LIST];
    int n_lengths, n_ms;
    int layers, trials, n_heads, n_kv, head_dim, threads;
};

static int usage(void)
{
    fprintf(stderr, "usage: subternary bench attn [--lengths N,...] [--m M,...] [--layers L]\n"
                    "       [--shape HEADS/KV_HEADS/HEAD_DIM] [--trials N] [--threads N]\n");
    return 2;
}

static int parse(int argc, char **argv, struct attn_opts *o)
{
    *o = (struct attn_opts){.lengths = {128, 1024, 4096, 8192}, .n_lengths = 4, .ms = {1, 4}, .n_ms = 2,
                            .layers = 28, .trials = 5, .n_heads = 24, .n_kv = 8, .head_dim = 128, .threads = 1};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(argv[i], "--lengths"))
            o->n_lengths = st_bench_parse_list(v, o->lengths, MAX_LIST);
        else if (!strcmp(argv[i], "--m"))
            o->n_ms = st_bench_parse_list(v, o->ms, MAX_LIST);
        else if (!strcmp(argv[i], "--layers")) {
            if (st_args_int("bench attn", argv[i], v, 1, 1024, &o->layers)) return 2;
        } else if (!strcmp(argv[i], "--trials")) {
            if (st_args_int("bench attn", argv[i], v, 1, 1000, &o->trials)) return 2;
        } else if (!strcmp(argv[i], "--threads")) {
            if (st_args_int("bench attn", argv[i], v, 1, 1024, &o->threads)) return 2;
        }
        else if (!strcmp(argv[i], "--shape")) {
            if (sscanf(v, "%d/%d/%d", &o->n_heads, &o->n_kv, &o->head_dim) != 3) return usage();
        } else
            return usage();
        i++;
    }
    if (o->n_lengths < 1 || o->n_ms < 1 || o->layers < 1 || o->trials < 1 || o->n_kv < 1 || o->head_dim < 1 ||
        o->n_heads < o->n_kv || o->n_heads % o->n_kv || o->n_heads > 1024 || o->head_dim > 1024 || o->threads < 1 ||
        o->threads > 256)
        return usage();
    for (int i = 0; i < o->n_lengths; i++)
        if (o->lengths[i] < 1 || o->lengths[i] > (1u << 20)) return usage();
    for (int i = 0; i < o->n_ms; i++)
        if (o->ms[i] < 1 || o->ms[i] > 64) return usage();
    return 0;
}

// The last M rows of a context of n_ctx positions (pos[M], filled here);
// K and V are set per layer.
static struct st_kern_attn shape(const struct attn_opts *o, uint32_t n_ctx, uint32_t M, const float *q, float *out,
                                 int32_t *pos)
{
    for (uint32_t m = 0; m < M; m++) pos[m] = (int32_t)(n_ctx - M + m);
    return (struct st_kern_attn){.q = q, .out = out, .pos = pos, .M = (int)M, .n_heads = o->n_heads,
                                 .n_kv_heads = o->n_kv, .head_dim = o->head_dim, .n_ctx = (int)n_ctx,
                                 .scale = 1.0f / sqrtf((float)o->head_dim)};
}

// The levels with attention kernels of their own (AMX adds none).
#define ATTN_LEVEL_END (ST_KERN_LEVEL_AVX512 + 1)

// Seconds a layer in a pass over all layers, best of the trials, per SIMD
// level (best[l] < 0: the CPU lacks level l).
static void measure(const struct attn_opts *o, uint16_t **k, uint16_t **v, uint32_t n_ctx, uint32_t M,
                    const float *q, float *out, float *scratch, double best[ST_KERN_LEVEL_COUNT])
{
    int32_t pos[64];
    struct st_kern_attn a = shape(o, n_ctx, M, q, out, pos);
    for (int l = 0; l < ST_KERN_LEVEL_COUNT; l++) best[l] = -1.0;
    for (int t = 0; t < o->trials; t++)
        for (int l = ST_KERN_LEVEL_AVX2; l < ATTN_LEVEL_END; l++) {
            const struct st_kern_ops *ops = st_kern_ops_get((enum st_kern_level)l);
            if (!ops) continue;
            double t0 = st_bench_seconds();
            for (int layer = 0; layer < o->layers; layer++) {
                a.k = k[layer];
                a.v = v[layer];
                ops->attention(&a, 0, o->n_kv, scratch);
            }
            double s = (st_bench_seconds() - t0) / o->layers;
            if (best[l] < 0 || s < best[l]) best[l] = s;
        }
}

// --threads N: the level in use, split by KV heads and by segments.
static int ranks_table(const struct attn_opts *o, uint16_t **k, uint16_t **v, const float *q, float *out)
{
    size_t row = (size_t)o->n_kv * o->head_dim;
    st_kern_init();
    printf("bench attn: %d heads / %d KV heads x %d, %d layers, %d threads (%s), best of %d; ms a layer, GB/s of "
           "KV read\n",
           o->n_heads, o->n_kv, o->head_dim, o->layers, o->threads, st_kern_level_name(st_kern_cpu.level), o->trials);
    printf(" context   M  by heads ms   GB/s  by segments ms   GB/s  heads/segments  workers split by\n");
    for (int i = 0; i < o->n_lengths; i++)
        for (int j = 0; j < o->n_ms; j++) {
            uint32_t n_ctx = o->lengths[i], M = o->ms[j] < n_ctx ? o->ms[j] : n_ctx;
            int32_t pos[64];
            struct st_kern_attn a = shape(o, n_ctx, M, q, out, pos);
            double best[2];
            if (st_bench_attn_ranks(k, v, o->layers, &a, o->threads, o->trials, best)) return 1;
            double gb = 2.0 * n_ctx * row * sizeof(uint16_t) / 1e9;
            printf("%8u %3u  %11.4f %6.1f", n_ctx, M, best[0] * 1e3, gb / best[0]);
            const char *pick = st_kern_attention_split_pays(&a, o->threads) ? "segments" : "heads";
            if (best[1] > 0)
                printf("  %14.4f %6.1f  %13.2fx  %s\n", best[1] * 1e3, gb / best[1], best[0] / best[1], pick);
            else
                printf("  %14s %6s  %14s  %s\n", "-", "-", "one segment", pick);
        }
    return 0;
}

int st_bench_attn(int argc, char **argv)
{
    struct attn_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    uint32_t max_ctx = 0, max_m = 0;
    for (int i = 0; i < o.n_lengths; i++) max_ctx = o.lengths[i] > max_ctx ? o.lengths[i] : max_ctx;
    for (int i = 0; i < o.n_ms; i++) max_m = o.ms[i] > max_m ? o.ms[i] : max_m;
    size_t row = (size_t)o.n_kv * o.head_dim, qn = (size_t)max_m * o.n_heads * o.head_dim;
    uint16_t **k = calloc((size_t)o.layers, sizeof *k), **v = calloc((size_t)o.layers, sizeof *v);
    float *q = malloc(qn * sizeof *q), *out = malloc(qn * sizeof *out), *scratch = malloc(max_ctx * sizeof *scratch);
    rc = 1;
    if (!k || !v || !q || !out || !scratch) goto fail;
    for (int l = 0; l < o.layers; l++) {
        k[l] = st_bench_huge_alloc((size_t)max_ctx * row * sizeof(uint16_t));
        v[l] = st_bench_huge_alloc((size_t)max_ctx * row * sizeof(uint16_t));
        if (!k[l] || !v[l]) {
            fprintf(stderr, "subternary bench attn: out of memory for %d layers of %u positions\n", o.layers, max_ctx);
            goto fail;
        }
        uint32_t x = 0x9e3779b9u * (uint32_t)(l + 1);
        for (size_t i = 0; i < (size_t)max_ctx * row; i++) {
            x = x * 1664525u + 1013904223u;
            k[l][i] = st_f32_to_f16((float)(x >> 8) / 8388608.0f - 1.0f);
            v[l][i] = st_f32_to_f16((float)(x & 0xffff) / 32768.0f - 1.0f);
        }
    }
    for (size_t i = 0; i < qn; i++) q[i] = (float)((i * 7919) % 200) / 100.0f - 1.0f;
    if (o.threads > 1) {
        rc = ranks_table(&o, k, v, q, out);
        goto fail;
    }
    printf("bench attn: %d heads / %d KV heads x %d, %d layers, one thread, best of %d; ms a layer, GB/s of KV read\n",
           o.n_heads, o.n_kv, o.head_dim, o.layers, o.trials);
    printf(" context   M");
    for (int l = ST_KERN_LEVEL_AVX2; l < ATTN_LEVEL_END; l++)
        if (st_kern_ops_get((enum st_kern_level)l)) printf("  %8s ms   GB/s", st_kern_level_name((enum st_kern_level)l));
    printf("\n");
    for (int i = 0; i < o.n_lengths; i++)
        for (int j = 0; j < o.n_ms; j++) {
            uint32_t n_ctx = o.lengths[i], M = o.ms[j] < n_ctx ? o.ms[j] : n_ctx;
            double best[ST_KERN_LEVEL_COUNT];
            measure(&o, k, v, n_ctx, M, q, out, scratch, best);
            printf("%8u %3u", n_ctx, M);
            for (int l = ST_KERN_LEVEL_AVX2; l < ATTN_LEVEL_END; l++)
                if (best[l] >= 0)
                    printf("  %11.4f %6.1f", best[l] * 1e3, 2.0 * n_ctx * row * sizeof(uint16_t) / best[l] / 1e9);
            if (best[ST_KERN_LEVEL_AVX2] > 0 && best[ST_KERN_LEVEL_AVX512] > 0)
                printf("  avx512/avx2 %.2fx", best[ST_KERN_LEVEL_AVX2] / best[ST_KERN_LEVEL_AVX512]);
            printf("\n");
        }
    if (!st_kern_ops_get(ST_KERN_LEVEL_AVX2)) printf("(no SIMD level on this CPU: nothing measured)\n");
    rc = 0;
fail:
    for (int l = 0; k && v && l < o.layers; l++) {
        free(k[l]);
        free(v[l]);
    }
    free(k);
    free(v);
    free(q);
    free(out);
    free(scratch);
    return rc;
}
