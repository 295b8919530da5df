// How much memory the system can still give us, so that a configuration
// that cannot fit fails at start with a clear error instead of an OOM kill
// in the middle of loading.
#include "shm/region.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>

int st_shm_mem_available(uint64_t *bytes, struct st_error *e)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                fclose(f);
                *bytes = (uint64_t)kib * 1024;
                return 0;
            }
        }
        fclose(f);
    }
    // Old kernels have no MemAvailable: free plus buffers is a lower bound.
    struct sysinfo si;
    if (sysinfo(&si) < 0) return st_error_set(e, "sysinfo: %s", strerror(errno));
    *bytes = ((uint64_t)si.freeram + si.bufferram) * si.mem_unit;
    return 0;
}

int st_shm_mem_check(uint64_t bytes, const char *what, struct st_error *e)
{
    uint64_t avail;
    if (st_shm_mem_available(&avail, e) < 0) return -1;
    if (bytes > avail)
        return st_error_set(e, "%s needs %" PRIu64 " MiB but only %" PRIu64 " MiB are "
                               "available (MemAvailable); lower the slots or the context",
                            what, bytes >> 20, avail >> 20);
    return 0;
}
