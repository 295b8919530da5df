// Speculative decoding through real worker processes: greedy output equals
// autoregressive output token for token (every pico target/draft type pair,
// short and long prompts, K 1/2/4/8/adaptive, governor on and off), and the
// governor suspends a draft that does not agree with the target.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "tests/support/engine_support.h"
#include "tests/support/test_support.h"

#define GEN_TOKENS 40

static struct st_golden_row *rows;
static int n_rows;

static const struct st_golden_row *prompt_row(const char *name)
{
    for (int i = 0; i < n_rows; i++)
        if (!strcmp(rows[i].prompt, name)) return &rows[i];
    return NULL;
}

static void run(struct st_session *s, const struct st_gen_params *gp, int32_t *out, uint32_t *n,
                struct st_session_stats *st)
{
    struct st_error e;
    if (st_session_rewind(s, gp, &e)) fail_msg("rewind: %s", e.msg);
    int32_t buf[64];
    enum st_finish fin = ST_FINISH_NONE;
    while (fin == ST_FINISH_NONE)
        if (st_session_round(s, buf, 64, &fin, &e) < 0) fail_msg("round: %s", e.msg);
    const int32_t *o = st_session_output(s, n);
    memcpy(out, o, *n * sizeof *o);
    if (st) *st = *st_session_stats(s);
}

static double early_k, early_rounds; // rounds run with draft_p_min, and their drafts

static void check_pair(const char *target, const char *draft)
{
    struct st_test_engine t;
    assert_int_equal(st_test_engine_open(&t, target, draft, 2, 1, 1), 0);
    const char *prompts[2] = {"p101", "p102"};
    uint32_t ks[5] = {1, 2, 4, 8, 0};
    for (int pi = 0; pi < 2; pi++) {
        const struct st_golden_row *r = prompt_row(prompts[pi]);
        assert_non_null(r);
        struct st_gen_params gp = {.max_tokens = GEN_TOKENS, .speculate = true, .governor = true, .seed = 1};
        struct st_session *s;
        struct st_error e;
        if (st_session_start(t.eng, &gp, r->prompt_ids, r->n_prompt, ++t.eng->next_session, &s, &e))
            fail_msg("%s", e.msg);
        int32_t ar[GEN_TOKENS], sp[GEN_TOKENS];
        uint32_t n_ar, n_sp;
        gp.speculate = false;
        run(s, &gp, ar, &n_ar, NULL);
        assert_int_equal(n_ar, GEN_TOKENS);
        uint32_t drafted = 0, accepted = 0;
        for (int ki = 0; ki < 5; ki++)
            for (int gov = 0; gov < 2; gov++) {
                struct st_session_stats st;
                gp.speculate = true;
                gp.k = ks[ki];
                gp.governor = gov;
                run(s, &gp, sp, &n_sp, &st);
                assert_int_equal(n_sp, n_ar);
                for (uint32_t i = 0; i < n_ar; i++)
                    if (sp[i] != ar[i])
                        fail_msg("%s + %s, %s, K=%u, governor %d: token %u is %d, autoregressive %d", target, draft,
                                 prompts[pi], ks[ki], gov, i, sp[i], ar[i]);
                drafted += st.drafted;
                accepted += st.accepted;
            }
        // K up to 8, drafting stopped early below 0.9 confidence.
        struct st_session_stats st;
        gp.k = 8;
        gp.governor = false;
        gp.draft_p_min = 0.9f;
        run(s, &gp, sp, &n_sp, &st);
        gp.draft_p_min = 0;
        assert_int_equal(n_sp, n_ar);
        for (uint32_t i = 0; i < n_ar; i++)
            if (sp[i] != ar[i])
                fail_msg("%s + %s, %s, K<=8, draft_p_min 0.9: token %u is %d, autoregressive %d", target, draft,
                         prompts[pi], i, sp[i], ar[i]);
        early_k += st.k_sum, early_rounds += st.rounds - st.suspended_rounds;
        // The summary's time split: the workers' draft and verify time are
        // parts of the decode time, and rounds + target-only steps are all of it.
        assert_true(st.draft_seconds > 0 && st.verify_seconds > 0);
        assert_true(st.draft_seconds + st.verify_seconds <= st.seconds + 1e-9);
        assert_true(fabs(st.round_seconds + st.target_only_seconds - st.seconds) < 1e-6);
        printf("  %-28s + %-26s %s: identical in 11 runs, acceptance %.3f; K<=8 with early stops: mean K %.2f\n",
               target + 7, draft + 7, prompts[pi], drafted ? (double)accepted / drafted : 0.0,
               st.rounds ? st.k_sum / st.rounds : 0.0);
        st_session_end(&s);
    }
    st_test_engine_close(&t);
}

// A longest draft over the sessions' per-depth tables is refused before
// anything is loaded, naming the limit.
static void test_k_max_limit(void **state)
{
    (void)state;
    struct st_engine_config ec = {.target_path = "models/pico-target.f16.gguf", .k_max = ST_ENGINE_K_LIMIT + 1};
    struct st_engine *eng = NULL;
    struct st_error e = {{0}};
    assert_int_equal(st_engine_open(&ec, NULL, &eng, &e), -1);
    assert_null(eng);
    assert_non_null(strstr(e.msg, "longest draft 33 is over the limit of 32"));
}

static void test_greedy_equality(void **state)
{
    (void)state;
    const char *targets[] = {"models/pico-target.f16.gguf", "models/pico-target.q8_0.gguf",
                             "models/pico-target.q4_0.gguf", "models/pico-target.q4_k.gguf",
                             "models/pico-target.q6_k.gguf"};
    const char *drafts[] = {"models/pico-draft.f16.gguf", "models/pico-draft.q4_0.gguf",
                            "models/pico-draft.tq1_0.gguf", "models/pico-draft.tq2_0.gguf"};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++) check_pair(targets[i], drafts[j]);
    // The early stop must actually have cut rounds short somewhere.
    assert_true(early_rounds > 0 && early_k < 8 * early_rounds);
}

// A draft that shares nothing with the target (another model altogether):
// acceptance collapses and the governor suspends drafting within its window;
// the matching draft keeps drafting.
static void test_governor(void **state)
{
    (void)state;
    const char *drafts[2] = {"models/stories260K.f32.gguf", "models/pico-draft.f16.gguf"};
    for (int d = 0; d < 2; d++) {
        const struct st_golden_row *r = prompt_row(d == 0 ? "p101" : "p102");
        struct st_test_engine t;
        assert_int_equal(st_test_engine_open(&t, "models/pico-target.f16.gguf", drafts[d], 2, 1, 1), 0);
        struct st_gen_params gp = {.max_tokens = 96, .speculate = true, .governor = true, .k = 4};
        struct st_session *s;
        struct st_error e;
        if (st_session_start(t.eng, &gp, r->prompt_ids, r->n_prompt, ++t.eng->next_session, &s, &e))
            fail_msg("%s", e.msg);
        int32_t out[96], ar[96];
        uint32_t n, n_ar;
        struct st_session_stats on, off, base;
        double best_on = 1e9, best_ar = 1e9;
        for (int rep = 0; rep < 3; rep++) { // alternating, best of 3
            gp.speculate = false;
            run(s, &gp, ar, &n_ar, &base);
            gp.speculate = true;
            gp.governor = true;
            run(s, &gp, out, &n, &on);
            assert_memory_equal(out, ar, n * sizeof *out);
            if (on.seconds < best_on) best_on = on.seconds;
            if (base.seconds < best_ar) best_ar = base.seconds;
        }
        gp.governor = false;
        run(s, &gp, out, &n, &off);
        double acc_off = off.drafted ? (double)off.accepted / off.drafted : 0;
        printf("  draft %-28s %s: acceptance without governor %.3f; with governor: drafted %u in %u rounds, "
               "%u target-only; time ratio speculative/autoregressive %.3f\n",
               drafts[d] + 7, r->prompt, acc_off, on.drafted, on.rounds, on.suspended_rounds, best_on / best_ar);
        // The node keeps the acceptance its sessions measured: the estimate
        // a new session starts from (adaptive K).
        const struct st_engine_node *nd = &t.eng->node[0];
        assert_true(nd->accept.tried[1] > 0 && nd->accept.passed[1] <= nd->accept.tried[1]);
        if (d == 0) {
            assert_true(nd->accept.ema < 0.3);
            assert_true(acc_off < 0.2);
            // Suspended within the window of 8 rounds; then only probes.
            assert_true(on.suspended_rounds > 0);
            assert_true(on.drafted <= 8 * 4 + (on.rounds / 16 + 1) * 4);
        } else {
            assert_true(acc_off > 0.5 && nd->accept.ema > 0.5);
            assert_int_equal(on.suspended_rounds, 0);
        }
        st_session_end(&s);
        st_test_engine_close(&t);
    }
}

// Bytes the draft's attention read in a run with gp.profile.
static uint64_t draft_attention_bytes(const struct st_session_stats *st)
{
    for (uint32_t i = 0; i < st->n_ops; i++)
        if (st->op_model[i] == ST_MODEL_DRAFT && !strcmp(st->op_names[i], "attention")) return st->op_bytes[i];
    return 0;
}

// A draft window over a long context (1800 prompt tokens; the draft attends
// the first 512 positions and the segments of the last 100): output still
// equals the target alone, token for token, and the draft really read less.
static void test_draft_window(void **state)
{
    (void)state;
    enum { N_PROMPT = 1800, N_GEN = 64 };
    struct st_test_engine t;
    assert_int_equal(st_test_engine_open_ctx(&t, "models/pico-target.q8_0.gguf", "models/pico-draft.q4_0.gguf", 2, 1,
                                             1, N_PROMPT + N_GEN + 16),
                     0);
    int32_t *prompt = malloc(N_PROMPT * sizeof *prompt);
    uint32_t x = 777;
    prompt[0] = 1;
    for (int i = 1; i < N_PROMPT; i++) {
        x = x * 1103515245u + 12345u;
        prompt[i] = (int32_t)((x >> 8) % t.eng->n_vocab);
    }
    struct st_gen_params gp = {.max_tokens = N_GEN, .speculate = true, .governor = true, .stop_at_eos = false};
    struct st_session *s;
    struct st_error e;
    if (st_session_start(t.eng, &gp, prompt, N_PROMPT, ++t.eng->next_session, &s, &e)) fail_msg("%s", e.msg);
    int32_t ar[N_GEN], sp[N_GEN];
    uint32_t n_ar, n_sp;
    gp.speculate = false;
    run(s, &gp, ar, &n_ar, NULL);
    assert_int_equal(n_ar, N_GEN);
    uint32_t ks[3] = {1, 4, 0}, windows[2] = {100, 0};
    uint64_t bytes[2] = {0, 0};
    double acc[2] = {0, 0};
    for (int w = 0; w < 2; w++)
        for (int ki = 0; ki < 3; ki++) {
            struct st_session_stats st;
            gp.speculate = true;
            gp.k = ks[ki];
            gp.draft_window = windows[w];
            gp.profile = ki == 1;
            run(s, &gp, sp, &n_sp, &st);
            assert_int_equal(n_sp, n_ar);
            for (uint32_t i = 0; i < n_ar; i++)
                if (sp[i] != ar[i])
                    fail_msg("draft window %u, K=%u: token %u is %d, autoregressive %d", windows[w], ks[ki], i, sp[i],
                             ar[i]);
            if (ki == 1) {
                bytes[w] = draft_attention_bytes(&st);
                acc[w] = st.drafted ? (double)st.accepted / st.drafted : 0;
            }
        }
    printf("  prompt %d: identical with draft windows 100 and all; K=4: draft attention read %.2f MB vs %.2f MB, "
           "acceptance %.3f vs %.3f\n",
           N_PROMPT, bytes[0] / 1e6, bytes[1] / 1e6, acc[0], acc[1]);
    // About 850 of ~1850 positions attended (the first segment, then from
    // segment 3 on): well under two thirds of all of them.
    assert_true(bytes[1] > 0 && bytes[0] * 3 < bytes[1] * 2);
    st_session_end(&s);
    free(prompt);
    st_test_engine_close(&t);
}

// The profile counts what an op reads on all workers together: with two
// workers, each step's ffn_down is every layer's whole down matrix, not a
// worker's half (the GB/s it prints is then the set's read rate).
static void test_profile_bytes(void **state)
{
    (void)state;
    const struct st_golden_row *r = prompt_row("p101");
    struct st_test_engine t;
    assert_int_equal(st_test_engine_open(&t, "models/pico-target.q8_0.gguf", "models/pico-draft.q4_0.gguf", 2, 1, 1), 0);
    struct st_gen_params gp = {.max_tokens = 8, .speculate = false, .profile = true, .stop_at_eos = false};
    struct st_session *s;
    struct st_error e;
    assert_int_equal(st_session_start(t.eng, &gp, r->prompt_ids, r->n_prompt, ++t.eng->next_session, &s, &e), 0);
    int32_t out[8];
    uint32_t n;
    struct st_session_stats st;
    run(s, &gp, out, &n, &st);
    uint64_t wb;
    const uint8_t *w = st_region_section(t.eng->node[0].region, ST_REGION_WEIGHTS, &wb);
    const struct st_layout_model *lm = &((const struct st_layout_dir *)w)->model[ST_MODEL_TARGET];
    const struct st_layout_mat *down = &((const struct st_layout_layer *)(w + lm->layers_offset))->down;
    uint64_t want = (uint64_t)st.steps * lm->hp.n_layer * st_kern_run_size(down->run_type, down->rows, down->cols);
    uint64_t got = 0;
    for (uint32_t i = 0; i < st.n_ops; i++)
        if (st.op_model[i] == ST_MODEL_TARGET && !strcmp(st.op_names[i], "ffn_down")) got = st.op_bytes[i];
    printf("  %u steps: ffn_down read %llu bytes, the whole matrices %llu\n", st.steps, (unsigned long long)got,
           (unsigned long long)want);
    assert_true(st.steps > 0 && got == want);
    st_session_end(&s);
    st_test_engine_close(&t);
}

// The context limit stops a generation cleanly, speculative or not, with the
// same tokens, and a prompt that leaves no room is a clear error.
static void test_context_limit(void **state)
{
    (void)state;
    const struct st_golden_row *r = prompt_row("p102");
    struct st_test_engine t;
    assert_int_equal(st_test_engine_open(&t, "models/pico-target.q8_0.gguf", "models/pico-draft.q4_0.gguf", 2, 1, 1), 0);
    struct st_gen_params gp = {.max_tokens = 100000, .speculate = true, .governor = true, .k = 8};
    struct st_session *s;
    struct st_error e;
    assert_int_equal(st_session_start(t.eng, &gp, r->prompt_ids, r->n_prompt, ++t.eng->next_session, &s, &e), 0);
    uint32_t room = t.eng->n_ctx - r->n_prompt;
    int32_t *ar = malloc(room * sizeof *ar), *sp = malloc(room * sizeof *sp);
    uint32_t n_ar, n_sp;
    for (int spec = 0; spec < 2; spec++) {
        gp.speculate = spec;
        assert_int_equal(st_session_rewind(s, &gp, &e), 0);
        int32_t buf[64];
        enum st_finish fin = ST_FINISH_NONE;
        while (fin == ST_FINISH_NONE) assert_true(st_session_round(s, buf, 64, &fin, &e) >= 0);
        assert_int_equal(fin, ST_FINISH_CONTEXT);
        const int32_t *o = st_session_output(s, spec ? &n_sp : &n_ar);
        memcpy(spec ? sp : ar, o, (spec ? n_sp : n_ar) * sizeof *o);
    }
    assert_int_equal(n_ar, room);
    assert_int_equal(n_sp, n_ar);
    assert_memory_equal(sp, ar, n_ar * sizeof *ar);
    printf("  context %u: both stopped cleanly after %u tokens, identical\n", t.eng->n_ctx, n_ar);
    st_session_end(&s);
    // A prompt as long as the context leaves no room: an error, not an overrun.
    int32_t *long_prompt = calloc(t.eng->n_ctx, sizeof *long_prompt);
    assert_int_equal(st_session_start(t.eng, &gp, long_prompt, t.eng->n_ctx, ++t.eng->next_session, &s, &e), -1);
    assert_non_null(strstr(e.msg, "does not fit the context"));
    free(long_prompt);
    free(ar);
    free(sp);
    st_test_engine_close(&t);
}

int main(void)
{
    n_rows = st_golden_load(&rows);
    if (n_rows <= 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_k_max_limit),
        cmocka_unit_test(test_greedy_equality),
        cmocka_unit_test(test_governor),
        cmocka_unit_test(test_context_limit),
        cmocka_unit_test(test_draft_window),
        cmocka_unit_test(test_profile_bytes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(rows);
    return rc;
}
