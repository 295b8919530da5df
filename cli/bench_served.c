#include "cli/bench_served.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

#define REQ_TIMEOUT_MS 600000
#define MAX_AT_ONCE 64

int st_bench_served_opt(int argc, char **argv, int *i, struct st_bench_common *b)
{
    int r = st_bench_common_opt(argc, argv, i, b);
    if (r) return r;
    if (!strcmp(argv[*i], "--step-rows") && *i + 1 < argc)
        return st_args_u32("bench", "--step-rows", argv[++*i], 1, 1024, &b->o.step_rows) ? -1 : 1;
    if (strcmp(argv[*i], "--no-draft")) return 0;
    b->o.draft = NULL;
    return 1;
}

void st_bench_served_defaults(struct st_bench_common *b)
{
    if (b->quick) {
        if (b->runs == 5) b->runs = 2;
        if (b->n_tokens == 128) b->n_tokens = 48;
    }
    if (!b->o.n_ctx) b->o.n_ctx = 2048;
}

static void *serve_main(void *arg)
{
    struct st_bench_served *sv = arg;
    struct st_error e;
    if (st_server_run(sv->srv, &sv->stop, &e)) fprintf(stderr, "bench: server: %s\n", e.msg);
    return NULL;
}

int st_bench_served_open(struct st_bench_served *sv, struct st_engine *eng, void *zctx, uint32_t max_batch,
                         uint32_t step_rows, struct st_error *e)
{
    memset(sv, 0, sizeof *sv);
    struct st_server_config cfg = {.listen = "tcp://127.0.0.1:*", .queue = MAX_AT_ONCE, .quiet = true,
                                   .max_batch = max_batch, .step_rows = step_rows};
    if (st_server_open(&cfg, eng, zctx, &sv->srv, e)) return -1;
    if (pthread_create(&sv->thread, NULL, serve_main, sv)) return st_error_set(e, "pthread_create failed");
    sv->running = true;
    struct st_client_options co = {.endpoint = st_server_endpoint(sv->srv)};
    if (st_client_connect(&co, &sv->c))
        return st_error_set(e, "connecting to %s: %s", co.endpoint, sv->c ? st_client_error(sv->c) : "failed");
    return 0;
}

void st_bench_served_close(struct st_bench_served *sv)
{
    st_client_close(&sv->c);
    if (sv->running) {
        sv->stop = 1;
        pthread_join(sv->thread, NULL);
        sv->running = false;
    }
    st_server_close(&sv->srv);
}

// The next event of the served requests; -1 (said on stderr) on a failure
// or a timeout.
static int next_event(struct st_bench_served *sv, struct st_client_event *ev, const char *who)
{
    int rc = st_client_next(sv->c, ev, REQ_TIMEOUT_MS);
    if (rc <= 0) {
        fprintf(stderr, "%s: %s\n", who, rc ? st_client_error(sv->c) : "no answer from the server");
        return -1;
    }
    return 0;
}

double st_bench_served_run(struct st_bench_served *sv, const struct st_bench_common *b, const char *text,
                           const uint32_t *ids, size_t n_ids, uint32_t n, const char *who)
{
    char names[MAX_AT_ONCE][32];
    if (n > MAX_AT_ONCE) n = MAX_AT_ONCE;
    double t0 = st_bench_seconds();
    for (uint32_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "b%u-%u", sv->batch_no, i);
        struct st_client_request rq = {.request_id = names[i], .prompt_text = ids ? NULL : text, .prompt_ids = ids,
                                       .n_prompt_ids = n_ids, .add_bos = true, .max_tokens = b->n_tokens,
                                       .ignore_eos = true, .no_speculation = b->o.draft == NULL};
        if (st_client_submit(sv->c, &rq)) {
            fprintf(stderr, "%s: submit: %s\n", who, st_client_error(sv->c));
            return -1;
        }
    }
    sv->batch_no++;
    uint32_t left = n, tokens = 0;
    while (left) {
        struct st_client_event ev;
        if (next_event(sv, &ev, who)) return -1;
        if (ev.type == ST_CLIENT_EV_DONE) {
            tokens += ev.done.tokens;
            left--;
        } else if (ev.type == ST_CLIENT_EV_ERROR) {
            fprintf(stderr, "%s: request %s: %s: %s\n", who, ev.request_id, st_client_code_name(ev.code), ev.message);
            st_client_event_clear(&ev);
            return -1;
        }
        st_client_event_clear(&ev);
    }
    return tokens / (st_bench_seconds() - t0);
}

int st_bench_served_beside(struct st_bench_served *sv, const char *text, const uint32_t *ids, size_t n_ids,
                           uint32_t n_prompt, uint32_t n_vocab, uint32_t max_tokens, double *max_gap, double *ttft,
                           const char *who)
{
    char dec[32], lng[32];
    snprintf(dec, sizeof dec, "d%u", sv->batch_no);
    snprintf(lng, sizeof lng, "p%u", sv->batch_no++);
    uint32_t *prompt = malloc(n_prompt * sizeof *prompt);
    if (!prompt) return -1;
    st_bench_synthetic_ids(prompt, n_prompt, n_vocab);
    struct st_client_request d = {.request_id = dec, .prompt_text = ids ? NULL : text, .prompt_ids = ids,
                                  .n_prompt_ids = n_ids, .add_bos = true, .max_tokens = max_tokens, .ignore_eos = true};
    struct st_client_request l = {.request_id = lng, .prompt_ids = prompt, .n_prompt_ids = n_prompt, .max_tokens = 1,
                                  .ignore_eos = true};
    int rc = -1, state = 0; // 0: waiting for the decoder, 1: the prompt runs, 2: its token came
    bool dec_done = false;
    double t_sub = 0, last = 0;
    *max_gap = *ttft = 0;
    if (st_client_submit(sv->c, &d)) goto fail;
    while (!dec_done || state < 2) {
        struct st_client_event ev;
        if (next_event(sv, &ev, who)) goto out;
        double now = st_bench_seconds();
        bool is_dec = !strcmp(ev.request_id, dec);
        if (ev.type == ST_CLIENT_EV_ERROR && !(is_dec && state == 2)) {
            fprintf(stderr, "%s: request %s: %s\n", who, ev.request_id, ev.message);
            st_client_event_clear(&ev);
            goto out;
        }
        if (is_dec && ev.type == ST_CLIENT_EV_CHUNK) {
            if (state == 0) { // the decoder streams: the prompt arrives
                if (st_client_submit(sv->c, &l)) goto fail;
                state = 1;
                t_sub = last = st_bench_seconds();
            } else if (state == 1) {
                if (now - last > *max_gap) *max_gap = now - last;
                last = now;
            }
        }
        if (is_dec && (ev.type == ST_CLIENT_EV_DONE || ev.type == ST_CLIENT_EV_ERROR)) {
            dec_done = true;
            if (state < 2) { // it ended before the prompt was in: the bench cannot say
                fprintf(stderr, "%s: the decoding request ended before the prompt was prefilled\n", who);
                st_client_event_clear(&ev);
                goto out;
            }
        }
        if (!is_dec && ev.type == ST_CLIENT_EV_DONE) {
            *ttft = now - t_sub;
            if (now - last > *max_gap) *max_gap = now - last;
            state = 2;
            if (!dec_done && st_client_cancel(sv->c, dec)) goto fail;
        }
        st_client_event_clear(&ev);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "%s: %s\n", who, st_client_error(sv->c));
out:
    free(prompt);
    return rc;
}
