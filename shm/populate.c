// Parallel MADV_POPULATE_WRITE (see shm/populate.h).
#include "shm/populate.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // linux/mman.h, Linux 5.14
#endif

#define MAX_THREADS 64

struct run {
    uint8_t *base;
    uint64_t len;
    int err; // errno of the failure, 0
};

static void *populate_run(void *arg)
{
    struct run *r = arg;
    int rc;
    do rc = madvise(r->base, r->len, MADV_POPULATE_WRITE);
    while (rc < 0 && errno == EINTR);
    r->err = rc < 0 ? errno : 0;
    return NULL;
}

static int cpus_allowed(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0) return 1;
    int n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

int st_shm_populate(void *base, uint64_t len, uint64_t grain)
{
    uint64_t grains = len / grain;
    int n = cpus_allowed();
    if ((uint64_t)n > grains) n = grains ? (int)grains : 1;
    struct run runs[MAX_THREADS];
    pthread_t threads[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        uint64_t share = grains / (uint64_t)n + ((uint64_t)i < grains % (uint64_t)n);
        runs[i] = (struct run){(uint8_t *)base + at, i == n - 1 ? len - at : share * grain, 0};
        at += share * grain;
        // The first run is this thread's own; one that cannot start runs here too.
        if (i > 0 && pthread_create(&threads[i], NULL, populate_run, &runs[i]) == 0) started[i] = true;
    }
    populate_run(&runs[0]);
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(threads[i], NULL);
        else populate_run(&runs[i]);
    }
    for (int i = 0; i < n; i++)
        if (runs[i].err) {
            errno = runs[i].err;
            return -1;
        }
    return 0;
}
