// `subternary generate`, run as users run it: the summary's last line (with
// --json) is one JSON object with the fields the speculative issue names,
// and its "finish" says why the generation ended -- the token budget, a
// stop string, or a full context (a clean stop at exactly the context's
// length, never past it); options are read exactly or refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/test_support.h"

static char target[1024], draft[1024];

// The last line of out that starts with '{'.
static const char *json_line(const char *out)
{
    const char *j = NULL;
    for (const char *p = out; (p = strchr(p, '{')); p++)
        if (p == out || p[-1] == '\n') j = p;
    assert_non_null(j);
    return j;
}

// The number after "key": in the JSON line j.
static double json_number(const char *j, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(j, pat);
    if (!p) fail_msg("no %s in %s", key, j);
    return strtod(p + strlen(pat), NULL);
}

static void assert_finish(const char *j, const char *want)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"finish\": \"%s\"", want);
    if (!strstr(j, pat)) fail_msg("wanted finish %s: %s", want, j);
}

static void test_length_and_fields(void **state)
{
    (void)state;
    static char out[1 << 16];
    const char *args[] = {"generate", "-m", target, "-d", draft, "--tokens", "1,2,3,4,5", "-n", "12",
                          "--ignore-eos", "--json", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, args), 0);
    const char *j = json_line(out);
    static const char *keys[] = {"tokens", "seconds", "tokens_per_second", "prompt_tokens", "prompt_seconds",
                                 "rounds", "drafted", "accepted", "acceptance", "mean_k"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) (void)json_number(j, keys[k]);
    assert_int_equal((int)json_number(j, "tokens"), 12);
    assert_int_equal((int)json_number(j, "prompt_tokens"), 5);
    assert_true(json_number(j, "accepted") <= json_number(j, "drafted"));
    assert_finish(j, "length");
    assert_non_null(strstr(out, "finish: length"));
}

// A context of 64 and a prompt of 50: 14 tokens, then a clean stop that
// says so, with a budget that would have gone past it.  Speculative rounds
// near the end must not draft past the context either (the same count).
static void test_context_full(void **state)
{
    (void)state;
    static char out[1 << 16], prompt[256];
    int n = 0;
    for (int i = 1; i <= 50; i++) n += snprintf(prompt + n, sizeof prompt - n, "%s%d", i > 1 ? "," : "", i);
    const char *with_draft[] = {"generate", "-m", target, "-d", draft, "--tokens", prompt, "--ctx", "64",
                                "-n", "100", "--ignore-eos", "--json", NULL};
    const char *alone[] = {"generate", "-m", target, "--tokens", prompt, "--ctx", "64",
                           "-n", "100", "--ignore-eos", "--json", NULL};
    const char *const *runs[] = {with_draft, alone};
    for (int r = 0; r < 2; r++) {
        assert_int_equal(st_run_cli(out, sizeof out, runs[r]), 0);
        const char *j = json_line(out);
        assert_int_equal((int)json_number(j, "tokens"), 64 - 50);
        assert_finish(j, "context");
    }
}

// A stop string ends it early, and says so.
static void test_stop_string(void **state)
{
    (void)state;
    static char out[1 << 16];
    const char *args[] = {"generate", "-m", target, "-d", draft, "-p", "Once upon a time", "-n", "200",
                          "--ignore-eos", "--stop", "e", "--json", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, args), 0);
    const char *j = json_line(out);
    assert_true(json_number(j, "tokens") < 200);
    assert_finish(j, "stop");
}

// The generated ids of a sampled run: the line of digits and commas that
// --ids prints (stdout and stderr come mixed).
static void sampled_ids(const char *seed, char *ids, size_t cap)
{
    static char out[1 << 16];
    const char *args[] = {"generate", "-m", target, "-d", draft, "--tokens", "1,2,3", "-n", "16", "--ignore-eos",
                          "--temp", "1.5", "--seed", seed, "--k", "3", "--no-governor", "--ids", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, args), 0);
    const char *line = NULL;
    for (char *q = strtok(out, "\n"); q; q = strtok(NULL, "\n"))
        if (strchr(q, ',') && strspn(q, "0123456789,") == strlen(q)) line = q;
    assert_non_null(line);
    snprintf(ids, cap, "%s", line);
}

// Seeds are 64-bit integers read exactly: 2^53 and 2^53 + 1, the same
// double, sample differently; each seed again the same (at a fixed K
// without the governor, whose rounds do not depend on measured time).
// Fractions, signs and trailing letters where an integer is wanted are
// refused, naming the option (the bench's options too).
static void test_options_exact(void **state)
{
    (void)state;
    char a[4096], b[4096], a2[4096];
    sampled_ids("9007199254740992", a, sizeof a);
    sampled_ids("9007199254740993", b, sizeof b);
    sampled_ids("9007199254740992", a2, sizeof a2);
    assert_string_equal(a, a2);
    assert_string_not_equal(a, b);
    static char out[4096];
    const char *frac[] = {"generate", "-m", target, "--tokens", "1,2", "-n", "2.5", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, frac), 2);
    assert_non_null(strstr(out, "-n: '2.5' is not an integer in [1, "));
    const char *neg[] = {"generate", "-m", target, "--tokens", "1,2", "--seed", "-1", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, neg), 2);
    assert_non_null(strstr(out, "--seed: '-1' is not an integer"));
    const char *nan[] = {"generate", "-m", target, "--tokens", "1,2", "--temp", "nan", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, nan), 2);
    assert_non_null(strstr(out, "--temp: 'nan' is not a number"));
    const char *bench[] = {"bench", "spec", "-m", target, "--runs", "3x", NULL}; // the bench's options too
    assert_int_equal(st_run_cli(out, sizeof out, bench), 2);
    assert_non_null(strstr(out, "--runs: '3x' is not an integer"));
}

int main(void)
{
    st_test_shared("models/pico-target.q8_0.gguf", target, sizeof target);
    st_test_shared("models/pico-draft.q4_0.gguf", draft, sizeof draft);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_length_and_fields), cmocka_unit_test(test_context_full),
                                       cmocka_unit_test(test_stop_string), cmocka_unit_test(test_options_exact)};
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
