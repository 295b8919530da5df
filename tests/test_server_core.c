// The server's dispatcher and scheduler state, without an engine: queue and
// busy, round-robin order, streaming offsets, retries (the running stream or
// the finished result, never a second run; different content is a
// duplicate), cancel (queued, active, during a step), disconnects, a peer that
// stops reading, deadlines, shutdown, stats; and the Prometheus exposition.
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/server_core.h"
#include "include/subternary.h"

#define MAX_REPLIES 256

struct reply {
    char ident[16];
    Subternary__Envelope *env;
};

static struct reply replies[MAX_REPLIES];
static int n_replies, released, fail_sends;
static struct st_srv_core C;

static int cap_send(void *ctx, const uint8_t *ident, size_t len, const Subternary__Envelope *env)
{
    (void)ctx;
    if (fail_sends) {
        errno = EHOSTUNREACH;
        return -1;
    }
    assert_true(n_replies < MAX_REPLIES);
    uint8_t buf[8192];
    size_t n = protobuf_c_message_get_packed_size(&env->base);
    assert_true(n <= sizeof buf);
    protobuf_c_message_pack(&env->base, buf);
    struct reply *r = &replies[n_replies++];
    snprintf(r->ident, sizeof r->ident, "%.*s", (int)len, (const char *)ident);
    r->env = subternary__envelope__unpack(NULL, n, buf);
    assert_non_null(r->env);
    return 0;
}

static void cap_release(void *ctx, struct st_srv_req *r)
{
    (void)ctx;
    assert_ptr_equal(r->session, r);
    assert_false(r->stepping);
    released++;
    r->session = NULL;
}

static void clear_replies(void)
{
    for (int i = 0; i < n_replies; i++) subternary__envelope__free_unpacked(replies[i].env, NULL);
    n_replies = 0;
}

static int setup(void **state)
{
    (void)state;
    struct st_srv_limits lim = {.n_vocab = 512, .n_ctx = 64, .k_max = 8, .slots = 2, .queue = 2,
                                .max_tokens_default = 16, .max_prompt_bytes = 256, .finished_cache = 3,
                                .max_deadline_ms = 60000, .has_draft = true};
    st_srv_core_init(&C, &lim, cap_send, cap_release, NULL);
    n_replies = released = fail_sends = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    st_srv_core_free(&C);
    clear_replies();
    return 0;
}

// Sends a message from client `who` (identity and fd).
static void send_env(const char *who, int fd, Subternary__Envelope *env)
{
    uint8_t buf[4096];
    size_t n = protobuf_c_message_pack(&env->base, buf);
    struct st_srv_frames f = {.n = 3, .f = {(const uint8_t *)who, (const uint8_t *)"ST01", buf},
                              .len = {strlen(who), 4, n}};
    st_srv_dispatch(&C, &f, fd);
}

static void generate(const char *who, int fd, const char *id, uint32_t max_tokens, uint64_t deadline_ms)
{
    static uint32_t ids[] = {1, 2, 3};
    Subternary__GenerateRequest g = SUBTERNARY__GENERATE_REQUEST__INIT;
    g.request_id = (char *)id;
    g.prompt_ids = ids;
    g.n_prompt_ids = 3;
    g.max_tokens = max_tokens;
    g.deadline_ms = deadline_ms;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_GENERATE;
    env.generate = &g;
    send_env(who, fd, &env);
}

static void cancel(const char *who, const char *id)
{
    Subternary__Cancel m = SUBTERNARY__CANCEL__INIT;
    m.request_id = (char *)id;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_CANCEL;
    env.cancel = &m;
    send_env(who, 1, &env);
}

static struct st_srv_req *admit(void)
{
    struct st_srv_req *r = st_srv_admit(&C);
    if (r) r->session = r;
    return r;
}

static Subternary__Error *error_at(int i)
{
    assert_true(i < n_replies);
    assert_int_equal(replies[i].env->msg_case, SUBTERNARY__ENVELOPE__MSG_ERROR);
    return replies[i].env->error;
}

static bool not_c(void *ctx, const struct st_srv_req *r)
{
    (void)ctx;
    return strcmp(r->id, "c") != 0;
}

static void test_queue_busy_round_robin(void **state)
{
    (void)state;
    generate("A", 1, "a", 0, 0);
    generate("B", 2, "b", 0, 0);
    generate("C", 3, "c", 0, 0);
    generate("D", 4, "d", 0, 0);
    assert_int_equal(n_replies, 0);
    generate("E", 5, "e", 0, 0); // 2 slots + 2 queued: the fifth is refused at once
    assert_int_equal(error_at(0)->code, SUBTERNARY__ERROR_CODE__ERR_BUSY);
    assert_string_equal(error_at(0)->request_id, "e");
    assert_string_equal(replies[0].ident, "E");
    assert_int_equal(C.c.rejected, 1);
    struct st_srv_req *a = admit(), *b = admit();
    assert_non_null(a);
    assert_non_null(b);
    assert_null(admit()); // every slot taken
    assert_string_equal(a->id, "a");
    assert_string_equal(b->id, "b");
    assert_int_equal(C.queued.n, 2);
    // Round-robin: a b a b ...
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), a);
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), b);
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), a);
    // a finishes: c takes its slot and joins the rotation.
    Subternary__Done d = SUBTERNARY__DONE__INIT;
    st_srv_finish(&C, a, &d);
    assert_int_equal(released, 1);
    struct st_srv_req *c = admit();
    assert_string_equal(c->id, "c");
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), b);
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), c);
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), b);
    // A request in a step is passed over, and so is one the caller refuses
    // (the server asks for a request of a free node's).
    b->stepping = true;
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), c);
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), c);
    c->stepping = true;
    assert_null(st_srv_next(&C, NULL, NULL));
    b->stepping = c->stepping = false;
    assert_ptr_equal(st_srv_next(&C, not_c, NULL), b);
    assert_ptr_equal(st_srv_next(&C, not_c, NULL), b);
    assert_ptr_equal(st_srv_next(&C, NULL, NULL), c);
    assert_int_equal(C.c.sessions_peak, 2);
    assert_int_equal(C.c.queued_peak, 2);
}

static void test_stream_and_retry(void **state)
{
    (void)state;
    generate("A", 1, "r", 5, 0);
    struct st_srv_req *r = admit();
    int32_t ids1[] = {10, 11, 12}, ids2[] = {13, 14};
    assert_int_equal(st_srv_chunk(&C, r, ids1, 3, "abc", 3), 0);
    assert_int_equal(st_srv_chunk(&C, r, ids2, 2, "de", 2), 0);
    assert_int_equal(n_replies, 2);
    Subternary__TokenChunk *c0 = replies[0].env->chunk, *c1 = replies[1].env->chunk;
    assert_int_equal(c0->offset, 0);
    assert_int_equal(c0->n_ids, 3);
    assert_int_equal(c1->offset, 3);
    assert_int_equal(c1->ids[1], 14);
    assert_memory_equal(c1->text.data, "de", 2);
    // A retry while it runs: one catch-up chunk with everything so far; no second run.
    generate("A", 7, "r", 5, 0);
    assert_int_equal(n_replies, 3);
    assert_int_equal(replies[2].env->chunk->offset, 0);
    assert_int_equal(replies[2].env->chunk->n_ids, 5);
    assert_int_equal(C.queued.n + C.active.n, 1);
    assert_int_equal(r->fd, 7); // the stream follows the client's new connection
    // Same id, other content: refused.
    generate("A", 1, "r", 6, 0);
    assert_int_equal(error_at(3)->code, SUBTERNARY__ERROR_CODE__ERR_DUPLICATE);
    // The same id from another client is another request.
    generate("B", 2, "r", 5, 0);
    assert_int_equal(C.queued.n, 1);
    // Finish; a retry gets the ids and the same Done.
    Subternary__Done d = SUBTERNARY__DONE__INIT;
    d.tokens = 5;
    d.drafted = 4;
    d.accepted = 3;
    st_srv_finish(&C, r, &d);
    assert_int_equal(replies[4].env->msg_case, SUBTERNARY__ENVELOPE__MSG_DONE);
    assert_string_equal(replies[4].env->done->request_id, "r");
    assert_true(replies[4].env->done->acceptance > 0.74 && replies[4].env->done->acceptance < 0.76);
    generate("A", 1, "r", 5, 0);
    assert_int_equal(n_replies, 7);
    assert_int_equal(replies[5].env->chunk->n_ids, 5);
    assert_int_equal(replies[5].env->chunk->ids[4], 14);
    assert_int_equal(replies[6].env->msg_case, SUBTERNARY__ENVELOPE__MSG_DONE);
    assert_int_equal(replies[6].env->done->tokens, 5);
    assert_int_equal(C.c.done, 1);
    // The finished cache is bounded (3): older results are forgotten and run again.
    st_srv_finish(&C, admit(), &d); // B's
    for (int i = 0; i < 2; i++) {
        char id[8];
        snprintf(id, sizeof id, "x%d", i);
        generate("C", 3, id, 1, 0);
        st_srv_finish(&C, admit(), &d);
    }
    assert_int_equal(C.finished.n, 3);
    int before = n_replies;
    generate("A", 1, "r", 5, 0);
    assert_int_equal(n_replies, before); // queued anew: no reply yet
    assert_int_equal(C.queued.n, 1);
}

static void test_cancel(void **state)
{
    (void)state;
    generate("A", 1, "a", 0, 0);
    generate("A", 1, "b", 0, 0);
    generate("A", 1, "q", 0, 0);
    struct st_srv_req *a = admit(), *b = admit();
    // Queued: answered at once, gone from the queue.
    cancel("A", "q");
    assert_int_equal(error_at(0)->code, SUBTERNARY__ERROR_CODE__ERR_CANCELLED);
    assert_int_equal(C.queued.n, 0);
    // Active, not in a step: its session ends at once.
    cancel("A", "b");
    assert_int_equal(error_at(1)->code, SUBTERNARY__ERROR_CODE__ERR_CANCELLED);
    assert_int_equal(released, 1);
    assert_int_equal(C.active.n, 1);
    (void)b;
    // During a's step: released right after it, and then answered.
    a->stepping = true;
    cancel("A", "a");
    assert_int_equal(n_replies, 2);
    assert_int_equal(released, 1);
    assert_true(st_srv_after_step(&C, a));
    assert_int_equal(released, 2);
    assert_int_equal(error_at(2)->code, SUBTERNARY__ERROR_CODE__ERR_CANCELLED);
    assert_int_equal(C.active.n, 0);
    // Unknown, and another client's request.
    cancel("A", "zzz");
    assert_int_equal(error_at(3)->code, SUBTERNARY__ERROR_CODE__ERR_UNKNOWN_REQUEST);
    generate("B", 2, "mine", 0, 0);
    cancel("A", "mine");
    assert_int_equal(error_at(4)->code, SUBTERNARY__ERROR_CODE__ERR_UNKNOWN_REQUEST);
    assert_int_equal(C.queued.n, 1);
    // A retry of a cancelled request gets its end again, and does not run.
    generate("A", 1, "b", 0, 0);
    assert_int_equal(error_at(5)->code, SUBTERNARY__ERROR_CODE__ERR_CANCELLED);
    assert_int_equal(C.queued.n, 1);
    assert_int_equal(C.c.cancelled, 3);
}

static void test_disconnect_and_stalled_peer(void **state)
{
    (void)state;
    generate("A", 5, "a1", 0, 0);
    generate("A", 5, "a2", 0, 0);
    generate("B", 6, "b1", 0, 0);
    struct st_srv_req *a1 = admit();
    admit();
    assert_int_equal(C.queued.n, 1);
    // A's connection closes: its active and queued requests go, silently.
    a1->stepping = true;
    st_srv_disconnect(&C, 5);
    assert_int_equal(n_replies, 0);
    assert_int_equal(released, 1);          // a2 at once; a1, in its step, after it
    assert_true(st_srv_after_step(&C, a1));
    assert_int_equal(released, 2);
    assert_int_equal(C.active.n, 0);
    assert_int_equal(C.c.disconnected, 2);
    struct st_srv_req *b1 = admit();
    assert_string_equal(b1->id, "b1");
    // Forgotten: a retry from A after reconnecting runs afresh.
    generate("A", 8, "a1", 0, 0);
    assert_int_equal(C.queued.n, 1);
    // A peer whose sends fail (gone, or not reading) loses its stream and slot.
    int32_t ids[] = {1};
    fail_sends = 1;
    assert_int_equal(st_srv_chunk(&C, b1, ids, 1, "", 0), -1);
    fail_sends = 0;
    assert_int_equal(released, 3);
    assert_int_equal(C.c.disconnected, 3);
    assert_int_equal(C.active.n, 0);
}

static void test_deadline_fail_shutdown(void **state)
{
    (void)state;
    generate("A", 1, "slow", 0, 100);
    generate("A", 1, "never", 0, 50);
    generate("A", 1, "ok", 0, 0);
    generate("A", 1, "boom", 0, 0);
    struct st_srv_req *slow = admit();
    assert_string_equal(slow->id, "slow");
    st_srv_expire(&C, st_srv_now_ns() + 60000000u); // 60 ms later: "never", still queued, is past its deadline
    assert_int_equal(error_at(0)->code, SUBTERNARY__ERROR_CODE__ERR_DEADLINE_EXCEEDED);
    assert_string_equal(error_at(0)->request_id, "never");
    st_srv_expire(&C, st_srv_now_ns() + 200000000u);
    assert_int_equal(error_at(1)->code, SUBTERNARY__ERROR_CODE__ERR_DEADLINE_EXCEEDED);
    assert_int_equal(released, 1);
    struct st_srv_req *ok = admit(), *boom = admit();
    st_srv_fail(&C, boom, SUBTERNARY__ERROR_CODE__ERR_INTERNAL, "step failed: %s", "workers died");
    assert_int_equal(error_at(2)->code, SUBTERNARY__ERROR_CODE__ERR_INTERNAL);
    assert_string_equal(error_at(2)->message, "step failed: workers died");
    assert_int_equal(C.c.failed, 3);
    (void)ok;
    generate("B", 2, "waiting", 0, 0);
    generate("B", 2, "waiting2", 0, 0);
    st_srv_shutdown(&C);
    assert_int_equal(n_replies, 6);
    for (int i = 3; i < 6; i++) assert_int_equal(error_at(i)->code, SUBTERNARY__ERROR_CODE__ERR_SHUTTING_DOWN);
    assert_int_equal(released, 3);
    assert_int_equal(C.active.n + C.queued.n, 0);
}

static void test_stats_and_health(void **state)
{
    (void)state;
    C.view.n_nodes = 2;
    C.view.workers = 4;
    C.view.workers_ready = 3;
    C.view.restarts = 5;
    C.view.node[1].sessions = 1;
    C.view.node[1].slots = 1;
    C.view.target = "t.gguf";
    generate("A", 1, "a", 0, 0);
    admit();
    generate("A", 1, "b", 0, 0);
    st_srv_count_round(&C, 30, 8, 6, st_srv_now_ns());
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    Subternary__StatsRequest sr = SUBTERNARY__STATS_REQUEST__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_STATS_REQUEST;
    env.stats_request = &sr;
    send_env("A", 1, &env);
    Subternary__HealthRequest hr = SUBTERNARY__HEALTH_REQUEST__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_HEALTH_REQUEST;
    env.health_request = &hr;
    send_env("A", 1, &env);
    assert_int_equal(n_replies, 2);
    const Subternary__Stats *st = replies[0].env->stats;
    assert_int_equal(st->sessions, 1);
    assert_int_equal(st->queued, 1);
    assert_int_equal(st->slots, 2);
    assert_int_equal(st->tokens_generated, 30);
    assert_true(st->tokens_per_second > 0);
    assert_true(st->acceptance > 0.74 && st->acceptance < 0.76);
    assert_int_equal(st->worker_restarts, 5);
    assert_int_equal(st->n_nodes, 2);
    assert_int_equal(st->nodes[1]->sessions, 1);
    const Subternary__Health *h = replies[1].env->health;
    assert_false(h->ok); // a worker is not ready
    assert_int_equal(h->workers_total, 4);
    assert_string_equal(h->target, "t.gguf");
}

static void test_prometheus(void **state)
{
    (void)state;
    struct st_client_stats st = {.sessions = 3, .slots = 4, .queued = 2, .requests_done = 17, .acceptance = 0.5,
                                 .tokens_per_second = 123.25, .n_nodes = 2};
    st.nodes[0] = (struct st_client_node_stats){.node = 0, .sessions = 2, .workers = 4};
    st.nodes[1] = (struct st_client_node_stats){.node = 1, .sessions = 1, .workers = 4};
    size_t need = st_client_prometheus(&st, NULL, 0);
    char *buf = malloc(need + 1);
    assert_int_equal(st_client_prometheus(&st, buf, need + 1), need);
    assert_int_equal(strlen(buf), need);
    assert_non_null(strstr(buf, "# TYPE subternary_sessions gauge\nsubternary_sessions 3\n"));
    assert_non_null(strstr(buf, "# TYPE subternary_requests_done_total counter\nsubternary_requests_done_total 17\n"));
    assert_non_null(strstr(buf, "subternary_tokens_per_second 123.25\n"));
    assert_non_null(strstr(buf, "subternary_node_sessions{node=\"1\"} 1\n"));
    // Every line is a comment or "name[{labels}] value", every family has HELP and TYPE.
    int types = 0, helps = 0, samples = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "# TYPE ", 7)) types++;
        else if (!strncmp(line, "# HELP ", 7)) helps++;
        else {
            char name[128], value[64];
            assert_int_equal(sscanf(line, "%127s %63s", name, value), 2);
            assert_true(!strncmp(name, "subternary_", 11));
            char *end;
            strtod(value, &end);
            assert_true(*end == 0);
            samples++;
        }
    }
    assert_int_equal(types, helps);
    assert_true(samples >= types);
    // Truncation: still NUL-terminated, same length needed.
    char small[32];
    assert_int_equal(st_client_prometheus(&st, small, sizeof small), need);
    assert_int_equal(strlen(small), sizeof small - 1);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_queue_busy_round_robin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_and_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disconnect_and_stalled_peer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_fail_shutdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_and_health, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prometheus, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
