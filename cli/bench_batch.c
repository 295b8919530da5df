// `subternary bench batch`: a real server with one worker set (one node),
// fed over ZeroMQ by the client library: N identical requests at once, with
// their rounds batched (one step carries every session's round, so each
// forward reads the weights once for all of them) against the same server
// taking one session a step (--batch 1), alternating, and one request alone
// for scale.  Decoding reads the weights at the memory's rate, so batching
// N sessions approaches N times the tokens/s of one, until the rows' own
// compute shows.  With --beside P it also measures a prompt of P tokens
// arriving while one request decodes: the decoder's longest wait between
// chunks meanwhile, and the prompt's time to its token (batched, its slices
// ride in the decoder's steps; one a step, they run whole in between).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench_served.h"
#include "cli/bench_suites.h"

// One server of the given batch on the rig's engine, n requests at once.
static double served_run(struct st_bench_rig *rig, uint32_t max_batch, const struct st_bench_common *b,
                         const char *text, const uint32_t *ids, size_t n_ids, uint32_t n)
{
    struct st_bench_served sv;
    struct st_error e = {{0}};
    double tps = -1;
    if (st_bench_served_open(&sv, rig->eng, rig->zctx, max_batch, b->o.step_rows, &e))
        fprintf(stderr, "bench batch: %s\n", e.msg);
    else
        tps = st_bench_served_run(&sv, b, text, ids, n_ids, n, "bench batch");
    st_bench_served_close(&sv);
    return tps;
}

// The --beside runs: batched and one a step, alternating.
static int beside_runs(struct st_bench_rig *rig, const struct st_bench_common *b, const char *text,
                       const uint32_t *ids, size_t n_ids, uint32_t n_prompt)
{
    FILE *csv = st_bench_csv(b->results, "batch-beside");
    if (!csv) return -1;
    fprintf(csv, "run,batched_gap_s,batched_ttft_s,one_a_step_gap_s,one_a_step_ttft_s\n");
    struct st_bench_stat gap[2], ttft[2];
    memset(gap, 0, sizeof gap);
    memset(ttft, 0, sizeof ttft);
    uint32_t dec_tokens = rig->eng->n_ctx - n_prompt - 64; // runs past the prompt's prefill
    int rc = 0;
    for (int r = 0; r < b->runs && !rc; r++) {
        double g[2], t[2];
        for (int k = 0; k < 2 && !rc; k++) {
            struct st_bench_served sv;
            struct st_error e = {{0}};
            rc = st_bench_served_open(&sv, rig->eng, rig->zctx, k ? 1 : 0, b->o.step_rows, &e);
            if (rc) fprintf(stderr, "bench batch: %s\n", e.msg);
            else rc = st_bench_served_beside(&sv, text, ids, n_ids, n_prompt, rig->eng->n_vocab, dec_tokens, &g[k],
                                             &t[k], "bench batch");
            st_bench_served_close(&sv);
            if (!rc) st_bench_add(&gap[k], g[k]), st_bench_add(&ttft[k], t[k]);
        }
        if (rc) break;
        fprintf(csv, "%d,%.4f,%.4f,%.4f,%.4f\n", r, g[0], t[0], g[1], t[1]);
        printf("  run %d, a prompt of %u beside a decoding request: its longest wait %.0f ms batched, %.0f ms one a "
               "step; the prompt's token after %.2f s / %.2f s\n",
               r + 1, n_prompt, g[0] * 1e3, g[1] * 1e3, t[0], t[1]);
        fflush(stdout);
    }
    fclose(csv);
    if (rc) return -1;
    printf("decoder's longest wait, batched:    %8.1f +- %.1f ms (prompt's token after %.2f s)\n",
           st_bench_mean(&gap[0]) * 1e3, st_bench_std(&gap[0]) * 1e3, st_bench_mean(&ttft[0]));
    printf("decoder's longest wait, one a step: %8.1f +- %.1f ms (prompt's token after %.2f s)\n",
           st_bench_mean(&gap[1]) * 1e3, st_bench_std(&gap[1]) * 1e3, st_bench_mean(&ttft[1]));
    printf("longest wait, one a step / batched: %8.2fx\n", st_bench_mean(&gap[1]) / st_bench_mean(&gap[0]));
    return 0;
}

int st_bench_batch(int argc, char **argv)
{
    struct st_bench_common b;
    st_bench_common_defaults(&b);
    b.o.n_nodes = 1;
    uint32_t n = 4, beside = 0;
    for (int i = 1; i < argc; i++) {
        int r = st_bench_served_opt(argc, argv, &i, &b);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--beside") && i + 1 < argc) {
            if (st_args_u32("bench batch", "--beside", argv[++i], 1, 1u << 20, &beside)) return 2;
            continue;
        }
        if (!strcmp(argv[i], "--sessions") && i + 1 < argc) {
            if (st_args_u32("bench batch", "--sessions", argv[++i], 2, ST_ENGINE_MAX_LANES, &n)) return 2;
            continue;
        }
        fprintf(stderr, "usage: subternary bench batch [-m TARGET] [-d DRAFT | --no-draft] [-p TEXT | --tokens IDS] "
                        "[--sessions N] [--beside P] [-n N] [--runs R] [--workers W] [--cpus LIST] [--ctx N] [--prefill-chunk N] "
                        "[--step-rows N] "
                        "[--quick]\n");
        return 2;
    }
    st_bench_served_defaults(&b);
    if (b.o.n_nodes != 1) {
        fprintf(stderr, "bench batch: one node (--nodes 1): batching is within a node's worker set\n");
        return 2;
    }
    if (beside && (uint64_t)beside + 256 > b.o.n_ctx) {
        fprintf(stderr, "bench batch: --beside %u: a prompt that long leaves no room to decode beside it in the "
                        "context of %u (--ctx)\n", beside, b.o.n_ctx);
        return 2;
    }
    b.o.n_slots = n;
    struct st_bench_rig rig;
    struct st_error e = {{0}};
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = 1;
    if (st_bench_rig_engine(&rig, &b.o, &e)) goto out;
    if (rig.eng->n_lanes < n) {
        st_error_set(&e, "%u sessions do not fit one step (%u lane%s: prefill chunk %u / (k-max %u + 1))", n,
                     rig.eng->n_lanes, rig.eng->n_lanes == 1 ? "" : "s", rig.eng->m_max, rig.eng->k_max);
        goto out;
    }
    if (b.o.prompt_ids) {
        int32_t *p;
        if (st_args_parse_ids(b.o.prompt_ids, &p, &n_ids, &e)) goto out;
        ids = (uint32_t *)p;
    }
    const char *text = b.o.prompt_text ? b.o.prompt_text : ST_BENCH_PROMPT;
    uint32_t workers = st_pool_ranks(rig.eng->node[0].pool);
    printf("bench batch: %s%s%s, %u tokens a request, %u requests at once, 1 node of %u worker%s, %d alternating "
           "runs\n",
           b.o.target, b.o.draft ? " + " : "", b.o.draft ? b.o.draft : " alone", b.n_tokens, n, workers,
           workers == 1 ? "" : "s", b.runs);
    FILE *csv = st_bench_csv(b.results, "batch");
    if (!csv) goto out;
    fprintf(csv, "run,one_tps,turns_tps,batched_tps,ratio\n");
    struct st_bench_stat one = {0}, turns = {0}, batched = {0}, ratio = {0};
    // Warm-up: page-ins and the node's cost figures.
    if (served_run(&rig, 0, &b, text, ids, n_ids, n) < 0) goto csv_out;
    for (int r = 0; r < b.runs; r++) {
        double a = served_run(&rig, 1, &b, text, ids, n_ids, 1);
        double t = a < 0 ? -1 : served_run(&rig, 1, &b, text, ids, n_ids, n);
        double m = t < 0 ? -1 : served_run(&rig, 0, &b, text, ids, n_ids, n);
        if (m < 0) goto csv_out;
        st_bench_add(&one, a);
        st_bench_add(&turns, t);
        st_bench_add(&batched, m);
        st_bench_add(&ratio, m / t);
        fprintf(csv, "%d,%.3f,%.3f,%.3f,%.4f\n", r, a, t, m, m / t);
        printf("  run %d: one request %.1f tokens/s; %u at once: one a step %.1f, batched %.1f tokens/s together: "
               "%.2fx\n",
               r + 1, a, n, t, m, m / t);
        fflush(stdout);
    }
    printf("one request alone:              %8.1f +- %.1f tokens/s\n", st_bench_mean(&one), st_bench_std(&one));
    printf("%2u at once, one session a step: %8.1f +- %.1f tokens/s together\n", n, st_bench_mean(&turns),
           st_bench_std(&turns));
    printf("%2u at once, batched:            %8.1f +- %.1f tokens/s together\n", n, st_bench_mean(&batched),
           st_bench_std(&batched));
    printf("ratio batched / one a step:     %8.2f +- %.2fx (%.2fx one request alone)\n", st_bench_mean(&ratio),
           st_bench_std(&ratio), st_bench_mean(&batched) / st_bench_mean(&one));
    rc = beside && beside_runs(&rig, &b, text, ids, n_ids, beside) ? 1 : 0;
csv_out:
    fclose(csv);
out:
    if (rc && e.msg[0]) fprintf(stderr, "bench batch: %s\n", e.msg);
    free(ids);
    st_bench_rig_close(&rig);
    return rc;
}
