// scripts/spec_bound.py against this build's binary on pico pairs: the
// draft's teacher-forced agreement (from the engine's kernels, one process
// per position) replayed at a fixed K must count exactly the rounds the
// engine ran with that K (--check), and the speculative reply must equal the
// target's own.  A replay that drifts from the engine would make its bounds
// fiction.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "tests/support/engine_support.h"
#include "tests/support/test_support.h"

static void check_pair(const char *target, const char *draft, const char *k)
{
    char exe[1024], rel[256], t[1024], d[1024], cmd[4096];
    assert_non_null(st_test_exe(exe, sizeof exe));
    snprintf(rel, sizeof rel, "models/%s", target);
    st_test_shared(rel, t, sizeof t);
    snprintf(rel, sizeof rel, "models/%s", draft);
    st_test_shared(rel, d, sizeof d);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 scripts/spec_bound.py --exe %s -m %s -d %s -n 48 --k-max %s --check --engine-agreement",
             exe, t, d, k);
    int status = system(cmd);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_replay_follows_engine(void **state)
{
    (void)state;
    check_pair("pico-target.q8_0.gguf", "pico-draft.q4_0.gguf", "8");
    check_pair("pico-target.f16.gguf", "pico-draft.tq2_0.gguf", "4");
    check_pair("pico-target.q4_k.gguf", "pico-draft.f16.gguf", "3");
    // Over the engine's default longest draft of 8: generate must run K 12, not 8.
    check_pair("pico-target.q8_0.gguf", "pico-draft.tq2_0.gguf", "12");
}

// A --k over an explicit --k-max is an error that names both.
static void test_k_over_k_max(void **state)
{
    (void)state;
    char target[1024], draft[1024], out[512];
    st_test_shared("models/pico-target.q8_0.gguf", target, sizeof target);
    st_test_shared("models/pico-draft.q4_0.gguf", draft, sizeof draft);
    const char *args[] = {"generate", "-m", target, "-d", draft, "--tokens", "1,2,3", "-n", "4",
                          "--k", "10", "--k-max", "6", NULL};
    assert_int_equal(st_run_cli(out, sizeof out, args), 2);
    assert_non_null(strstr(out, "--k 10 is over --k-max 6"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_replay_follows_engine), cmocka_unit_test(test_k_over_k_max)};
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
