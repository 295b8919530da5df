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
#include <sys/wait.h>

#include <cmocka.h>

#include "tests/support/engine_support.h"

static void check_pair(const char *target, const char *draft, const char *k)
{
    char exe[1024], cmd[4096];
    assert_non_null(st_test_exe(exe, sizeof exe));
    const char *shared = getenv("ST_SHARED");
    if (!shared || !*shared) shared = "../shared";
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 scripts/spec_bound.py --exe %s -m %s/models/%s -d %s/models/%s -n 48 --k-max %s --check --engine-agreement",
             exe, shared, target, shared, draft, k);
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
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_replay_follows_engine)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
