// io_uring reader: a generated 64 MiB file (in $TMPDIR, default /tmp) read
// as a whole and as many ranges of odd sizes and offsets, into aligned and
// misaligned memory, in every mode, compared with pread(); progress
// reports; errors for ranges past the end and missing files; a tmpfs file
// (no O_DIRECT on older kernels).
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"

#define FILE_BYTES ((UINT64_C(64) << 20) + 12345) // odd tail: not a block multiple

static char path[4096];
static uint8_t *ref; // [FILE_BYTES] the file's contents

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int write_file(const char *p, const uint8_t *data, uint64_t n)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    for (uint64_t done = 0; done < n;) {
        ssize_t w = write(fd, data + done, n - done > (1u << 20) ? (1u << 20) : n - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (uint64_t)w;
    }
    fdatasync(fd);
    close(fd);
    return 0;
}

static void drop_cache(const char *p)
{
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/st_uring_test_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) fail_msg("mkstemp(%s) failed", path);
    close(fd);
    ref = malloc(FILE_BYTES);
    assert_non_null(ref);
    for (uint64_t i = 0; i + 8 <= FILE_BYTES; i += 8) {
        uint64_t x = rnd();
        memcpy(ref + i, &x, 8);
    }
    for (uint64_t i = FILE_BYTES / 8 * 8; i < FILE_BYTES; i++) ref[i] = (uint8_t)rnd();
    if (write_file(path, ref, FILE_BYTES) < 0) fail_msg("writing %s failed", path);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    free(ref);
    return 0;
}

static uint8_t *aligned_buf(uint64_t n)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4096, n), 0);
    memset(p, 0xcc, n);
    return p;
}

struct progress {
    uint64_t calls, last, total;
    int backwards;
};
static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    struct progress *p = ctx;
    if (done < p->last) p->backwards = 1;
    p->calls++;
    p->last = done;
    p->total = total;
}

static void test_whole_file(void **state)
{
    (void)state;
    uint8_t *dst = aligned_buf(FILE_BYTES);
    // Cold runs first (the buffered one leaves the file cached), then AUTO
    // on the warm cache, which must copy from the page cache instead.
    const char *names[] = {"auto (cold)", "direct", "buffered", "auto (warm)"};
    const enum st_uring_mode modes[] = {ST_URING_AUTO, ST_URING_DIRECT, ST_URING_BUFFERED,
                                        ST_URING_AUTO};
    for (int i = 0; i < 4; i++) {
        if (i < 3) drop_cache(path);
        memset(dst, 0xcc, FILE_BYTES);
        struct st_read_range r = {0, FILE_BYTES, dst};
        struct progress pr = {0};
        struct st_uring_opts o = {.mode = modes[i], .progress = on_progress, .progress_ctx = &pr};
        struct st_uring_stats st;
        struct st_error e;
        if (st_uring_read(path, &r, 1, &o, &st, &e) < 0) fail_msg("%s", e.msg);
        printf("  %-12s %.2f GB/s, %" PRIu64 " MiB direct, %" PRIu64 " reads, %" PRIu64
               " short, O_DIRECT %s\n", names[i], st.gbps, st.direct_bytes >> 20, st.n_reads,
               st.short_reads, modes[i] == ST_URING_BUFFERED ? "not tried"
                               : st.direct_available ? "available" : "refused");
        assert_int_equal(st.bytes, FILE_BYTES);
        assert_memory_equal(dst, ref, FILE_BYTES);
        assert_int_equal(pr.last, FILE_BYTES);
        assert_int_equal(pr.total, FILE_BYTES);
        assert_false(pr.backwards);
        assert_true(pr.calls >= FILE_BYTES / ST_URING_DEFAULT_IO_BYTES);
        if (modes[i] == ST_URING_BUFFERED) assert_int_equal(st.direct_bytes, 0);
        if (modes[i] == ST_URING_DIRECT && st.direct_available)
            assert_int_equal(st.direct_bytes, FILE_BYTES / 4096 * 4096);
        if (i == 3) assert_true(st.direct_bytes < FILE_BYTES / 2); // cached: copied
    }
    free(dst);
}

// The file cut at random points into segments of 1 byte to 3 MiB; about
// two thirds of them read, each into buffer A (same misalignment as the
// file offset: the middle can go O_DIRECT) or B (shifted by 1..4095 bytes:
// all buffered).
static void test_odd_ranges(void **state)
{
    (void)state;
    uint8_t *a = aligned_buf(FILE_BYTES), *b_base = aligned_buf(FILE_BYTES + 8192);
    uint64_t shift = 1 + rnd() % 4095;
    uint8_t *b = b_base + shift;
    struct st_read_range *r = malloc(4096 * sizeof *r);
    assert_non_null(r);
    uint64_t n = 0, bytes = 0;
    for (uint64_t off = 0; off < FILE_BYTES && n < 4096;) {
        uint64_t kind = rnd() % 4, len;
        if (kind == 0) len = 1 + rnd() % 16;
        else if (kind == 1) len = 1 + rnd() % 9000;
        else len = 1 + rnd() % (3u << 20);
        if (len > FILE_BYTES - off) len = FILE_BYTES - off;
        if (rnd() % 3) {
            r[n++] = (struct st_read_range){off, len, (rnd() & 1 ? a : b) + off};
            bytes += len;
        }
        off += len;
    }
    const enum st_uring_mode modes[] = {ST_URING_AUTO, ST_URING_BUFFERED, ST_URING_DIRECT};
    const uint32_t depths[] = {0, 4, 64};
    const uint64_t ios[] = {0, 64 << 10, 4 << 20};
    for (int i = 0; i < 3; i++) {
        drop_cache(path);
        memset(a, 0xcc, FILE_BYTES);
        memset(b_base, 0xcc, FILE_BYTES + 8192);
        struct st_uring_opts o = {.mode = modes[i], .queue_depth = depths[i], .io_bytes = ios[i]};
        struct st_uring_stats st;
        struct st_error e;
        if (st_uring_read(path, r, n, &o, &st, &e) < 0) fail_msg("%s", e.msg);
        printf("  mode %d: %" PRIu64 " ranges, %" PRIu64 " MiB (%" PRIu64 " MiB direct) in %"
               PRIu64 " reads, %.2f GB/s\n", (int)modes[i], n, bytes >> 20,
               st.direct_bytes >> 20, st.n_reads, st.gbps);
        assert_int_equal(st.bytes, bytes);
        if (modes[i] == ST_URING_BUFFERED) assert_int_equal(st.direct_bytes, 0);
        if (modes[i] == ST_URING_DIRECT && st.direct_available) assert_true(st.direct_bytes > 0);
        for (uint64_t k = 0; k < n; k++) {
            if (memcmp(r[k].dst, ref + r[k].offset, r[k].length))
                fail_msg("range %" PRIu64 " [%" PRIu64 ", +%" PRIu64 ") into %s differs", k,
                         r[k].offset, r[k].length, (uint8_t *)r[k].dst - a < (ptrdiff_t)FILE_BYTES &&
                         (uint8_t *)r[k].dst >= a ? "A" : "B");
        }
        // Nothing outside the ranges was written.
        uint64_t untouched_a = 0;
        for (uint64_t k = 0; k < FILE_BYTES; k++) untouched_a += a[k] == 0xcc;
        uint64_t in_a = 0, cc_in_a = 0;
        for (uint64_t k = 0; k < n; k++)
            if ((uint8_t *)r[k].dst >= a && (uint8_t *)r[k].dst < a + FILE_BYTES) {
                in_a += r[k].length;
                for (uint64_t j = 0; j < r[k].length; j++) cc_in_a += ref[r[k].offset + j] == 0xcc;
            }
        assert_int_equal(untouched_a, FILE_BYTES - in_a + cc_in_a);
        assert_int_equal(b_base[shift - 1], 0xcc);
    }
    free(r);
    free(a);
    free(b_base);
}

// Edge cases of the split: a skewed destination (read buffered) at the
// start and at the unaligned end of the file; an aligned range ending at the
// unaligned end (direct middle, buffered tail); ranges shorter than a block
// inside one block and across two; several pieces with queue depth 2.
static void test_edges(void **state)
{
    (void)state;
    uint8_t *base = aligned_buf(16 << 20);
    const uint64_t tail = FILE_BYTES - 200001;
    struct st_read_range r[] = {
        {0, 100000, base + 3},
        {tail, 200001, base + (1u << 20) + 5},
        {tail, 200001, base + (2u << 20) + tail % 4096},
        {4096 * 7 + 9, 100, base + (3u << 20) + 9},
        {4096 * 9 - 50, 100, base + (3u << 20) + 4096 - 50 + 8192},
        {12345678, (5u << 20) + 333, base + (4u << 20) + 12345678 % 4096},
    };
    uint64_t n = sizeof r / sizeof r[0];
    for (int mode = ST_URING_AUTO; mode <= ST_URING_DIRECT; mode++) {
        drop_cache(path);
        memset(base, 0xcc, 16 << 20);
        struct st_uring_opts o = {.mode = mode, .queue_depth = 2, .io_bytes = 1u << 20};
        struct st_uring_stats st;
        struct st_error e;
        if (st_uring_read(path, r, n, &o, &st, &e) < 0) fail_msg("%s", e.msg);
        printf("  mode %d: %" PRIu64 " bytes direct, %" PRIu64 " reads, %" PRIu64 " short\n",
               mode, st.direct_bytes, st.n_reads, st.short_reads);
        if (mode != ST_URING_BUFFERED && st.direct_available) {
            // Only the aligned middles of the two unskewed large ranges.
            uint64_t mid2 = (FILE_BYTES / 4096 * 4096) - (tail + 4095) / 4096 * 4096;
            uint64_t b = 12345678, mid5 = (b + (5u << 20) + 333) / 4096 * 4096 -
                                          (b + 4095) / 4096 * 4096;
            assert_int_equal(st.direct_bytes, mid2 + mid5);
        }
        for (uint64_t k = 0; k < n; k++) {
            assert_memory_equal(r[k].dst, ref + r[k].offset, r[k].length);
            assert_int_equal(((uint8_t *)r[k].dst)[-1], 0xcc);
            assert_int_equal(((uint8_t *)r[k].dst)[r[k].length], 0xcc);
        }
    }
    free(base);
}

static void test_errors(void **state)
{
    (void)state;
    uint8_t buf[64];
    struct st_error e;
    struct st_read_range r = {FILE_BYTES - 10, 11, buf};
    assert_int_equal(st_uring_read(path, &r, 1, NULL, NULL, &e), -1);
    printf("  %s\n", e.msg);
    assert_non_null(strstr(e.msg, "passes the end"));
    r = (struct st_read_range){UINT64_MAX - 3, 10, buf};
    assert_int_equal(st_uring_read(path, &r, 1, NULL, NULL, &e), -1);
    assert_int_equal(st_uring_read("/nonexistent/model.gguf", &r, 1, NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "open(/nonexistent/model.gguf)"));
    struct st_uring_stats st;
    assert_int_equal(st_uring_read(path, NULL, 0, NULL, &st, &e), 0);
    assert_int_equal(st.bytes, 0);
    r = (struct st_read_range){FILE_BYTES - 10, 10, buf};
    assert_int_equal(st_uring_read(path, &r, 1, NULL, NULL, &e), 0);
    assert_memory_equal(buf, ref + FILE_BYTES - 10, 10);
}

// The page cache's share of a range: none after a drop, all of a range just
// read, none beyond it; AUTO reads the cached half buffered, the rest direct.
static void test_residency(void **state)
{
    (void)state;
    drop_cache(path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    double f0 = st_page_cache_fraction(fd, 0, FILE_BYTES);
    const uint64_t half = 32u << 20;
    uint8_t *buf = aligned_buf(half);
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); // no readahead past the read
    assert_int_equal(pread(fd, buf, half, 0), (ssize_t)half);
    double f_read = st_page_cache_fraction(fd, 4096, half - 8192), f_rest = st_page_cache_fraction(fd, half + 4096, 1 << 20);
    double f_all = st_page_cache_resident(path);
    printf("  cached after a drop %.3f; of a range read %.3f, beyond it %.3f, whole file %.3f\n", f0, f_read, f_rest, f_all);
    assert_true(f0 >= 0 && f0 < 0.05);
    assert_true(f_read > 0.99);
    assert_true(f_rest < 0.05);
    assert_true(f_all > 0.45 && f_all < 0.55);
    assert_true(st_page_cache_fraction(fd, 0, 0) < 0);
    close(fd);
    uint8_t *dst = aligned_buf(FILE_BYTES);
    struct st_read_range r = {0, FILE_BYTES, dst};
    struct st_uring_stats st;
    struct st_error e;
    if (st_uring_read(path, &r, 1, NULL, &st, &e) < 0) fail_msg("%s", e.msg);
    assert_memory_equal(dst, ref, FILE_BYTES);
    printf("  AUTO read %" PRIu64 " of %" PRIu64 " bytes direct\n", st.direct_bytes, (uint64_t)FILE_BYTES);
    if (st.direct_available) assert_true(st.direct_bytes >= FILE_BYTES - half - (4u << 20) && st.direct_bytes <= FILE_BYTES - half + (4u << 20));
    free(buf);
    free(dst);
}

// tmpfs: O_DIRECT is refused on older kernels and accepted on newer ones;
// either way the bytes must come back.
static void test_tmpfs(void **state)
{
    (void)state;
    char p[] = "/dev/shm/st_uring_XXXXXX";
    int fd = mkstemp(p);
    if (fd < 0) {
        printf("  no writable /dev/shm: skipped\n");
        return;
    }
    close(fd);
    const uint64_t n = (3u << 20) + 777;
    assert_int_equal(write_file(p, ref, n), 0);
    uint8_t *dst = aligned_buf(n);
    struct st_read_range r[3] = {{0, 4096 * 5, dst}, {4096 * 5, 3, dst + 4096 * 5},
                                 {4096 * 5 + 3, n - 4096 * 5 - 3, dst + 4096 * 5 + 3}};
    struct st_uring_opts o = {.mode = ST_URING_DIRECT};
    struct st_uring_stats st;
    struct st_error e;
    int rc = st_uring_read(p, r, 3, &o, &st, &e);
    unlink(p);
    if (rc < 0) fail_msg("%s", e.msg);
    printf("  tmpfs: O_DIRECT %s, %" PRIu64 " bytes direct\n",
           st.direct_available ? "available" : "refused", st.direct_bytes);
    assert_memory_equal(dst, ref, n);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_file),
        cmocka_unit_test(test_odd_ranges),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_residency),
        cmocka_unit_test(test_tmpfs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
