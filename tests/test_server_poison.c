// The server loop in this process (so the engine's crash hook can poison one
// request): a request whose steps kill a worker on every attempt fails with
// ERR_INTERNAL after the retries, alone, although it was poisoned inside a
// step batched with the others' rounds; the other sessions complete with
// correct output and the server goes on serving.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordinator/server.h"
#include "tests/support/engine_support.h"
#include "tests/support/server_support.h"

#define N 3

static struct st_test_engine T;
static struct st_server *srv;
static volatile sig_atomic_t stop;

static void *serve_main(void *arg)
{
    (void)arg;
    struct st_error e;
    if (st_server_run(srv, &stop, &e)) fprintf(stderr, "server: %s\n", e.msg);
    return NULL;
}

static void test_poison_step_fails_alone(void **state)
{
    (void)state;
    assert_int_equal(st_test_engine_open(&T, "models/pico-target.q8_0.gguf", "models/pico-draft.q4_0.gguf", 2, 1, 4), 0);
    // References first (they run steps too).  The last request is the
    // poison; the others run long enough that its rounds are batched with theirs.
    int32_t prompt[N][11] = {{1, 300, 436, 102, 468, 497, 279, 476, 186, 242, 27}};
    uint32_t max_tokens[N];
    int32_t *ref[N];
    uint32_t n_ref[N];
    for (int i = 0; i < N; i++) {
        memcpy(prompt[i], prompt[0], sizeof prompt[0]);
        prompt[i][10] = 27 + 50 * i;
        max_tokens[i] = i == N - 1 ? 32 : 256;
        struct st_gen_params gp = {.max_tokens = max_tokens[i], .speculate = true, .governor = true,
                                   .stop_at_eos = true};
        assert_int_equal(st_test_generate(T.eng, &gp, prompt[i], 11, &ref[i], &n_ref[i], NULL), 0);
    }
    struct st_server_config cfg = {.listen = "tcp://127.0.0.1:*", .queue = 4, .quiet = true,
                                   .target_name = "pico-target", .draft_name = "pico-draft"};
    struct st_error e;
    assert_int_equal(st_server_open(&cfg, T.eng, T.zctx, &srv, &e), 0);
    struct st_test_server view = {0};
    snprintf(view.endpoint, sizeof view.endpoint, "%s", st_server_endpoint(srv));
    pthread_t th;
    stop = 0;
    assert_int_equal(pthread_create(&th, NULL, serve_main, NULL), 0);

    struct st_client *c[N];
    static struct st_test_result r[N];
    memset(r, 0, sizeof r);
    char id[N][16];
    for (int i = 0; i < N; i++) {
        assert_non_null(c[i] = st_test_client(&view, NULL));
        snprintf(id[i], sizeof id[i], "p%d", i);
        if (i == N - 1) { // the others decode; the poison takes the next slot
            struct st_client_stats st;
            for (int k = 0; k < 500; k++) {
                assert_int_equal(st_client_stats(c[i], &st, 5000), 1);
                if (st.tokens_generated >= 16) break;
                usleep(2000);
            }
            assert_true(st.tokens_generated >= 16 && st.tokens_generated < 2 * 256);
            st_engine_test_poison(T.eng, true, N - 1, 1, 3, false);
        }
        uint32_t ids[11];
        for (int k = 0; k < 11; k++) ids[k] = (uint32_t)prompt[i][k];
        struct st_client_request q = {.request_id = id[i], .prompt_ids = ids, .n_prompt_ids = 11,
                                      .max_tokens = max_tokens[i]};
        assert_int_equal(st_client_submit(c[i], &q), 0);
    }
    int failed = 0, ok = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(st_test_wait(c[i], id[i], &r[i], 60000), 0);
        if (r[i].code == ST_CLIENT_ERR_INTERNAL) {
            failed++;
            assert_int_equal(i, N - 1); // the poison, and only it
            printf("  request %d failed alone: %s\n", i, r[i].message);
            continue;
        }
        assert_int_equal(r[i].code, 0);
        assert_int_equal(r[i].n, n_ref[i]);
        for (uint32_t k = 0; k < n_ref[i]; k++) assert_int_equal(r[i].ids[k], (uint32_t)ref[i][k]);
        ok++;
    }
    assert_int_equal(failed, 1);
    assert_int_equal(ok, N - 1);
    // The server goes on: another request completes, the workers are all back.
    static struct st_test_result again;
    memset(&again, 0, sizeof again);
    uint32_t ids[11];
    for (int k = 0; k < 11; k++) ids[k] = (uint32_t)prompt[0][k];
    struct st_client_request q = {.request_id = "again", .prompt_ids = ids, .n_prompt_ids = 11,
                                  .max_tokens = max_tokens[0]};
    assert_int_equal(st_client_submit(c[0], &q), 0);
    assert_int_equal(st_test_wait(c[0], "again", &again, 60000), 0);
    assert_int_equal(again.code, 0);
    assert_int_equal(again.n, n_ref[0]);
    struct st_client_stats st;
    assert_int_equal(st_client_stats(c[0], &st, 5000), 1);
    assert_int_equal(st.requests_failed, 1);
    printf("  %llu steps, %.2f sessions a step\n", (unsigned long long)st.steps, (double)st.step_sessions / st.steps);
    assert_true(st.step_sessions > st.steps); // rounds were batched
    assert_int_equal(st.requests_done, N);
    // 3 attempts of the batched step, then 3 of the poison's round alone.
    assert_true(st.worker_restarts >= 6);
    struct st_client_health h;
    assert_int_equal(st_client_health(c[0], &h, 5000), 1);
    assert_true(h.ok);
    assert_string_equal(h.target, "pico-target");
    for (int i = 0; i < N; i++) st_client_close(&c[i]);
    stop = 1;
    pthread_join(th, NULL);
    st_server_close(&srv);
    st_test_engine_close(&T);
    for (int i = 0; i < N; i++) free(ref[i]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_poison_step_fails_alone)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
