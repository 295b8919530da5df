// Several real `subternary serve` processes behind one client (a comma-
// separated endpoint list, on loopback tcp), each with one slot and a queue
// of one: concurrent requests spread over both servers with the greedy
// output of `subternary generate`; a request refused as busy moves to the
// other server, and only a request every server refused comes back busy;
// cancels and retries reach the server that holds the request; stats and
// health add up the servers, also in the command-line client; after one
// server is SIGKILLed, its streaming request ends with an error, its waiting
// one moves to the survivor, new requests run there and stats count 1 of 2
// servers; a new server on its endpoint is taken up again.
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

#include "tests/support/server_support.h"

#define N_PROMPTS ST_TEST_N_PROMPTS
#define REF_TOKENS 96
#define LONG 3000 // tokens of a request that runs until cancelled

static struct st_test_server S[2];
static char list[600]; // "A,B"
static int killed = -1;  // the server test_kill_one killed
static char prompts[N_PROMPTS][128];
static uint32_t *ref[N_PROMPTS];
static int n_ref[N_PROMPTS];

// A client of both servers, once both answered.
static struct st_client *multi_client(void)
{
    struct st_client_options o = {.endpoint = list, .connect_timeout_ms = 1000};
    struct st_client *c;
    if (st_client_connect(&o, &c)) {
        fprintf(stderr, "connect %s: %s\n", list, st_client_error(c));
        st_client_close(&c);
        return NULL;
    }
    for (int64_t give_up = st_test_now_ms() + 10000; st_test_now_ms() < give_up;) {
        struct st_client_health h;
        if (st_client_health(c, &h, 2000) == 1 && h.servers == 2 && h.servers_answered == 2) return c;
    }
    fprintf(stderr, "%s: not both servers answered\n", list);
    st_client_close(&c);
    return NULL;
}

// Server i's own stats, through a client of it alone.
static void server_stats(int i, struct st_client_stats *st)
{
    struct st_client *c = st_test_client(&S[i], NULL);
    assert_non_null(c);
    assert_int_equal(st_client_stats(c, st, 5000), 1);
    assert_int_equal(st->servers, 1);
    st_client_close(&c);
}

// Pumps the n requests until each finished or, with `chunk`, streamed.
static void pump_until(struct st_client *c, const char *const *ids, struct st_test_result *rs, int n, bool chunk)
{
    for (int64_t give_up = st_test_now_ms() + 60000;;) {
        int left = 0;
        for (int i = 0; i < n; i++) left += !rs[i].finished && !(chunk && rs[i].chunks);
        if (!left) return;
        assert_true(st_test_now_ms() < give_up);
        assert_true(st_test_pump_any(c, ids, rs, n, 1000) >= 0);
    }
}

// Submits a request that runs until cancelled.
static void submit_long(struct st_client *c, const char *id, int p)
{
    assert_int_equal(st_test_submit(c, id, prompts[p], LONG, true), 0);
}

// Two requests that run until cancelled, once both streamed: one on each
// server (the fewest in flight).
static void start_pair(struct st_client *c, const char *const *ids, struct st_test_result *r)
{
    memset(r, 0, 2 * sizeof *r);
    submit_long(c, ids[0], 0);
    submit_long(c, ids[1], 1);
    pump_until(c, ids, r, 2, true);
    assert_int_not_equal(r[0].server, r[1].server);
}

static void test_endpoint_list_errors(void **state)
{
    (void)state;
    const char *bad[] = {"tcp://127.0.0.1:1,,tcp://127.0.0.1:2", "tcp://127.0.0.1:1, tcp://127.0.0.1:1", ","};
    const char *why[] = {"empty entry", "twice", "empty entry"};
    for (int i = 0; i < 3; i++) {
        struct st_client_options o = {.endpoint = bad[i]};
        struct st_client *c;
        assert_int_equal(st_client_connect(&o, &c), -1);
        assert_non_null(strstr(st_client_error(c), why[i]));
        st_client_close(&c);
    }
    char many[1024] = "";
    for (int i = 0; i <= ST_CLIENT_MAX_SERVERS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%stcp://127.0.0.1:%d", i ? "," : "", 1000 + i);
    struct st_client_options o = {.endpoint = many};
    struct st_client *c;
    assert_int_equal(st_client_connect(&o, &c), -1);
    assert_non_null(strstr(st_client_error(c), "more than 16"));
    st_client_close(&c);
    // Nothing listens: a submit gives up after the connect timeout.
    o = (struct st_client_options){.endpoint = "tcp://127.0.0.1:1,tcp://127.0.0.1:2", .connect_timeout_ms = 200};
    assert_int_equal(st_client_connect(&o, &c), 0);
    int64_t t0 = st_test_now_ms();
    assert_int_equal(st_test_submit(c, "nowhere", prompts[0], 8, false), -1);
    assert_true(st_test_now_ms() - t0 >= 190);
    assert_non_null(strstr(st_client_error(c), "none of the 2 servers is connected"));
    st_client_close(&c);
}

static void test_spread(void **state)
{
    (void)state;
    enum { N = 4 }; // one server takes 2 (a slot and a queue place)
    struct st_client_stats st0[2], st1[2], all;
    server_stats(0, &st0[0]);
    server_stats(1, &st0[1]);
    struct st_client *c = multi_client();
    assert_non_null(c);
    static struct st_test_result r[N];
    memset(r, 0, sizeof r);
    char name[N][16];
    const char *ids[N];
    for (int i = 0; i < N; i++) {
        snprintf(name[i], sizeof name[i], "spread-%d", i);
        ids[i] = name[i];
        assert_int_equal(st_test_submit(c, ids[i], prompts[i], REF_TOKENS, false), 0);
    }
    pump_until(c, ids, r, N, false);
    int on[2] = {0, 0};
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].code, 0);
        assert_int_equal(r[i].finals, 1);
        assert_int_equal(r[i].gaps, 0);
        assert_true(st_test_prefix_of(&r[i], ref[i], n_ref[i], REF_TOKENS));
        assert_true(r[i].server == 0 || r[i].server == 1);
        on[r[i].server]++;
    }
    server_stats(0, &st1[0]);
    server_stats(1, &st1[1]);
    printf("  %d requests on server 0, %d on server 1\n", on[0], on[1]);
    for (int s = 0; s < 2; s++) { // the fewest in flight: two each, none refused
        assert_int_equal(on[s], 2);
        assert_int_equal(st1[s].requests_done - st0[s].requests_done, 2);
        assert_int_equal(st1[s].requests_rejected, st0[s].requests_rejected);
    }
    // The combined view adds both up.
    assert_int_equal(st_client_stats(c, &all, 5000), 1);
    assert_int_equal(all.servers, 2);
    assert_int_equal(all.servers_answered, 2);
    assert_int_equal(all.slots, 2);
    assert_int_equal(all.queue_limit, 2);
    assert_int_equal(all.requests_done, st1[0].requests_done + st1[1].requests_done);
    assert_int_equal(all.tokens_generated, st1[0].tokens_generated + st1[1].tokens_generated);
    assert_int_equal(all.drafted, st1[0].drafted + st1[1].drafted);
    assert_true(all.acceptance > 0 && all.acceptance <= 1);
    assert_int_equal(all.n_nodes, 2);
    assert_int_equal(all.node_server[0], 0);
    assert_int_equal(all.node_server[1], 1);
    assert_int_equal(all.nodes[1].slots, 1);
    struct st_client_health h;
    assert_int_equal(st_client_health(c, &h, 5000), 1);
    assert_true(h.ok);
    assert_int_equal(h.workers_total, 2);
    assert_int_equal(h.servers_answered, 2);
    // While a long request holds one server, new requests go to the other
    // (round-robin alone would queue every second one behind the long one).
    static struct st_test_result hold, next;
    memset(&hold, 0, sizeof hold);
    submit_long(c, "hold", 0);
    while (!hold.chunks) assert_int_equal(st_test_pump(c, "hold", &hold, 10000), 1);
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "next-%d", i);
        memset(&next, 0, sizeof next);
        assert_int_equal(st_test_submit(c, id, prompts[i], 16, false), 0);
        assert_int_equal(st_test_wait(c, id, &next, 10000), 0);
        assert_int_equal(next.code, 0);
        assert_int_equal(next.server, 1 - hold.server);
    }
    assert_int_equal(st_client_cancel(c, "hold"), 0);
    assert_int_equal(st_test_wait(c, "hold", &hold, 10000), 0);
    assert_int_equal(hold.code, ST_CLIENT_ERR_CANCELLED);
    server_stats(0, &st1[0]);
    server_stats(1, &st1[1]);
    // The async form: one STATS event per server, each its own figures.
    assert_int_equal(st_client_request_stats(c), 0);
    bool seen[2] = {false, false};
    while (!seen[0] || !seen[1]) {
        struct st_client_event ev;
        assert_int_equal(st_client_next(c, &ev, 5000), 1);
        assert_int_equal(ev.type, ST_CLIENT_EV_STATS);
        assert_true(ev.server == 0 || ev.server == 1);
        assert_false(seen[ev.server]);
        seen[ev.server] = true;
        assert_int_equal(ev.stats.slots, 1);
        assert_int_equal(ev.stats.requests_done, st1[ev.server].requests_done);
        st_client_event_clear(&ev);
    }
    st_client_close(&c);
    // One server alone gives the same ids.
    struct st_client *one = st_test_client(&S[1], NULL);
    assert_non_null(one);
    static struct st_test_result o;
    memset(&o, 0, sizeof o);
    assert_int_equal(st_test_submit(one, "alone", prompts[0], REF_TOKENS, false), 0);
    assert_int_equal(st_test_wait(one, "alone", &o, 30000), 0);
    assert_int_equal(o.n, r[0].n);
    assert_memory_equal(o.ids, r[0].ids, o.n * sizeof *o.ids);
    st_client_close(&one);
}

static void test_busy_moves(void **state)
{
    (void)state;
    struct st_client_stats st0[2], st1[2];
    // Another client fills server 0: one running, one queued.
    struct st_client *other = st_test_client(&S[0], NULL);
    assert_non_null(other);
    static struct st_test_result fill[2];
    memset(fill, 0, sizeof fill);
    const char *fill_ids[] = {"fill-0", "fill-1"};
    submit_long(other, fill_ids[0], 0);
    submit_long(other, fill_ids[1], 1);
    assert_int_equal(st_client_stats(other, &st0[0], 5000), 1); // after both were taken
    assert_int_equal(st0[0].sessions + st0[0].queued, 2);
    server_stats(1, &st0[1]);
    struct st_client *c = multi_client();
    assert_non_null(c);
    // Placement alternates on a tie, so some of these go to server 0 first:
    // refused there, they run on server 1, and the caller sees no busy.
    static struct st_test_result r[3];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "moved-%d", i);
        assert_int_equal(st_test_submit(c, id, prompts[i], 24, false), 0);
        assert_int_equal(st_test_wait(c, id, &r[i], 30000), 0);
        assert_int_equal(r[i].code, 0);
        assert_int_equal(r[i].server, 1);
        assert_true(st_test_prefix_of(&r[i], ref[i], n_ref[i], 24));
    }
    server_stats(0, &st1[0]);
    server_stats(1, &st1[1]);
    printf("  server 0 refused %llu of 3, server 1 ran them\n",
           (unsigned long long)(st1[0].requests_rejected - st0[0].requests_rejected));
    assert_true(st1[0].requests_rejected - st0[0].requests_rejected >= 1);
    assert_int_equal(st1[0].requests_done, st0[0].requests_done);
    assert_int_equal(st1[1].requests_done - st0[1].requests_done, 3);
    // Three more than server 1 can take, all at once: one runs there, one
    // waits there, the third is refused by both and only then comes back busy.
    static struct st_test_result b[3];
    memset(b, 0, sizeof b);
    const char *bids[] = {"both-0", "both-1", "both-2"};
    for (int i = 0; i < 3; i++) submit_long(c, bids[i], i);
    for (int64_t give_up = st_test_now_ms() + 30000;;) {
        int streaming = 0, busy = 0;
        for (int i = 0; i < 3; i++) {
            streaming += b[i].chunks > 0 && !b[i].finished;
            busy += b[i].finished;
        }
        if (streaming == 1 && busy == 1) break;
        assert_true(st_test_now_ms() < give_up);
        assert_true(st_test_pump_any(c, bids, b, 3, 1000) >= 0);
    }
    struct st_client_stats all;
    assert_int_equal(st_client_stats(c, &all, 5000), 1);
    assert_int_equal(all.sessions, 2); // server 0: fill-0, server 1: one of ours
    assert_int_equal(all.queued, 2);
    for (int i = 0; i < 3; i++) {
        if (!b[i].finished) {
            assert_int_equal(b[i].chunks ? b[i].server : 1, 1);
            assert_int_equal(st_client_cancel(c, bids[i]), 0);
            continue;
        }
        printf("  refused by both: %s\n", b[i].message);
        assert_int_equal(b[i].code, ST_CLIENT_ERR_BUSY);
        assert_int_equal(b[i].n, 0);
        assert_non_null(strstr(b[i].message, "every server refused"));
    }
    pump_until(c, bids, b, 3, false);
    for (int i = 0; i < 3; i++) assert_true(b[i].code == ST_CLIENT_ERR_CANCELLED || b[i].code == ST_CLIENT_ERR_BUSY);
    st_client_close(&c);
    for (int i = 0; i < 2; i++) assert_int_equal(st_client_cancel(other, fill_ids[i]), 0);
    pump_until(other, fill_ids, fill, 2, false);
    assert_int_equal(fill[0].code, ST_CLIENT_ERR_CANCELLED);
    assert_int_equal(fill[1].code, ST_CLIENT_ERR_CANCELLED);
    st_client_close(&other);
}

static void test_cancel_and_retry_reach_their_server(void **state)
{
    (void)state;
    struct st_client_stats st0[2], st1[2], all;
    server_stats(0, &st0[0]);
    server_stats(1, &st0[1]);
    struct st_client *c = multi_client();
    assert_non_null(c);
    static struct st_test_result r[2];
    const char *ids[] = {"cancel-0", "cancel-1"};
    start_pair(c, ids, r);
    // A retry (same id, same bytes) replays from offset 0 on the server that
    // runs it: still two sessions in all, not three.
    submit_long(c, ids[0], 0);
    int gaps = r[0].gaps;
    while (r[0].gaps == gaps) assert_int_equal(st_test_pump_any(c, ids, r, 2, 10000), 1);
    assert_int_equal(st_client_stats(c, &all, 5000), 1);
    assert_int_equal(all.sessions, 2);
    for (int i = 0; i < 2; i++) assert_int_equal(st_client_cancel(c, ids[i]), 0);
    pump_until(c, ids, r, 2, false);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].code, ST_CLIENT_ERR_CANCELLED); // not "unknown request": the right server
        assert_int_equal(r[i].finals, 1);
    }
    server_stats(0, &st1[0]);
    server_stats(1, &st1[1]);
    for (int s = 0; s < 2; s++) {
        assert_int_equal(st1[s].requests_cancelled - st0[s].requests_cancelled, 1);
        assert_int_equal(st1[s].sessions, 0);
    }
    // An id not in flight: answered by the library as a server would.
    static struct st_test_result u;
    memset(&u, 0, sizeof u);
    assert_int_equal(st_client_cancel(c, "never-submitted"), 0);
    assert_int_equal(st_test_wait(c, "never-submitted", &u, 1000), 0);
    assert_int_equal(u.code, ST_CLIENT_ERR_UNKNOWN_REQUEST);
    assert_int_equal(u.server, -1);
    st_client_close(&c);
}

static void test_cli(void **state)
{
    (void)state;
    char out[32768], gen[8192], target[1024], draft[1024];
    const char *shared = getenv("ST_SHARED") ? getenv("ST_SHARED") : "../shared";
    snprintf(target, sizeof target, "%s/models/pico-target.q8_0.gguf", shared);
    snprintf(draft, sizeof draft, "%s/models/pico-draft.q4_0.gguf", shared);
    const char *g[] = {"generate", "-m", target, "-d", draft, "--workers", "2", "--tokens", prompts[2], "-n", "40", "--ids",
                       NULL};
    assert_int_equal(st_test_run(g, gen, sizeof gen), 0);
    const char *cli[] = {"client", "--connect", list, "--tokens", prompts[2], "-n", "40", "--ids", "--quiet", NULL};
    assert_int_equal(st_test_run(cli, out, sizeof out), 0);
    assert_true(strlen(out) > 10);
    assert_string_equal(out, gen);
    // The list from the environment.
    setenv("SUBTERNARY_ENDPOINT", list, 1);
    const char *env[] = {"client", "--tokens", prompts[2], "-n", "40", "--ids", "--quiet", NULL};
    assert_int_equal(st_test_run(env, out, sizeof out), 0);
    assert_string_equal(out, gen);
    const char *stats[] = {"client", "--stats", NULL};
    assert_int_equal(st_test_run(stats, out, sizeof out), 0);
    unsetenv("SUBTERNARY_ENDPOINT");
    assert_non_null(strstr(out, "sessions 0 / 2 slots"));
    assert_non_null(strstr(out, "servers: 2 of 2 answered\n"));
    assert_non_null(strstr(out, "server 1 node 0: 0 sessions / 1 slots"));
    const char *prom[] = {"client", "--connect", list, "--stats", "--prom", NULL};
    assert_int_equal(st_test_run(prom, out, sizeof out), 0);
    assert_non_null(strstr(out, "\nsubternary_servers 2\n"));
    assert_non_null(strstr(out, "\nsubternary_servers_answered 2\n"));
    assert_non_null(strstr(out, "\nsubternary_node_slots{server=\"0\",node=\"0\"} 1\n"));
    assert_non_null(strstr(out, "\nsubternary_node_slots{server=\"1\",node=\"0\"} 1\n"));
    const char *health[] = {"client", "--connect", list, "--health", NULL};
    assert_int_equal(st_test_run(health, out, sizeof out), 0);
    assert_true(!strncmp(out, "ok: workers 2/2 ready", 21));
    assert_non_null(strstr(out, "; 2 of 2 servers answered\n"));
}

static void test_kill_one(void **state)
{
    (void)state;
    struct st_client *c = multi_client();
    assert_non_null(c);
    static struct st_test_result r[3];
    const char *ids[] = {"kill-0", "kill-1", "kill-moves"};
    start_pair(c, ids, r);
    memset(&r[2], 0, sizeof r[2]);
    // A third request waits behind one of the two; its server is the victim.
    assert_int_equal(st_test_submit(c, ids[2], prompts[2], 32, false), 0);
    int v = -1;
    for (int64_t give_up = st_test_now_ms() + 10000; v < 0; usleep(10000)) {
        assert_true(st_test_now_ms() < give_up);
        struct st_client_stats st;
        for (int s = 0; s < 2 && v < 0; s++) {
            server_stats(s, &st);
            if (st.queued == 1) v = s;
        }
    }
    int on_dead = r[0].server == v ? 0 : 1, alive = 1 - v;
    char endpoint[256];
    snprintf(endpoint, sizeof endpoint, "%s", S[v].endpoint);
    kill(S[v].pid, SIGKILL);
    killed = v;
    assert_int_equal(st_test_server_stop(&S[v]), -1); // reaped: it was killed
    // Its streaming request ends with an error; the other streams on, and
    // the waiting one moved to the survivor, where it waits behind it.
    while (!r[on_dead].finished) assert_int_equal(st_test_pump_any(c, ids, r, 3, 10000), 1);
    printf("  on the killed server: %s\n", r[on_dead].message);
    assert_int_equal(r[on_dead].code, ST_CLIENT_ERR_SHUTTING_DOWN);
    assert_non_null(strstr(r[on_dead].message, "lost the connection"));
    assert_false(r[1 - on_dead].finished);
    assert_false(r[2].finished);
    assert_int_equal(st_client_cancel(c, ids[1 - on_dead]), 0);
    pump_until(c, ids, r, 3, false);
    assert_int_equal(r[1 - on_dead].code, ST_CLIENT_ERR_CANCELLED);
    assert_int_equal(r[2].code, 0);
    assert_int_equal(r[2].server, alive);
    assert_true(st_test_prefix_of(&r[2], ref[2], n_ref[2], 32));
    // New requests run on the survivor, one after another and two at once.
    for (int i = 0; i < 3; i++) {
        static struct st_test_result a;
        memset(&a, 0, sizeof a);
        char id[16];
        snprintf(id, sizeof id, "after-%d", i);
        assert_int_equal(st_test_submit(c, id, prompts[i], 32, false), 0);
        assert_int_equal(st_test_wait(c, id, &a, 30000), 0);
        assert_int_equal(a.code, 0);
        assert_int_equal(a.server, alive);
        assert_true(st_test_prefix_of(&a, ref[i], n_ref[i], 32));
    }
    static struct st_test_result two[2];
    memset(two, 0, sizeof two);
    const char *tids[] = {"pair-0", "pair-1"};
    for (int i = 0; i < 2; i++) assert_int_equal(st_test_submit(c, tids[i], prompts[i + 2], 32, false), 0);
    pump_until(c, tids, two, 2, false);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(two[i].code, 0);
        assert_true(st_test_prefix_of(&two[i], ref[i + 2], n_ref[i + 2], 32));
    }
    // Stats and health count the survivor alone (within the connect timeout).
    struct st_client_stats st;
    int64_t t0 = st_test_now_ms();
    assert_int_equal(st_client_stats(c, &st, 5000), 1);
    printf("  stats of 1 of 2 servers in %lld ms\n", (long long)(st_test_now_ms() - t0));
    assert_int_equal(st.servers, 2);
    assert_int_equal(st.servers_answered, 1);
    assert_int_equal(st.slots, 1);
    assert_int_equal(st.n_nodes, 1);
    assert_int_equal(st.node_server[0], (uint32_t)alive);
    struct st_client_health h;
    assert_int_equal(st_client_health(c, &h, 5000), 1);
    assert_false(h.ok);
    assert_int_equal(h.servers_answered, 1);
    char out[4096];
    const char *health[] = {"client", "--connect", list, "--health", "--timeout", "3", NULL};
    assert_int_equal(st_test_run(health, out, sizeof out), 1);
    assert_true(!strncmp(out, "degraded:", 9));
    assert_non_null(strstr(out, "; 1 of 2 servers answered\n"));
    // A new server on the same endpoint: the client takes it up again once
    // the connection is back.
    const char *args[] = {"--slots", "1", "--queue", "1", "--workers", "1", "--listen", endpoint, NULL};
    assert_int_equal(st_test_server_start(&S[v], args), 0);
    killed = -1;
    for (int64_t give_up = st_test_now_ms() + 10000; !h.ok; usleep(50000)) {
        assert_true(st_test_now_ms() < give_up);
        assert_int_equal(st_client_health(c, &h, 1000), 1);
    }
    assert_int_equal(h.servers_answered, 2);
    static struct st_test_result back[2];
    const char *bids[] = {"back-0", "back-1"};
    start_pair(c, bids, back); // one on each, the new server too
    for (int i = 0; i < 2; i++) assert_int_equal(st_client_cancel(c, bids[i]), 0);
    pump_until(c, bids, back, 2, false);
    st_client_close(&c);
}

static int setup(void **state)
{
    (void)state;
    if (st_test_prompts(prompts, ref, n_ref, REF_TOKENS)) return -1;
    // One slot and one queue place each: a third request is refused.
    const char *args[] = {"--slots", "1", "--queue", "1", "--workers", "1", NULL};
    for (int i = 0; i < 2; i++)
        if (st_test_server_start(&S[i], args)) return -1;
    snprintf(list, sizeof list, "%s,%s", S[0].endpoint, S[1].endpoint);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        bool alive = st_test_server_alive(&S[i]);
        int exit = st_test_server_stop(&S[i]);
        if (i != killed && (!alive || exit != 0)) {
            fprintf(stderr, "server %d: alive %d, exit %d\n", i, alive, exit);
            rc = -1;
        }
    }
    for (int i = 0; i < N_PROMPTS; i++) free(ref[i]);
    return rc;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_list_errors),
        cmocka_unit_test(test_spread),
        cmocka_unit_test(test_busy_moves),
        cmocka_unit_test(test_cancel_and_retry_reach_their_server),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_kill_one),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
