// A real server under faults: cancel frees the slot at once; a client that
// disconnects (streaming or queued) has its request dropped; 1000 malformed
// messages of every kind interleaved with valid requests (each gets its
// error code, every valid request completes correctly, the server stays up);
// oversized messages are dropped by ZeroMQ; a worker SIGKILLed during 8
// concurrent sessions costs no request its correct output.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "proto/subternary.pb-c.h"
#include "tests/support/server_support.h"

#define N_PROMPTS ST_TEST_N_PROMPTS

static char prompts[N_PROMPTS][128];
static uint32_t *ref[N_PROMPTS];
static int n_ref[N_PROMPTS];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void wait_first_chunk(struct st_client *c, const char *id, struct st_test_result *r)
{
    while (!r->chunks && !r->finished) assert_int_equal(st_test_pump(c, id, r, 10000), 1);
    assert_false(r->finished);
}

static void test_cancel_frees_slot(void **state)
{
    (void)state;
    struct st_test_server s;
    const char *args[] = {"--slots", "1", "--queue", "2", NULL};
    assert_int_equal(st_test_server_start(&s, args), 0);
    struct st_client *a = st_test_client(&s, NULL), *b = st_test_client(&s, NULL);
    static struct st_test_result ra, rb;
    memset(&ra, 0, sizeof ra);
    memset(&rb, 0, sizeof rb);
    assert_int_equal(st_test_submit(a, "long", prompts[0], 3000, true), 0);
    wait_first_chunk(a, "long", &ra);
    assert_int_equal(st_test_submit(b, "short", prompts[1], 16, false), 0);
    struct st_client_stats st;
    assert_int_equal(st_client_stats(b, &st, 5000), 1);
    assert_int_equal(st.sessions, 1);
    assert_int_equal(st.queued, 1);
    double t0 = now_s();
    assert_int_equal(st_client_cancel(a, "long"), 0);
    assert_int_equal(st_test_wait(a, "long", &ra, 10000), 0);
    assert_int_equal(ra.code, ST_CLIENT_ERR_CANCELLED);
    assert_int_equal(ra.finals, 1);
    assert_true(ra.n < 3000);
    // The waiting request got the slot at once.
    assert_int_equal(st_test_wait(b, "short", &rb, 10000), 0);
    double dt = now_s() - t0;
    assert_int_equal(rb.code, 0);
    assert_true(st_test_prefix_of(&rb, ref[1], n_ref[1], 16));
    printf("  cancelled after %zu tokens; the queued request finished %.0f ms after the cancel\n", ra.n, dt * 1e3);
    assert_true(dt < 3.0);
    assert_int_equal(st_client_stats(b, &st, 5000), 1);
    assert_int_equal(st.requests_cancelled, 1);
    assert_int_equal(st.sessions, 0);
    st_client_close(&a);
    st_client_close(&b);
    assert_int_equal(st_test_server_stop(&s), 0);
}

static void test_disconnect_frees_slot(void **state)
{
    (void)state;
    struct st_test_server s;
    const char *args[] = {"--slots", "1", "--queue", "2", NULL};
    assert_int_equal(st_test_server_start(&s, args), 0);
    struct st_client *a = st_test_client(&s, NULL), *q = st_test_client(&s, NULL), *obs = st_test_client(&s, NULL);
    static struct st_test_result ra, rd;
    memset(&ra, 0, sizeof ra);
    memset(&rd, 0, sizeof rd);
    assert_int_equal(st_test_submit(a, "streaming", prompts[0], 3000, true), 0);
    wait_first_chunk(a, "streaming", &ra);
    assert_int_equal(st_test_submit(q, "waiting", prompts[2], 3000, true), 0);
    struct st_client_stats st;
    for (int k = 0; k < 100; k++) { // until the server has read it
        assert_int_equal(st_client_stats(obs, &st, 5000), 1);
        if (st.queued == 1) break;
        usleep(10000);
    }
    assert_int_equal(st.queued, 1);
    // Both clients go away: the queued one, then the streaming one.
    st_client_close(&q);
    st_client_close(&a);
    double t0 = now_s();
    do {
        usleep(10000);
        assert_int_equal(st_client_stats(obs, &st, 5000), 1);
    } while ((st.sessions || st.queued) && now_s() - t0 < 5);
    printf("  both requests dropped %.0f ms after their clients left\n", (now_s() - t0) * 1e3);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.requests_disconnected, 2);
    assert_int_equal(st.requests_done, 0);
    // The slot serves the next client.
    assert_int_equal(st_test_submit(obs, "next", prompts[3], 16, false), 0);
    assert_int_equal(st_test_wait(obs, "next", &rd, 10000), 0);
    assert_int_equal(rd.code, 0);
    assert_true(st_test_prefix_of(&rd, ref[3], n_ref[3], 16));
    assert_true(rd.done.queue_seconds < 0.5);
    st_client_close(&obs);
    assert_int_equal(st_test_server_stop(&s), 0);
}

// ---- raw sockets for messages the client library never sends ----

static void *raw_socket(void *zctx, const char *ep)
{
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0, hwm = 100000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    assert_int_equal(zmq_connect(s, ep), 0);
    return s;
}

static void raw_send(void *s, const char *version, const void *payload, size_t n, int frames)
{
    if (frames == 1) {
        assert_true(zmq_send(s, version, strlen(version), 0) >= 0);
        return;
    }
    assert_true(zmq_send(s, version, strlen(version), ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(s, payload, n, frames > 2 ? ZMQ_SNDMORE : 0) >= 0);
    if (frames > 2) assert_true(zmq_send(s, "extra", 5, 0) >= 0);
}

static size_t pack_generate(uint8_t *buf, const char *id, const uint32_t *ids, size_t n, float temp, uint32_t k,
                            const char *text)
{
    Subternary__GenerateRequest g = SUBTERNARY__GENERATE_REQUEST__INIT;
    Subternary__Sampling sm = SUBTERNARY__SAMPLING__INIT;
    Subternary__Speculation sp = SUBTERNARY__SPECULATION__INIT;
    g.request_id = (char *)id;
    g.prompt_ids = (uint32_t *)ids;
    g.n_prompt_ids = n;
    if (text) g.prompt_text = (char *)text;
    g.max_tokens = 8;
    sm.temperature = temp;
    sp.k = k;
    g.sampling = &sm;
    g.speculation = &sp;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_GENERATE;
    env.generate = &g;
    return protobuf_c_message_pack(&env.base, buf);
}

// Sends malformed message number i; returns the error code it must get.
static int send_bad(void *s, int i)
{
    static uint8_t buf[8192];
    static uint32_t ok_ids[] = {1, 300, 436}, bad_ids[] = {1, 600}, long_ids[300];
    for (int k = 0; k < 300; k++) long_ids[k] = (uint32_t)(k % 500);
    char id[32];
    snprintf(id, sizeof id, "bad-%d", i);
    size_t n;
    switch (i % 14) {
    case 0:
        n = pack_generate(buf, id, ok_ids, 3, 0, 0, NULL);
        raw_send(s, "ST02", buf, n, 2);
        return SUBTERNARY__ERROR_CODE__ERR_UNSUPPORTED_VERSION;
    case 1:
        for (int k = 0; k < 64; k++) buf[k] = (uint8_t)(k * 37 + i);
        buf[0] = 0; // field number 0: never valid
        raw_send(s, "ST01", buf, 64, 2);
        return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    case 2: { // a server message
        Subternary__Done d = SUBTERNARY__DONE__INIT;
        d.request_id = id;
        Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
        env.msg_case = SUBTERNARY__ENVELOPE__MSG_DONE;
        env.done = &d;
        raw_send(s, "ST01", buf, protobuf_c_message_pack(&env.base, buf), 2);
        return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    }
    case 3: raw_send(s, "ST01", buf, 0, 2); return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    case 4: raw_send(s, "ST01", NULL, 0, 1); return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    case 5:
        n = pack_generate(buf, id, ok_ids, 3, 0, 0, NULL);
        raw_send(s, "ST01", buf, n, 3);
        return SUBTERNARY__ERROR_CODE__ERR_MALFORMED;
    case 6:
        n = pack_generate(buf, id, ok_ids, 3, -1.0f, 0, NULL);
        raw_send(s, "ST01", buf, n, 2);
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    case 7:
        n = pack_generate(buf, id, bad_ids, 2, 0, 0, NULL);
        raw_send(s, "ST01", buf, n, 2);
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    case 8:
        n = pack_generate(buf, id, long_ids, 300, 0, 0, NULL);
        raw_send(s, "ST01", buf, n, 2);
        return SUBTERNARY__ERROR_CODE__ERR_PROMPT_TOO_LONG;
    case 9:
        n = pack_generate(buf, "tab\tid", ok_ids, 3, 0, 0, NULL);
        raw_send(s, "ST01", buf, n, 2);
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    case 10: {
        static char text[3000];
        memset(text, 'a', sizeof text - 1);
        n = pack_generate(buf, id, NULL, 0, 0, 0, text);
        raw_send(s, "ST01", buf, n, 2);
        return SUBTERNARY__ERROR_CODE__ERR_TOO_LARGE;
    }
    case 11: {
        Subternary__Cancel c = SUBTERNARY__CANCEL__INIT;
        c.request_id = id;
        Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
        env.msg_case = SUBTERNARY__ENVELOPE__MSG_CANCEL;
        env.cancel = &c;
        raw_send(s, "ST01", buf, protobuf_c_message_pack(&env.base, buf), 2);
        return SUBTERNARY__ERROR_CODE__ERR_UNKNOWN_REQUEST;
    }
    case 12:
        n = pack_generate(buf, id, ok_ids, 3, 0, 99, NULL);
        raw_send(s, "ST01", buf, n, 2);
        return SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD;
    default:
        raw_send(s, "ST", buf, 0, 2);
        return SUBTERNARY__ERROR_CODE__ERR_UNSUPPORTED_VERSION;
    }
}

static void test_malformed_flood(void **state)
{
    (void)state;
    enum { BAD = 1000, GOOD = 20, CLIENTS = 4 };
    struct st_test_server s;
    const char *args[] = {"--slots", "4", "--queue", "32", "--ctx", "256", "--max-prompt-bytes", "2048", NULL};
    assert_int_equal(st_test_server_start(&s, args), 0);
    void *zctx = zmq_ctx_new();
    void *bad = raw_socket(zctx, s.endpoint);
    struct st_client *c[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) assert_non_null(c[i] = st_test_client(&s, NULL));
    static struct st_test_result r[GOOD];
    memset(r, 0, sizeof r);
    char id[GOOD][16];
    static int want[BAD];
    // Interleave: 50 bad messages, one valid request, and now and then a
    // message over ZMQ_MAXMSGSIZE from a socket of its own (ZeroMQ drops it
    // and the connection; nothing answers).
    static uint8_t huge[(1 << 20) + 4096];
    for (int i = 0, g = 0; i < BAD; i++) {
        want[i] = send_bad(bad, i);
        if (i % 50 == 49 && g < GOOD) {
            snprintf(id[g], sizeof id[g], "good-%d", g);
            assert_int_equal(st_test_submit(c[g % CLIENTS], id[g], prompts[g % N_PROMPTS], 24, false), 0);
            g++;
        }
        if (i % 300 == 150) {
            void *big = raw_socket(zctx, s.endpoint);
            raw_send(big, "ST01", huge, sizeof huge, 2);
            usleep(20000);
            zmq_close(big);
        }
    }
    // Every bad message got its error, in order.
    int got = 0, wrong = 0;
    while (got < BAD) {
        zmq_pollitem_t it = {bad, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 20000) <= 0) break;
        char ver[8];
        uint8_t buf[4096];
        int vn = zmq_recv(bad, ver, sizeof ver, 0);
        int more = 0;
        size_t sz = sizeof more;
        zmq_getsockopt(bad, ZMQ_RCVMORE, &more, &sz);
        assert_true(vn == 4 && !memcmp(ver, "ST01", 4) && more);
        int n = zmq_recv(bad, buf, sizeof buf, 0);
        assert_true(n >= 0 && n <= (int)sizeof buf);
        Subternary__Envelope *env = subternary__envelope__unpack(NULL, (size_t)n, buf);
        assert_non_null(env);
        assert_int_equal(env->msg_case, SUBTERNARY__ENVELOPE__MSG_ERROR);
        if ((int)env->error->code != want[got]) {
            if (wrong++ < 5)
                fprintf(stderr, "bad message %d (kind %d): code %d, want %d: %s\n", got, got % 14, env->error->code,
                        want[got], env->error->message);
        }
        subternary__envelope__free_unpacked(env, NULL);
        got++;
    }
    assert_int_equal(got, BAD);
    assert_int_equal(wrong, 0);
    // Every valid request completed with the right output.  Client k has
    // requests k, k + CLIENTS, ...: their events are sorted by id.
    for (int k = 0; k < CLIENTS; k++) {
        const char *ids[GOOD];
        static struct st_test_result rk[GOOD / CLIENTS];
        memset(rk, 0, sizeof rk);
        int n = 0;
        for (int g = k; g < GOOD; g += CLIENTS) ids[n++] = id[g];
        double t0 = now_s();
        for (int left = n; left && now_s() - t0 < 30;) {
            int before = 0, after = 0;
            for (int j = 0; j < n; j++) before += rk[j].finished;
            assert_true(st_test_pump_any(c[k], ids, rk, n, 1000) >= 0);
            for (int j = 0; j < n; j++) after += rk[j].finished;
            left -= after - before;
        }
        for (int j = 0; j < n; j++) r[k + j * CLIENTS] = rk[j];
    }
    for (int g = 0; g < GOOD; g++) {
        assert_true(r[g].finished);
        assert_int_equal(r[g].code, 0);
        assert_int_equal(r[g].gaps, 0);
        assert_int_equal(r[g].finals, 1);
        assert_true(st_test_prefix_of(&r[g], ref[g % N_PROMPTS], n_ref[g % N_PROMPTS], 24));
    }
    struct st_client_health h;
    assert_int_equal(st_client_health(c[0], &h, 5000), 1);
    assert_true(h.ok);
    struct st_client_stats st;
    assert_int_equal(st_client_stats(c[0], &st, 5000), 1);
    printf("  %d malformed messages answered with their codes, %d valid requests correct; errors counted %llu\n",
           BAD, GOOD, (unsigned long long)st.errors);
    assert_int_equal(st.errors, BAD);
    assert_int_equal(st.requests_done, GOOD);
    assert_true(st_test_server_alive(&s));
    for (int i = 0; i < CLIENTS; i++) st_client_close(&c[i]);
    zmq_close(bad);
    zmq_ctx_term(zctx);
    assert_int_equal(st_test_server_stop(&s), 0);
}

static void test_worker_killed(void **state)
{
    (void)state;
    enum { N = 8 };
    struct st_test_server s;
    const char *args[] = {"--slots", "8", "--queue", "0", NULL};
    assert_int_equal(st_test_server_start(&s, args), 0);
    struct st_client *c[N];
    static struct st_test_result r[N];
    memset(r, 0, sizeof r);
    char id[N][16];
    for (int i = 0; i < N; i++) {
        assert_non_null(c[i] = st_test_client(&s, NULL));
        snprintf(id[i], sizeof id[i], "w-%d", i);
        assert_int_equal(st_test_submit(c[i], id[i], prompts[i % N_PROMPTS], 80 + i, false), 0);
    }
    for (int i = 0; i < N; i++) wait_first_chunk(c[i], id[i], &r[i]);
    // Every session is streaming: kill a worker (rank 1, then rank 0).
    int kills = 0;
    for (int round = 0; round < 2; round++) {
        pid_t w[16];
        int n = st_test_children(s.pid, round ? "--rank 0 " : "--rank 1 ", w, 16);
        assert_true(n >= 1);
        assert_int_equal(kill(w[0], SIGKILL), 0);
        kills++;
        for (int i = 0; i < N; i++) // let the sessions go on a little
            for (int k = 0; k < 3 && !r[i].finished; k++) st_test_pump(c[i], id[i], &r[i], 200);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(st_test_wait(c[i], id[i], &r[i], 30000), 0);
        assert_int_equal(r[i].code, 0);
        assert_int_equal(r[i].gaps, 0);
        if (!st_test_prefix_of(&r[i], ref[i % N_PROMPTS], n_ref[i % N_PROMPTS], 80 + i)) {
            fprintf(stderr, "session %d: output differs after the kill\n", i);
            fail();
        }
    }
    struct st_client_stats st;
    assert_int_equal(st_client_stats(c[0], &st, 5000), 1);
    printf("  %d workers killed during %d sessions: all complete and correct; %llu worker restarts\n", kills, N,
           (unsigned long long)st.worker_restarts);
    assert_true(st.worker_restarts >= (uint64_t)kills);
    assert_int_equal(st.requests_done, N);
    assert_int_equal(st.requests_failed, 0);
    struct st_client_health h;
    assert_int_equal(st_client_health(c[0], &h, 5000), 1);
    assert_true(h.ok);
    for (int i = 0; i < N; i++) st_client_close(&c[i]);
    assert_int_equal(st_test_server_stop(&s), 0);
}

static int setup(void **state)
{
    (void)state;
    return st_test_prompts(prompts, ref, n_ref, 96);
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
        cmocka_unit_test(test_cancel_frees_slot),
        cmocka_unit_test(test_disconnect_frees_slot),
        cmocka_unit_test(test_malformed_flood),
        cmocka_unit_test(test_worker_killed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
