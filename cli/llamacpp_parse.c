#include "cli/llamacpp_parse.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The number after "key": inside obj[0..len).  llama-bench's objects are flat
// (arrays but no nested objects), so a search within the braces is enough.
static bool json_number(const char *obj, size_t len, const char *key, double *v)
{
    char k[64];
    int kl = snprintf(k, sizeof k, "\"%s\"", key);
    const char *p = memmem(obj, len, k, (size_t)kl), *end = obj + len;
    if (!p) return false;
    p += kl;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p >= end || *p != ':') return false;
    char *stop;
    *v = strtod(p + 1, &stop);
    return stop != p + 1 && stop <= end;
}

int st_llamacpp_parse_bench(const char *json, double *tps, struct st_error *e)
{
    for (const char *p = strchr(json, '{'); p; p = strchr(p + 1, '{')) {
        const char *q = strchr(p, '}');
        if (!q) break;
        size_t len = (size_t)(q - p);
        double n_prompt, n_gen, ts;
        if (json_number(p, len, "n_prompt", &n_prompt) && json_number(p, len, "n_gen", &n_gen) &&
            json_number(p, len, "avg_ts", &ts) && n_prompt == 0 && n_gen > 0 && ts > 0) {
            *tps = ts;
            return 0;
        }
        p = q;
    }
    return st_error_set(e, "llama-bench output: no test with \"n_prompt\": 0, \"n_gen\" > 0 and \"avg_ts\"");
}

int st_llamacpp_parse_spec(const char *text, struct st_llamacpp_spec_figures *f, struct st_error *e)
{
    bool decoded = false;
    f->accept = -1;
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *s = line + strspn(line, " \t");
        struct st_llamacpp_spec_figures d;
        double pct;
        if (sscanf(s, "decoded %u tokens in %lf seconds, speed: %lf t/s", &d.tokens, &d.seconds, &d.tps) == 3 &&
            d.tps > 0) {
            f->tokens = d.tokens, f->seconds = d.seconds, f->tps = d.tps;
            decoded = true;
        } else if (sscanf(s, "accept = %lf%%", &pct) == 1) {
            f->accept = pct / 100;
        }
    }
    if (!decoded) return st_error_set(e, "llama-speculative output: no line \"decoded N tokens in S seconds, speed: X t/s\"");
    return 0;
}
