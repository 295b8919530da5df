// PAGEMAP_SCAN on /proc/self/pagemap (see shm/map_huge.h).  The structures
// are the kernel's ABI, declared here because older headers lack them.
#include "shm/map_huge.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct page_region {
    uint64_t start, end, categories;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PAGE_IS_HUGE (1u << 6)
#define REGIONS 256

int st_map_huge_chunks(const void *addr, uint64_t len, uint64_t chunk, bool *huge)
{
    uint64_t n = (len + chunk - 1) / chunk, base = (uintptr_t)addr, end = base + len;
    memset(huge, 0, n * sizeof *huge);
    uint64_t *covered = calloc(n ? n : 1, sizeof *covered); // huge bytes in each chunk
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    int rc = covered && fd >= 0 ? 0 : -1;
    struct page_region r[REGIONS];
    for (uint64_t at = base; !rc && at < end;) {
        struct pm_scan_arg a = {.size = sizeof a, .start = at, .end = end, .vec = (uintptr_t)r, .vec_len = REGIONS,
                                .category_mask = PAGE_IS_HUGE, .return_mask = PAGE_IS_HUGE};
        int got = ioctl(fd, PAGEMAP_SCAN, &a);
        if (got < 0) {
            rc = -1;
            break;
        }
        for (int i = 0; i < got; i++)
            for (uint64_t s = r[i].start; s < r[i].end;) { // add the region to the chunks it overlaps
                uint64_t c = (s - base) / chunk, ce = base + (c + 1) * chunk, e = ce < r[i].end ? ce : r[i].end;
                covered[c] += e - s;
                s = e;
            }
        if (got < REGIONS || a.walk_end <= at) break; // the walk reached `end` (or made no progress)
        at = a.walk_end;
    }
    for (uint64_t c = 0; !rc && c < n; c++) huge[c] = covered[c] == (c + 1 < n ? chunk : len - c * chunk);
    if (fd >= 0) close(fd);
    free(covered);
    return rc;
}

int64_t st_map_huge_count(const void *addr, uint64_t len, uint64_t chunk)
{
    uint64_t n = (len + chunk - 1) / chunk;
    bool *huge = malloc(n ? n : 1);
    int64_t count = huge && !st_map_huge_chunks(addr, len, chunk, huge) ? 0 : -1;
    for (uint64_t i = 0; count >= 0 && i < n; i++) count += huge[i];
    free(huge);
    return count;
}
