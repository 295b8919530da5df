// `subternary generate`: embedded mode.  Starts a coordinator engine and its
// workers privately (ipc endpoints in a private 0700 directory, removed on
// exit and on Ctrl-C), runs one prompt, streams the text, prints a summary.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/runtime.h"
#include "include/subternary.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: subternary generate -m TARGET.gguf [-d DRAFT.gguf] (-p TEXT | --tokens IDS) [-n N]\n"
            "         [--temp T --top-k K --top-p P --min-p P --seed S] [--k N] [--no-governor]\n"
            "         [--governor-threshold A] [--draft-p-min P] [--draft-window N] [--stop STR] [--ignore-eos]\n"
            "         [--ids] [--json] [--quiet]\n"
            "         [--ctx N --cpus LIST --nodes N --workers N --k-max N]\n"
            "Without -d the target decodes alone (autoregressive baseline).\n");
}

// Why the generation ended: the session's reason (its enum shares the
// wire protocol's values, whose names the client library holds), or Ctrl-C.
static const char *finish_name(enum st_finish fin, bool interrupted)
{
    return interrupted && fin == ST_FINISH_NONE ? "interrupted" : st_client_finish_name((int)fin);
}

static void print_summary(const struct st_session_stats *st, const struct st_engine *eng, bool json, bool spec,
                          const char *finish)
{
    double tps = st->seconds > 0 ? st->tokens / st->seconds : 0;
    double acc = st->drafted ? (double)st->accepted / st->drafted : 0;
    double mean_k = st->rounds - st->suspended_rounds > 0 && spec ? st->k_sum / (st->rounds - st->suspended_rounds) : 0;
    double other = st->seconds - st->draft_seconds - st->verify_seconds;
    fprintf(stderr,
            "\n%u tokens in %.3f s: %.2f tokens/s (prompt %u tokens in %.3f s); finish: %s\n"
            "rounds %u, drafted %u, accepted %u, acceptance %.3f, mean K %.2f, suspended rounds %u\n"
            "time: draft %.3f s, verify %.3f s, other %.3f s (draft+verify rounds %.3f s, target-only steps %.3f s); "
            "commit %.0f ns/round; workers replaced %u\n",
            st->tokens, st->seconds, tps, st->prompt_tokens, st->prompt_seconds, finish, st->rounds, st->drafted,
            st->accepted, acc, mean_k, st->suspended_rounds, st->draft_seconds, st->verify_seconds, other > 0 ? other : 0,
            st->round_seconds, st->target_only_seconds, st->commits ? st->commit_ns_sum / st->commits : 0.0,
            st->restarts);
    if (json)
        fprintf(stderr,
                "{\"tokens\": %u, \"seconds\": %.6f, \"tokens_per_second\": %.4f, \"prompt_tokens\": %u, "
                "\"prompt_seconds\": %.6f, \"rounds\": %u, \"drafted\": %u, \"accepted\": %u, \"acceptance\": %.4f, "
                "\"mean_k\": %.3f, \"suspended_rounds\": %u, \"draft_seconds\": %.6f, \"verify_seconds\": %.6f, "
                "\"other_seconds\": %.6f, \"round_seconds\": %.6f, \"target_only_seconds\": %.6f, "
                "\"commit_ns\": %.1f, \"workers\": %u, \"restarts\": %u, \"speculative\": %s, \"finish\": \"%s\"}\n",
                st->tokens, st->seconds, tps, st->prompt_tokens, st->prompt_seconds, st->rounds, st->drafted,
                st->accepted, acc, mean_k, st->suspended_rounds, st->draft_seconds, st->verify_seconds,
                other > 0 ? other : 0, st->round_seconds, st->target_only_seconds,
                st->commits ? st->commit_ns_sum / st->commits : 0.0, st_engine_workers(eng, NULL), st->restarts,
                spec ? "true" : "false", finish);
}

// Per-op attribution of the decode steps, sorted by share of the time.
static void print_profile(const struct st_session_stats *st)
{
    uint32_t order[ST_POOL_MAX_OPS];
    double total = st_session_stats_op_order(st, order);
    fprintf(stderr, "\nprofile of %u decode steps (rank 0; %llu barriers, %.1f per step):\n", st->steps,
            (unsigned long long)st->barriers, st->steps ? (double)st->barriers / st->steps : 0.0);
    fprintf(stderr, "  %-8s %-12s %10s %7s %10s %8s\n", "model", "op", "seconds", "share", "ms/token", "GB/s");
    for (uint32_t i = 0; i < st->n_ops; i++) {
        uint32_t k = order[i];
        double sec = st->op_seconds[k];
        fprintf(stderr, "  %-8s %-12s %10.4f %6.1f%% %10.3f %8.2f\n", st->op_model[k] ? "draft" : "target", st->op_names[k], sec, total > 0 ? 100 * sec / total : 0,
                st->tokens ? 1e3 * sec / st->tokens : 0, sec > 0 ? st->op_bytes[k] / sec / 1e9 : 0);
    }
    fprintf(stderr, "  wall time of the steps: %.4f s; outside the workers' ops (messages, coordinator): %.4f s\n",
            st->seconds, st->seconds - total > 0 ? st->seconds - total : 0);
}

int st_cmd_generate(int argc, char **argv)
{
    struct st_engine_config ec = {0};
    struct st_gen_params gp;
    st_runtime_gen_defaults(&gp);
    const char *text = NULL, *ids = NULL;
    bool want_ids = false, json = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        int r = st_runtime_engine_opt(argc, argv, &i, &ec);
        if (!r) r = st_runtime_gen_opt(argc, argv, &i, &gp);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-p") && i + 1 < argc) text = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) ids = argv[++i];
        else if (!strcmp(argv[i], "--ids")) want_ids = true;
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--quiet")) quiet = true;
        else if (!strcmp(argv[i], "--profile")) gp.profile = true;
        else {
            fprintf(stderr, "subternary generate: unknown or incomplete option '%s'\n", argv[i]);
            usage();
            return 2;
        }
    }
    if (!ec.target_path || (!text && !ids)) {
        usage();
        return 2;
    }
    if (st_runtime_fit_k_max(&ec, &gp)) return 2;
    struct st_error e = {{0}};
    char dir[512] = "", exe[1024];
    int32_t *prompt = NULL, *out = NULL;
    size_t n_prompt = 0;
    struct st_engine *eng = NULL;
    struct st_session *s = NULL;
    void *zctx = zmq_ctx_new();
    int rc = 1;
    st_runtime_signals();
    if (ids && st_args_parse_ids(ids, &prompt, &n_prompt, &e)) goto fail;
    if (st_self_exe(exe, sizeof exe, &e) || st_rundir_new(dir, sizeof dir, &e)) goto fail;
    ec.exe = exe;
    ec.run_dir = dir;
    ec.progress = true;
    ec.quiet = quiet;
    if (st_engine_open(&ec, zctx, &eng, &e)) goto fail;
    if (text) {
        if (!eng->tok) {
            st_error_set(&e, "%s has no tokenizer: give --tokens", ec.target_path);
            goto fail;
        }
        if (st_tok_encode(eng->tok, text, strlen(text), true, &prompt, &n_prompt, &e)) goto fail;
    }
    if (!ec.draft_path) gp.speculate = false;
    if (st_session_start(eng, &gp, prompt, (uint32_t)n_prompt, ++eng->next_session, &s, &e)) goto fail;
    out = malloc((eng->k_max + 2) * sizeof *out);
    enum st_finish fin = ST_FINISH_NONE;
    while (fin == ST_FINISH_NONE && !st_stop_requested) {
        int n = st_session_round(s, out, eng->k_max + 2, &fin, &e);
        if (n < 0) goto fail;
        if (eng->tok && !want_ids) {
            for (int k = 0; k < n; k++) {
                char piece[256];
                int len = st_tok_decode_piece(eng->tok, out[k], piece, sizeof piece);
                if (len > 0) fwrite(piece, 1, len < (int)sizeof piece ? (size_t)len : sizeof piece, stdout);
            }
            fflush(stdout);
        }
    }
    if (want_ids) {
        uint32_t n;
        const int32_t *o = st_session_output(s, &n);
        for (uint32_t k = 0; k < n; k++) printf("%s%d", k ? "," : "", o[k]);
        printf("\n");
    } else {
        printf("\n");
    }
    fflush(stdout);
    if (gp.profile) print_profile(st_session_stats(s));
    print_summary(st_session_stats(s), eng, json, gp.speculate, finish_name(fin, st_stop_requested));
    rc = st_stop_requested ? 130 : 0;
fail:
    if (rc == 1) fprintf(stderr, "subternary generate: %s\n", e.msg);
    st_session_end(&s);
    st_engine_close(&eng);
    zmq_ctx_term(zctx);
    if (dir[0]) st_rundir_remove(dir);
    free(prompt);
    free(out);
    return rc;
}
