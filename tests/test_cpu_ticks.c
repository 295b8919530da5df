// The steal figure of `bench spec`: /proc/stat's aggregate line parsed by
// hand-written samples (good, short, garbled, a per-CPU line), the share
// between two readings, and a reading of this machine's own file.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "cli/cpu_ticks.c"

static void test_parse(void **state)
{
    (void)state;
    struct st_cpu_ticks t;
    assert_int_equal(st_cpu_ticks_parse("cpu  100 2 30 800 5 0 3 60 7 0\ncpu0 50 1 15 400 2 0 1 30 0 0\n", &t), 0);
    assert_true(t.ok);
    assert_int_equal(t.steal, 60);
    assert_int_equal(t.total, 100 + 2 + 30 + 800 + 5 + 0 + 3 + 60); // guest fields left out
    assert_int_equal(st_cpu_ticks_parse("cpu  1 2 3 4 5 6 7 8", &t), 0); // exactly up to steal
    assert_int_equal(t.steal, 8);
    assert_int_equal(st_cpu_ticks_parse("cpu  1 2 3 4 5 6 7\n", &t), -1); // no steal field
    assert_false(t.ok);
    assert_int_equal(st_cpu_ticks_parse("cpu0 1 2 3 4 5 6 7 8\n", &t), -1);
    assert_int_equal(st_cpu_ticks_parse("cpu  1 2 x 4 5 6 7 8\n", &t), -1);
    assert_int_equal(st_cpu_ticks_parse("cpu  1 2 3 4 5 6 7 -8\n", &t), -1);
    assert_int_equal(st_cpu_ticks_parse("cpu  1 2 3 4 5 6 7 8x\n", &t), -1);
    assert_int_equal(st_cpu_ticks_parse("", &t), -1);
}

static void test_share(void **state)
{
    (void)state;
    struct st_cpu_ticks a = {.steal = 10, .total = 1000, .ok = true}, b = {.steal = 30, .total = 2000, .ok = true};
    assert_true(fabs(st_cpu_steal_share(&a, &b) - 0.02) < 1e-12);
    assert_true(isnan(st_cpu_steal_share(&a, &a))); // no time passed
    assert_true(isnan(st_cpu_steal_share(&b, &a))); // readings swapped
    b.ok = false;
    assert_true(isnan(st_cpu_steal_share(&a, &b)));
}

static void test_now(void **state)
{
    (void)state;
    struct st_cpu_ticks t;
    st_cpu_ticks_now(&t);
    assert_true(t.ok); // Linux since 2.6.11
    assert_true(t.total > 0 && t.steal <= t.total);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_now),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
