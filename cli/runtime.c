#include "cli/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int num(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "subternary: %s: '%s' is not a number in [%g, %g]\n", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
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
    double x;
    if (!strcmp(o, "-m") || !strcmp(o, "--target")) { VALUE(); ec->target_path = v; return 1; }
    if (!strcmp(o, "-d") || !strcmp(o, "--draft")) { VALUE(); ec->draft_path = v; return 1; }
    if (!strcmp(o, "--ctx")) { VALUE(); if (num(o, v, 16, 1 << 20, &x)) return -1; ec->n_ctx = (uint32_t)x; return 1; }
    if (!strcmp(o, "--slots")) { VALUE(); if (num(o, v, 1, 4096, &x)) return -1; ec->n_slots = (uint32_t)x; return 1; }
    if (!strcmp(o, "--k-max")) { VALUE(); if (num(o, v, 1, ST_ENGINE_K_LIMIT, &x)) return -1; ec->k_max = (uint32_t)x; return 1; }
    if (!strcmp(o, "--nodes")) { VALUE(); if (num(o, v, 1, ST_ENGINE_MAX_NODES, &x)) return -1; ec->n_nodes = (uint32_t)x; return 1; }
    if (!strcmp(o, "--cpus")) { VALUE(); ec->cpus = v; return 1; }
    if (!strcmp(o, "--workers")) { VALUE(); if (num(o, v, 1, 128, &x)) return -1; ec->workers_per_node = (uint32_t)x; return 1; }
    if (!strcmp(o, "--hang-ms")) { VALUE(); if (num(o, v, 50, 600000, &x)) return -1; ec->hang_ms = (uint32_t)x; return 1; }
    if (!strcmp(o, "--prefill-chunk")) { VALUE(); if (num(o, v, 1, 1024, &x)) return -1; ec->prefill_chunk = (uint32_t)x; return 1; }
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
    double x;
    if (!strcmp(o, "-n") || !strcmp(o, "--max-tokens")) { VALUE(); if (num(o, v, 1, 1 << 20, &x)) return -1; gp->max_tokens = (uint32_t)x; return 1; }
    if (!strcmp(o, "--temp")) { VALUE(); if (num(o, v, 0, 100, &x)) return -1; gp->sampling.temperature = (float)x; return 1; }
    if (!strcmp(o, "--top-k")) { VALUE(); if (num(o, v, 0, 1 << 24, &x)) return -1; gp->sampling.top_k = (uint32_t)x; return 1; }
    if (!strcmp(o, "--top-p")) { VALUE(); if (num(o, v, 0, 1, &x)) return -1; gp->sampling.top_p = (float)x; return 1; }
    if (!strcmp(o, "--min-p")) { VALUE(); if (num(o, v, 0, 1, &x)) return -1; gp->sampling.min_p = (float)x; return 1; }
    if (!strcmp(o, "--seed")) { VALUE(); if (num(o, v, 0, 1.8e19, &x)) return -1; gp->seed = (uint64_t)x; return 1; }
    if (!strcmp(o, "--k")) { VALUE(); if (num(o, v, 0, 32, &x)) return -1; gp->k = (uint32_t)x; return 1; }
    if (!strcmp(o, "--no-governor")) { gp->governor = false; return 1; }
    if (!strcmp(o, "--draft-p-min")) { VALUE(); if (num(o, v, 0, 0.999, &x)) return -1; gp->draft_p_min = (float)x; return 1; }
    if (!strcmp(o, "--draft-window")) { VALUE(); if (num(o, v, 1, UINT32_MAX, &x)) return -1; gp->draft_window = (uint32_t)x; return 1; }
    if (!strcmp(o, "--governor-threshold")) { VALUE(); if (num(o, v, 0, 1, &x)) return -1; gp->governor_threshold = (float)x; return 1; }
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
