#include "cli/args.h"

#include <errno.h>
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
