// Model loading into a region: the io_uring path, the page-cache path and
// the probe (part of a file each way, then the rest either way) must write
// the same bytes, for every pico type pair (repacked run formats, matrices
// read in place, norms, the directory), whether they write the region
// through its mapping or, as for small pages, with pwrite on its fd; a file
// cut short is a clear error on every path.  The pico files are too small for the kernel to map them huge,
// so the page-cache path reads them with pread; map_all covers its other way,
// out of the mapping.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordinator/load.h"
#include "kernels/kernels.h"
#include "tests/support/test_support.h"

// Whether any of the models' layer-0 matrices changes layout in its run
// format (the f16 and f32 files only copy).
static bool repacks(struct st_llama_model *const *models, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        const struct st_llama_layer *L = &models[i]->layers[0];
        const struct st_gguf_tensor *t[7] = {L->wq, L->wk, L->wv, L->wo, L->ffn_gate, L->ffn_up, L->ffn_down};
        for (int k = 0; k < 7; k++) {
            uint32_t run;
            if (st_kern_runfmt_size(t[k]->type, t[k]->ne[1], t[k]->ne[0], &run) && run != t[k]->type) return true;
        }
    }
    return false;
}

// Loads target (+ draft) with options o into a fresh region; returns a copy
// of the weights section (*bytes long).
static uint8_t *load_copy(const char *target, const char *draft, const struct st_load_opts *o, uint64_t *bytes,
                          struct st_error *e)
{
    struct st_llama_model *models[2] = {NULL, NULL};
    const char *paths[2] = {target, draft};
    uint32_t n = draft ? 2 : 1;
    struct st_load_plan *plan = NULL;
    struct st_region *r = NULL;
    uint8_t *copy = NULL;
    for (uint32_t i = 0; i < n; i++)
        if (st_llama_open(paths[i], &models[i], e)) goto out;
    uint64_t wbytes;
    if (st_load_plan_new(models, paths, n, &plan, &wbytes, e)) goto out;
    struct st_region_config rc = {.name = "test-load", .mem_node = -1, .huge = ST_REGION_HUGE_OFF};
    rc.section_bytes[ST_REGION_WEIGHTS] = wbytes;
    if (st_region_create(&rc, &r, e)) goto out;
    struct st_load_stats st;
    if (st_load_run_opts(plan, r, o, &st, e)) goto out;
    assert_int_equal(st.cached_files, o->mode == ST_LOAD_CACHED ? n : 0);
    if (o->mode == ST_LOAD_PROBE) { // every pico file is large enough to split at a 64 KiB probe
        assert_int_equal(st.probed_files, n);
        assert_int_equal(st.threads_won, o->pick == ST_LOAD_PICK_THREADS ? n : o->pick == ST_LOAD_PICK_URING ? 0 : st.threads_won);
        assert_true(st.probe_gbps[0] > 0 && st.probe_gbps[1] > 0);
    }
    assert_true(st.file_bytes > 0 && st.gbps > 0);
    if (o->map_all) assert_int_equal(st.mapped_bytes > 0, repacks(models, n)); // repacked out of the mapping
    if (o->mode != ST_LOAD_CACHED) assert_int_equal(st.mapped_bytes, 0);
    assert_int_equal(st.written_by_fd, o->write != ST_LOAD_WRITE_MAPPED); // the test regions are in small pages
    uint64_t sb;
    const uint8_t *w = st_region_section(r, ST_REGION_WEIGHTS, &sb);
    copy = malloc(wbytes);
    assert_non_null(copy);
    memcpy(copy, w, wbytes);
    *bytes = wbytes;
out:
    st_region_close(&r);
    st_load_plan_free(&plan);
    for (uint32_t i = 0; i < n; i++) st_llama_close(&models[i]);
    return copy;
}

static void check_pair(const char *target_rel, const char *draft_rel)
{
    char t[4096], d[4096];
    st_test_shared(target_rel, t, sizeof t);
    if (draft_rel) st_test_shared(draft_rel, d, sizeof d);
    struct st_error e = {{0}};
    uint64_t na = 0, nb = 0;
    struct st_load_opts ref = {.mode = ST_LOAD_IO_URING, .write = ST_LOAD_WRITE_MAPPED};
    uint8_t *a = load_copy(t, draft_rel ? d : NULL, &ref, &na, &e);
    if (!a) fail_msg("io_uring load of %s: %s", target_rel, e.msg);
    const struct st_load_opts others[] = {
        {.mode = ST_LOAD_IO_URING},
        {.mode = ST_LOAD_CACHED},
        {.mode = ST_LOAD_CACHED, .write = ST_LOAD_WRITE_MAPPED},
        {.mode = ST_LOAD_CACHED, .map_all = true},
        {.mode = ST_LOAD_CACHED, .map_all = true, .write = ST_LOAD_WRITE_MAPPED},
        {.mode = ST_LOAD_PROBE, .probe_bytes = 64 << 10, .pick = ST_LOAD_PICK_URING},
        {.mode = ST_LOAD_PROBE, .probe_bytes = 64 << 10, .pick = ST_LOAD_PICK_THREADS},
        {.mode = ST_LOAD_PROBE, .probe_bytes = 64 << 10, .pick = ST_LOAD_PICK_FASTER},
    };
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
        uint8_t *b = load_copy(t, draft_rel ? d : NULL, &others[k], &nb, &e);
        if (!b) fail_msg("load %zu of %s: %s", k, target_rel, e.msg);
        assert_int_equal(na, nb);
        for (uint64_t i = 0; i < na; i++)
            if (a[i] != b[i]) fail_msg("%s + %s: byte %llu differs between io_uring and load %zu", target_rel,
                                       draft_rel ? draft_rel : "-", (unsigned long long)i, k);
        free(b);
    }
    free(a);
}

static void test_paths_agree(void **state)
{
    (void)state;
    const char *targets[] = {"models/pico-target.q8_0.gguf", "models/pico-target.q4_0.gguf",
                             "models/pico-target.q4_k.gguf", "models/pico-target.f16.gguf"};
    const char *drafts[] = {"models/pico-draft.q4_0.gguf", "models/pico-draft.tq2_0.gguf",
                            "models/pico-draft.tq1_0.gguf", "models/pico-draft.f16.gguf"};
    for (int i = 0; i < 4; i++) check_pair(targets[i], drafts[i]);
    check_pair("models/stories260K.f32.gguf", NULL);
}

// A copy of a model cut short after its header: both paths name the file.
static void test_truncated(void **state)
{
    (void)state;
    char src[4096];
    st_test_shared("models/pico-target.q8_0.gguf", src, sizeof src);
    struct st_llama_model *m = NULL;
    struct st_error e = {{0}};
    assert_int_equal(st_llama_open(src, &m, &e), 0);
    const char *cut = st_tmp("cut.gguf");
    FILE *in = fopen(src, "rb"), *out = fopen(cut, "wb");
    assert_true(in && out);
    char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, got, out), got);
    fclose(in);
    fclose(out);
    const char *paths[1] = {cut};
    struct st_load_plan *plan = NULL;
    uint64_t wbytes;
    assert_int_equal(st_load_plan_new(&m, paths, 1, &plan, &wbytes, &e), 0);
    // The plan was made from the whole file; now the file loses its tail.
    assert_int_equal(truncate(cut, (off_t)(m->gguf->data_offset + 4096)), 0);
    const struct st_load_opts opts[4] = {
        {.mode = ST_LOAD_IO_URING}, {.mode = ST_LOAD_CACHED}, {.mode = ST_LOAD_CACHED, .map_all = true},
        {.mode = ST_LOAD_PROBE}};
    for (int k = 0; k < 4; k++) {
        struct st_region_config rc = {.name = "test-load", .mem_node = -1, .huge = ST_REGION_HUGE_OFF};
        rc.section_bytes[ST_REGION_WEIGHTS] = wbytes;
        struct st_region *r = NULL;
        assert_int_equal(st_region_create(&rc, &r, &e), 0);
        struct st_load_stats st;
        memset(&e, 0, sizeof e);
        assert_int_equal(st_load_run_opts(plan, r, &opts[k], &st, &e), -1);
        if (!strstr(e.msg, "cut.gguf") || !strstr(e.msg, "end of"))
            fail_msg("mode %d: unclear error: %s", k, e.msg);
        st_region_close(&r);
    }
    st_load_plan_free(&plan);
    st_llama_close(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_agree),
        cmocka_unit_test(test_truncated),
    };
    return cmocka_run_group_tests(tests, st_tmpdir_setup, st_tmpdir_teardown);
}
