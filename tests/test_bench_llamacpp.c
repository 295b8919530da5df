// `bench spec --compare-llamacpp`: the parsers of llama-bench's JSON and
// llama-speculative's summary on short hand-written samples (good, reordered,
// truncated, unrelated), and the child runner: capture, exit codes, a missing
// binary, the deadline.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/child.c"
#include "cli/llamacpp_parse.c"

// Two tests as llama-bench prints them: a prompt test, then the generation one.
static const char bench_json[] =
    "[\n  {\n    \"model_filename\": \"m.gguf\",\n    \"n_threads\": 2,\n    \"n_prompt\": 16,\n"
    "    \"n_gen\": 0,\n    \"avg_ts\": 250.5,\n    \"samples_ts\": [ 250.5 ]\n  },\n"
    "  {\n    \"n_prompt\": 0,\n    \"n_gen\": 32,\n    \"avg_ns\": 1000000000,\n    \"stddev_ts\": 0.0,\n"
    "    \"avg_ts\" : 31.25,\n    \"samples_ts\": [ 31.25 ]\n  }\n]\n";

static void test_bench_json(void **state)
{
    (void)state;
    struct st_error e;
    double tps = 0;
    assert_int_equal(st_llamacpp_parse_bench(bench_json, &tps, &e), 0);
    assert_true(tps == 31.25);
    // Only the prompt test, a truncated object, an error text: no figure.
    const char *bad[] = {"[{\"n_prompt\": 16, \"n_gen\": 0, \"avg_ts\": 250.5}]",
                         "[{\"n_prompt\": 0, \"n_gen\": 32, \"avg_ts\": ", "[{\"n_prompt\": 0, \"n_gen\": 32, ",
                         "error: failed to load model\n", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = 0;
        assert_int_equal(st_llamacpp_parse_bench(bad[i], &tps, &e), -1);
        assert_non_null(strstr(e.msg, "llama-bench"));
    }
}

static const char spec_text[] = "load: some loader line\n"
                                "encoded   20 tokens in    0.100 seconds, speed:  200.000 t/s\n"
                                "decoded   34 tokens in    0.500 seconds, speed:   68.000 t/s\n"
                                "\n"
                                "n_draft   = 3\n"
                                "n_drafted = 36\n"
                                "n_accept  = 21\n"
                                "accept    = 58.333%\n";

static void test_spec_summary(void **state)
{
    (void)state;
    struct st_error e;
    struct st_llamacpp_spec_figures f;
    assert_int_equal(st_llamacpp_parse_spec(spec_text, &f, &e), 0);
    assert_int_equal(f.tokens, 34);
    assert_true(f.tps == 68.0 && f.seconds == 0.5);
    assert_true(f.accept > 0.5833 && f.accept < 0.5834);
    // Without the accept line the speed still counts; without "decoded" nothing does.
    assert_int_equal(st_llamacpp_parse_spec("decoded 8 tokens in 0.25 seconds, speed: 32.0 t/s", &f, &e), 0);
    assert_true(f.tps == 32.0 && f.accept == -1);
    const char *bad[] = {"encoded 20 tokens in 0.1 seconds, speed: 200 t/s\naccept = 50%\n",
                         "decoded 8 tokens in", "text that says decoded 8 tokens in 1 seconds, speed: 8 t/s\n", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = 0;
        assert_int_equal(st_llamacpp_parse_spec(bad[i], &f, &e), -1);
        assert_non_null(strstr(e.msg, "llama-speculative"));
    }
}

static void test_child_capture(void **state)
{
    (void)state;
    struct st_error e;
    struct st_child_out o;
    char *ok[] = {"/bin/sh", "-c", "echo out; echo err >&2", NULL};
    char *fail[] = {"/bin/sh", "-c", "echo partial; exit 3", NULL};
    char buf[4096] = "";
    FILE *log = fmemopen(buf, sizeof buf, "w");
    assert_int_equal(st_child_run(ok, 10, log, &o, &e), 0);
    assert_string_equal(o.out, "out\n");
    assert_string_equal(o.err, "err\n");
    assert_int_equal(o.code, 0);
    st_child_out_free(&o);
    assert_int_equal(st_child_run(fail, 10, log, &o, &e), -1);
    assert_int_equal(o.code, 3);
    assert_string_equal(o.out, "partial\n");
    assert_non_null(strstr(e.msg, "code 3"));
    st_child_out_free(&o);
    fclose(log);
    assert_non_null(strstr(buf, "==== $ /bin/sh -c 'echo out; echo err >&2'"));
    assert_non_null(strstr(buf, "==== exit 3"));
}

static void test_child_errors(void **state)
{
    (void)state;
    struct st_error e;
    struct st_child_out o;
    char *missing[] = {"/nonexistent/llama-bench", NULL};
    assert_int_equal(st_child_run(missing, 10, NULL, &o, &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/llama-bench: No such file"));
    char *slow[] = {"/bin/sleep", "30", NULL};
    assert_int_equal(st_child_run(slow, 0.2, NULL, &o, &e), -1);
    assert_int_equal(o.code, 128 + 9);
    assert_non_null(strstr(e.msg, "killed"));
    st_child_out_free(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_json),
        cmocka_unit_test(test_spec_summary),
        cmocka_unit_test(test_child_capture),
        cmocka_unit_test(test_child_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
