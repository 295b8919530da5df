// `subternary bench nodes`: a real server with one worker set per (virtual)
// node, fed over ZeroMQ by the client library: one request alone, then one
// request per node at once, alternating.  The sets run their steps side by
// side, so the aggregate tokens/s of the concurrent requests over those of
// the one alone tends to the number of nodes where each node has its own
// cores and memory (on a one-node machine, the virtual nodes share the
// memory, which caps it lower).
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bench_suites.h"
#include "cli/bench_util.h"
#include "coordinator/server.h"
#include "include/subternary.h"

#define REQ_TIMEOUT_MS 600000

// The rig's engine, served by a server thread in this process.
struct served {
    struct st_bench_rig rig;
    struct st_server *srv;
    pthread_t thread;
    bool running;
    volatile sig_atomic_t stop;
};

static void *serve_main(void *arg)
{
    struct served *sv = arg;
    struct st_error e;
    if (st_server_run(sv->srv, &sv->stop, &e)) fprintf(stderr, "bench nodes: server: %s\n", e.msg);
    return NULL;
}

static void served_close(struct served *sv)
{
    if (sv->running) {
        sv->stop = 1;
        pthread_join(sv->thread, NULL);
    }
    st_server_close(&sv->srv);
    st_bench_rig_close(&sv->rig);
}

static int served_open(struct served *sv, const struct st_bench_opts *o, struct st_error *e)
{
    memset(sv, 0, sizeof *sv);
    if (st_bench_rig_engine(&sv->rig, o, e)) return -1;
    struct st_server_config cfg = {.listen = "tcp://127.0.0.1:*", .queue = 16, .quiet = true};
    if (st_server_open(&cfg, sv->rig.eng, sv->rig.zctx, &sv->srv, e)) return -1;
    if (pthread_create(&sv->thread, NULL, serve_main, sv)) return st_error_set(e, "pthread_create failed");
    sv->running = true;
    return 0;
}

// Runs n identical greedy requests at once; returns their tokens over the
// wall time from the first submit to the last final event, or -1.
static double run_batch(struct st_client *c, const struct st_bench_common *b, const char *text, const uint32_t *ids,
                        size_t n_ids, uint32_t n, uint32_t *batch_no, uint32_t *tokens_out)
{
    char names[ST_ENGINE_MAX_NODES][32];
    double t0 = st_bench_seconds();
    for (uint32_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "b%u-%u", *batch_no, i);
        struct st_client_request rq = {.request_id = names[i], .prompt_text = ids ? NULL : text, .prompt_ids = ids,
                                       .n_prompt_ids = n_ids, .add_bos = true, .max_tokens = b->n_tokens,
                                       .ignore_eos = true, .no_speculation = b->o.draft == NULL};
        if (st_client_submit(c, &rq)) {
            fprintf(stderr, "bench nodes: submit: %s\n", st_client_error(c));
            return -1;
        }
    }
    (*batch_no)++;
    uint32_t left = n, tokens = 0;
    while (left) {
        struct st_client_event ev;
        int rc = st_client_next(c, &ev, REQ_TIMEOUT_MS);
        if (rc <= 0) {
            fprintf(stderr, "bench nodes: %s\n", rc ? st_client_error(c) : "no answer from the server");
            return -1;
        }
        if (ev.type == ST_CLIENT_EV_DONE) {
            tokens += ev.done.tokens;
            left--;
        } else if (ev.type == ST_CLIENT_EV_ERROR) {
            fprintf(stderr, "bench nodes: request %s: %s: %s\n", ev.request_id, st_client_code_name(ev.code),
                    ev.message);
            st_client_event_clear(&ev);
            return -1;
        }
        st_client_event_clear(&ev);
    }
    *tokens_out = tokens;
    return tokens / (st_bench_seconds() - t0);
}

int st_bench_nodes(int argc, char **argv)
{
    struct st_bench_common b;
    st_bench_common_defaults(&b);
    b.o.n_nodes = 2;
    for (int i = 1; i < argc; i++) {
        int r = st_bench_common_opt(argc, argv, &i, &b);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--no-draft")) {
            b.o.draft = NULL;
            continue;
        }
        fprintf(stderr, "usage: subternary bench nodes [-m TARGET] [-d DRAFT | --no-draft] [-p TEXT | --tokens IDS] "
                        "[-n N] [--runs R] [--nodes N] [--workers W] [--cpus LIST] [--ctx N] [--quick]\n");
        return 2;
    }
    if (b.quick) {
        if (b.runs == 5) b.runs = 2;
        if (b.n_tokens == 128) b.n_tokens = 48;
    }
    if (b.o.n_nodes < 2 || b.o.n_nodes > ST_ENGINE_MAX_NODES) {
        fprintf(stderr, "bench nodes: --nodes %u: give 2 to %d nodes to compare with one request alone\n", b.o.n_nodes,
                ST_ENGINE_MAX_NODES);
        return 2;
    }
    if (!b.o.n_ctx) b.o.n_ctx = 2048;
    struct served sv;
    struct st_error e = {{0}};
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    struct st_client *c = NULL;
    int rc = 1;
    if (served_open(&sv, &b.o, &e)) goto out;
    if (b.o.prompt_ids) {
        int32_t *p;
        if (st_args_parse_ids(b.o.prompt_ids, &p, &n_ids, &e)) goto out;
        ids = (uint32_t *)p;
    }
    uint32_t nodes = sv.rig.eng->n_nodes;
    struct st_client_options co = {.endpoint = st_server_endpoint(sv.srv)};
    if (st_client_connect(&co, &c)) {
        st_error_set(&e, "connecting to %s: %s", co.endpoint, c ? st_client_error(c) : "failed");
        goto out;
    }
    const char *text = b.o.prompt_text ? b.o.prompt_text : ST_BENCH_PROMPT;
    uint32_t workers = st_pool_ranks(sv.rig.eng->node[0].pool);
    printf("bench nodes: %s%s%s, %u tokens a request, %u nodes of %u worker%s, %d alternating runs\n", b.o.target,
           b.o.draft ? " + " : "", b.o.draft ? b.o.draft : " alone", b.n_tokens, nodes, workers, workers == 1 ? "" : "s",
           b.runs);
    FILE *csv = st_bench_csv(b.results, "nodes");
    if (!csv) goto out;
    fprintf(csv, "run,one_tps,concurrent_tps,ratio\n");
    struct st_bench_stat one = {0}, all = {0}, ratio = {0};
    uint32_t batch = 0, tok;
    // Warm-up: every node's first steps (page-ins, the nodes' cost figures).
    if (run_batch(c, &b, text, ids, n_ids, nodes, &batch, &tok) < 0) goto csv_out;
    for (int r = 0; r < b.runs; r++) {
        double a = run_batch(c, &b, text, ids, n_ids, 1, &batch, &tok);
        double m = a < 0 ? -1 : run_batch(c, &b, text, ids, n_ids, nodes, &batch, &tok);
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
    st_client_close(&c);
    free(ids);
    served_close(&sv);
    return rc;
}
