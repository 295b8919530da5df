// `subternary bench shm` (see cli/bench_shm.h).
#include "cli/bench_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/bench_load.h"
#include "shm/shm.h"

struct bench_opts {
    const char *file;  // NULL: a generated temporary file
    const char *model; // GGUF: time the model loader against cat too
    uint64_t size_mib; // of the generated file
    uint64_t iters;    // barrier rounds
    uint32_t qd;
    uint64_t io_kib;
    bool quick;
};

static int parse(int argc, char **argv, struct bench_opts *o)
{
    *o = (struct bench_opts){NULL, NULL, 256, 200000, 0, 0, false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) { // bench all --quick: fewer barrier rounds, a smaller file
            o->iters = 20000;
            o->size_mib = 64;
            o->quick = true;
            continue;
        }
        if (!strcmp(a, "--file") && v) o->file = v;
        else if (!strcmp(a, "--model") && v) o->model = v;
        else if (!strcmp(a, "--size") && v) {
            if (st_args_uint("bench shm", a, v, 1, 1 << 20, &o->size_mib)) return -1;
        } else if (!strcmp(a, "--iters") && v) {
            if (st_args_uint("bench shm", a, v, 1, 1000000000, &o->iters)) return -1;
        } else if (!strcmp(a, "--qd") && v) {
            if (st_args_u32("bench shm", a, v, 1, 4096, &o->qd)) return -1;
        } else if (!strcmp(a, "--io-kib") && v) {
            if (st_args_uint("bench shm", a, v, 4, 1 << 20, &o->io_kib)) return -1;
        } else {
            fprintf(stderr, "usage: subternary bench shm [--quick] [--file F] [--model F.gguf] [--size MIB] [--iters N] "
                            "[--qd N] [--io-kib N]\n");
            return -1;
        }
        i++;
    }
    if (o->size_mib == 0 || o->iters == 0) {
        fprintf(stderr, "bench shm: --size and --iters must be positive\n");
        return -1;
    }
    return 0;
}

// ---- barrier -------------------------------------------------------------

// Nanoseconds per barrier for two processes meeting `iters` times.
static int barrier_round_trip(uint64_t iters, uint64_t spin_ns, double *ns, struct st_error *e)
{
    struct st_region_config cfg = {.name = "bench_shm", .mem_node = 0, .huge = ST_REGION_HUGE_OFF,
                                   .section_bytes = {[ST_REGION_CONTROL] = sizeof(struct st_barrier)}};
    struct st_region *r;
    uint64_t off;
    if (st_region_create(&cfg, &r, e) < 0) return -1;
    if (st_region_alloc(r, ST_REGION_CONTROL, sizeof(struct st_barrier), 64, &off, e) < 0) {
        st_region_close(&r);
        return -1;
    }
    struct st_barrier *b =
        (struct st_barrier *)((uint8_t *)st_region_section(r, ST_REGION_CONTROL, NULL) + off);
    st_barrier_init(b, 2, spin_ns);
    uint64_t deadline = st_shm_now_ns() + UINT64_C(120) * 1000000000;
    pid_t pid = fork();
    if (pid < 0) {
        st_region_close(&r);
        return st_error_set(e, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (uint64_t i = 0; i < iters; i++)
            if (st_barrier_wait(b, deadline, NULL) != ST_BARRIER_OK) _exit(1);
        _exit(0);
    }
    int rc = 0, status;
    uint64_t t0 = st_shm_now_ns();
    for (uint64_t i = 0; i < iters && rc == 0; i++)
        if (st_barrier_wait(b, deadline, e) != ST_BARRIER_OK) rc = -1;
    *ns = (double)(st_shm_now_ns() - t0) / (double)iters;
    if (rc < 0) st_barrier_abort(b);
    waitpid(pid, &status, 0);
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status)))
        rc = st_error_set(e, "the second rank failed");
    st_region_close(&r);
    return rc;
}

// ---- rollback ----------------------------------------------------------

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// Median ns per rollback at each committed length (batches of B rollbacks,
// since one is below the clock's resolution).
static int rollback_latency(struct st_error *e)
{
    const struct st_kv_config cfg = {.n_slots = 1, .n_ctx = 32768, .n_models = 2,
                                     .model = {{4, 8, 128}, {2, 4, 64}}};
    uint64_t bytes, size;
    struct st_region *r;
    struct st_kv kv;
    uint32_t slot;
    if (st_kv_size(&cfg, &bytes, e) < 0) return -1;
    struct st_region_config rc = {.name = "bench_kv", .mem_node = 0, .huge = ST_REGION_HUGE_AUTO,
                                  .section_bytes = {[ST_REGION_KV] = bytes}};
    if (st_region_create(&rc, &r, e) < 0) return -1;
    void *base = st_region_section(r, ST_REGION_KV, &size);
    if (st_kv_init(&kv, base, size, &cfg, e) < 0 || st_kv_reserve(&kv, 1, &slot, NULL, e) < 0) {
        st_region_close(&r);
        return -1;
    }
    enum { N = 20000, B = 64 };
    static uint64_t t[N];
    const uint32_t lens[] = {128, 1024, 8192, 32768};
    printf("rollback latency (ns per rollback, median of %d batches of %d):\n", N, B);
    for (int li = 0; li < 4; li++) {
        uint32_t L = lens[li];
        for (int i = 0; i < N; i++) {
            st_kv_commit(&kv, slot, ST_KV_TARGET, L, NULL);
            uint64_t t0 = st_shm_now_ns();
            for (uint32_t j = 1; j <= B; j++) st_kv_rollback(&kv, slot, ST_KV_TARGET, L - j, NULL);
            t[i] = st_shm_now_ns() - t0;
        }
        qsort(t, N, sizeof t[0], cmp_u64);
        printf("  committed %5u: %6.1f ns  (p99 %.1f ns)\n", L, (double)t[N / 2] / B,
               (double)t[N * 99 / 100] / B);
    }
    st_region_close(&r);
    return 0;
}

// ---- load throughput -----------------------------------------------------

// Evicts the file from the page cache: DONTNEED on the file, and as root
// the global drop_caches too (failure ignored: containers often refuse).
void st_bench_make_cold(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    if (geteuid() == 0) {
        int d = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
        if (d >= 0) {
            if (write(d, "1\n", 2) < 0) { /* ignored */ }
            close(d);
        }
    }
}

// dst NULL: what `cat FILE > /dev/null` does, read() 128 KiB at a time into
// one small buffer.  Otherwise read() 2 MiB at a time into dst (window bytes,
// reused when the file is larger): a read()-based loader.
int st_bench_read_loop(const char *path, uint8_t *dst, uint64_t window, double *gbps,
                       struct st_error *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_error_set(e, "open(%s): %s", path, strerror(errno));
    static uint8_t small[128 << 10];
    uint64_t total = 0, t0 = st_shm_now_ns();
    for (;;) {
        uint8_t *p = small;
        size_t n = sizeof small;
        if (dst) {
            uint64_t at = total % window;
            p = dst + at;
            n = window - at < (2u << 20) ? (size_t)(window - at) : (2u << 20);
        }
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            close(fd);
            return st_error_set(e, "read(%s): %s", path, strerror(errno));
        }
        if (got == 0) break;
        total += (uint64_t)got;
    }
    *gbps = (double)total / (double)(st_shm_now_ns() - t0);
    close(fd);
    return 0;
}

static void progress_bar(void *ctx, uint64_t done, uint64_t total)
{
    int *last = ctx, pct = total ? (int)(done * 100 / total) : 100;
    if (pct == *last) return;
    *last = pct;
    fprintf(stderr, "\r  loading %3d%%", pct);
    if (done == total) fprintf(stderr, "\r              \r");
}

// The whole file into `dst` (window bytes at a time when the file is larger).
static int uring_load(const char *path, uint64_t file_bytes, uint8_t *dst, uint64_t window,
                      const struct bench_opts *bo, double *gbps, double *direct_frac,
                      struct st_error *e)
{
    int last = -1;
    struct st_uring_opts o = {.mode = ST_URING_AUTO, .queue_depth = bo->qd,
                              .io_bytes = bo->io_kib << 10};
    if (isatty(2)) {
        o.progress = progress_bar;
        o.progress_ctx = &last;
    }
    uint64_t direct = 0, t0 = st_shm_now_ns();
    for (uint64_t off = 0; off < file_bytes; off += window) {
        struct st_read_range r = {off, file_bytes - off < window ? file_bytes - off : window, dst};
        struct st_uring_stats st;
        if (st_uring_read(path, &r, 1, &o, &st, e) < 0) return -1;
        direct += st.direct_bytes;
    }
    *gbps = (double)file_bytes / (double)(st_shm_now_ns() - t0);
    *direct_frac = file_bytes ? (double)direct / (double)file_bytes : 0;
    return 0;
}

static int make_temp_file(char *path, size_t cap, uint64_t bytes, struct st_error *e)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/st_bench_shm_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return st_error_set(e, "mkstemp(%s): %s", path, strerror(errno));
    enum { CHUNK = 4 << 20 };
    uint64_t *buf = malloc(CHUNK), x = 0x2545f4914f6cdd1dull;
    if (!buf) {
        close(fd);
        return st_error_set(e, "out of memory");
    }
    int rc = 0;
    for (uint64_t done = 0; done < bytes && rc == 0; done += CHUNK) {
        for (size_t i = 0; i < CHUNK / 8; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = x;
        }
        size_t n = bytes - done < CHUNK ? (size_t)(bytes - done) : CHUNK;
        if (write(fd, buf, n) != (ssize_t)n)
            rc = st_error_set(e, "write(%s): %s", path, strerror(errno));
    }
    fdatasync(fd);
    free(buf);
    close(fd);
    if (rc < 0) unlink(path);
    return rc;
}

static int load_throughput(const struct bench_opts *bo, struct st_error *e)
{
    char tmp[4096];
    const char *path = bo->file;
    if (!path) {
        if (make_temp_file(tmp, sizeof tmp, bo->size_mib << 20, e) < 0) return -1;
        path = tmp;
    }
    int rc = -1;
    uint8_t *dst = NULL;
    struct stat st;
    if (stat(path, &st) < 0) {
        st_error_set(e, "stat(%s): %s", path, strerror(errno));
        goto out;
    }
    uint64_t bytes = (uint64_t)st.st_size, window = bytes < (UINT64_C(1) << 30) ? bytes : UINT64_C(1) << 30;
    if (window == 0) {
        st_error_set(e, "%s is empty", path);
        goto out;
    }
    if (posix_memalign((void **)&dst, 2 << 20, window)) {
        st_error_set(e, "out of memory for a %" PRIu64 "-byte buffer", window);
        dst = NULL;
        goto out;
    }
    memset(dst, 0, window); // prefault: measure the reads, not page faults
    printf("load: %s, %.1f MiB; io_uring QD %u, %" PRIu64 " KiB reads; destination prefaulted\n",
           path, (double)bytes / (1 << 20), bo->qd ? bo->qd : ST_URING_DEFAULT_QUEUE_DEPTH,
           bo->io_kib ? bo->io_kib : ST_URING_DEFAULT_IO_BYTES >> 10);
    // Per cache state: cat-like read(), read() into memory, io_uring.
    const char *state[2] = {"cold", "warm"};
    for (int warm = 0; warm < 2; warm++) {
        double cat, rd, ur, direct, res[3];
        if (warm && st_bench_read_loop(path, NULL, window, &cat, e) < 0) goto out; // fills the cache
        if (!warm) st_bench_make_cold(path);
        res[0] = st_page_cache_resident(path);
        if (st_bench_read_loop(path, NULL, window, &cat, e) < 0) goto out;
        if (!warm) st_bench_make_cold(path);
        res[1] = st_page_cache_resident(path);
        if (st_bench_read_loop(path, dst, window, &rd, e) < 0) goto out;
        if (!warm) st_bench_make_cold(path);
        res[2] = st_page_cache_resident(path);
        if (uring_load(path, bytes, dst, window, bo, &ur, &direct, e) < 0) goto out;
        printf("  %s: read() 128 KiB like cat %6.2f GB/s | read() into memory %6.2f GB/s | "
               "io_uring %6.2f GB/s (%.0f%% O_DIRECT)  [cached before: %.0f/%.0f/%.0f%%]\n",
               state[warm], cat, rd, ur, direct * 100, res[0] * 100, res[1] * 100, res[2] * 100);
    }
    rc = 0;
out:
    free(dst);
    if (!bo->file) unlink(tmp);
    return rc;
}

int st_bench_shm(int argc, char **argv)
{
    struct bench_opts o;
    struct st_error e = {{0}};
    if (parse(argc, argv, &o) < 0) return 2;
    double spin, futex;
    if (barrier_round_trip(o.iters, ST_BARRIER_DEFAULT_SPIN_NS, &spin, &e) < 0 ||
        barrier_round_trip(o.iters / 10 + 1, 0, &futex, &e) < 0)
        goto fail;
    printf("barrier round trip, 2 processes: %.3f us (spin %d us, then futex), %.3f us "
           "(futex only)\n", spin / 1e3, ST_BARRIER_DEFAULT_SPIN_NS / 1000, futex / 1e3);
    if (rollback_latency(&e) < 0) goto fail;
    if (load_throughput(&o, &e) < 0) goto fail;
    if (o.model && st_bench_model_load(o.model, o.quick, &e) < 0) goto fail;
    return 0;
fail:
    fprintf(stderr, "bench shm: %s\n", e.msg);
    return 1;
}
