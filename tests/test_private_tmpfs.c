// Regions on a private huge=always tmpfs instance: the file comes back from
// both ways of mounting it (in place, and through a user namespace child),
// is inheritable, is held to its size, and is mapped with huge pages, in
// the creating process and in a worker that attaches the region.
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/private_tmpfs.h"
#include "shm/shm.h"

#define MIB (UINT64_C(1) << 20)

// Chunks of 2 MiB mapped huge in [p, +len), -1 when the kernel cannot say.
static int huge_chunks(const void *p, uint64_t len)
{
    return (int)st_map_huge_count(p, len / (2 * MIB) * (2 * MIB), 2 * MIB);
}

// The refusals a sandbox or a kernel without user namespaces gives; any
// other failure is a bug.
static bool not_permitted_here(const char *why)
{
    return strstr(why, "Operation not permitted") || strstr(why, "Permission denied") ||
           strstr(why, "Function not implemented") || !strncmp(why, "unshare", 7) ||
           !strncmp(why, "write /proc", 11);
}

static void check_file(enum st_private_tmpfs_via via, const char *via_name)
{
    const uint64_t len = 8 * MIB;
    char why[128] = "";
    int fd = st_private_tmpfs_open(len, via, why, sizeof why);
    if (fd < 0) {
        print_message("%s: no private tmpfs here (%s)\n", via_name, why);
        assert_true(not_permitted_here(why));
        return;
    }
    assert_int_equal(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0); // workers inherit it
    assert_int_equal(ftruncate(fd, (off_t)len), 0);

    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    for (uint64_t i = 0; i < len; i++) p[i] = (uint8_t)(i * 13);
    // The instance holds the file's size and no more.
    assert_int_equal(fallocate(fd, 0, (off_t)len, (off_t)(2 * MIB)), -1);
    assert_int_equal(errno, ENOSPC);
    char setting[32];
    st_region_shmem_thp(setting, sizeof setting);
    int huge = huge_chunks(p, len);
    print_message("%s: %d of 4 chunks huge (shmem THP %s)\n", via_name, huge, setting);
    if (huge >= 0 && strcmp(setting, "deny")) assert_int_equal(huge, 4);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { // another process maps the inherited fd and reads what was written
        const uint8_t *q = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        if (q == MAP_FAILED) _exit(10);
        for (uint64_t i = 0; i < len; i++)
            if (q[i] != (uint8_t)(i * 13)) _exit(11);
        _exit(huge > 0 && huge_chunks(q, len) != huge ? 12 : 0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    munmap(p, len);
    close(fd);
}

static void test_in_place(void **state)
{
    (void)state;
    check_file(ST_PRIVATE_TMPFS_DIRECT, "in place");
}

static void test_through_user_namespace(void **state)
{
    (void)state;
    check_file(ST_PRIVATE_TMPFS_USERNS, "user namespace");
}

// Where shmem THP is "never", a region asking for huge pages, with no pool
// reserved, gets transparent ones anyway, and a worker attaching it maps
// its read-only weights huge as well.
static void test_region_gets_huge_pages(void **state)
{
    (void)state;
    char setting[32], why[128] = "";
    st_region_shmem_thp(setting, sizeof setting);
    int probe = st_private_tmpfs_open(2 * MIB, ST_PRIVATE_TMPFS_AUTO, why, sizeof why);
    if (strcmp(setting, "never") || probe < 0) {
        print_message("shmem THP %s, private tmpfs %s: nothing to check\n", setting,
                      probe < 0 ? why : "available");
        if (probe >= 0) close(probe);
        return;
    }
    close(probe);
    struct st_region_config cfg = {
        .name = "test_private_tmpfs", .mem_node = -1, .huge = ST_REGION_HUGE_TRANSPARENT_ONLY,
        .section_bytes = {[ST_REGION_CONTROL] = 4096, [ST_REGION_WEIGHTS] = 6 * MIB},
    };
    struct st_region *r;
    struct st_error e = {{0}};
    if (st_region_create(&cfg, &r, &e) < 0) fail_msg("%s", e.msg);
    print_message("region: %s\n", st_region_huge_note(r));
    assert_int_equal(st_region_huge_kind(r), ST_REGION_HUGE_TRANSPARENT);
    uint64_t n;
    uint8_t *w = st_region_section(r, ST_REGION_WEIGHTS, &n);
    memset(w, 0x3c, n);
    int huge = huge_chunks(w, n);
    if (huge >= 0) {
        assert_int_equal(huge, 3);
        assert_non_null(strstr(st_region_huge_note(r), ", 100% huge)")); // the start-up line says so
    }

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct st_region *a;
        struct st_error ce;
        if (st_region_attach(st_region_fd(r), NULL, &a, &ce) < 0) _exit(10);
        uint64_t m;
        const uint8_t *ro = st_region_section(a, ST_REGION_WEIGHTS, &m);
        for (uint64_t i = 0; i < m; i++)
            if (ro[i] != 0x3c) _exit(11);
        _exit(huge >= 0 && huge_chunks(ro, m) != huge ? 12 : 0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    st_region_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_place),
        cmocka_unit_test(test_through_user_namespace),
        cmocka_unit_test(test_region_gets_huge_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
