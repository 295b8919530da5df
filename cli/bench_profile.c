// `subternary bench profile`: per-op attribution of one generation: each op
// class of each model, the kernels and shapes behind it, its share of the
// token time and the GB/s of weights it streamed, sorted by share so the next
// optimisation target is obvious.  `subternary bench all`: every suite.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench_kernels.h"
#include "cli/bench_llamacpp.h"
#include "cli/bench_shm.h"
#include "cli/bench_suites.h"
#include "cli/bench_util.h"
#include "kernels/kernels.h"

// "q8_0x8 3072x3072" for the matrices behind an op class of layer 0.
static void describe(const struct st_engine *eng, uint32_t model, const char *op, char *buf, size_t cap)
{
    uint64_t wb;
    const uint8_t *w = st_region_section(eng->node[0].region, ST_REGION_WEIGHTS, &wb);
    const struct st_layout_dir *dir = (const void *)w;
    buf[0] = 0;
    if (model >= dir->n_models) return;
    const struct st_layout_model *lm = &dir->model[model];
    const struct st_layout_layer *L = (const void *)(w + lm->layers_offset);
    const struct st_layout_mat *m[3] = {NULL, NULL, NULL};
    if (!strcmp(op, "qkv")) m[0] = &L->wq, m[1] = &L->wk, m[2] = &L->wv;
    else if (!strcmp(op, "attn_out")) m[0] = &L->wo;
    else if (!strcmp(op, "ffn_gate_up")) m[0] = &L->gate, m[1] = &L->up;
    else if (!strcmp(op, "ffn_down")) m[0] = &L->down;
    else if (!strcmp(op, "output")) m[0] = &lm->output;
    else if (!strcmp(op, "attention"))
        snprintf(buf, cap, "f16 KV, %u heads / %u KV heads x %u", lm->hp.n_head, lm->hp.n_head_kv, lm->hp.head_dim);
    size_t n = 0;
    for (int i = 0; i < 3 && m[i]; i++)
        n += (size_t)snprintf(buf + n, cap > n ? cap - n : 0, "%s%s %lldx%lld", i ? ", " : "",
                              st_kern_run_name(m[i]->run_type), (long long)m[i]->rows, (long long)m[i]->cols);
    if (m[0] && strcmp(op, "output")) snprintf(buf + n, cap > n ? cap - n : 0, " (x%u layers)", lm->hp.n_layer);
}

int st_bench_profile(int argc, char **argv)
{
    struct st_bench_common c;
    st_bench_common_defaults(&c);
    bool spec = true;
    uint32_t k = 0;
    for (int i = 1; i < argc; i++) {
        int r = st_bench_common_opt(argc, argv, &i, &c);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--no-spec")) spec = false;
        else if (!strcmp(argv[i], "--k") && i + 1 < argc) {
            if (st_args_u32("bench", argv[i], argv[i + 1], 1, ST_ENGINE_K_LIMIT, &k)) return 2;
            i++;
        } else {
            fprintf(stderr, "usage: subternary bench profile [-m TARGET] [-d DRAFT] [--no-spec] [--k N] [-n N] [--quick]\n");
            return 2;
        }
    }
    if (c.quick && c.n_tokens == 128) c.n_tokens = 64;
    if (k > c.o.k_max) c.o.k_max = k;
    struct st_bench_rig rig;
    if (st_bench_rig_open(&rig, &c.o)) return 1;
    struct st_gen_params gp = {.max_tokens = c.n_tokens, .speculate = spec, .k = k, .profile = true, .stop_at_eos = false};
    struct st_session_stats st;
    if (st_bench_rig_run(&rig, &gp, &st) || st_bench_rig_run(&rig, &gp, &st)) return 1; // second run: warm
    uint32_t order[ST_POOL_MAX_OPS];
    double total = st_session_stats_op_order(&st, order);
    FILE *csv = st_bench_csv(c.results, "profile");
    if (!csv) return 1;
    fprintf(csv, "model,op,seconds,share,ms_per_token,gbps,kernels\n");
    printf("bench profile: %s%s%s, %u tokens, %s; %u decode steps, %.1f barriers per step\n", c.o.target,
           spec ? " + " : "", spec ? c.o.draft : "", st.tokens, spec ? "speculative" : "autoregressive", st.steps,
           st.steps ? (double)st.barriers / st.steps : 0);
    printf("GB/s: what the op reads (matrices, or K and V) on all workers, over rank 0's time in it\n");
    printf("%-7s %-12s %7s %9s %7s  %s\n", "model", "op", "share", "ms/token", "GB/s", "kernels and shapes");
    for (uint32_t i = 0; i < st.n_ops; i++) {
        uint32_t k = order[i];
        char desc[256];
        describe(rig.eng, st.op_model[k], st.op_names[k], desc, sizeof desc);
        double sec = st.op_seconds[k], share = total > 0 ? sec / st.seconds : 0;
        double gbps = sec > 0 ? st.op_bytes[k] / sec / 1e9 : 0;
        printf("%-7s %-12s %6.1f%% %9.3f %7.2f  %s\n", st.op_model[k] ? "draft" : "target", st.op_names[k],
               100 * share, 1e3 * sec / st.tokens, gbps, desc);
        fprintf(csv, "%s,%s,%.6f,%.4f,%.4f,%.3f,\"%s\"\n", st.op_model[k] ? "draft" : "target", st.op_names[k], sec,
                share, 1e3 * sec / st.tokens, gbps, desc);
    }
    double other = st.seconds - total;
    printf("%-7s %-12s %6.1f%% %9.3f %7s  %s\n", "-", "coordinator", 100 * (other > 0 ? other : 0) / st.seconds,
           1e3 * (other > 0 ? other : 0) / st.tokens, "", "step messages, acceptance, commit (outside the workers)");
    printf("token time %.3f ms (%.2f tokens/s)\n", 1e3 * st.seconds / st.tokens, st.tokens / st.seconds);
    // The machinery's own cost: a no-op step's round trip, and a barrier.
    double rtt, many;
    struct st_error e;
    if (st_engine_ping(rig.eng, 0, 200, 1, &rtt, &e) || st_engine_ping(rig.eng, 0, 20, 1001, &many, &e)) {
        fprintf(stderr, "ping: %s\n", e.msg);
    } else {
        double bar = (many - rtt) / 1000, per_token = (st.steps * rtt + st.barriers * bar) / st.tokens;
        printf("machinery: step round trip %.1f us, barrier %.2f us, %.1f barriers and %.2f steps per token: "
               "%.3f ms per token = %.2f%% of the token time\n",
               rtt * 1e6, bar * 1e6, (double)st.barriers / st.tokens, (double)st.steps / st.tokens, per_token * 1e3,
               100 * per_token / (st.seconds / st.tokens));
    }
    fclose(csv);
    st_bench_rig_close(&rig);
    return 0;
}

int st_bench_all(int argc, char **argv)
{
    bool quick = false;
    // spec also gets the llama.cpp comparison options, if any.
    char *spec_args[16] = {"spec"};
    int ns = 1;
    struct st_llamacpp_opts lo;
    st_llamacpp_opts_defaults(&lo);
    for (int i = 1; i < argc; i++) {
        int at = i, r = st_llamacpp_opt(argc, argv, &i, &lo);
        if (r < 0) return 2;
        for (int j = at; r && j <= i && ns < 14; j++) spec_args[ns++] = argv[j];
        if (!strcmp(argv[i], "--quick")) quick = true;
    }
    if (quick) spec_args[ns++] = "--quick";
    char *q[] = {"x", quick ? "--quick" : NULL, NULL};
    int qa = quick ? 2 : 1, rc = 0;
    struct {
        const char *name;
        int (*fn)(int, char **);
    } suites[] = {{"kernels", st_bench_kernels}, {"shm", st_bench_shm},         {"spec", st_bench_spec},
                  {"ctx", st_bench_ctx},         {"contention", st_bench_contention},
                  {"governor", st_bench_governor}, {"profile", st_bench_profile},
                  {"nodes", st_bench_nodes},     {"batch", st_bench_batch}};
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++) {
        printf("\n===== bench %s%s\n", suites[i].name, quick ? " --quick" : "");
        fflush(stdout);
        q[0] = (char *)suites[i].name;
        bool spec = suites[i].fn == st_bench_spec;
        if (suites[i].fn(spec ? ns : qa, spec ? spec_args : q)) {
            fprintf(stderr, "bench %s failed\n", suites[i].name);
            rc = 1;
        }
        fflush(stdout);
    }
    return rc;
}
