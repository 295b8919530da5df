#include "cli/cpu_ticks.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// user nice system idle iowait irq softirq steal; the guest fields after
// them are already counted in user and nice.
#define FIELDS 8
#define STEAL 7

int st_cpu_ticks_parse(const char *stat, struct st_cpu_ticks *t)
{
    *t = (struct st_cpu_ticks){0};
    if (strncmp(stat, "cpu ", 4)) return -1;
    const char *s = stat + 4;
    for (int i = 0; i < FIELDS; i++) {
        while (*s == ' ') s++;
        if (!isdigit((unsigned char)*s)) return -1;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (*end != ' ' && *end != '\n' && *end != '\0') return -1;
        t->total += v;
        if (i == STEAL) t->steal = v;
        s = end;
    }
    t->ok = true;
    return 0;
}

void st_cpu_ticks_now(struct st_cpu_ticks *t)
{
    *t = (struct st_cpu_ticks){0};
    char line[512];
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    if (fgets(line, sizeof line, f)) st_cpu_ticks_parse(line, t);
    fclose(f);
}

double st_cpu_steal_share(const struct st_cpu_ticks *a, const struct st_cpu_ticks *b)
{
    if (!a->ok || !b->ok || b->total <= a->total || b->steal < a->steal) return NAN;
    return (double)(b->steal - a->steal) / (double)(b->total - a->total);
}
