// The server's request decoder and validator on every kind of bad input
// (wrong version, wrong frame count, garbage, a server message, each invalid
// field, prompts too long or too large, unknown fields), and the replay of the
// fuzz corpus tests/corpus/request through the fuzz target itself.
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/server_core.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tests/support/test_support.h"

// The fuzz target, compiled in: the corpus replays through exactly what
// libFuzzer runs.
#include "tests/fuzz/fuzz_request.c"

static struct st_tokenizer *tok;

static struct st_srv_limits limits(void)
{
    return (struct st_srv_limits){.n_vocab = 512, .n_ctx = 64, .k_max = 8, .slots = 2, .queue = 2,
                                  .max_tokens_default = 16, .max_prompt_bytes = 256, .finished_cache = 8,
                                  .max_deadline_ms = 60000, .has_draft = true, .tok = tok};
}

static uint8_t payload[1 << 16];

static size_t pack(const Subternary__Envelope *env)
{
    size_t n = protobuf_c_message_get_packed_size(&env->base);
    assert_true(n <= sizeof payload);
    return protobuf_c_message_pack(&env->base, payload);
}

// Decodes [identity, version, payload] and returns the code.
static Subternary__ErrorCode decode(const char *version, size_t n, int frames)
{
    struct st_srv_frames f = {.n = frames};
    f.f[0] = (const uint8_t *)"id";
    f.len[0] = 2;
    f.f[1] = (const uint8_t *)version;
    f.len[1] = strlen(version);
    f.f[2] = payload;
    f.len[2] = n;
    Subternary__Envelope *env;
    char id[ST_SRV_ID_MAX + 1], msg[256];
    Subternary__ErrorCode code = st_srv_decode(&f, &env, id, msg, sizeof msg);
    if (code) {
        assert_null(env);
        assert_true(msg[0]);
    } else {
        subternary__envelope__free_unpacked(env, NULL);
    }
    return code;
}

static Subternary__ErrorCode validate(const Subternary__GenerateRequest *g, struct st_srv_req *r)
{
    struct st_srv_limits lim = limits();
    char msg[256];
    memset(r, 0, sizeof *r);
    Subternary__ErrorCode code = st_srv_validate_generate(g, &lim, r, msg, sizeof msg);
    if (code) {
        assert_true(msg[0]);
        assert_null(r->prompt);
    }
    return code;
}

static void release(struct st_srv_req *r)
{
    free(r->prompt);
    for (int i = 0; i < ST_SESSION_MAX_STOPS; i++) free(r->stops[i]);
    memset(r, 0, sizeof *r);
}

static uint32_t ids4[] = {1, 300, 436, 102};

static void test_frames_and_versions(void **state)
{
    (void)state;
    Subternary__StatsRequest sr = SUBTERNARY__STATS_REQUEST__INIT;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_STATS_REQUEST;
    env.stats_request = &sr;
    size_t n = pack(&env);
    assert_int_equal(decode("ST01", n, 3), SUBTERNARY__ERROR_CODE__ERR_NONE);
    assert_int_equal(decode("ST02", n, 3), SUBTERNARY__ERROR_CODE__ERR_UNSUPPORTED_VERSION);
    assert_int_equal(decode("ST0", n, 3), SUBTERNARY__ERROR_CODE__ERR_UNSUPPORTED_VERSION);
    assert_int_equal(decode("ST011", n, 3), SUBTERNARY__ERROR_CODE__ERR_UNSUPPORTED_VERSION);
    assert_int_equal(decode("", n, 3), SUBTERNARY__ERROR_CODE__ERR_UNSUPPORTED_VERSION);
    // A wrong version wins over a wrong shape: a peer of another version is told so.
    assert_int_equal(decode("ST02", n, 2), SUBTERNARY__ERROR_CODE__ERR_UNSUPPORTED_VERSION);
    assert_int_equal(decode("ST01", n, 1), SUBTERNARY__ERROR_CODE__ERR_MALFORMED);
    assert_int_equal(decode("ST01", n, 2), SUBTERNARY__ERROR_CODE__ERR_MALFORMED);
    assert_int_equal(decode("ST01", n, 4), SUBTERNARY__ERROR_CODE__ERR_MALFORMED);
    // Empty payload: an Envelope with nothing set.
    assert_int_equal(decode("ST01", 0, 3), SUBTERNARY__ERROR_CODE__ERR_MALFORMED);
    // Garbage: field number 0 is never valid; a truncated length-delimited field.
    memcpy(payload, "\x00\x01\x02", 3);
    assert_int_equal(decode("ST01", 3, 3), SUBTERNARY__ERROR_CODE__ERR_MALFORMED);
    memcpy(payload, "\x0a\x7f\x01", 3);
    assert_int_equal(decode("ST01", 3, 3), SUBTERNARY__ERROR_CODE__ERR_MALFORMED);
    // A server message sent to the server.
    Subternary__Done d = SUBTERNARY__DONE__INIT;
    d.request_id = "x";
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_DONE;
    env.done = &d;
    assert_int_equal(decode("ST01", pack(&env), 3), SUBTERNARY__ERROR_CODE__ERR_MALFORMED);
    // Unknown fields are skipped: a stats request with field 100 (varint) and field 101 (bytes) appended.
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_STATS_REQUEST;
    env.stats_request = &sr;
    n = pack(&env);
    memcpy(payload + n, "\xa0\x06\x2a\xaa\x06\x03xyz", 9);
    assert_int_equal(decode("ST01", n + 9, 3), SUBTERNARY__ERROR_CODE__ERR_NONE);
}

static void test_request_ids(void **state)
{
    (void)state;
    assert_true(st_srv_valid_id("r1"));
    assert_true(st_srv_valid_id("h\xc3\xa9llo \xf0\x9f\x98\x80"));
    assert_false(st_srv_valid_id(""));
    assert_false(st_srv_valid_id(NULL));
    assert_false(st_srv_valid_id("tab\there"));
    assert_false(st_srv_valid_id("del\x7f"));
    assert_false(st_srv_valid_id("\xc0\xaf"));          // overlong '/'
    assert_false(st_srv_valid_id("\xed\xa0\x80"));      // surrogate
    assert_false(st_srv_valid_id("\xe2\x82"));          // truncated
    assert_false(st_srv_valid_id("\xf4\x90\x80\x80")); // past U+10FFFF
    assert_false(st_srv_valid_id("\xc2\x85"));          // C1 control
    char big[ST_SRV_ID_MAX + 2];
    memset(big, 'a', sizeof big);
    big[ST_SRV_ID_MAX] = 0;
    assert_true(st_srv_valid_id(big));
    big[ST_SRV_ID_MAX] = 'a';
    big[ST_SRV_ID_MAX + 1] = 0;
    assert_false(st_srv_valid_id(big));
    // Through the decoder: a generate with a bad id is an invalid field, and no id is echoed.
    Subternary__GenerateRequest g = SUBTERNARY__GENERATE_REQUEST__INIT;
    g.request_id = "bad\nid";
    g.prompt_ids = ids4;
    g.n_prompt_ids = 4;
    Subternary__Envelope env = SUBTERNARY__ENVELOPE__INIT;
    env.msg_case = SUBTERNARY__ENVELOPE__MSG_GENERATE;
    env.generate = &g;
    size_t n = pack(&env);
    struct st_srv_frames f = {.n = 3, .f = {(const uint8_t *)"id", (const uint8_t *)"ST01", payload}, .len = {2, 4, n}};
    Subternary__Envelope *out;
    char id[ST_SRV_ID_MAX + 1], msg[256];
    assert_int_equal(st_srv_decode(&f, &out, id, msg, sizeof msg), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    assert_string_equal(id, "");
    g.request_id = "good";
    f.len[2] = pack(&env);
    assert_int_equal(st_srv_decode(&f, &out, id, msg, sizeof msg), SUBTERNARY__ERROR_CODE__ERR_NONE);
    assert_string_equal(id, "good");
    subternary__envelope__free_unpacked(out, NULL);
}

static void test_generate_fields(void **state)
{
    (void)state;
    struct st_srv_req r;
    Subternary__GenerateRequest g = SUBTERNARY__GENERATE_REQUEST__INIT;
    Subternary__Sampling s = SUBTERNARY__SAMPLING__INIT;
    Subternary__Speculation sp = SUBTERNARY__SPECULATION__INIT;
    g.request_id = "r";
    g.prompt_ids = ids4;
    g.n_prompt_ids = 4;
    // Valid, with defaults.
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_NONE);
    assert_int_equal(r.n_prompt, 4);
    assert_int_equal(r.prompt[1], 300);
    assert_int_equal(r.gp.max_tokens, 16);
    assert_true(r.gp.speculate && r.gp.governor && r.gp.stop_at_eos);
    release(&r);
    // Every sampling field out of range, one at a time.
    g.sampling = &s;
    float bad_t[] = {-0.1f, 100.5f, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++) {
        s.temperature = bad_t[i];
        assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    }
    s.temperature = 0.8f;
    s.top_p = 1.01f;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    s.top_p = NAN;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    s.top_p = 0.9f;
    s.min_p = -0.01f;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    s.min_p = 0.05f;
    s.top_k = 513;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    s.top_k = 512;
    s.seed = 7;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_NONE);
    assert_true(fabsf(r.gp.sampling.temperature - 0.8f) < 1e-6f && r.gp.sampling.top_k == 512 && r.gp.seed == 7);
    release(&r);
    // Speculation.
    g.speculation = &sp;
    sp.k = 9;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    sp.k = 8;
    sp.governor_threshold = 1.5f;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    sp.governor_threshold = 0.5f;
    sp.draft_p_min = 1.0f;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    sp.draft_p_min = -0.1f;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    sp.draft_p_min = 0.8f;
    sp.draft_window = 3000;
    sp.disable = true;
    sp.no_governor = true;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_NONE);
    assert_true(!r.gp.speculate && !r.gp.governor && r.gp.k == 8 && fabsf(r.gp.draft_p_min - 0.8f) < 1e-6f);
    assert_int_equal(r.gp.draft_window, 3000);
    release(&r);
    // max_tokens: over the context is refused; 0 takes the default.
    g.max_tokens = 65;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    g.max_tokens = 64;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_NONE);
    release(&r);
    // Deadline bound.
    g.deadline_ms = 60001;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    g.deadline_ms = 60000;
    // Stop strings: count, empty, too long.
    char *stops[9] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
    g.stop = stops;
    g.n_stop = 9;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    g.n_stop = 8;
    stops[3] = "";
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    char longstop[ST_SRV_STOP_MAX + 2];
    memset(longstop, 'x', sizeof longstop - 1);
    longstop[sizeof longstop - 1] = 0;
    stops[3] = longstop;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    stops[3] = "d";
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_NONE);
    assert_int_equal(r.gp.n_stop, 8);
    assert_string_equal(r.gp.stop[7], "h");
    assert_ptr_equal(r.gp.stop[7], r.stops[7]); // owned by the request, not the message
    release(&r);
    g.ignore_eos = true;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_NONE);
    assert_false(r.gp.stop_at_eos);
    release(&r);
}

static void test_prompts(void **state)
{
    (void)state;
    struct st_srv_req r;
    Subternary__GenerateRequest g = SUBTERNARY__GENERATE_REQUEST__INIT;
    g.request_id = "p";
    // None, both.
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    g.prompt_text = "hello";
    g.prompt_ids = ids4;
    g.n_prompt_ids = 4;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    g.prompt_text = "";
    // An id out of the vocabulary.
    uint32_t bad[] = {1, 2, 512};
    g.prompt_ids = bad;
    g.n_prompt_ids = 3;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    // Longest that fits (one position stays for the first new token), one more.
    uint32_t many[64];
    for (int i = 0; i < 64; i++) many[i] = (uint32_t)i;
    g.prompt_ids = many;
    g.n_prompt_ids = 63;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_NONE);
    release(&r);
    g.n_prompt_ids = 64;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_PROMPT_TOO_LONG);
    // Text: tokenized with the model's tokenizer, as st_tok_encode does.
    g.prompt_ids = NULL;
    g.n_prompt_ids = 0;
    g.prompt_text = "hello world";
    g.add_bos = true;
    assert_non_null(tok);
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_NONE);
    int32_t *want;
    size_t n_want;
    struct st_error e;
    assert_int_equal(st_tok_encode(tok, "hello world", 11, true, &want, &n_want, &e), 0);
    assert_int_equal(r.n_prompt, n_want);
    assert_memory_equal(r.prompt, want, n_want * sizeof *want);
    free(want);
    release(&r);
    // Text over the byte limit; text that tokenizes past the context.
    char text[300];
    memset(text, 'z', sizeof text - 1);
    text[sizeof text - 1] = 0;
    g.prompt_text = text;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_TOO_LARGE);
    for (int i = 0; i < 200; i++) text[i] = i % 2 ? ' ' : (char)('a' + i % 26);
    text[200] = 0;
    assert_int_equal(validate(&g, &r), SUBTERNARY__ERROR_CODE__ERR_PROMPT_TOO_LONG);
    // No tokenizer: text prompts and stop strings are refused.
    struct st_srv_limits lim = limits();
    lim.tok = NULL;
    char msg[256];
    g.prompt_text = "hi";
    memset(&r, 0, sizeof r);
    assert_int_equal(st_srv_validate_generate(&g, &lim, &r, msg, sizeof msg), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    g.prompt_text = "";
    g.prompt_ids = ids4;
    g.n_prompt_ids = 4;
    char *stop[] = {"x"};
    g.stop = stop;
    g.n_stop = 1;
    assert_int_equal(st_srv_validate_generate(&g, &lim, &r, msg, sizeof msg), SUBTERNARY__ERROR_CODE__ERR_INVALID_FIELD);
    assert_null(r.prompt);
    assert_null(r.stops[0]);
}

static void test_corpus_replay(void **state)
{
    (void)state;
    DIR *d = opendir("tests/corpus/request");
    assert_non_null(d);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "tests/corpus/request/%s", de->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static uint8_t buf[1 << 17];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        files++;
    }
    closedir(d);
    printf("  %d corpus inputs replayed\n", files);
    assert_true(files >= 20);
}

static int setup(void **state)
{
    (void)state;
    char path[1024];
    struct st_gguf *g;
    struct st_error e;
    if (st_gguf_open(st_test_shared("models/pico-target.q8_0.gguf", path, sizeof path), &g, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    int rc = st_tok_load(g, &tok, &e);
    st_gguf_close(&g);
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    st_tok_free(&tok);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames_and_versions),
        cmocka_unit_test(test_request_ids),
        cmocka_unit_test(test_generate_fields),
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_corpus_replay),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
