// Shared regions: create and attach (in another process, through the fd),
// read-only weights, bump allocation, header corruption caught by attach with
// a clear error, model identities, memory checks, NUMA topology and virtual
// node splitting.
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"

#define MIB (UINT64_C(1) << 20)

static struct st_region *make_region(enum st_region_huge_policy huge)
{
    struct st_region_config cfg = {
        .name = "test_shm_region",
        .mem_node = 0,
        .huge = huge,
        .section_bytes = {[ST_REGION_CONTROL] = 4096, [ST_REGION_KV] = 3 * MIB,
                          [ST_REGION_SCRATCH] = 100000, [ST_REGION_WEIGHTS] = 5 * MIB + 123},
        .n_models = 2,
        .models = {{1, 2, 3, 4}, {5, 6, 7, 8}},
    };
    struct st_region *r;
    struct st_error e = {{0}};
    if (st_region_create(&cfg, &r, &e) < 0) fail_msg("%s", e.msg);
    return r;
}

static void test_create_layout(void **state)
{
    (void)state;
    for (int pol = ST_REGION_HUGE_AUTO; pol <= ST_REGION_HUGE_OFF; pol++) {
        struct st_region *r = make_region(pol);
        const struct st_region_header *h = st_region_header(r);
        printf("policy %d: %s; %s; NUMA binding %s; %llu bytes\n", pol,
               st_region_huge_name(st_region_huge_kind(r)), st_region_huge_note(r),
               st_region_bound(r) ? "node 0" : "none", (unsigned long long)h->total_bytes);
        uint64_t want_align = pol == ST_REGION_HUGE_OFF ? (uint64_t)sysconf(_SC_PAGESIZE)
                                                        : ST_REGION_HUGE_BYTES;
        assert_int_equal(h->align, want_align);
        for (int s = 0; s < ST_REGION_N_SECTIONS; s++) {
            uint64_t n;
            uint8_t *p = st_region_section(r, s, &n);
            assert_int_equal((uintptr_t)p % 4096, 0);
            assert_int_equal(h->sections[s].offset % want_align, 0);
            memset(p, s + 1, n); // every section is writable by the creator
        }
        assert_true(h->sections[ST_REGION_WEIGHTS].offset + h->sections[ST_REGION_WEIGHTS].size <=
                    h->total_bytes);
        struct st_error e;
        assert_int_equal(st_region_header_check(h, h->total_bytes, &e), 0);
        st_region_close(&r);
        assert_null(r);
    }
}

// A forked child attaches the region through the inherited fd number and
// checks what the creator wrote, writes scratch, and finds the weights
// read-only (the kernel refuses to write into them: EFAULT).
static int child_attach(int fd)
{
    struct st_region *w;
    struct st_error e;
    struct st_file_identity ids[2] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    struct st_region_attach_opts o = {.weights_writable = false, .n_models = 2, .models = ids};
    if (st_region_attach(fd, &o, &w, &e) < 0) {
        fprintf(stderr, "child: %s\n", e.msg);
        return 10;
    }
    uint64_t n;
    const uint8_t *wt = st_region_section(w, ST_REGION_WEIGHTS, &n);
    for (uint64_t i = 0; i < n; i++)
        if (wt[i] != (uint8_t)(i * 7)) return 11;
    uint8_t *kv = st_region_section(w, ST_REGION_KV, &n);
    if (kv[0] != 0xab || kv[n - 1] != 0xcd) return 12;
    uint8_t *scratch = st_region_section(w, ST_REGION_SCRATCH, &n);
    memset(scratch, 0x5a, n);
    int z = open("/dev/zero", O_RDONLY);
    if (z < 0) return 13;
    ssize_t got = read(z, (void *)wt, 16);
    close(z);
    if (got != -1 || errno != EFAULT) return 14;
    st_region_close(&w);
    return 0;
}

static void test_attach_other_process(void **state)
{
    (void)state;
    struct st_region *r = make_region(ST_REGION_HUGE_AUTO);
    uint64_t n;
    uint8_t *wt = st_region_section(r, ST_REGION_WEIGHTS, &n);
    for (uint64_t i = 0; i < n; i++) wt[i] = (uint8_t)(i * 7);
    uint8_t *kv = st_region_section(r, ST_REGION_KV, &n);
    kv[0] = 0xab;
    kv[n - 1] = 0xcd;
    int fd = st_region_fd(r);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(child_attach(fd));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    uint8_t *scratch = st_region_section(r, ST_REGION_SCRATCH, &n);
    for (uint64_t i = 0; i < n; i++) assert_int_equal(scratch[i], 0x5a);
    // The creator's fd is inheritable across exec (workers are exec'd).
    assert_int_equal(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    st_region_close(&r);
}

static void test_alloc(void **state)
{
    (void)state;
    struct st_region *r = make_region(ST_REGION_HUGE_OFF);
    struct st_error e;
    uint64_t size, a, b, c;
    uint8_t *base = st_region_section(r, ST_REGION_SCRATCH, &size);
    assert_int_equal(st_region_alloc(r, ST_REGION_SCRATCH, 10, 64, &a, &e), 0);
    assert_int_equal(st_region_alloc(r, ST_REGION_SCRATCH, 1, 256, &b, &e), 0);
    assert_int_equal(st_region_alloc(r, ST_REGION_SCRATCH, 100, 64, &c, &e), 0);
    assert_int_equal(a, 0);
    assert_int_equal(b, 256);
    assert_int_equal(c, 320);
    assert_int_equal((uintptr_t)(base + b) % 256, 0);
    assert_int_equal(st_region_alloc(r, ST_REGION_SCRATCH, size, 64, &a, &e), -1);
    assert_non_null(strstr(e.msg, "section is full"));
    assert_int_equal(st_region_alloc(r, ST_REGION_SCRATCH, 8, 48, &a, &e), -1);
    assert_non_null(strstr(e.msg, "alignment 48"));
    // Exactly the rest fits.
    assert_int_equal(st_region_alloc(r, ST_REGION_SCRATCH, size - 448, 64, &a, &e), 0);
    assert_int_equal(a, 448);
    assert_int_equal(st_region_alloc(r, ST_REGION_SCRATCH, 1, 64, &a, &e), -1);
    st_region_close(&r);
}

// Each corruption of the header (written through the fd, as a stray write
// or a foreign file would) must fail attach with a message naming it.
struct corruption {
    const char *what;
    size_t offset; // into the header
    uint64_t value;
    size_t width;
    const char *expect; // substring of the error
};

static void test_corrupt_header(void **state)
{
    (void)state;
    struct st_region *r = make_region(ST_REGION_HUGE_OFF);
    int fd = st_region_fd(r);
    const struct st_region_header *h = st_region_header(r);
    size_t sec = offsetof(struct st_region_header, sections);
    size_t entry = sizeof(struct st_region_section_entry);
    size_t off_field = offsetof(struct st_region_section_entry, offset);
    size_t size_field = offsetof(struct st_region_section_entry, size);
    const struct corruption cases[] = {
        {"magic", offsetof(struct st_region_header, magic), 0x1234, 8, "bad magic"},
        {"version", offsetof(struct st_region_header, version), 99, 4, "layout version 99"},
        {"header size", offsetof(struct st_region_header, header_bytes), 8, 4, "header is 8 bytes"},
        {"total size", offsetof(struct st_region_header, total_bytes), h->total_bytes * 2, 8,
         "the memfd is"},
        {"alignment", offsetof(struct st_region_header, align), 4097, 8, "not a power of two"},
        {"sections", offsetof(struct st_region_header, n_sections), 7, 4, "7 sections"},
        {"models", offsetof(struct st_region_header, n_models), 9, 4, "9 models"},
        {"section name", sec + ST_REGION_KV * entry, 0x7878, 8, "named 'xx'"},
        {"unaligned offset", sec + ST_REGION_KV * entry + off_field,
         h->sections[ST_REGION_KV].offset + 64, 8, "is not a multiple"},
        {"overlap", sec + ST_REGION_SCRATCH * entry + off_field, h->sections[ST_REGION_KV].offset,
         8, "overlaps"},
        {"outside", sec + ST_REGION_WEIGHTS * entry + size_field, h->total_bytes, 8,
         "lies outside"},
        {"huge size", sec + ST_REGION_WEIGHTS * entry + size_field, UINT64_MAX - 5, 8,
         "lies outside"},
        {"model identity", offsetof(struct st_region_header, models) + 9, 0x77, 1,
         "checksum"},
    };
    struct st_region_header saved = *h;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct corruption *c = &cases[i];
        assert_int_equal(pwrite(fd, &c->value, c->width, (off_t)c->offset), (ssize_t)c->width);
        struct st_region *w = NULL;
        struct st_error e = {{0}};
        int rc = st_region_attach(fd, NULL, &w, &e);
        printf("  %-16s -> %s\n", c->what, e.msg);
        assert_int_equal(rc, -1);
        assert_null(w);
        if (!strstr(e.msg, c->expect)) fail_msg("%s: '%s' lacks '%s'", c->what, e.msg, c->expect);
        assert_non_null(strstr(e.msg, "st_region_attach(fd="));
        assert_int_equal(pwrite(fd, &saved, sizeof saved, 0), (ssize_t)sizeof saved);
    }
    // Restored: attaches again.
    struct st_region *w;
    struct st_error e;
    assert_int_equal(st_region_attach(fd, NULL, &w, &e), 0);
    st_region_close(&w);
    // A truncated memfd and a non-region fd.
    uint64_t total = h->total_bytes;
    assert_int_equal(ftruncate(fd, (off_t)(total - 4096)), 0);
    assert_int_equal(st_region_attach(fd, NULL, &w, &e), -1);
    assert_non_null(strstr(e.msg, "bytes but the memfd is"));
    assert_int_equal(ftruncate(fd, (off_t)total), 0);
    int devnull = open("/dev/null", O_RDONLY);
    assert_int_equal(st_region_attach(devnull, NULL, &w, &e), -1);
    assert_non_null(strstr(e.msg, "smaller than the"));
    close(devnull);
    st_region_close(&r);
}

static void test_model_identity(void **state)
{
    (void)state;
    char path[] = "/tmp/st_identity_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "GGUF-header-bytes", 17), 17);
    struct st_file_identity a, b;
    struct st_error e;
    assert_int_equal(st_file_identity_get(path, &a, &e), 0);
    assert_int_equal(a.size, 17);
    assert_int_equal(pwrite(fd, "X", 1, 0), 1); // same size, other content
    assert_int_equal(st_file_identity_get(path, &b, &e), 0);
    assert_true(a.head_hash != b.head_hash);
    close(fd);
    unlink(path);
    assert_int_equal(st_file_identity_get(path, &b, &e), -1);
    assert_non_null(strstr(e.msg, "open("));

    struct st_region *r = make_region(ST_REGION_HUGE_OFF), *w = NULL;
    struct st_file_identity ids[2] = {{1, 2, 3, 4}, {5, 6, 7, 9}};
    struct st_region_attach_opts o = {.n_models = 2, .models = ids};
    assert_int_equal(st_region_attach(st_region_fd(r), &o, &w, &e), -1);
    printf("  identity mismatch -> %s\n", e.msg);
    assert_non_null(strstr(e.msg, "model 1 differs"));
    o.n_models = 1;
    assert_int_equal(st_region_attach(st_region_fd(r), &o, &w, &e), -1);
    assert_non_null(strstr(e.msg, "holds 2 models"));
    st_region_close(&r);
}

static void test_memory_checks(void **state)
{
    (void)state;
    struct st_error e;
    uint64_t avail;
    assert_int_equal(st_shm_mem_available(&avail, &e), 0);
    assert_true(avail > 0);
    assert_int_equal(st_shm_mem_check(avail / 2, "half", &e), 0);
    assert_int_equal(st_shm_mem_check(avail * 4, "the test", &e), -1);
    assert_non_null(strstr(e.msg, "the test needs"));
    assert_non_null(strstr(e.msg, "MemAvailable"));
    struct st_region_config cfg = {.mem_node = -1, .huge = ST_REGION_HUGE_OFF,
                                   .section_bytes = {[ST_REGION_KV] = avail * 4}};
    struct st_region *r = NULL;
    assert_int_equal(st_region_create(&cfg, &r, &e), -1);
    assert_null(r);
    printf("  too big -> %s\n", e.msg);
    assert_non_null(strstr(e.msg, "shared region needs"));
    cfg.section_bytes[ST_REGION_KV] = UINT64_MAX - 100;
    assert_int_equal(st_region_create(&cfg, &r, &e), -1);
    assert_non_null(strstr(e.msg, "overflows"));
    struct st_topology t;
    assert_int_equal(st_topology_detect(&t, &e), 0);
    if (t.numa) { // without NUMA a node number is not checked: nothing is bound
        cfg.section_bytes[ST_REGION_KV] = 4096;
        cfg.mem_node = 4000;
        assert_int_equal(st_region_create(&cfg, &r, &e), -1);
        assert_non_null(strstr(e.msg, "NUMA node 4000"));
    }
}

static volatile sig_atomic_t ticks;
static void on_tick(int sig)
{
    (void)sig;
    ticks++;
}

// A signal caught while the region's pages are allocated (fallocate and the
// populating madvise stop with EINTR) must not fail the creation: a server
// gets SIGCHLD, timers, io_uring task work.  A timer fires every 50 us while
// 64 MiB regions are created.
static void test_signals_during_allocation(void **state)
{
    (void)state;
    struct sigaction sa = {.sa_handler = on_tick}; // no SA_RESTART: fallocate sees EINTR
    struct sigaction old;
    sigaction(SIGALRM, &sa, &old);
    struct itimerval it = {{0, 50}, {0, 50}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &it, NULL);
    const enum st_region_huge_policy policies[] = {ST_REGION_HUGE_OFF, ST_REGION_HUGE_AUTO};
    for (int i = 0; i < 8; i++) {
        struct st_region_config cfg = {.mem_node = -1, .huge = policies[i % 2],
                                       .section_bytes = {[ST_REGION_WEIGHTS] = 64 * MIB}};
        struct st_region *r = NULL;
        struct st_error e = {{0}};
        int rc = st_region_create(&cfg, &r, &e);
        if (rc) {
            setitimer(ITIMER_REAL, &off, NULL);
            fail_msg("region %d with a timer firing: %s", i, e.msg);
        }
        st_region_close(&r);
    }
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old, NULL);
    printf("  8 regions of 64 MiB created with %d timer signals caught\n", (int)ticks);
    assert_true(ticks > 0);
}

static void test_topology(void **state)
{
    (void)state;
    struct st_topology t, v;
    struct st_error e;
    assert_int_equal(st_topology_detect(&t, &e), 0);
    assert_true(t.n_nodes >= 1);
    uint32_t cpus = 0;
    for (uint32_t i = 0; i < t.n_nodes; i++) {
        assert_int_equal(t.node[i].n_cpus, (uint32_t)CPU_COUNT(&t.node[i].cpus));
        cpus += t.node[i].n_cpus;
    }
    printf("  %u node(s), %u CPUs, NUMA %s\n", t.n_nodes, cpus, t.numa ? "yes" : "no");

    // A made-up node of 7 CPUs {2,3,5,8,9,10,40} split into 3 virtual nodes.
    struct st_topology fake = {.numa = true, .n_nodes = 1};
    int ids[] = {2, 3, 5, 8, 9, 10, 40};
    fake.node[0].mem_node = 0;
    fake.node[0].n_cpus = 7;
    CPU_ZERO(&fake.node[0].cpus);
    for (int i = 0; i < 7; i++) CPU_SET(ids[i], &fake.node[0].cpus);
    assert_int_equal(st_topology_split(&fake, 3, &v, &e), 0);
    assert_int_equal(v.n_nodes, 3);
    int expect[3][3] = {{2, 3, 5}, {8, 9, -1}, {10, 40, -1}};
    for (int n = 0; n < 3; n++) {
        assert_int_equal(v.node[n].mem_node, 0);
        assert_int_equal(v.node[n].n_cpus, n == 0 ? 3 : 2);
        for (int k = 0; k < 3 && expect[n][k] >= 0; k++)
            assert_true(CPU_ISSET(expect[n][k], &v.node[n].cpus));
        assert_int_equal(CPU_COUNT(&v.node[n].cpus), (int)v.node[n].n_cpus);
    }
    assert_int_equal(st_topology_split(&fake, 8, &v, &e), -1);
    assert_non_null(strstr(e.msg, "only 7 CPUs"));
    assert_int_equal(st_topology_split(&fake, 0, &v, &e), -1);

    // This machine split into as many virtual nodes as its first node has CPUs.
    if (t.node[0].n_cpus >= 2) {
        assert_int_equal(st_topology_split(&t, 2, &v, &e), 0);
        assert_int_equal(v.n_nodes, 2 * t.n_nodes);
        assert_int_equal(v.node[0].n_cpus + v.node[1].n_cpus, t.node[0].n_cpus);
        cpu_set_t both;
        CPU_AND(&both, &v.node[0].cpus, &v.node[1].cpus);
        assert_int_equal(CPU_COUNT(&both), 0);
    }
    uint32_t begin, count, total = 0;
    for (uint32_t p = 0; p < 4; p++) {
        st_cpu_list_split(10, 4, p, &begin, &count);
        assert_int_equal(begin, total);
        total += count;
    }
    assert_int_equal(total, 10);
}

// AnonHugePages of the mapping at addr, in bytes, from /proc/self/smaps.
static uint64_t smaps_anon_huge(const void *addr)
{
    char want[32], line[512];
    snprintf(want, sizeof want, "%lx-", (unsigned long)(uintptr_t)addr);
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    uint64_t kb = 0;
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, want, strlen(want))) in = true;
        else if (in && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1) break;
    }
    fclose(f);
    return kb << 10;
}

// st_map_huge_chunks against the kernel's own count: 4 KiB pages are never
// huge; a THP mapping has as many huge 2 MiB chunks as smaps says, and each
// 1 MiB half of one is huge too; a short last chunk counts.
static void test_map_huge(void **state)
{
    (void)state;
    const uint64_t len = 8 * MIB;
    bool huge[16];
    uint8_t *small = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(small != MAP_FAILED);
    madvise(small, len, MADV_NOHUGEPAGE);
    memset(small, 1, len);
    int rc = st_map_huge_chunks(small, len, 2 * MIB, huge);
    for (int c = 0; c < 4; c++) assert_false(huge[c]);
    munmap(small, len);
    if (rc < 0) {
        print_message("PAGEMAP_SCAN unsupported here: every chunk reported not huge, as it must\n");
        return;
    }
    uint8_t *raw = mmap(NULL, len + 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(raw != MAP_FAILED);
    uint8_t *thp = (uint8_t *)(((uintptr_t)raw + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
    madvise(thp, len, MADV_HUGEPAGE);
    memset(thp, 1, len);
    uint64_t expect = 0, got = 0;
    assert_int_equal(st_map_huge_chunks(thp, len, 2 * MIB, huge), 0);
    for (int c = 0; c < 4; c++) got += huge[c];
    // The VMA may start below thp (raw was one mapping): count the kernel's
    // huge pages of thp's range by splitting it off.
    munmap(raw, (size_t)(thp - raw));
    munmap(thp + len, (size_t)(raw + len + 2 * MIB - (thp + len)));
    expect = smaps_anon_huge(thp) / (2 * MIB);
    print_message("THP mapping: %llu of 4 chunks huge (smaps: %llu)\n", (unsigned long long)got,
                  (unsigned long long)expect);
    assert_int_equal(got, expect);
    bool half[16];
    assert_int_equal(st_map_huge_chunks(thp, len - MIB / 2, MIB, half), 0); // 8 chunks, the last 512 KiB
    for (int c = 0; c < 8; c++) assert_int_equal(half[c], huge[c / 2]);
    munmap(thp, len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_layout),
        cmocka_unit_test(test_attach_other_process),
        cmocka_unit_test(test_alloc),
        cmocka_unit_test(test_corrupt_header),
        cmocka_unit_test(test_model_identity),
        cmocka_unit_test(test_memory_checks),
        cmocka_unit_test(test_signals_during_allocation),
        cmocka_unit_test(test_topology),
        cmocka_unit_test(test_map_huge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
