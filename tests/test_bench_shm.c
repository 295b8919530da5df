// `subternary bench shm` as `bench all --quick` runs it, and with --model:
// the real binary, its exit code and the figures it must print.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tests/support/test_support.h"

static char out[1 << 16];

static void expect(const char *what)
{
    if (!strstr(out, what)) fail_msg("no '%s' in:\n%s", what, out);
}

static void test_quick(void **state)
{
    (void)state;
    const char *args[] = {"bench", "shm", "--quick", NULL};
    int rc = st_run_cli(out, sizeof out, args);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    expect("barrier round trip");
    expect("committed 32768");
    expect("warm: read() 128 KiB like cat");
}

static void test_model_load(void **state)
{
    (void)state;
    char model[4096];
    st_test_shared("models/pico-target.q8_0.gguf", model, sizeof model);
    const char *args[] = {"bench", "shm", "--quick", "--size", "8", "--model", model, NULL};
    int rc = st_run_cli(out, sizeof out, args);
    if (rc) fail_msg("exit %d:\n%s", rc, out);
    expect("model load:");
    expect("warm, 5: cat");
    expect("warm: median load / cat");
    expect("| region allocation");
}

static void test_bad_option(void **state)
{
    (void)state;
    const char *args[] = {"bench", "shm", "--no-such-option", NULL};
    assert_int_not_equal(st_run_cli(out, sizeof out, args), 0);
    expect("usage: subternary bench shm");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quick),
        cmocka_unit_test(test_model_load),
        cmocka_unit_test(test_bad_option),
    };
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
