// `subternary serve`: the server.  Loads the models, starts the worker sets
// (ipc endpoints in a private 0700 directory), listens for clients, and on
// SIGINT/SIGTERM ends every request with an error, stops the workers and
// removes its directory.
//
// Exit codes: 0 stopped by a signal; 1 failure (models, workers, the
// endpoint); 2 bad configuration (options, config file, key files): a
// service manager should not restart.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/conf.h"
#include "cli/keys.h"
#include "cli/runtime.h"
#include "coordinator/server.h"

struct serve_opts {
    struct st_engine_config ec;
    struct st_server_config sc;
    const char *curve_secret_file, *curve_allow_file;
    bool check;
};

static void usage(void)
{
    fprintf(stderr,
            "usage: subternary serve --target T.gguf [--draft D.gguf] [--listen ENDPOINT] [--config FILE]\n"
            "         [--slots N] [--batch N] [--ctx N] [--queue N] [--nodes N] [--cpus LIST] [--workers N] [--k-max N]\n"
            "         [--max-tokens N] [--prefill-chunk N] [--step-rows N] [--prefill-slice N] [--max-msg BYTES]\n"
            "         [--max-prompt-bytes N]\n"
            "         [--curve-secret SERVER.key --curve-allow FILE] [--quiet] [--check-config]\n"
            "  --listen     tcp://HOST:PORT (PORT * picks a free one) or ipc://PATH (its directory must be 0700);\n"
            "               default tcp://127.0.0.1:5555.  Prints \"listening on ENDPOINT\" when ready.\n"
            "  --slots      concurrent sessions per node (default 4); --queue: requests that may wait (default 64)\n"
            "  --batch      sessions of a node whose rounds run as one step, reading the weights once (1-8;\n"
            "               default: the slots, at most 8 and prefill-chunk / (k-max + 1)); 1: one at a time\n"
            "  --max-tokens default for requests that give none (256)\n"
            "  --prefill-chunk rows of a prefill forward (default 256)\n"
            "  --step-rows  rows of a batched step's forward (default 64, at most the prefill chunk): a prompt\n"
            "               prefilled beside decoding sessions takes the rows their rounds leave, so more rows\n"
            "               give its first token sooner and the others longer waits between their tokens\n"
            "  --config     'key = value' lines, keys as the long options; the command line overrides them\n"
            "  -m/-d are short for --target/--draft.\n"
            "Exit codes: 0 stopped by SIGINT/SIGTERM, 1 failure, 2 bad configuration.\n");
}

static const char *const flags[] = {"quiet", "check-config", NULL};

// Parses argv[from..] into o; 0, or 2 on a usage error.
static int parse(int argc, char **argv, struct serve_opts *o, const char **config)
{
    for (int i = 1; i < argc; i++) {
        int r = st_runtime_engine_opt(argc, argv, &i, &o->ec);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--quiet")) o->sc.quiet = o->ec.quiet = true;
        else if (!strcmp(a, "--check-config")) o->check = true;
        else if (!strcmp(a, "--config") && has) *config = argv[++i];
        else if (!strcmp(a, "--listen") && has) o->sc.listen = argv[++i];
        else if (!strcmp(a, "--curve-secret") && has) o->curve_secret_file = argv[++i];
        else if (!strcmp(a, "--curve-allow") && has) o->curve_allow_file = argv[++i];
        else if (!strcmp(a, "--queue") && has) {
            if (st_args_u32("serve", a, argv[++i], 0, 1 << 20, &o->sc.queue)) return 2;
        } else if (!strcmp(a, "--max-tokens") && has) {
            if (st_args_u32("serve", a, argv[++i], 1, 1 << 20, &o->sc.max_tokens_default)) return 2;
        } else if (!strcmp(a, "--step-rows") && has) {
            if (st_args_u32("serve", a, argv[++i], 1, 1024, &o->sc.step_rows)) return 2;
        } else if (!strcmp(a, "--prefill-slice") && has) {
            if (st_args_u32("serve", a, argv[++i], 1, 1 << 20, &o->sc.prefill_slice)) return 2;
        } else if (!strcmp(a, "--max-msg") && has) {
            if (st_args_u32("serve", a, argv[++i], 4096, 1 << 30, &o->sc.max_msg_bytes)) return 2;
        } else if (!strcmp(a, "--max-prompt-bytes") && has) {
            if (st_args_u32("serve", a, argv[++i], 1, 1 << 30, &o->sc.max_prompt_bytes)) return 2;
        } else {
            fprintf(stderr, "subternary serve: unknown or incomplete option '%s'\n", a);
            return 2;
        }
    }
    return 0;
}

static void print_config(const struct serve_opts *o)
{
    const struct st_engine_config *ec = &o->ec;
    const struct st_server_config *sc = &o->sc;
    uint32_t chunk = st_engine_prefill_rows(ec), rows, slice; // what the engine and server will use
    st_server_rows(sc, chunk, &rows, &slice);
    printf("target = %s\ndraft = %s\nlisten = %s\nslots = %u\nbatch = %u\nctx = %u\nqueue = %u\nnodes = %u\n"
           "cpus = %s\nworkers = %u\nk-max = %u\nmax-tokens = %u\nprefill-chunk = %u\nstep-rows = %u\n"
           "prefill-slice = %u\nmax-msg = %u\nmax-prompt-bytes = %u\ncurve-secret = %s\ncurve-allow = %s\nquiet = %s\n",
           ec->target_path ? ec->target_path : "", ec->draft_path ? ec->draft_path : "", sc->listen, ec->n_slots,
           ec->max_batch, ec->n_ctx, sc->queue, ec->n_nodes, ec->cpus ? ec->cpus : "", ec->workers_per_node, ec->k_max,
           sc->max_tokens_default, chunk, rows, slice, sc->max_msg_bytes, sc->max_prompt_bytes,
           o->curve_secret_file ? o->curve_secret_file : "", o->curve_allow_file ? o->curve_allow_file : "",
           sc->quiet ? "true" : "false");
}

int st_cmd_serve(int argc, char **argv)
{
    struct serve_opts o = {0};
    o.sc.listen = "tcp://127.0.0.1:5555";
    o.sc.queue = 64;
    o.ec.n_slots = 4;
    const char *config = NULL, *cfg_unused = NULL;
    char **cargv = NULL;
    int cargc = 0, rc = 1;
    // The config file first, so that the command line overrides it.
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config")) config = argv[i + 1];
    struct st_error e = {{0}};
    if (config) {
        if (st_conf_read(config, flags, &cargv, &cargc, &e)) {
            fprintf(stderr, "subternary serve: %s\n", e.msg);
            return 2;
        }
        if (parse(cargc, cargv, &o, &cfg_unused)) {
            fprintf(stderr, "subternary serve: in %s\n", config);
            st_conf_free(cargv, cargc);
            return 2;
        }
    }
    if (parse(argc, argv, &o, &config)) {
        usage();
        st_conf_free(cargv, cargc);
        return 2;
    }
    if (!o.ec.target_path) {
        usage();
        st_conf_free(cargv, cargc);
        return 2;
    }
    if (o.check) {
        print_config(&o);
        st_conf_free(cargv, cargc);
        return 0;
    }
    char dir[512] = "", exe[1024], pub[41], sec[41];
    uint8_t(*allow)[32] = NULL;
    size_t n_allow = 0;
    struct st_engine *eng = NULL;
    struct st_server *srv = NULL;
    void *zctx = zmq_ctx_new();
    if (o.curve_secret_file || o.curve_allow_file) {
        rc = 2; // a configuration error: restarting would not help
        if (!o.curve_secret_file || !o.curve_allow_file) {
            st_error_set(&e, "CURVE needs both --curve-secret and --curve-allow");
            goto fail;
        }
        if (!zmq_has("curve")) {
            st_error_set(&e, "this libzmq has no CURVE support");
            goto fail;
        }
        if (st_keys_read_pair(o.curve_secret_file, pub, sec, &e) ||
            st_keys_read_allow(o.curve_allow_file, &allow, &n_allow, &e))
            goto fail;
        rc = 1;
        o.sc.curve_secret = sec;
        o.sc.allow = (const uint8_t(*)[32])allow;
        o.sc.n_allow = n_allow;
    } else if (!strncmp(o.sc.listen, "tcp://", 6) && strncmp(o.sc.listen, "tcp://127.", 10) &&
               strncmp(o.sc.listen, "tcp://localhost:", 16) && strncmp(o.sc.listen, "tcp://[::1]", 11)) {
        fprintf(stderr, "subternary serve: warning: %s is reachable from other hosts without CURVE "
                        "(--curve-secret, --curve-allow)\n", o.sc.listen);
    }
    st_runtime_signals();
    if (st_self_exe(exe, sizeof exe, &e) || st_rundir_new(dir, sizeof dir, &e)) goto fail;
    o.ec.exe = exe;
    o.ec.run_dir = dir;
    o.ec.progress = isatty(2);
    if (st_engine_open(&o.ec, zctx, &eng, &e)) goto fail;
    if (st_stop_requested) goto done;
    o.sc.target_name = o.ec.target_path;
    o.sc.draft_name = o.ec.draft_path;
    if (st_server_open(&o.sc, eng, zctx, &srv, &e)) goto fail;
    if (!o.sc.quiet)
        fprintf(stderr, "serve: %u slot(s) x %u node(s), batches of up to %u, context %u, queue %u, %u workers%s%s\n",
                eng->cfg.n_slots, eng->n_nodes, eng->n_lanes, eng->n_ctx, o.sc.queue, st_engine_workers(eng, NULL),
                o.sc.curve_secret ? ", CURVE with allow-list, server key " : "", o.sc.curve_secret ? pub : "");
    printf("listening on %s\n", st_server_endpoint(srv));
    fflush(stdout);
    if (st_server_run(srv, &st_stop_requested, &e)) goto fail;
done:
    if (!o.sc.quiet) fprintf(stderr, "serve: stopping\n");
    rc = 0;
fail:
    if (rc) fprintf(stderr, "subternary serve: %s\n", e.msg);
    st_server_close(&srv);
    st_engine_close(&eng);
    zmq_ctx_term(zctx);
    if (dir[0]) st_rundir_remove(dir);
    free(allow);
    st_conf_free(cargv, cargc);
    return rc;
}
