// Batched steps in a real `subternary serve` process: the rounds of the
// sessions on one node run as one worker-set step (one forward reads the
// weights once for all of them), prompt slices beside them.  Batching
// changes no output: concurrent greedy requests, speculative and
// target-only mixed in the same steps, equal `subternary generate`'s; seeded
// sampled requests run together give the ids each gives alone; a long
// prompt is prefilled in the steps of a session decoding beside it, which
// streams all along; steps did carry several sessions (stats), none with
// --batch 1.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/server_support.h"

#define N_PROMPTS ST_TEST_N_PROMPTS
#define TOKENS 64

static char prompts[N_PROMPTS][128];
static uint32_t *ref[N_PROMPTS];
static int n_ref[N_PROMPTS];
static uint32_t prompt_ids[N_PROMPTS][16];
static size_t n_prompt_ids[N_PROMPTS];

static void parse_prompts(void)
{
    for (int p = 0; p < N_PROMPTS; p++) n_prompt_ids[p] = st_test_parse_ids(prompts[p], prompt_ids[p], 16);
}

// Submits the requests q[0..n) on one client at once and collects them all.
static void run_together(struct st_client *c, const struct st_client_request *q, struct st_test_result *r, int n)
{
    const char *ids[N_PROMPTS];
    for (int i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof r[i]);
        ids[i] = q[i].request_id;
        assert_int_equal(st_client_submit(c, &q[i]), 0);
    }
    for (int left = n; left > 0;) {
        assert_int_equal(st_test_pump_any(c, ids, r, n, 60000), 1);
        left = 0;
        for (int i = 0; i < n; i++) left += !r[i].finished;
    }
    for (int i = 0; i < n; i++) {
        if (r[i].code) printf("  request %s: error %d %s\n", ids[i], r[i].code, r[i].message);
        assert_int_equal(r[i].code, 0);
        assert_int_equal(r[i].finals, 1);
        assert_int_equal(r[i].gaps, 0);
    }
}

static double sessions_a_step(struct st_client *c, struct st_client_stats *st)
{
    assert_int_equal(st_client_stats(c, st, 5000), 1);
    return st->steps ? (double)st->step_sessions / (double)st->steps : 0;
}

// A server of 4 slots and the given --batch, and a client of it.
static struct st_client *start(struct st_test_server *s, const char *batch)
{
    const char *args[] = {"--slots", "4", "--batch", batch, NULL};
    assert_int_equal(st_test_server_start(s, args), 0);
    struct st_client *c = st_test_client(s, NULL);
    assert_non_null(c);
    return c;
}

// Greedy requests of TOKENS tokens on the first n prompts, named PREFIX<p>.
static void requests(struct st_client_request *q, char (*id)[16], int n, const char *prefix)
{
    for (int p = 0; p < n; p++) {
        snprintf(id[p], sizeof id[p], "%s%d", prefix, p);
        q[p] = (struct st_client_request){.request_id = id[p], .prompt_ids = prompt_ids[p],
                                          .n_prompt_ids = n_prompt_ids[p], .max_tokens = TOKENS, .ignore_eos = true};
    }
}

static void stop(struct st_test_server *s)
{
    assert_true(st_test_server_alive(s));
    assert_int_equal(st_test_server_stop(s), 0);
}

// Four greedy requests at once, the last with the target alone: each
// equals the greedy reference, and the steps carried several sessions.
static void test_greedy_batched(void **state)
{
    (void)state;
    struct st_test_server s = {0};
    struct st_client *c = start(&s, "4");
    struct st_client_request q[N_PROMPTS];
    char id[N_PROMPTS][16];
    requests(q, id, N_PROMPTS, "g");
    q[N_PROMPTS - 1].no_speculation = true;
    static struct st_test_result r[N_PROMPTS];
    run_together(c, q, r, N_PROMPTS);
    for (int p = 0; p < N_PROMPTS; p++) {
        assert_int_equal(r[p].n, TOKENS);
        assert_true(st_test_prefix_of(&r[p], ref[p], n_ref[p], TOKENS));
    }
    struct st_client_stats st;
    double m = sessions_a_step(c, &st);
    printf("  4 greedy requests at once: %llu steps, %.2f sessions a step; ids equal the references\n",
           (unsigned long long)st.steps, m);
    assert_true(st.step_sessions > st.steps);
    st_client_close(&c);
    stop(&s);
}

// Seeded sampling, speculative (fixed K, no governor) and target-only: the
// requests run together give what each gives alone.
static void test_sampled_batched_equals_alone(void **state)
{
    (void)state;
    struct st_test_server s = {0};
    struct st_client *c = start(&s, "4");
    struct st_client_request q[N_PROMPTS];
    char id[N_PROMPTS][16];
    requests(q, id, N_PROMPTS, "s");
    for (int p = 0; p < N_PROMPTS; p++) {
        q[p].temperature = p % 2 ? 1.2f : 0.8f;
        q[p].top_p = p == 1 ? 0.9f : 0;
        q[p].seed = 1000 + (uint64_t)p;
        q[p].k = 3;
        q[p].no_governor = true;
        q[p].no_speculation = p == 2;
    }
    static struct st_test_result together[N_PROMPTS], alone[N_PROMPTS];
    run_together(c, q, together, N_PROMPTS);
    struct st_client_stats st;
    double m = sessions_a_step(c, &st);
    assert_true(st.step_sessions > st.steps);
    for (int p = 0; p < N_PROMPTS; p++) {
        snprintf(id[p], sizeof id[p], "a%d", p);
        run_together(c, &q[p], &alone[p], 1);
        assert_int_equal(alone[p].n, together[p].n);
        assert_memory_equal(alone[p].ids, together[p].ids, alone[p].n * sizeof alone[p].ids[0]);
    }
    printf("  4 sampled requests together (%.2f sessions a step) = each alone\n", m);
    st_client_close(&c);
    stop(&s);
}

// A long prompt arrives while another request decodes: its slices ride in
// the decoder's steps, so the decoder streams a round per slice (alone, a
// slice runs whole: 2 steps of 512 tokens), and both outputs are the references.
#define LONG_PROMPT 700
static void test_long_prompt_beside_decoding(void **state)
{
    (void)state;
    static uint32_t long_ids[LONG_PROMPT];
    static char list[LONG_PROMPT * 4 + 1];
    size_t at = 0;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < LONG_PROMPT; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        long_ids[i] = i ? (uint32_t)(3 + x % 500) : 1u;
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%u", i ? "," : "", long_ids[i]);
    }
    uint32_t *long_ref;
    const char *args[] = {"--tokens", list, "-n", "16", "--ignore-eos", "--ids", NULL};
    int n_long_ref = st_test_reference(args, &long_ref);
    assert_int_equal(n_long_ref, 16);

    struct st_test_server s = {0};
    struct st_client *c = start(&s, "4");
    struct st_client_request q[2];
    char id[2][16];
    requests(q, id, 1, "d");
    q[0].max_tokens = 512;
    static struct st_test_result r[2];
    memset(r, 0, sizeof r);
    const char *ids[2] = {"d0", "long"};
    assert_int_equal(st_client_submit(c, &q[0]), 0);
    while (r[0].n < 8) assert_int_equal(st_test_pump_any(c, ids, r, 1, 60000), 1);
    q[1] = (struct st_client_request){.request_id = "long", .prompt_ids = long_ids, .n_prompt_ids = LONG_PROMPT,
                                      .max_tokens = 16, .ignore_eos = true};
    assert_int_equal(st_client_submit(c, &q[1]), 0);
    int before = r[0].chunks, during = -1;
    while (!r[0].finished || !r[1].finished) {
        assert_int_equal(st_test_pump_any(c, ids, r, 2, 60000), 1);
        if (during < 0 && r[1].chunks) during = r[0].chunks - before;
    }
    assert_int_equal(r[0].code, 0);
    assert_int_equal(r[1].code, 0);
    assert_int_equal(r[0].n, 512);
    assert_memory_equal(r[0].ids, ref[0], (size_t)n_ref[0] * sizeof *ref[0]); // the reference's 64 tokens
    assert_int_equal(r[1].n, 16);
    assert_memory_equal(r[1].ids, long_ref, 16 * sizeof *long_ref);
    printf("  the decoder streamed %d chunks while a %d-token prompt was prefilled beside it\n", during, LONG_PROMPT);
    assert_true(during >= LONG_PROMPT / 64);
    free(long_ref);
    st_client_close(&c);
    stop(&s);
}

// --batch 1: every step carries one session, and the output is the same.
static void test_batch_off(void **state)
{
    (void)state;
    struct st_test_server s = {0};
    struct st_client *c = start(&s, "1");
    struct st_client_request q[2];
    char id[2][16];
    requests(q, id, 2, "o");
    static struct st_test_result r[2];
    run_together(c, q, r, 2);
    for (int p = 0; p < 2; p++) assert_true(st_test_prefix_of(&r[p], ref[p], n_ref[p], TOKENS));
    struct st_client_stats st;
    sessions_a_step(c, &st);
    assert_true(st.steps > 0);
    assert_int_equal(st.step_sessions, st.steps);
    st_client_close(&c);
    stop(&s);
}

static int setup(void **state)
{
    (void)state;
    if (st_test_prompts(prompts, ref, n_ref, TOKENS)) return -1;
    parse_prompts();
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
        cmocka_unit_test(test_greedy_batched),
        cmocka_unit_test(test_sampled_batched_equals_alone),
        cmocka_unit_test(test_long_prompt_beside_decoding),
        cmocka_unit_test(test_batch_off),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
