#include "tests/support/test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *st_test_shared(const char *rel, char *buf, size_t cap)
{
    const char *root = getenv("ST_SHARED");
    snprintf(buf, cap, "%s/%s", root && *root ? root : "../shared", rel);
    return buf;
}

static uint32_t parse_ids(char *s, int32_t *out, uint32_t cap)
{
    uint32_t n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ",")) out[n++] = atoi(tok);
    return n;
}

int st_golden_load(struct st_golden_row **rows)
{
    char path[1024];
    FILE *f = fopen(st_test_shared("golden/manifest.tsv", path, sizeof path), "r");
    if (!f) return -1;
    static char line[65536];
    int n = 0, cap = 0;
    struct st_golden_row *v = NULL;
    if (!fgets(line, sizeof line, f)) { // header
        fclose(f);
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        char *col[6];
        char *save, *p = line;
        line[strcspn(line, "\n")] = 0;
        int k = 0;
        for (char *t = strtok_r(p, "\t", &save); t && k < 6; t = strtok_r(NULL, "\t", &save)) col[k++] = t;
        if (k != 6) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            v = realloc(v, cap * sizeof *v);
        }
        struct st_golden_row *r = &v[n++];
        memset(r, 0, sizeof *r);
        snprintf(r->model, sizeof r->model, "%s", col[0]);
        snprintf(r->prompt, sizeof r->prompt, "%s", col[1]);
        r->n_vocab = (uint32_t)atoi(col[2]);
        r->n_prompt = parse_ids(col[3], r->prompt_ids, 1024);
        snprintf(r->logits_file, sizeof r->logits_file, "%s", col[4]);
        r->n_greedy = parse_ids(col[5], r->greedy, 64);
    }
    fclose(f);
    *rows = v;
    return n;
}

float *st_golden_logits(const struct st_golden_row *r)
{
    char rel[512], path[1024];
    snprintf(rel, sizeof rel, "golden/%s", r->logits_file);
    FILE *f = fopen(st_test_shared(rel, path, sizeof path), "rb");
    if (!f) return NULL;
    size_t n = (size_t)r->n_prompt * r->n_vocab;
    float *v = malloc(n * sizeof *v);
    if (v && fread(v, sizeof *v, n, f) != n) {
        free(v);
        v = NULL;
    }
    fclose(f);
    return v;
}

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[512];

int st_tmpdir_setup(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/st_test.XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

int st_tmpdir_teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

const char *st_tmp(const char *name)
{
    static char buf[8][768];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

int st_run_cli(char *out, size_t cap, const char *const *args)
{
    char exe[1024], bin[1100];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) return -1;
    exe[n] = 0;
    *strrchr(exe, '/') = 0;
    snprintf(bin, sizeof bin, "%s/../subternary", exe); // build/tests/x -> build/subternary
    const char *log = st_tmp("cli.log");
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (!f || dup2(1, 2) < 0) _exit(127);
        const char *argv[64] = {bin};
        int k = 1;
        for (; args[k - 1] && k < 63; k++) argv[k] = args[k - 1];
        argv[k] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    FILE *f = fopen(log, "r");
    size_t got = f ? fread(out, 1, cap - 1, f) : 0;
    out[got] = 0;
    if (f) fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int st_golden_check(const struct st_golden_row *r, const float *golden, const float *ours, double *worst,
                    char *msg, size_t cap)
{
    // F32/F16 weights: tight bound; quantised weights: looser (README table).
    int plain = strstr(r->model, ".f16.") || strstr(r->model, ".f32.");
    double bound = plain ? 0.06 : 0.25, margin_bound = plain ? 0.05 : 0.25;
    *worst = 0;
    for (uint32_t p = 0; p < r->n_prompt; p++) {
        const float *g = golden + (size_t)p * r->n_vocab, *o = ours + (size_t)p * r->n_vocab;
        double mean = 0, var = 0, maxd = 0;
        uint32_t top = 0, second = 1, ours_top = 0;
        for (uint32_t i = 0; i < r->n_vocab; i++) mean += g[i];
        mean /= r->n_vocab;
        for (uint32_t i = 0; i < r->n_vocab; i++) {
            var += (g[i] - mean) * (g[i] - mean);
            double d = fabs((double)g[i] - o[i]);
            if (!(d <= maxd)) maxd = d; // NaN counts as worst
            if (o[i] > o[ours_top]) ours_top = i;
        }
        if (g[second] > g[top]) top = 1, second = 0;
        for (uint32_t i = 2; i < r->n_vocab; i++) {
            if (g[i] > g[top]) second = top, top = i;
            else if (g[i] > g[second]) second = i;
        }
        double std = sqrt(var / r->n_vocab);
        double ratio = maxd / std;
        if (!(ratio <= *worst)) *worst = ratio;
        if (!(ratio <= bound)) {
            snprintf(msg, cap, "%s %s position %u: max |diff| %.4f = %.4f std > %.2f std", r->model, r->prompt, p,
                     maxd, ratio, bound);
            return -1;
        }
        if (g[top] - g[second] > margin_bound * std && ours_top != top) {
            snprintf(msg, cap, "%s %s position %u: top-1 %u differs from llama.cpp's %u (margin %.4f std)", r->model,
                     r->prompt, p, ours_top, top, (g[top] - g[second]) / std);
            return -1;
        }
    }
    return 0;
}

int st_golden_report(const struct st_golden_row *r, const float *golden, const float *ours, const char *against,
                     char *msg, size_t cap)
{
    double worst;
    int rc = st_golden_check(r, golden, ours, &worst, msg, cap);
    printf("  %-34s %s  max |diff| / std = %.4f%s%s%s\n", r->model, r->prompt, worst, against ? " (against " : "",
           against ? against : "", against ? ")" : "");
    return rc;
}
