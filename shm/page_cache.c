// What of a file the page cache holds (see shm/uring_read.h).
#include "shm/uring_read.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

unsigned char *st_page_cache_pages(int fd, uint64_t bytes, uint64_t *n_pages)
{
    if (bytes == 0) return NULL;
    void *map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return NULL;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    *n_pages = (bytes + page - 1) / page;
    unsigned char *vec = malloc(*n_pages);
    if (vec && mincore(map, bytes, vec) != 0) {
        free(vec);
        vec = NULL;
    }
    munmap(map, bytes);
    return vec;
}

double st_page_cache_resident(const char *path)
{
    double frac = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) goto out;
    uint64_t n = 0, res = 0;
    unsigned char *vec = st_page_cache_pages(fd, (uint64_t)st.st_size, &n);
    if (vec) {
        for (uint64_t i = 0; i < n; i++) res += vec[i] & 1;
        frac = (double)res / (double)n;
    }
    free(vec);
out:
    if (fd >= 0) close(fd);
    return frac;
}
