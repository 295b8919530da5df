// The benches that run a server, on the pico pair: `bench nodes` (two
// virtual nodes of one worker: one request alone, then one a node at once)
// and `bench batch` (one node: N requests at once, batched and one session
// a step).  The real binary starts its server and workers and prints every
// figure; impossible options are refused by name.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/test_support.h"

static char out[1 << 16];

static void expect(const char *what)
{
    if (!strstr(out, what)) fail_msg("no '%s' in:\n%s", what, out);
}

// The bench's ratio line holds a positive, finite figure (not a timing
// bound), and results/NAME.csv a header and 2 runs.
static void expect_figures(const char *ratio_label, const char *csv_name)
{
    const char *r = strstr(out, ratio_label);
    assert_non_null(r);
    double ratio = strtod(r + strlen(ratio_label), NULL);
    assert_true(ratio > 0 && ratio < 100);
    char csv[4096];
    snprintf(csv, sizeof csv, "%s/%s", st_tmp("results"), csv_name);
    FILE *f = fopen(csv, "r");
    assert_non_null(f);
    char line[256];
    int lines = 0;
    while (fgets(line, sizeof line, f)) lines++;
    fclose(f);
    assert_int_equal(lines, 3);
}

// `bench SUITE` on the pico pair, 24 tokens a request, 2 runs, with the
// suite's own options (NULL-terminated); its output into `out`.
static void run_bench(const char *suite, const char *const *extra)
{
    char target[4096], draft[4096];
    st_test_shared("models/pico-target.q8_0.gguf", target, sizeof target);
    st_test_shared("models/pico-draft.q4_0.gguf", draft, sizeof draft);
    const char *args[32] = {"bench", suite, "-m", target, "-d", draft, "--tokens", "1,300,436,102,468,497",
                            "-n", "24", "--runs", "2", "--results", st_tmp("results")};
    int n = 14;
    while (*extra && n < 31) args[n++] = *extra++;
    int rc = st_run_cli(out, sizeof out, args);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
}

static void test_two_nodes(void **state)
{
    (void)state;
    const char *extra[] = {"--nodes", "2", "--workers", "1", NULL};
    run_bench("nodes", extra);
    expect("2 nodes of 1 worker, 2 alternating runs");
    expect("  run 2: one request ");
    expect("one request alone:");
    expect_figures("ratio:", "nodes.csv");
}

static void test_batch(void **state)
{
    (void)state;
    // Batched forwards of 32 rows: the prompt's slices beside the decoder are smaller.
    const char *extra[] = {"--sessions", "3", "--workers", "2", "--beside", "300", "--step-rows", "32", NULL};
    run_bench("batch", extra);
    expect("3 requests at once, 1 node of 2 workers, 2 alternating runs");
    expect("  run 2: one request ");
    expect(" 3 at once, one session a step:");
    expect(" 3 at once, batched:");
    expect_figures("ratio batched / one a step:", "batch.csv");
    expect("  run 2, a prompt of 300 beside a decoding request: its longest wait ");
    expect_figures("longest wait, one a step / batched:", "batch-beside.csv");
}

static void test_refusals(void **state)
{
    (void)state;
    const char *one[] = {"bench", "nodes", "--nodes", "1", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, one), 2);
    expect("--nodes 1");
    const char *bad[] = {"bench", "nodes", "--no-such-option", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, bad), 2);
    expect("usage: subternary bench nodes");
    const char *nodes[] = {"bench", "batch", "--nodes", "2", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, nodes), 2);
    expect("one node (--nodes 1)");
    const char *many[] = {"bench", "batch", "--sessions", "9", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, many), 2);
    expect("--sessions");
    const char *long_prompt[] = {"bench", "batch", "--beside", "4000", "--ctx", "4096", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, long_prompt), 2);
    expect("leaves no room to decode beside it");
    char target[4096];
    st_test_shared("models/pico-target.q8_0.gguf", target, sizeof target);
    const char *narrow[] = {"bench", "batch", "-m", target, "--no-draft", "--sessions", "4", "--prefill-chunk", "16",
                            NULL};
    assert_int_not_equal(st_run_cli(out, sizeof out, narrow), 0);
    expect("4 sessions do not fit one step (1 lane: prefill chunk 16 / (k-max 8 + 1))");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_nodes),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
