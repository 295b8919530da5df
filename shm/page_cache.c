// What of a file the page cache holds (see shm/uring_read.h).
//
// cachestat(2) (Linux 6.5) counts a range's cached pages in the kernel:
// 0.2 ms for the 3.2 GB l3b file.  mincore over a mapping looks every page
// up one by one: 40-63 ms for the same file, and the io_uring loader asked
// about the whole file once per 64 MiB batch (about 50 times per load).
// So a range is asked about, and mincore is only the fallback.
#include "shm/uring_read.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_cachestat
#define SYS_cachestat 451 // the same number on every architecture
#endif

struct cachestat_range {
    uint64_t off, len;
};
struct cachestat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

static double by_mincore(int fd, uint64_t off, uint64_t len)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = off / page * page, span = off + len - start;
    void *map = mmap(NULL, span, PROT_READ, MAP_SHARED, fd, (off_t)start);
    if (map == MAP_FAILED) return -1;
    uint64_t n = (span + page - 1) / page, res = 0;
    unsigned char *vec = malloc(n);
    double frac = -1;
    if (vec && mincore(map, span, vec) == 0) {
        for (uint64_t i = 0; i < n; i++) res += vec[i] & 1;
        frac = (double)res / (double)n;
    }
    free(vec);
    munmap(map, span);
    return frac;
}

double st_page_cache_fraction(int fd, uint64_t off, uint64_t len)
{
    if (len == 0) return -1;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    struct cachestat_range r = {off / page * page, off + len - off / page * page};
    struct cachestat cs;
    if (syscall(SYS_cachestat, fd, &r, &cs, 0) == 0) {
        uint64_t n = (r.len + page - 1) / page;
        return cs.nr_cache >= n ? 1.0 : (double)cs.nr_cache / (double)n;
    }
    return by_mincore(fd, off, len); // ENOSYS (older kernels) or refused
}

double st_page_cache_resident(const char *path)
{
    double frac = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) frac = st_page_cache_fraction(fd, 0, (uint64_t)st.st_size);
    if (fd >= 0) close(fd);
    return frac;
}
