// The machine's CPU time by kind, from /proc/stat, so a benchmark can say
// how much of a measured run the hypervisor gave to other guests (steal).
// On a shared VM the figures swing with it: on the development host, AR
// runs with 5-6% steal decoded 5.7-6.0 tokens/s and runs with 2% 6.6-6.8,
// as both ranks of a worker set wait at each barrier for the one held back.
#ifndef ST_CLI_CPU_TICKS_H
#define ST_CLI_CPU_TICKS_H

#include <stdbool.h>
#include <stdint.h>

struct st_cpu_ticks {
    uint64_t steal, total; // clock ticks over all CPUs since boot
    bool ok;               // false: /proc/stat was unreadable or had no steal field
};

// The aggregate "cpu " line of /proc/stat's text.  Returns 0, or -1 when it
// is missing or has fewer than the 8 fields up to steal (Linux < 2.6.11).
int st_cpu_ticks_parse(const char *stat, struct st_cpu_ticks *t);
// The current figures; t->ok false when they cannot be read.
void st_cpu_ticks_now(struct st_cpu_ticks *t);
// The share of all CPU time between a and b that was stolen, 0..1; NAN when
// either is unknown or no time passed.
double st_cpu_steal_share(const struct st_cpu_ticks *a, const struct st_cpu_ticks *b);

#endif
