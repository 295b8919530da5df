// `subternary bench nodes`: a real server with one worker set per (virtual)
// node, fed over ZeroMQ by the client library: one request alone, then one
// request per node at once, alternating.  The sets run their steps side by
// side, so the aggregate tokens/s of the concurrent requests over those of
// the one alone tends to the number of nodes where each node has its own
// cores and memory (on a one-node machine, the virtual nodes share the
// memory, which caps it lower).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench_served.h"
#include "cli/bench_suites.h"

int st_bench_nodes(int argc, char **argv)
{
    struct st_bench_common b;
    st_bench_common_defaults(&b);
    b.o.n_nodes = 2;
    for (int i = 1; i < argc; i++) {
        int r = st_bench_served_opt(argc, argv, &i, &b);
        if (r < 0) return 2;
        if (r) continue;
        fprintf(stderr, "usage: subternary bench nodes [-m TARGET] [-d DRAFT | --no-draft] [-p TEXT | --tokens IDS] "
                        "[-n N] [--runs R] [--nodes N] [--workers W] [--cpus LIST] [--ctx N] [--quick]\n");
        return 2;
    }
    st_bench_served_defaults(&b);
    if (b.o.n_nodes < 2 || b.o.n_nodes > ST_ENGINE_MAX_NODES) {
        fprintf(stderr, "bench nodes: --nodes %u: give 2 to %d nodes to compare with one request alone\n", b.o.n_nodes,
                ST_ENGINE_MAX_NODES);
        return 2;
    }
    struct st_bench_rig rig;
    struct st_bench_served sv = {0};
    struct st_error e = {{0}};
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = 1;
    if (st_bench_rig_engine(&rig, &b.o, &e) || st_bench_served_open(&sv, rig.eng, rig.zctx, 0, b.o.step_rows, &e)) goto out;
    if (b.o.prompt_ids) {
        int32_t *p;
        if (st_args_parse_ids(b.o.prompt_ids, &p, &n_ids, &e)) goto out;
        ids = (uint32_t *)p;
    }
    uint32_t nodes = rig.eng->n_nodes;
    const char *text = b.o.prompt_text ? b.o.prompt_text : ST_BENCH_PROMPT;
    uint32_t workers = st_pool_ranks(rig.eng->node[0].pool);
    printf("bench nodes: %s%s%s, %u tokens a request, %u nodes of %u worker%s, %d alternating runs\n", b.o.target,
           b.o.draft ? " + " : "", b.o.draft ? b.o.draft : " alone", b.n_tokens, nodes, workers, workers == 1 ? "" : "s",
           b.runs);
    FILE *csv = st_bench_csv(b.results, "nodes");
    if (!csv) goto out;
    fprintf(csv, "run,one_tps,concurrent_tps,ratio\n");
    struct st_bench_stat one = {0}, all = {0}, ratio = {0};
    const char *who = "bench nodes";
    // Warm-up: every node's first steps (page-ins, the nodes' cost figures).
    if (st_bench_served_run(&sv, &b, text, ids, n_ids, nodes, who) < 0) goto csv_out;
    for (int r = 0; r < b.runs; r++) {
        double a = st_bench_served_run(&sv, &b, text, ids, n_ids, 1, who);
        double m = a < 0 ? -1 : st_bench_served_run(&sv, &b, text, ids, n_ids, nodes, who);
        if (m < 0) goto csv_out;
        st_bench_add(&one, a);
        st_bench_add(&all, m);
        st_bench_add(&ratio, m / a);
        fprintf(csv, "%d,%.3f,%.3f,%.4f\n", r, a, m, m / a);
        printf("  run %d: one request %.1f tokens/s, %u at once %.1f tokens/s together: %.2fx\n", r + 1, a, nodes, m,
               m / a);
        fflush(stdout);
    }
    printf("one request alone:        %8.1f +- %.1f tokens/s\n", st_bench_mean(&one), st_bench_std(&one));
    printf("%2u requests, one a node:  %8.1f +- %.1f tokens/s together\n", nodes, st_bench_mean(&all),
           st_bench_std(&all));
    printf("ratio:                    %8.2f +- %.2fx (%u nodes)\n", st_bench_mean(&ratio), st_bench_std(&ratio), nodes);
    rc = 0;
csv_out:
    fclose(csv);
out:
    if (rc && e.msg[0]) fprintf(stderr, "bench nodes: %s\n", e.msg);
    free(ids);
    st_bench_served_close(&sv);
    st_bench_rig_close(&rig);
    return rc;
}
