#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int st_args_parse_ids(const char *s, int32_t **ids, size_t *n, struct st_error *e)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return st_error_set(e, "out of memory");
    size_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return st_error_set(e, "'%s' is not a comma-separated list of token ids", s);
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(v);
        return st_error_set(e, "no token ids given");
    }
    *ids = v;
    *n = k;
    return 0;
}

int st_args_uint(const char *cmd, const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = isdigit((unsigned char)v[0]) ? strtoull(v, &end, 10) : 0;
    if (!isdigit((unsigned char)v[0]) || errno || *end || x < lo || x > hi) {
        fprintf(stderr, "subternary%s%s: %s: '%s' is not an integer in [%llu, %llu]\n", cmd ? " " : "", cmd ? cmd : "", opt, v,
                (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

int st_args_u32(const char *cmd, const char *opt, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t x;
    if (st_args_uint(cmd, opt, v, lo, hi, &x)) return -1;
    *out = (uint32_t)x;
    return 0;
}

int st_args_int(const char *cmd, const char *opt, const char *v, int lo, int hi, int *out)
{
    uint64_t x;
    if (st_args_uint(cmd, opt, v, (uint64_t)lo, (uint64_t)hi, &x)) return -1;
    *out = (int)x;
    return 0;
}

int st_args_real(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || !(x >= lo && x <= hi)) {
        fprintf(stderr, "subternary%s%s: %s: '%s' is not a number in [%g, %g]\n", cmd ? " " : "", cmd ? cmd : "", opt, v,
                lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int st_args_f32(const char *cmd, const char *opt, const char *v, double lo, double hi, float *out)
{
    double x;
    if (st_args_real(cmd, opt, v, lo, hi, &x)) return -1;
    *out = (float)x;
    return 0;
}
