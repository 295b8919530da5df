// `subternary bench shm --model` (see cli/bench_load.h).
#include "cli/bench_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/bench_shm.h"
#include "coordinator/load.h"
#include "kernels/kernels.h"

// A fresh region for one load, allocated before the cold state is set up:
// a server allocates its region at start, before it reads the models, and
// the allocation is outside the load figure.
struct target {
    struct st_llama_model *m; // the plan keeps pointers to these two
    const char *path;
    struct st_load_plan *plan;
    struct st_region *r;
    double alloc_s;
};

static int target_new(struct st_llama_model *m, const char *path, struct target *t, struct st_error *e)
{
    uint64_t wbytes;
    *t = (struct target){.m = m, .path = path};
    if (st_load_plan_new(&t->m, &t->path, 1, &t->plan, &wbytes, e)) return -1;
    struct st_region_config rc_cfg = {.name = "bench-load", .mem_node = -1, .huge = ST_REGION_HUGE_AUTO};
    rc_cfg.section_bytes[ST_REGION_WEIGHTS] = wbytes;
    if (st_region_create(&rc_cfg, &t->r, e)) {
        st_load_plan_free(&t->plan);
        return -1;
    }
    t->alloc_s = st_region_alloc_seconds(t->r);
    return 0;
}

static void target_free(struct target *t)
{
    st_region_close(&t->r);
    st_load_plan_free(&t->plan);
}

static int load_into(struct target *t, enum st_load_mode mode, double *gbps, struct st_load_stats *st,
                     struct st_error *e)
{
    if (st_load_run(t->plan, t->r, false, mode, st, e)) return -1;
    *gbps = st->gbps;
    return 0;
}

#define COLD_ROUNDS 3
#define HANDED_BACK_S 12 // the VM's free page reporting returns freed memory within ~10 s

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// A cold start depends on more than the page cache on a VM whose host takes
// freed guest memory back (free page reporting): a read into memory freed a
// moment ago runs at the device's speed (cat of l3b: 2.9-3.3 GB/s), into
// memory the host took back at the speed the host backs it again (0.63-0.77
// GB/s, 10-20 s after the drop).  Each contender starts from the same state:
//  - just freed: the file read once (its pages cached), then dropped;
//  - handed back: dropped, then HANDED_BACK_S seconds of waiting.
enum cold_state { JUST_FREED, HANDED_BACK };

static int prepare(const char *path, enum cold_state s, struct st_error *e)
{
    double gbps;
    if (s == JUST_FREED && st_bench_read_loop(path, NULL, 0, &gbps, e) < 0) return -1;
    st_bench_make_cold(path);
    if (s == HANDED_BACK) sleep(HANDED_BACK_S);
    return 0;
}

// The loader as a server runs it (AUTO: the probe, then the faster path),
// and each of its two paths alone.
enum { CAT, AUTO, URING, THREADS, N_CONTENDERS };
static const enum st_load_mode contender_mode[N_CONTENDERS] = {0, ST_LOAD_AUTO, ST_LOAD_IO_URING, ST_LOAD_CACHED};

// Rounds in rotating order, so no contender always follows the same one.
static int cold(struct st_llama_model *m, const char *path, enum cold_state s, struct st_error *e)
{
    static const char *names[2] = {"just freed", "handed back"};
    double g[N_CONTENDERS], ratio[N_CONTENDERS][COLD_ROUNDS], alloc = 0;
    struct st_load_stats auto_st = {0};
    for (int i = 0; i < COLD_ROUNDS; i++) {
        for (int k = 0; k < N_CONTENDERS; k++) {
            int c = (i + k) % N_CONTENDERS;
            struct target t = {0};
            if (c != CAT && target_new(m, path, &t, e)) return -1;
            int rc = prepare(path, s, e);
            struct st_load_stats st;
            if (!rc)
                rc = c == CAT ? st_bench_read_loop(path, NULL, 0, &g[c], e) : load_into(&t, contender_mode[c], &g[c], &st, e);
            if (c != CAT) alloc = t.alloc_s;
            if (c == AUTO) auto_st = st;
            target_free(&t);
            if (rc < 0) return -1;
        }
        for (int c = AUTO; c < N_CONTENDERS; c++) ratio[c][i] = g[c] / g[CAT];
        char probe[96] = "no probe: a small file, all io_uring";
        if (auto_st.probed_files)
            snprintf(probe, sizeof probe, "probe: io_uring %.2f, threads %.2f GB/s: rest by %s", auto_st.probe_gbps[0],
                     auto_st.probe_gbps[1], auto_st.threads_won ? "threads" : "io_uring");
        printf("  cold, %s, %d: cat %5.2f GB/s | load %5.2f GB/s = %.2fx (%s) | io_uring alone %.2fx | threads "
               "alone %.2fx | region allocation %.2f s\n",
               names[s], i + 1, g[CAT], g[AUTO], ratio[AUTO][i], probe, ratio[URING][i], ratio[THREADS][i], alloc);
    }
    for (int c = AUTO; c < N_CONTENDERS; c++) qsort(ratio[c], COLD_ROUNDS, sizeof ratio[c][0], cmp_double);
    printf("  cold, %s: median load / cat %.2fx (io_uring alone %.2fx, threads alone %.2fx) over %d rounds\n",
           names[s], ratio[AUTO][COLD_ROUNDS / 2], ratio[URING][COLD_ROUNDS / 2], ratio[THREADS][COLD_ROUNDS / 2],
           COLD_ROUNDS);
    return 0;
}

// Warm: the file stays cached; cat and the load alternate, the order
// swapped each round (one sample each moved 0.70-1.10x over a day).
#define WARM_ROUNDS 5

static int warm(struct st_llama_model *m, const char *path, struct st_error *e)
{
    double ratio[WARM_ROUNDS];
    bool cached = true;
    if (st_bench_read_loop(path, NULL, 0, &(double){0}, e) < 0) return -1; // fills the cache
    for (int i = 0; i < WARM_ROUNDS; i++) {
        double cat = 0, load = 0;
        struct target t;
        if (target_new(m, path, &t, e)) return -1;
        struct st_load_stats st;
        int rc = 0;
        for (int k = 0; k < 2 && !rc; k++)
            rc = (k == i % 2) ? st_bench_read_loop(path, NULL, 0, &cat, e) : load_into(&t, ST_LOAD_AUTO, &load, &st, e);
        double alloc = t.alloc_s;
        target_free(&t);
        if (rc < 0) return -1;
        cached = cached && st.cached_files;
        ratio[i] = load / cat;
        char path_s[64] = "io_uring path";
        if (st.cached_files)
            snprintf(path_s, sizeof path_s, "page-cache path, %.0f%% out of a huge mapping",
                     100.0 * (double)st.mapped_bytes / (double)st.file_bytes);
        printf("  warm, %d: cat %5.2f GB/s | load %5.2f GB/s = %.2fx (%s%s) | region allocation %.2f s\n", i + 1, cat,
               load, ratio[i], path_s, i % 2 ? ", load first" : "", alloc);
    }
    qsort(ratio, WARM_ROUNDS, sizeof ratio[0], cmp_double);
    printf("  warm: median load / cat %.2fx (%.2f-%.2fx) over %d rounds%s\n", ratio[WARM_ROUNDS / 2], ratio[0],
           ratio[WARM_ROUNDS - 1], WARM_ROUNDS, cached ? "" : "; some loads did not find the file cached");
    return 0;
}

int st_bench_model_load(const char *path, bool quick, struct st_error *e)
{
    struct st_llama_model *m = NULL;
    st_kern_init();
    if (st_llama_open(path, &m, e)) return -1;
    printf("model load: %s (region allocated before each load; the figure is read + repack)\n", path);
    // Warm first, as a server that finds its files cached would.  (After the
    // cold rounds the page cache is refilled from fragmented memory: small
    // folios, which the loader reads with pread instead of out of a huge
    // mapping.)  Each cold round sets its own state.
    int rc = -1;
    if (warm(m, path, e) || cold(m, path, JUST_FREED, e)) goto out;
    if (quick) printf("  cold, handed back: not run with --quick (%d s of waiting before each read)\n", HANDED_BACK_S);
    else if (cold(m, path, HANDED_BACK, e)) goto out;
    rc = 0;
out:
    st_llama_close(&m);
    return rc;
}
