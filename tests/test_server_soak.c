// A randomized soak of a real `subternary serve` process: a few hundred
// requests of every kind a client sends, interleaved on a server with
// fewer slots than requests in flight (so they queue, batch and share
// steps with prompt slices): greedy speculative (adaptive and fixed K, with
// and without governor), target-only, seeded sampling, cancels after some
// chunks, deadlines, invalid requests, requests of a client that goes away,
// prompts that reach the context limit.  Every request gets exactly one
// final event with the code its kind allows; every id streamed is the
// reference's (greedy: `subternary generate`; sampled: the same request
// alone), contiguous; a finish at the context limit stops exactly there.
// Afterwards the server runs, no worker was restarted, no request failed,
// every slot is free again, and a last batch still equals the references.
// Once more with workers SIGKILLed all along, on one node and on two: the same
// holds, but for the restarts.
//
// ST_SOAK_SEED and ST_SOAK_REQUESTS replay a plan or make it longer;
// ST_SOAK_ONLY=test_soak_... runs one configuration.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/server_support.h"

#define CTX 384
#define REF_TOKENS 200
#define IN_FLIGHT 7
#define MAX_REQUESTS 2000
#ifdef __SANITIZE_ADDRESS__ // the sanitizer tree runs it too, at about a fifth of the speed
#define DEFAULT_REQUESTS 80
#else
#define DEFAULT_REQUESTS 240
#endif
#define N_SHORT ST_TEST_N_PROMPTS
#define N_LONG 2
#define N_PROMPTS (N_SHORT + N_LONG)
#define N_SAMPLED 3
#define SAMPLED_TOKENS 64 // the sampled requests' longest: their references run at the start

static const uint32_t long_len[N_LONG] = {150, 300}; // 300 + 200 tokens cross CTX

static uint32_t prompt[N_PROMPTS][300];
static size_t n_prompt[N_PROMPTS];
static uint32_t *ref[N_PROMPTS];
static int n_ref[N_PROMPTS];

enum kind { GREEDY, GREEDY_K, TARGET, SAMPLED, SAMPLED_FREE, CANCEL, DEADLINE, INVALID, DISCONNECT, N_KINDS };
static const char *kind_name[N_KINDS] = {"greedy", "greedy-k", "target", "sampled", "sampled-free", "cancel",
                                         "deadline", "invalid", "disconnect"};

struct req {
    char id[24];
    enum kind kind;
    int prompt, sampled, cancel_after, want_code, first_code;
    bool cancelled;
    struct st_client_request q;
    uint32_t bad_ids[CTX + 8];
};

static uint64_t rng;
static uint32_t draw(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static unsigned env_u(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

// A seeded sampled request: speculative at a fixed K without governor (or
// target-only), so it samples the same ids alone or beside others.
static void sampled_params(struct st_client_request *q, int i)
{
    q->temperature = i == 1 ? 1.3f : 0.8f;
    q->top_k = i == 2 ? 40 : 0;
    q->top_p = i == 0 ? 0.9f : 0;
    q->seed = 7000 + (uint64_t)i;
    q->k = (uint32_t)(2 + i);
    q->no_governor = true;
    q->no_speculation = i == 2;
}

static void plan(struct req *r, uint32_t n)
{
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "soak%u", n);
    r->kind = (enum kind)draw(N_KINDS);
    r->prompt = (int)draw(N_PROMPTS);
    r->q = (struct st_client_request){.request_id = r->id, .prompt_ids = prompt[r->prompt],
                                      .n_prompt_ids = n_prompt[r->prompt], .ignore_eos = true,
                                      .max_tokens = 1 + draw(REF_TOKENS)};
    switch (r->kind) {
    case GREEDY: // what changes no greedy output: the draft's window and early stop
        r->q.draft_window = draw(2) ? 8 + draw(64) : 0;
        r->q.draft_p_min = draw(2) ? 0.4f : 0;
        break;
    case GREEDY_K:
        r->q.k = 1 + draw(8);
        r->q.no_governor = draw(2);
        break;
    case TARGET: r->q.no_speculation = true; break;
    case SAMPLED:
        r->sampled = (int)draw(N_SAMPLED);
        sampled_params(&r->q, r->sampled);
        r->q.max_tokens = 1 + draw(SAMPLED_TOKENS);
        break;
    case SAMPLED_FREE: // a fresh seed, adaptive K and the governor: only the ids' range is known
        r->q.temperature = 0.5f + 0.25f * (float)draw(5);
        r->q.top_k = draw(2) ? 20 : 0;
        r->q.min_p = draw(2) ? 0.05f : 0;
        break;
    case CANCEL: r->cancel_after = (int)draw(4); break; // 0: right after the submit
    case DEADLINE: r->q.deadline_ms = 1 + draw(1500); break; // some expire queued, some decoding, some not
    case INVALID:
        r->want_code = ST_CLIENT_ERR_INVALID_FIELD;
        switch (draw(4)) {
        case 0: r->q.temperature = -1; break;
        case 1: r->q.top_p = 1.5f; break;
        case 2: // an id outside the vocabulary (512)
            memcpy(r->bad_ids, prompt[0], n_prompt[0] * sizeof *r->bad_ids);
            r->bad_ids[n_prompt[0] - 1] = 100000;
            r->q.prompt_ids = r->bad_ids;
            break;
        default: // a prompt longer than the context
            for (uint32_t i = 0; i < CTX + 8; i++) r->bad_ids[i] = 3 + i % 500;
            r->q.prompt_ids = r->bad_ids;
            r->q.n_prompt_ids = CTX + 8;
            r->want_code = ST_CLIENT_ERR_PROMPT_TOO_LONG;
        }
        break;
    default: break;
    }
}

// The ids request r may have streamed: the greedy reference, or what its
// sampled configuration gave alone.
static const uint32_t *expected(const struct req *r, const uint32_t *const *alone, size_t *n)
{
    if (r->kind == SAMPLED) {
        *n = ST_TEST_MAX_IDS;
        return alone[r->sampled * N_PROMPTS + r->prompt];
    }
    *n = (size_t)n_ref[r->prompt];
    return ref[r->prompt];
}

static void check(struct req *r, const struct st_test_result *res, const uint32_t *const *alone,
                  uint32_t *landed)
{
    r->first_code = res->code;
    size_t n_exp;
    const uint32_t *exp = expected(r, alone, &n_exp);
    bool ok = res->finals == 1 && res->gaps == 0 && res->n <= r->q.max_tokens;
    if (r->kind == SAMPLED_FREE)
        for (size_t i = 0; i < res->n; i++) ok &= res->ids[i] < 512;
    else
        ok &= res->n <= n_exp && (!res->n || !memcmp(res->ids, exp, res->n * sizeof *exp));
    uint32_t room = CTX - (uint32_t)r->q.n_prompt_ids; // tokens before the context is full
    switch (r->kind) {
    case INVALID: ok &= res->code == r->want_code && res->n == 0; break;
    case CANCEL:
        ok &= res->code == ST_CLIENT_ERR_CANCELLED || res->code == 0;
        landed[0] += res->code == ST_CLIENT_ERR_CANCELLED;
        break;
    case DEADLINE:
        ok &= res->code == ST_CLIENT_ERR_DEADLINE_EXCEEDED || res->code == 0;
        landed[1] += res->code == ST_CLIENT_ERR_DEADLINE_EXCEEDED;
        break;
    default: ok &= res->code == 0;
    }
    landed[2] += res->code == 0;
    if (res->code == 0 && r->kind != INVALID) {
        bool full = r->q.max_tokens > room;
        uint32_t want = full ? room : r->q.max_tokens;
        ok &= res->n == want && res->done.tokens == want;
        ok &= res->done.reason == (full ? ST_CLIENT_FINISH_CONTEXT : ST_CLIENT_FINISH_LENGTH);
    }
    if (!ok)
        printf("  %s (%s, prompt %d of %zu ids, max %u): %zu ids, finals %d, gaps %d, code %d (%s), reason %d\n",
               r->id, kind_name[r->kind], r->prompt, r->q.n_prompt_ids, r->q.max_tokens, res->n, res->finals,
               res->gaps, res->code, res->message, res->done.reason);
    assert_true(ok);
}

// A client that submits and goes away: after nothing, or after its first
// chunk.  The server must free its session.
static void disconnect(const struct st_test_server *s, struct req *r)
{
    struct st_client_options o = {.endpoint = s->endpoint};
    struct st_client *c;
    assert_int_equal(st_client_connect(&o, &c), 0);
    assert_int_equal(st_client_submit(c, &r->q), 0);
    if (draw(2)) {
        struct st_client_event ev;
        for (int i = 0; i < 200 && st_client_next(c, &ev, 50) == 1; i++) {
            bool chunk = ev.type == ST_CLIENT_EV_CHUNK;
            st_client_event_clear(&ev);
            if (chunk) break;
        }
    }
    st_client_close(&c);
}

// Each sampled configuration on each prompt, alone.
static void sampled_alone(struct st_client *c, uint32_t **alone)
{
    static struct st_test_result res;
    for (int i = 0; i < N_SAMPLED; i++)
        for (int p = 0; p < N_PROMPTS; p++) {
            char id[24];
            snprintf(id, sizeof id, "alone%d.%d", i, p);
            struct st_client_request q = {.request_id = id, .prompt_ids = prompt[p], .n_prompt_ids = n_prompt[p],
                                          .ignore_eos = true, .max_tokens = SAMPLED_TOKENS};
            sampled_params(&q, i);
            memset(&res, 0, sizeof res);
            assert_int_equal(st_client_submit(c, &q), 0);
            assert_int_equal(st_test_wait(c, id, &res, 120000), 0);
            assert_int_equal(res.code, 0);
            alone[i * N_PROMPTS + p] = malloc(ST_TEST_MAX_IDS * sizeof **alone);
            memcpy(alone[i * N_PROMPTS + p], res.ids, res.n * sizeof *res.ids);
        }
}

// Waits until the server holds no session and no queued request.
static void drained(struct st_client *c, struct st_client_stats *st)
{
    for (int i = 0; i < 300; i++) {
        assert_int_equal(st_client_stats(c, st, 5000), 1);
        if (!st->sessions && !st->queued) return;
        usleep(100000);
    }
    fail_msg("sessions %u, queued %u left after the soak", st->sessions, st->queued);
}

// SIGKILLs one of the server's worker processes (a spare too); says whether
// one was killed.
static bool kill_worker(const struct st_test_server *s)
{
    pid_t w[64];
    int n = st_test_children(s->pid, "worker", w, 64);
    return n > 0 && kill(w[draw((uint32_t)n)], SIGKILL) == 0;
}

// The soak on a server started with `args` (after --ctx CTX --quiet); with
// kill_ms, a worker is SIGKILLed about that often.
static void soak(const char *const *args, int kill_ms)
{
    unsigned seed = env_u("ST_SOAK_SEED", 20261207), total = env_u("ST_SOAK_REQUESTS", DEFAULT_REQUESTS);
    if (total > MAX_REQUESTS) total = MAX_REQUESTS;
    rng = 0x9e3779b97f4a7c15ull ^ seed;
    char ctx[16];
    snprintf(ctx, sizeof ctx, "%d", CTX);
    const char *all[32] = {"--ctx", ctx, "--quiet"};
    for (int i = 0; args[i] && i < 28; i++) all[3 + i] = args[i];
    struct st_test_server s = {0};
    assert_int_equal(st_test_server_start(&s, all), 0);
    struct st_client *c = st_test_client(&s, NULL);
    assert_non_null(c);
    uint32_t *alone[N_SAMPLED * N_PROMPTS];
    sampled_alone(c, alone);

    struct req *reqs = calloc(total, sizeof *reqs);
    struct st_test_result *res = calloc(total, sizeof *res);
    const char **ids = calloc(total, sizeof *ids);
    uint32_t counts[N_KINDS] = {0}, submitted = 0, done = 0, in_flight = 0;
    uint32_t landed[3] = {0}; // cancels, deadlines, Done events
    int64_t t0 = st_test_now_ms();
    int kills = 0;
    int64_t next_kill = kill_ms ? st_test_now_ms() + kill_ms : INT64_MAX;
    while (done < total) {
        while (submitted < total && in_flight < IN_FLIGHT) {
            struct req *r = &reqs[submitted];
            plan(r, submitted);
            ids[submitted] = r->id;
            counts[r->kind]++;
            submitted++;
            if (r->kind == DISCONNECT) { // its events go to a client that is gone
                disconnect(&s, r);
                done++;
                continue;
            }
            assert_int_equal(st_client_submit(c, &r->q), 0);
            in_flight++;
            if (r->kind == CANCEL && r->cancel_after == 0) {
                assert_int_equal(st_client_cancel(c, r->id), 0);
                r->cancelled = true;
            }
        }
        if (!in_flight) continue;
        assert_int_equal(st_test_pump_any(c, ids, res, (int)submitted, 60000), 1);
        if (st_test_now_ms() >= next_kill) {
            kills += kill_worker(&s);
            next_kill = st_test_now_ms() + kill_ms / 2 + draw((uint32_t)kill_ms);
        }
        for (uint32_t i = 0; i < submitted; i++) {
            struct req *r = &reqs[i];
            if (r->kind == CANCEL && !r->cancelled && !res[i].finished && res[i].chunks >= r->cancel_after) {
                assert_int_equal(st_client_cancel(c, r->id), 0);
                r->cancelled = true;
            }
            if (res[i].finished && res[i].finals == 1 && r->kind != DISCONNECT) {
                check(r, &res[i], (const uint32_t *const *)alone, landed);
                res[i].finals++; // checked: a second final event would make it 3
                done++;
                in_flight--;
            }
        }
    }
    double seconds = (double)(st_test_now_ms() - t0) * 1e-3;

    // Late events (a second final) would show up now.  The one allowed: a
    // cancel that crossed its request's Done is answered "unknown request".
    while (st_test_pump_any(c, ids, res, (int)submitted, 300) == 1) {}
    for (uint32_t i = 0; i < submitted; i++) {
        if (reqs[i].kind == DISCONNECT) continue;
        bool crossed = reqs[i].kind == CANCEL && reqs[i].first_code == 0 && res[i].finals == 3 &&
                       res[i].code == ST_CLIENT_ERR_UNKNOWN_REQUEST;
        if (res[i].finals != 2 && !crossed) printf("  %s: %d final events\n", reqs[i].id, res[i].finals - 1);
        assert_true(res[i].finals == 2 || crossed);
    }

    struct st_client_stats st;
    drained(c, &st);
    printf("  %u requests (seed %u, %d workers killed) in %.1f s:", total, seed, kills, seconds);
    for (int k = 0; k < N_KINDS; k++) printf(" %s %u", kind_name[k], counts[k]);
    printf("\n  %u done, %u cancelled, %u past their deadline; server: done %llu, cancelled %llu, "
           "disconnected %llu, failed %llu, %.2f sessions a step\n",
           landed[2], landed[0], landed[1], (unsigned long long)st.requests_done, (unsigned long long)st.requests_cancelled,
           (unsigned long long)st.requests_disconnected, (unsigned long long)st.requests_failed,
           st.steps ? (double)st.step_sessions / (double)st.steps : 0.0);
    // Failed: only the deadlines (the server counts them so); every cancel
    // counted; done also counts what the gone clients' requests finished.
    assert_int_equal(st.requests_failed, landed[1]);
    assert_int_equal(st.requests_cancelled, landed[0]);
    uint64_t done_here = landed[2] + N_SAMPLED * N_PROMPTS; // and the sampled references
    assert_true(st.requests_done >= done_here && st.requests_done <= done_here + counts[DISCONNECT]);
    if (kill_ms)
        assert_true(kills > 0 && st.worker_restarts > 0);
    else
        assert_int_equal(st.worker_restarts, 0);
    assert_true(st.step_sessions > st.steps);

    // Still whole: four greedy requests at once equal the references.
    static struct st_test_result last[N_SHORT];
    memset(last, 0, sizeof last);
    const char *last_ids[N_SHORT] = {"last0", "last1", "last2", "last3"};
    for (int p = 0; p < N_SHORT; p++) {
        struct st_client_request q = {.request_id = last_ids[p], .prompt_ids = prompt[p],
                                      .n_prompt_ids = n_prompt[p], .ignore_eos = true, .max_tokens = 64};
        assert_int_equal(st_client_submit(c, &q), 0);
    }
    for (int left = N_SHORT; left;) {
        assert_int_equal(st_test_pump_any(c, last_ids, last, N_SHORT, 60000), 1);
        left = 0;
        for (int p = 0; p < N_SHORT; p++) left += !last[p].finished;
    }
    for (int p = 0; p < N_SHORT; p++) assert_true(st_test_prefix_of(&last[p], ref[p], n_ref[p], 64));

    for (int i = 0; i < N_SAMPLED * N_PROMPTS; i++) free(alone[i]);
    free(reqs);
    free(res);
    free(ids);
    st_client_close(&c);
    assert_true(st_test_server_alive(&s));
    assert_int_equal(st_test_server_stop(&s), 0);
}

// One node of 2 workers, 4 slots batched, prompt slices of 64 tokens.
static const char *const one_node[] = {"--slots", "4", "--prefill-slice", "64", NULL};
// Two nodes of one worker, 3 slots each batched by 2, slices of 32: more
// sessions queue, and each node batches its own.
static const char *const two_nodes[] = {"--nodes", "2", "--workers", "1", "--slots", "3", "--batch", "2",
                                        "--prefill-slice", "32", NULL};

static void test_soak_one_node(void **state)
{
    (void)state;
    soak(one_node, 0);
}

static void test_soak_two_nodes(void **state)
{
    (void)state;
    soak(two_nodes, 0);
}

// One node, a worker SIGKILLed every 100-300 ms: batched steps replay on
// the replacements and no request notices, but for time.
static void test_soak_worker_kills(void **state)
{
    (void)state;
    soak(one_node, 200);
}

// Two nodes, a worker SIGKILLed every 100-300 ms: a set replaces its
// workers between steps too, while the other steps on, and new sessions go
// to a whole set where the counts tie.
static void test_soak_two_nodes_worker_kills(void **state)
{
    (void)state;
    soak(two_nodes, 200);
}

// The prompts (the server tests' four, and two long synthetic ones) and
// each one's greedy reference.
static int setup(void **state)
{
    (void)state;
    char shorts[N_SHORT][128];
    if (st_test_prompts(shorts, ref, n_ref, REF_TOKENS)) return -1;
    for (int p = 0; p < N_SHORT; p++) {
        n_prompt[p] = st_test_parse_ids(shorts[p], prompt[p], 300);
        if (n_ref[p] != REF_TOKENS) {
            fprintf(stderr, "reference of prompt %d: %d ids\n", p, n_ref[p]);
            return -1;
        }
    }
    static char list[300 * 4 + 1];
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int l = 0; l < N_LONG; l++) {
        int p = N_SHORT + l;
        size_t at = 0;
        n_prompt[p] = long_len[l];
        for (uint32_t i = 0; i < long_len[l]; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompt[p][i] = i ? (uint32_t)(3 + x % 500) : 1u;
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%u", i ? "," : "", prompt[p][i]);
        }
        char n[16], ctx[16];
        snprintf(n, sizeof n, "%u", CTX - long_len[l] < REF_TOKENS ? CTX - long_len[l] : REF_TOKENS);
        snprintf(ctx, sizeof ctx, "%d", CTX);
        const char *args[] = {"--tokens", list, "-n", n, "--ctx", ctx, "--ignore-eos", "--ids", NULL};
        n_ref[p] = st_test_reference(args, &ref[p]);
        if (n_ref[p] != atoi(n)) {
            fprintf(stderr, "reference of long prompt %d: %d ids\n", l, n_ref[p]);
            return -1;
        }
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N_PROMPTS; i++) free(ref[i]);
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soak_one_node),
        cmocka_unit_test(test_soak_two_nodes),
        cmocka_unit_test(test_soak_worker_kills),
        cmocka_unit_test(test_soak_two_nodes_worker_kills),
    };
    if (getenv("ST_SOAK_ONLY")) cmocka_set_test_filter(getenv("ST_SOAK_ONLY")); // one configuration, by name
    return cmocka_run_group_tests(tests, setup, teardown);
}
