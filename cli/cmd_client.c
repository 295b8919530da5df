// `subternary client`: a command-line client of `subternary serve`, built on
// the C client library (include/subternary.h).  Streams the generated text to
// stdout (or prints the ids), the summary to stderr; or prints stats (also as
// Prometheus text) or health.  Several endpoints (a comma-separated list):
// the library spreads requests over the servers and adds their stats up.
//
// Exit codes: 0 done; 1 an error reply, a timeout or a connection failure;
// 2 usage; 3 cancelled; 4 busy (the server's queue was full, with several
// servers every one's: retry later).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/keys.h"
#include "cli/runtime.h"
#include "include/subternary.h"

#define EXIT_CANCELLED 3
#define EXIT_BUSY 4

static void usage(void)
{
    fprintf(stderr,
            "usage: subternary client [--connect ENDPOINTS] (-p TEXT | --tokens IDS) [-n N] [--ids] [--id ID]\n"
            "         [--temp T --top-k K --top-p P --min-p P --seed S] [--k N] [--no-spec] [--no-governor]\n"
            "         [--governor-threshold A] [--draft-p-min P] [--draft-window N] [--stop STR] [--ignore-eos] [--no-bos] [--deadline MS]\n"
            "         [--cancel-after N] [--timeout SECONDS] [--quiet]\n"
            "       subternary client [--connect ENDPOINTS] --stats [--prom] | --health\n"
            "  CURVE: --curve-server-key KEY|SERVER.pub [--curve-keys CLIENT.key]\n"
            "  ENDPOINTS: one endpoint, or several separated by commas (up to 16 servers: a request goes\n"
            "  to the least loaded, moves on when one is busy; stats and health add up all that answer).\n"
            "  Default: $SUBTERNARY_ENDPOINT, else tcp://127.0.0.1:5555.\n"
            "  --seed: default a fresh one per request (the summary says which); a seed samples the same\n"
            "  tokens again (with a draft, at a fixed --k with --no-governor).\n"
            "  Exit codes: 0 done, 1 error or timeout, 2 usage, 3 cancelled, 4 busy.\n");
}

struct opts {
    const char *endpoint, *text, *ids, *id, *server_key, *keys;
    bool want_ids, stats, prom, health, no_bos, quiet;
    uint32_t cancel_after;
    uint64_t deadline_ms;
    int timeout_ms;
    struct st_gen_params gp;
};

static int parse(int argc, char **argv, struct opts *o)
{
    for (int i = 1; i < argc; i++) {
        int r = st_runtime_gen_opt(argc, argv, &i, &o->gp);
        if (r < 0) return -1;
        if (r) continue;
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--connect") && has) o->endpoint = argv[++i];
        else if (!strcmp(a, "-p") && has) o->text = argv[++i];
        else if (!strcmp(a, "--tokens") && has) o->ids = argv[++i];
        else if (!strcmp(a, "--id") && has) o->id = argv[++i];
        else if (!strcmp(a, "--ids")) o->want_ids = true;
        else if (!strcmp(a, "--stats")) o->stats = true;
        else if (!strcmp(a, "--prom")) o->prom = true;
        else if (!strcmp(a, "--health")) o->health = true;
        else if (!strcmp(a, "--no-bos")) o->no_bos = true;
        else if (!strcmp(a, "--quiet")) o->quiet = true;
        else if (!strcmp(a, "--curve-server-key") && has) o->server_key = argv[++i];
        else if (!strcmp(a, "--curve-keys") && has) o->keys = argv[++i];
        else if (!strcmp(a, "--cancel-after") && has) {
            if (st_args_u32("client", a, argv[++i], 0, UINT32_MAX, &o->cancel_after)) return -1;
        } else if (!strcmp(a, "--deadline") && has) {
            if (st_args_uint("client", a, argv[++i], 0, UINT64_MAX, &o->deadline_ms)) return -1;
        } else if (!strcmp(a, "--timeout") && has) {
            double s;
            if (st_args_real("client", a, argv[++i], 0.001, 86400, &s)) return -1;
            o->timeout_ms = (int)(s * 1000);
        } else {
            fprintf(stderr, "subternary client: unknown or incomplete option '%s'\n", a);
            return -1;
        }
    }
    return 0;
}

static void print_stats(const struct st_client_stats *st, bool prom)
{
    if (prom) {
        size_t n = st_client_prometheus(st, NULL, 0);
        char *buf = malloc(n + 1);
        if (buf) {
            st_client_prometheus(st, buf, n + 1);
            fputs(buf, stdout);
            free(buf);
        }
        return;
    }
    printf("sessions %u / %u slots (peak %u)\nqueued %u / %u (peak %u)\n"
           "requests: done %llu, cancelled %llu, disconnected %llu, rejected (busy) %llu, failed %llu; errors %llu\n"
           "tokens %llu, %.1f tokens/s; drafted %llu, accepted %llu, acceptance %.3f\n"
           "steps %llu, %.2f sessions a step\n"
           "worker restarts %llu; uptime %.1f s\n",
           st->sessions, st->slots, st->sessions_peak, st->queued, st->queue_limit, st->queued_peak,
           (unsigned long long)st->requests_done, (unsigned long long)st->requests_cancelled,
           (unsigned long long)st->requests_disconnected, (unsigned long long)st->requests_rejected,
           (unsigned long long)st->requests_failed, (unsigned long long)st->errors,
           (unsigned long long)st->tokens_generated, st->tokens_per_second, (unsigned long long)st->drafted,
           (unsigned long long)st->accepted, st->acceptance, (unsigned long long)st->steps,
           st->steps ? (double)st->step_sessions / (double)st->steps : 0.0, (unsigned long long)st->worker_restarts,
           st->uptime_seconds);
    bool several = st->servers > 1;
    if (several) printf("servers: %u of %u answered\n", st->servers_answered, st->servers);
    for (uint32_t i = 0; i < st->n_nodes; i++) {
        if (several) printf("server %u ", st->node_server[i]);
        printf("node %u: %u sessions / %u slots, workers %u/%u ready, %llu restarts\n", st->nodes[i].node,
               st->nodes[i].sessions, st->nodes[i].slots, st->nodes[i].workers_ready, st->nodes[i].workers,
               (unsigned long long)st->nodes[i].worker_restarts);
    }
}

// Streams one request to its end; returns the exit code.
static int generate(struct st_client *c, const struct opts *o, uint32_t *prompt, size_t n_prompt)
{
    char id[64];
    if (o->id) snprintf(id, sizeof id, "%s", o->id);
    else snprintf(id, sizeof id, "cli-%d-%ld", (int)getpid(), (long)time(NULL));
    struct st_client_request r = {
        .request_id = id, .prompt_text = o->text, .prompt_ids = prompt, .n_prompt_ids = n_prompt,
        .add_bos = !o->no_bos, .max_tokens = o->gp.max_tokens, .temperature = o->gp.sampling.temperature,
        .top_k = o->gp.sampling.top_k, .top_p = o->gp.sampling.top_p, .min_p = o->gp.sampling.min_p,
        .seed = o->gp.seed, .no_speculation = !o->gp.speculate, .k = o->gp.k, .no_governor = !o->gp.governor,
        .governor_threshold = o->gp.governor_threshold, .draft_p_min = o->gp.draft_p_min,
        .draft_window = o->gp.draft_window, .stop = o->gp.stop, .n_stop = o->gp.n_stop,
        .deadline_ms = o->deadline_ms, .ignore_eos = !o->gp.stop_at_eos};
    if (st_client_submit(c, &r)) {
        fprintf(stderr, "subternary client: %s\n", st_client_error(c));
        return 1;
    }
    uint32_t *ids = NULL;
    size_t n = 0, cap = 0;
    bool cancel_sent = false;
    int rc = 1;
    for (;;) {
        struct st_client_event ev;
        int got = st_client_next(c, &ev, o->timeout_ms);
        if (got <= 0) {
            fprintf(stderr, "subternary client: %s\n",
                    got ? st_client_error(c) : "no reply from the server within the timeout");
            break;
        }
        if (strcmp(ev.request_id, id)) { // not ours
            st_client_event_clear(&ev);
            continue;
        }
        if (ev.type == ST_CLIENT_EV_CHUNK) {
            // A chunk replayed after a retry starts at offset 0: keep only what is new.
            size_t skip = ev.offset < n ? n - ev.offset : 0;
            if (skip < ev.n_ids) {
                if (n + ev.n_ids > cap) {
                    cap = (n + ev.n_ids) * 2;
                    uint32_t *nb = realloc(ids, cap * sizeof *ids);
                    if (!nb) {
                        st_client_event_clear(&ev);
                        break;
                    }
                    ids = nb;
                }
                memcpy(ids + n, ev.ids + skip, (ev.n_ids - skip) * sizeof *ids);
                n += ev.n_ids - skip;
                if (!o->want_ids && !skip) {
                    fwrite(ev.text, 1, ev.text_len, stdout);
                    fflush(stdout);
                }
            }
            if (o->cancel_after && n >= o->cancel_after && !cancel_sent) {
                cancel_sent = true;
                if (st_client_cancel(c, id)) fprintf(stderr, "subternary client: %s\n", st_client_error(c));
            }
        } else if (ev.type == ST_CLIENT_EV_DONE) {
            const struct st_client_done *d = &ev.done;
            if (o->want_ids) {
                for (size_t k = 0; k < n; k++) printf("%s%u", k ? "," : "", ids[k]);
            }
            printf("\n");
            fflush(stdout);
            if (!o->quiet)
                fprintf(stderr,
                        "\n%u tokens in %.3f s: %.2f tokens/s (prompt %u tokens in %.3f s; queued %.3f s; wall %.3f s)\n"
                        "finish %s; seed %llu; rounds %u, drafted %u, accepted %u, acceptance %.3f, mean K %.2f; "
                        "workers replaced %u\n",
                        d->tokens, d->seconds, d->seconds > 0 ? d->tokens / d->seconds : 0, d->prompt_tokens,
                        d->prompt_seconds, d->queue_seconds, d->wall_seconds, st_client_finish_name(d->reason),
                        (unsigned long long)d->seed, d->rounds, d->drafted, d->accepted, d->acceptance, d->mean_k, d->worker_restarts);
            rc = 0;
            st_client_event_clear(&ev);
            break;
        } else if (ev.type == ST_CLIENT_EV_ERROR) {
            if (n && !o->want_ids) printf("\n");
            fprintf(stderr, "subternary client: %s: %s (after %zu tokens)\n", st_client_code_name(ev.code),
                    ev.message, n);
            rc = ev.code == ST_CLIENT_ERR_CANCELLED ? EXIT_CANCELLED : ev.code == ST_CLIENT_ERR_BUSY ? EXIT_BUSY : 1;
            st_client_event_clear(&ev);
            break;
        }
        st_client_event_clear(&ev);
    }
    free(ids);
    return rc;
}

int st_cmd_client(int argc, char **argv)
{
    struct opts o = {0};
    st_runtime_gen_defaults(&o.gp);
    o.gp.seed = 0; // the server draws one per request
    o.timeout_ms = 60000;
    o.endpoint = getenv("SUBTERNARY_ENDPOINT");
    if (!o.endpoint || !*o.endpoint) o.endpoint = "tcp://127.0.0.1:5555";
    if (parse(argc, argv, &o) || (!o.text && !o.ids && !o.stats && !o.health) || (o.text && o.ids)) {
        usage();
        return 2;
    }
    struct st_error e;
    char server_key[41], pub[41], sec[41];
    struct st_client_options co = {.endpoint = o.endpoint};
    if (o.server_key) {
        if (st_keys_read_public(o.server_key, server_key, &e)) {
            fprintf(stderr, "subternary client: --curve-server-key: %s\n", e.msg);
            return 2;
        }
        co.server_key = server_key;
    }
    if (o.keys) {
        if (st_keys_read_pair(o.keys, pub, sec, &e)) {
            fprintf(stderr, "subternary client: --curve-keys: %s\n", e.msg);
            return 2;
        }
        co.public_key = pub;
        co.secret_key = sec;
    }
    uint32_t *prompt = NULL;
    size_t n_prompt = 0;
    if (o.ids) {
        int32_t *p;
        if (st_args_parse_ids(o.ids, &p, &n_prompt, &e)) {
            fprintf(stderr, "subternary client: --tokens: %s\n", e.msg);
            return 2;
        }
        prompt = (uint32_t *)p; // ids were checked non-negative
    }
    struct st_client *c;
    int rc = 0;
    if (st_client_connect(&co, &c)) {
        fprintf(stderr, "subternary client: %s\n", st_client_error(c));
        st_client_close(&c);
        free(prompt);
        return 1;
    }
    if (o.health) {
        struct st_client_health h;
        int got = st_client_health(c, &h, o.timeout_ms);
        if (got == 1) {
            printf("%s: workers %u/%u ready, %u sessions, %u queued; target %s%s%s", h.ok ? "ok" : "degraded",
                   h.workers_ready, h.workers_total, h.sessions, h.queued, h.target, h.draft[0] ? ", draft " : "",
                   h.draft);
            if (h.servers > 1) printf("; %u of %u servers answered", h.servers_answered, h.servers);
            printf("\n");
            if (!h.ok) rc = 1;
        } else {
            fprintf(stderr, "subternary client: health: %s\n", got ? st_client_error(c) : "no reply (timeout)");
            rc = 1;
        }
    }
    if (o.stats && !rc) {
        struct st_client_stats st;
        int got = st_client_stats(c, &st, o.timeout_ms);
        if (got == 1) {
            print_stats(&st, o.prom);
        } else {
            fprintf(stderr, "subternary client: stats: %s\n", got ? st_client_error(c) : "no reply (timeout)");
            rc = 1;
        }
    }
    if ((o.text || o.ids) && !rc) rc = generate(c, &o, prompt, n_prompt);
    fflush(stdout);
    st_client_close(&c);
    free(prompt);
    return rc;
}
