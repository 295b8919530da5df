// `subternary bench shm --model` (see cli/bench_load.h).
#include "cli/bench_load.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli/bench_shm.h"
#include "coordinator/load.h"
#include "kernels/kernels.h"

// One load of the model into a fresh region; *alloc_s is the region's
// allocation (outside the load figure: a server does it once at start).
static int load_once(struct st_llama_model *m, const char *path, enum st_load_mode mode, double *gbps,
                     double *alloc_s, unsigned *cached, struct st_error *e)
{
    struct st_load_plan *plan = NULL;
    struct st_region *r = NULL;
    uint64_t wbytes;
    int rc = -1;
    if (st_load_plan_new(&m, &path, 1, &plan, &wbytes, e)) goto out;
    struct st_region_config rc_cfg = {.name = "bench-load", .mem_node = -1, .huge = ST_REGION_HUGE_AUTO};
    rc_cfg.section_bytes[ST_REGION_WEIGHTS] = wbytes;
    if (st_region_create(&rc_cfg, &r, e)) goto out;
    *alloc_s = st_region_alloc_seconds(r);
    struct st_load_stats st;
    if (st_load_run(plan, r, false, mode, &st, e)) goto out;
    *gbps = st.gbps;
    *cached = st.cached_files;
    rc = 0;
out:
    st_region_close(&r);
    st_load_plan_free(&plan);
    return rc;
}

#define COLD_ROUNDS 3

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int st_bench_model_load(const char *path, struct st_error *e)
{
    struct st_llama_model *m = NULL;
    st_kern_init();
    if (st_llama_open(path, &m, e)) return -1;
    printf("model load: %s (region allocated before each load; the figure is read + repack)\n", path);
    int rc = -1;
    double cat, load, alloc;
    unsigned cached;
    // Cold: a virtual disk's speed swings by 2-3x within a minute, so cat
    // and the loader alternate and the ratio is taken round by round.
    // The buffered path (threads reading through the page cache) runs cold
    // too, for comparison: on some virtual disks O_DIRECT is the slower.
    double ratio[COLD_ROUNDS], ratio_buf[COLD_ROUNDS], buf;
    for (int i = 0; i < COLD_ROUNDS; i++) {
        st_bench_make_cold(path);
        if (st_bench_read_loop(path, NULL, 0, &cat, e) < 0) goto out;
        st_bench_make_cold(path);
        if (load_once(m, path, ST_LOAD_AUTO, &load, &alloc, &cached, e) < 0) goto out;
        st_bench_make_cold(path);
        if (load_once(m, path, ST_LOAD_CACHED, &buf, &alloc, &cached, e) < 0) goto out;
        ratio[i] = load / cat;
        ratio_buf[i] = buf / cat;
        printf("  cold %d: cat %6.2f GB/s | load %6.2f GB/s (io_uring path) = %.2fx cat | buffered threads %6.2f GB/s = "
               "%.2fx | region allocation %.2f s\n",
               i + 1, cat, load, ratio[i], buf, ratio_buf[i], alloc);
    }
    qsort(ratio, COLD_ROUNDS, sizeof ratio[0], cmp_double);
    qsort(ratio_buf, COLD_ROUNDS, sizeof ratio_buf[0], cmp_double);
    printf("  cold: median load / cat %.2fx (buffered threads %.2fx) over %d alternated rounds\n",
           ratio[COLD_ROUNDS / 2], ratio_buf[COLD_ROUNDS / 2], COLD_ROUNDS);
    if (st_bench_read_loop(path, NULL, 0, &cat, e) < 0) goto out; // fills the cache
    if (st_bench_read_loop(path, NULL, 0, &cat, e) < 0) goto out;
    if (load_once(m, path, ST_LOAD_AUTO, &load, &alloc, &cached, e) < 0) goto out;
    printf("  warm: cat %6.2f GB/s | load %6.2f GB/s (%s) = %.2fx cat | region allocation %.2f s\n", cat, load,
           cached ? "page-cache path" : "io_uring path", load / cat, alloc);
    rc = 0;
out:
    st_llama_close(&m);
    return rc;
}
