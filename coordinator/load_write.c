// Writing the weights section (coordinator/load_internal.h).
//
// A region in small pages is written with pwrite on its memfd.  On the
// development VM the first access from a process to each 4 KiB page of a
// mapping costs about 7 us even after a populating mmap: copying a 1 MiB
// buffer over 3.2 GB of a memfd, 2 threads, ran 0.45-1.3 GB/s into its
// mapping and 4.4-8.7 GB/s with pwrite, the kernel copying through its own
// mapping of memory (warm l3b loads: 1.0-1.2 -> 3.9-9.0 GB/s).  In huge
// pages the loader writes through the mapping, with streaming stores and no
// extra copy.
#include "coordinator/load_internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"

static int pwrite_all(const struct st_load_dest *d, uint64_t off, const uint8_t *src, uint64_t len,
                      struct st_error *e)
{
    while (len) {
        ssize_t n = pwrite(d->fd, src, len, (off_t)(d->fd_off + off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return st_error_set(e, "writing %llu bytes to the shared region at %llu: %s", (unsigned long long)len,
                                (unsigned long long)(d->fd_off + off), n < 0 ? strerror(errno) : "no progress");
        src += n;
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

int st_load_put_bytes(const struct st_load_dest *d, uint64_t off, const void *src, uint64_t len, struct st_error *e)
{
    if (d->fd < 0) {
        memcpy(d->w + off, src, len);
        return 0;
    }
    return pwrite_all(d, off, src, len, e);
}

int st_load_put_rows(const struct st_load_dest *d, const struct st_layout_mat *m, const uint8_t *src, int64_t r0,
                     int64_t r1, uint8_t *scratch, uint64_t scratch_bytes, struct st_error *e)
{
    if (d->fd < 0)
        return st_kern_repack(m->gguf_type, m->rows, m->cols, m->run_type, src, r0, r1, d->w + m->offset, m->bytes, e);
    int64_t align = st_kern_run_row_align(m->run_type);
    size_t off, unit; // bytes of a unit of rows in the run format
    st_kern_repack_span(m->run_type, m->cols, 0, align, &off, &unit);
    int64_t step = (int64_t)(scratch_bytes / unit) * align;
    if (step < align)
        return st_error_set(e, "load: a %llu-byte buffer cannot hold %lld rows of %llu bytes",
                            (unsigned long long)scratch_bytes, (long long)align, (unsigned long long)unit);
    size_t rb = st_type_row_bytes(m->gguf_type, m->cols);
    for (int64_t a = r0; a < r1; a += step) {
        int64_t b = a + step < r1 ? a + step : r1;
        size_t len;
        st_kern_repack_span(m->run_type, m->cols, a, b, &off, &len);
        if (st_kern_repack_part(m->gguf_type, m->rows, m->cols, m->run_type, src + (size_t)(a - r0) * rb, a, b,
                                scratch, scratch_bytes, e) ||
            pwrite_all(d, m->offset + off, scratch, len, e))
            return -1;
    }
    return 0;
}
