#include "cli/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

volatile sig_atomic_t st_stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    st_stop_requested = 1;
}

void st_runtime_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

#define VALUE()                                                                 \
    do {                                                                        \
        if (*i + 1 >= argc) {                                                   \
            fprintf(stderr, "subternary: %s needs a value\n", argv[*i]);        \
            return -1;                                                          \
        }                                                                       \
        v = argv[++*i];                                                         \
    } while (0)

int st_runtime_engine_opt(int argc, char **argv, int *i, struct st_engine_config *ec)
{
    const char *o = argv[*i], *v;
    if (!strcmp(o, "-m") || !strcmp(o, "--target")) { VALUE(); ec->target_path = v; return 1; }
    if (!strcmp(o, "-d") || !strcmp(o, "--draft")) { VALUE(); ec->draft_path = v; return 1; }
    if (!strcmp(o, "--ctx")) { VALUE(); if (st_args_u32(NULL, o, v, 16, 1 << 20, &ec->n_ctx)) return -1; return 1; }
    if (!strcmp(o, "--slots")) { VALUE(); if (st_args_u32(NULL, o, v, 1, 4096, &ec->n_slots)) return -1; return 1; }
    if (!strcmp(o, "--k-max")) { VALUE(); if (st_args_u32(NULL, o, v, 1, ST_ENGINE_K_LIMIT, &ec->k_max)) return -1; return 1; }
    if (!strcmp(o, "--nodes")) { VALUE(); if (st_args_u32(NULL, o, v, 1, ST_ENGINE_MAX_NODES, &ec->n_nodes)) return -1; return 1; }
    if (!strcmp(o, "--cpus")) { VALUE(); ec->cpus = v; return 1; }
    if (!strcmp(o, "--workers")) { VALUE(); if (st_args_u32(NULL, o, v, 1, 128, &ec->workers_per_node)) return -1; return 1; }
    if (!strcmp(o, "--hang-ms")) { VALUE(); if (st_args_u32(NULL, o, v, 50, 600000, &ec->hang_ms)) return -1; return 1; }
    if (!strcmp(o, "--batch")) { VALUE(); if (st_args_u32(NULL, o, v, 1, ST_ENGINE_MAX_LANES, &ec->max_batch)) return -1; return 1; }
    if (!strcmp(o, "--prefill-chunk")) { VALUE(); if (st_args_u32(NULL, o, v, 1, 1024, &ec->prefill_chunk)) return -1; return 1; }
    return 0;
}

void st_runtime_gen_defaults(struct st_gen_params *gp)
{
    memset(gp, 0, sizeof *gp);
    gp->max_tokens = 128;
    gp->speculate = true;
    gp->governor = true;
    gp->stop_at_eos = true;
    gp->seed = 42;
}

int st_runtime_gen_opt(int argc, char **argv, int *i, struct st_gen_params *gp)
{
    const char *o = argv[*i], *v;
    if (!strcmp(o, "-n") || !strcmp(o, "--max-tokens")) { VALUE(); if (st_args_u32(NULL, o, v, 1, 1 << 20, &gp->max_tokens)) return -1; return 1; }
    if (!strcmp(o, "--temp")) { VALUE(); if (st_args_f32(NULL, o, v, 0, 100, &gp->sampling.temperature)) return -1; return 1; }
    if (!strcmp(o, "--top-k")) { VALUE(); if (st_args_u32(NULL, o, v, 0, 1 << 24, &gp->sampling.top_k)) return -1; return 1; }
    if (!strcmp(o, "--top-p")) { VALUE(); if (st_args_f32(NULL, o, v, 0, 1, &gp->sampling.top_p)) return -1; return 1; }
    if (!strcmp(o, "--min-p")) { VALUE(); if (st_args_f32(NULL, o, v, 0, 1, &gp->sampling.min_p)) return -1; return 1; }
    if (!strcmp(o, "--seed")) { VALUE(); if (st_args_uint(NULL, o, v, 0, UINT64_MAX, &gp->seed)) return -1; return 1; }
    if (!strcmp(o, "--k")) { VALUE(); if (st_args_u32(NULL, o, v, 0, 32, &gp->k)) return -1; return 1; }
    if (!strcmp(o, "--no-governor")) { gp->governor = false; return 1; }
    if (!strcmp(o, "--draft-p-min")) { VALUE(); if (st_args_f32(NULL, o, v, 0, 0.999, &gp->draft_p_min)) return -1; return 1; }
    if (!strcmp(o, "--draft-window")) { VALUE(); if (st_args_u32(NULL, o, v, 1, UINT32_MAX, &gp->draft_window)) return -1; return 1; }
    if (!strcmp(o, "--governor-threshold")) { VALUE(); if (st_args_f32(NULL, o, v, 0, 1, &gp->governor_threshold)) return -1; return 1; }
    if (!strcmp(o, "--no-spec")) { gp->speculate = false; return 1; }
    if (!strcmp(o, "--ignore-eos")) { gp->stop_at_eos = false; return 1; }
    if (!strcmp(o, "--stop")) {
        VALUE();
        if (gp->n_stop >= ST_SESSION_MAX_STOPS) { fprintf(stderr, "subternary: at most %d --stop strings\n", ST_SESSION_MAX_STOPS); return -1; }
        gp->stop[gp->n_stop++] = v;
        return 1;
    }
    return 0;
}

int st_runtime_fit_k_max(struct st_engine_config *ec, const struct st_gen_params *gp)
{
    uint32_t k_max = ec->k_max ? ec->k_max : ST_ENGINE_K_DEFAULT;
    if (gp->k <= k_max) return 0;
    if (ec->k_max) {
        fprintf(stderr, "subternary: --k %u is over --k-max %u\n", gp->k, ec->k_max);
        return -1;
    }
    ec->k_max = gp->k; // a private engine: its longest draft is the one asked for
    return 0;
}
