// Helpers shared by the test binaries: locating ../shared and reading the
// golden manifest.
#ifndef ST_TESTS_SUPPORT_H
#define ST_TESTS_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

// Path of a file under $ST_SHARED (default ../shared) into buf.
const char *st_test_shared(const char *rel, char *buf, size_t cap);

struct st_golden_row {
    char model[256];       // path relative to shared/
    char prompt[32];
    uint32_t n_vocab;
    int32_t prompt_ids[1024];
    uint32_t n_prompt;
    char logits_file[256];  // relative to shared/golden
    int32_t greedy[64];
    uint32_t n_greedy;
};

// Reads golden/manifest.tsv; returns the number of rows (malloc'd array) or -1.
int st_golden_load(struct st_golden_row **rows);
// Reads the float32 logits file of a row: n_prompt x n_vocab floats (malloc'd).
float *st_golden_logits(const struct st_golden_row *r);



// Checks our logits of a golden row against llama.cpp's within the bounds of
// shared/README.md.  Returns 0 if within bounds; *worst gets the largest
// |difference| / std over all positions.  On failure msg says where.
int st_golden_check(const struct st_golden_row *r, const float *golden, const float *ours, double *worst,
                    char *msg, size_t cap);
// st_golden_check, then one line naming the row and its worst difference
// (and `against`, if not NULL, the side compared with).  Returns its result.
int st_golden_report(const struct st_golden_row *r, const float *golden, const float *ours, const char *against,
                     char *msg, size_t cap);
// A private temporary directory for one test binary: the group setup and
// teardown of cmocka create and remove it; st_tmp names a file in it (the
// last 8 results stay valid).
int st_tmpdir_setup(void **state);
int st_tmpdir_teardown(void **state);
const char *st_tmp(const char *name);

// Runs the subternary binary of this build tree with args (NULL-terminated,
// without argv[0]); returns its exit code, its stdout and stderr in out.
int st_run_cli(char *out, size_t cap, const char *const *args);

#endif
