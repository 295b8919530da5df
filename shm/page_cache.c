// How much of a file the page cache holds (see shm/uring_read.h).
#include "shm/uring_read.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

double st_page_cache_resident(const char *path)
{
    double frac = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) goto out;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) goto out;
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = ((size_t)st.st_size + (size_t)page - 1) / (size_t)page, res = 0;
    unsigned char *v = malloc(pages);
    if (v && mincore(m, (size_t)st.st_size, v) == 0) {
        for (size_t i = 0; i < pages; i++) res += v[i] & 1;
        frac = (double)res / (double)pages;
    }
    free(v);
    munmap(m, (size_t)st.st_size);
out:
    if (fd >= 0) close(fd);
    return frac;
}
