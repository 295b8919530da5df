// io_uring reader (see shm/uring_read.h).
#include "shm/uring_read.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm/uring_plan.h"

#define A ST_URING_DIRECT_ALIGN
#define ASYNC_MIN_BYTES (64 * 1024)

struct reader {
    const char *path;
    int fd;  // buffered
    int dfd; // O_DIRECT, -1 when unavailable or given up
    struct io_uring ring;
    struct st_uring_piece *pieces; // [n_pieces]
    uint64_t n_pieces;
    uint64_t done_bytes, total_bytes;
    struct st_uring_stats st;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// A cached part is cheaper to copy out of the page cache than to read from
// the device again, so AUTO reads it buffered: pieces with at least half of
// their pages resident become buffered.  Each piece is asked about on its
// own: the whole file, once per call, cost more than the batch's reads.
static void demote_cached(struct reader *r)
{
    for (uint64_t i = 0; i < r->n_pieces; i++) {
        struct st_uring_piece *p = &r->pieces[i];
        if (p->direct && st_page_cache_fraction(r->fd, p->offset, p->length) >= 0.5) p->direct = false;
    }
}

static bool aligned(const struct st_uring_piece *p)
{
    return p->offset % A == 0 && p->length % A == 0 && (uintptr_t)p->dst % A == 0;
}

static void prep(struct reader *r, uint64_t idx)
{
    struct st_uring_piece *p = &r->pieces[idx];
    if (p->direct && r->dfd < 0) p->direct = false; // O_DIRECT was given up
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    // At most queue_depth reads are pending and the ring has that many
    // entries, so a slot is always free.
    ST_ASSERT(sqe != NULL);
    io_uring_prep_read(sqe, p->direct ? r->dfd : r->fd, p->dst, (unsigned)p->length, p->offset);
    io_uring_sqe_set_data64(sqe, idx);
    // A buffered read of cached pages is a memcpy that io_uring would do
    // inline, in this thread, one after the other; IOSQE_ASYNC hands large
    // ones to io-wq workers so the copies run on every core.  (Uncached
    // buffered reads end up in io-wq anyway.)
    if (!p->direct && p->length >= ASYNC_MIN_BYTES) io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
    r->st.n_reads++;
}

// One completion.  Returns 1 when the piece is finished, 0 when it was
// resubmitted, -1 on error.
static int complete(struct reader *r, uint64_t idx, int res, const struct st_uring_opts *o,
                    struct st_error *e)
{
    struct st_uring_piece *p = &r->pieces[idx];
    if (res == -EAGAIN || res == -EINTR) {
        prep(r, idx);
        return 0;
    }
    if (res == -EINVAL && p->direct) {
        // The filesystem refused this O_DIRECT read: use the page cache from here on.
        p->direct = false;
        if (r->dfd >= 0) close(r->dfd); // reads in flight hold their own reference
        r->dfd = -1;
        prep(r, idx);
        return 0;
    }
    if (res < 0)
        return st_error_set(e, "read(%s, offset %" PRIu64 ", %" PRIu64 " bytes%s): %s", r->path,
                            p->offset, p->length, p->direct ? ", O_DIRECT" : "",
                            strerror(-res));
    if (res == 0)
        return st_error_set(e, "read(%s, offset %" PRIu64 ", %" PRIu64 " bytes): unexpected "
                               "end of file (was it truncated?)", r->path, p->offset, p->length);
    uint64_t got = (uint64_t)res;
    if (p->direct) r->st.direct_bytes += got;
    r->done_bytes += got;
    if (o && o->progress) o->progress(o->progress_ctx, r->done_bytes, r->total_bytes);
    if (got >= p->length) return 1;
    r->st.short_reads++;
    p->offset += got;
    p->dst += got;
    p->length -= got;
    if (p->direct && !aligned(p)) p->direct = false; // the rest through the page cache
    prep(r, idx);
    return 0;
}

static int run(struct reader *r, uint32_t qd, const struct st_uring_opts *o, struct st_error *e)
{
    uint64_t next = 0, in_flight = 0, finished = 0;
    int err = 0;
    while (finished < r->n_pieces && !(err && in_flight == 0)) {
        while (!err && in_flight < qd && next < r->n_pieces) {
            prep(r, next++);
            in_flight++;
        }
        int ret = io_uring_submit_and_wait(&r->ring, 1);
        if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
            if (!err) st_error_set(e, "io_uring_submit_and_wait(%s): %s", r->path, strerror(-ret));
            // Reap what was submitted before the caller's memory goes away.
            struct io_uring_cqe *cqe;
            while (in_flight > 0 && io_uring_wait_cqe(&r->ring, &cqe) == 0) {
                io_uring_cqe_seen(&r->ring, cqe);
                in_flight--;
            }
            return -1;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&r->ring, head, cqe) {
            seen++;
            if (err) { // draining after an error: stop continuing reads
                in_flight--;
                continue;
            }
            int done = complete(r, cqe->user_data, cqe->res, o, e);
            if (done < 0) {
                err = 1;
                in_flight--;
            } else if (done > 0) {
                in_flight--;
                finished++;
            }
        }
        io_uring_cq_advance(&r->ring, seen);
    }
    return err ? -1 : 0;
}

int st_uring_read(const char *path, const struct st_read_range *ranges, uint64_t n_ranges,
                  const struct st_uring_opts *opts, struct st_uring_stats *stats,
                  struct st_error *e)
{
    struct reader r = {.path = path, .fd = -1, .dfd = -1};
    bool ring_ok = false;
    enum st_uring_mode mode = opts ? opts->mode : ST_URING_AUTO;
    uint32_t qd = opts && opts->queue_depth ? opts->queue_depth : ST_URING_DEFAULT_QUEUE_DEPTH;
    uint64_t io_bytes = opts && opts->io_bytes ? opts->io_bytes : ST_URING_DEFAULT_IO_BYTES;
    if (qd > 4096) qd = 4096;
    if (io_bytes > (UINT64_C(1) << 30)) io_bytes = UINT64_C(1) << 30; // fits a read's unsigned
    if (io_bytes < A) io_bytes = A;

    r.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r.fd < 0) {
        st_error_set(e, "open(%s): %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(r.fd, &st) < 0) {
        st_error_set(e, "fstat(%s): %s", path, strerror(errno));
        goto fail;
    }
    uint64_t file_bytes = (uint64_t)st.st_size;
    for (uint64_t i = 0; i < n_ranges; i++) {
        const struct st_read_range *g = &ranges[i];
        if (g->offset > file_bytes || g->length > file_bytes - g->offset) {
            st_error_set(e, "range %" PRIu64 " [%" PRIu64 ", +%" PRIu64 ") passes the end of "
                            "%s (%" PRIu64 " bytes)", i, g->offset, g->length, path, file_bytes);
            goto fail;
        }
        r.total_bytes += g->length;
    }
    if (mode != ST_URING_BUFFERED) {
        r.dfd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC); // may fail (tmpfs, some FUSE)
        r.st.direct_available = r.dfd >= 0;
    }
    if (st_uring_plan(ranges, n_ranges, io_bytes, r.dfd >= 0, &r.pieces, &r.n_pieces, e) < 0)
        goto fail;
    if (mode == ST_URING_AUTO && r.dfd >= 0) demote_cached(&r);

    int ret = io_uring_queue_init(qd, &r.ring, 0);
    if (ret < 0) {
        st_error_set(e, "io_uring_queue_init(%u entries): %s", qd, strerror(-ret));
        goto fail;
    }
    ring_ok = true;
    double t0 = now_s();
    if (run(&r, qd, opts, e) < 0) goto fail;
    r.st.seconds = now_s() - t0;
    r.st.bytes = r.done_bytes;
    r.st.gbps = r.st.seconds > 0 ? (double)r.st.bytes / r.st.seconds * 1e-9 : 0;
    if (stats) *stats = r.st;
    io_uring_queue_exit(&r.ring);
    free(r.pieces);
    if (r.dfd >= 0) close(r.dfd);
    close(r.fd);
    return 0;
fail:
    if (ring_ok) io_uring_queue_exit(&r.ring);
    free(r.pieces);
    if (r.dfd >= 0) close(r.dfd);
    if (r.fd >= 0) close(r.fd);
    return st_error_wrap(e, "st_uring_read(%s, %" PRIu64 " ranges)", path, n_ranges);
}
