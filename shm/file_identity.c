// Model file identities recorded in the region header, so a worker can tell
// that the region was loaded from the files it was told to serve.
#include "shm/region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEAD_BYTES (64 * 1024)

uint64_t st_shm_fnv1a(uint64_t h, const void *data, uint64_t n)
{
    const uint8_t *p = data;
    for (uint64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

int st_file_identity_get(const char *path, struct st_file_identity *id, struct st_error *e)
{
    uint8_t *head = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_error_set(e, "open(%s): %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        st_error_set(e, "fstat(%s): %s", path, strerror(errno));
        goto fail;
    }
    head = malloc(HEAD_BYTES);
    if (!head) {
        st_error_set(e, "out of memory");
        goto fail;
    }
    ssize_t n = pread(fd, head, HEAD_BYTES, 0);
    if (n < 0) {
        st_error_set(e, "pread(%s, %d bytes): %s", path, HEAD_BYTES, strerror(errno));
        goto fail;
    }
    memset(id, 0, sizeof *id);
    id->path_hash = st_shm_fnv1a(ST_SHM_FNV_SEED, path, strlen(path));
    id->size = (uint64_t)st.st_size;
    id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    id->head_hash = st_shm_fnv1a(ST_SHM_FNV_SEED, head, (uint64_t)n);
    free(head);
    close(fd);
    return 0;
fail:
    free(head);
    close(fd);
    return -1;
}
