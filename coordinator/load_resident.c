// Loading through the page cache (coordinator/load_internal.h): from a file
// it already holds, or from a cold one when the probe found this faster.
//
// Reading a cached file is a memcpy out of the page cache.  io_uring into a
// large staging buffer makes that two trips through memory (cache to
// staging, staging to region) one after the other; here each CPU copies a
// piece small enough to stay in its L2 and repacks it into the region at
// once, so the weights cross memory once, on every core.  A cold file is
// read so with pread, whose readahead and drop-behind suit it.
//
// From a cached file the CPUs repack straight out of a shared mapping of it,
// without the copy, where the kernel maps it with huge (PMD) entries: the
// page cache holds large folios when it was filled with memory to spare
// (`cat` into a fresh cache: 99% of l3b mapped huge).  Out of parts mapped
// by 4 KiB pages the repack ran about 8x slower on the development VM,
// presumably a TLB miss per page (a cache refilled after a cold io_uring
// load: 68% huge, the whole load 0.45-0.52x of `cat`): those pieces go
// through pread.  Warm l3b, loads alternated in one run: mapped 23.2-24.0
// GB/s (1.28-1.34x `cat`), pread 16.6-18.0 GB/s (0.90-1.01x).
//
// The mapping is populated before the repack: a 2 MiB part in one call,
// where the repack's first touches took a fault per folio (2,500-15,000 by
// how the cache was filled, 35 us each on the VM: 115-135 ms on one CPU).
#include "coordinator/load_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "shm/map_huge.h"
#include "shm/uring_read.h"

// Source bytes per repacked piece.  Cached: pread 15.2 GB/s at 1 MiB against
// 13.5 at 256 KiB and 14.7 at 2 MiB (l3b, the same run); out of the mapping
// 256 KiB was 8% slower.  Cold: 256 KiB, which fits L2 with room.
#define PIECE_BYTES (1u << 20)
#define COLD_PIECE_BYTES (256u << 10)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 // Linux 5.14; older C libraries lack the name
#endif
#define HUGE_BYTES (2u << 20)    // the unit of a huge mapping (x86-64 PMD)
#define COPY_BYTES (4u << 20)    // bytes per piece read straight into the region
#define MAX_THREADS 16

bool st_load_is_resident(const char *path) { return st_page_cache_resident(path) >= ST_LOAD_RESIDENT_FRACTION; }

// A piece: rows [r0, r1) of a matrix to repack, or bytes read in place.
struct piece {
    const struct job *jb; // NULL: a plain copy to dst
    uint64_t file_offset, length;
    int64_t r0, r1;
    uint64_t dst; // a copy's offset in the weights section
};

struct loader {
    const char *path;
    int fd;
    const uint8_t *map; // the whole file, for a cached one mapped partly huge; else NULL
    uint64_t map_len;
    bool *huge; // [map_len / HUGE_BYTES + 1]: whether that part of map is mapped huge; NULL: all used
    atomic_uint_fast64_t mapped_bytes;
    const struct st_load_dest *d;
    struct piece *pieces;
    uint64_t n_pieces, buf_bytes;
    atomic_uint_fast64_t next, done_bytes;
    atomic_int failed;
    bool drop_behind;
    _Atomic uint64_t dropped_to; // file offset below which the cache was dropped
    uint64_t drop_lag;
    struct st_load_progress *pr;
    pthread_mutex_t err_lock;
    struct st_error e;
};

static int add(struct loader *L, uint64_t *cap, struct piece pc)
{
    if (L->n_pieces == *cap) {
        uint64_t c = *cap ? *cap * 2 : 1024;
        struct piece *np = realloc(L->pieces, c * sizeof *np);
        if (!np) return -1;
        L->pieces = np;
        *cap = c;
    }
    L->pieces[L->n_pieces++] = pc;
    if (pc.jb && pc.length > L->buf_bytes) L->buf_bytes = pc.length;
    return 0;
}

static int add_copy(struct loader *L, uint64_t *cap, uint64_t off, uint64_t len, uint64_t dst)
{
    for (uint64_t at = 0; at < len; at += COPY_BYTES) {
        uint64_t n = len - at < COPY_BYTES ? len - at : COPY_BYTES;
        if (add(L, cap, (struct piece){NULL, off + at, n, 0, 0, dst + at})) return -1;
    }
    return 0;
}

// Row pieces of whole units of the run format (16 rows for q8_0x8).
static int add_rows(struct loader *L, uint64_t *cap, const struct job *jb)
{
    const struct st_layout_mat *m = jb->dst;
    uint64_t rb = st_type_row_bytes(m->gguf_type, m->cols);
    int64_t align = st_kern_run_row_align(m->run_type);
    int64_t step = (int64_t)((L->drop_behind ? COLD_PIECE_BYTES : PIECE_BYTES) / rb) / align * align;
    if (step < align) step = align;
    for (int64_t r0 = 0; r0 < m->rows; r0 += step) {
        int64_t r1 = r0 + step < m->rows ? r0 + step : m->rows;
        struct piece pc = {jb, jb->file_offset + (uint64_t)r0 * rb, (uint64_t)(r1 - r0) * rb, r0, r1, 0};
        if (add(L, cap, pc)) return -1;
    }
    return 0;
}

static void fail(struct loader *L, const struct st_error *e)
{
    pthread_mutex_lock(&L->err_lock);
    if (!atomic_exchange(&L->failed, 1)) L->e = *e;
    pthread_mutex_unlock(&L->err_lock);
}

// Drops the cache up to drop_lag before the piece just done, in DROP_UNIT
// steps.  Pieces go in file order and the other threads' pieces are within
// a piece or two of this one, so what is dropped was read (a page dropped
// early would only be read again).  Dropping each 256 KiB piece on its own
// gained nothing (a read loop: 0.73 GB/s against 0.76 without); 2 MiB
// steps, 3.5 GB/s.
#define DROP_UNIT (UINT64_C(2) << 20)

// Drops [dropped_to, to) unless another thread already moved dropped_to.
static void drop_until(struct loader *L, uint64_t to)
{
    uint64_t from = atomic_load(&L->dropped_to);
    if (to > from && atomic_compare_exchange_strong(&L->dropped_to, &from, to))
        posix_fadvise(L->fd, (off_t)from, (off_t)(to - from), POSIX_FADV_DONTNEED);
}

static void drop_behind(struct loader *L, uint64_t offset)
{
    if (offset >= L->drop_lag) drop_until(L, (offset - L->drop_lag) / DROP_UNIT * DROP_UNIT);
}

static int by_offset(const void *a, const void *b)
{
    uint64_t x = ((const struct piece *)a)->file_offset, y = ((const struct piece *)b)->file_offset;
    return x < y ? -1 : x > y;
}

// A SIGBUS while a thread repacks out of the mapping means the file lost
// pages under it (cut short during the load): that thread jumps back out of
// its piece and fails the load with a clear error.  Any other thread's
// SIGBUS gets the default action.  (Populating each piece's pages first
// would catch it too, at 8% of the warm load's speed.)
static _Thread_local sigjmp_buf *bus_jump;

static void on_sigbus(int sig)
{
    if (bus_jump) siglongjmp(*bus_jump, 1);
    signal(sig, SIG_DFL); // not ours: the access faults again, with the default action
}

// Repacks a piece's rows from src (its bytes, mapped or read) into the region;
// out: scratch for writing through the region's fd.
static int repack(const struct loader *L, const struct piece *pc, const uint8_t *src, uint8_t *out,
                  struct st_error *e)
{
    return st_load_put_rows(L->d, pc->jb->dst, src, pc->r0, pc->r1, out, ST_LOAD_PUT_SCRATCH, e);
}

static int repack_mapped(const struct loader *L, const struct piece *pc, uint8_t *out, struct st_error *e)
{
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1)) {
        bus_jump = NULL;
        return st_error_set(e, "read(%s, offset %llu): unexpected end of file (was it truncated while loading?)",
                            L->path, (unsigned long long)pc->file_offset);
    }
    bus_jump = &jb;
    int rc = repack(L, pc, L->map + pc->file_offset, out, e);
    bus_jump = NULL;
    return rc;
}

// Whether the piece can be repacked out of the mapping: all of it mapped huge
// (and not cut short since the file was mapped).
static bool mapped_huge(const struct loader *L, const struct piece *pc)
{
    if (!L->map || pc->file_offset + pc->length > L->map_len) return false;
    if (!L->huge) return true; // ST_LOAD_THROUGH_MAP
    for (uint64_t c = pc->file_offset / HUGE_BYTES; c <= (pc->file_offset + pc->length - 1) / HUGE_BYTES; c++)
        if (!L->huge[c]) return false;
    return true;
}

// Copies a piece in place: read straight into the region's mapping, or,
// writing through its fd, into buf first.
static int copy_piece(const struct loader *L, const struct piece *pc, uint8_t *buf, struct st_error *e)
{
    if (L->d->fd < 0) return st_load_pread(L->fd, L->path, L->d->w + pc->dst, pc->file_offset, pc->length, e);
    if (st_load_pread(L->fd, L->path, buf, pc->file_offset, pc->length, e)) return -1;
    return st_load_put_bytes(L->d, pc->dst, buf, pc->length, e);
}

static void *worker(void *v)
{
    struct loader *L = v;
    struct st_error e = {{0}};
    bool by_fd = L->d->fd >= 0;
    uint64_t bytes = by_fd && L->buf_bytes < COPY_BYTES ? COPY_BYTES : L->buf_bytes;
    uint8_t *buf = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    uint8_t *out = by_fd ? malloc(ST_LOAD_PUT_SCRATCH) : NULL; // repacked rows on their way to the fd
    if (!buf || (by_fd && !out)) {
        st_error_set(&e, "load: out of memory for a %llu-byte piece buffer", (unsigned long long)bytes);
        fail(L, &e);
        free(buf);
        return NULL;
    }
    for (;;) {
        uint64_t i = atomic_fetch_add(&L->next, 1);
        if (i >= L->n_pieces || atomic_load(&L->failed)) break;
        const struct piece *pc = &L->pieces[i];
        int rc;
        if (!pc->jb) {
            rc = copy_piece(L, pc, buf, &e);
        } else if (mapped_huge(L, pc)) {
            rc = repack_mapped(L, pc, out, &e);
            if (!rc) atomic_fetch_add(&L->mapped_bytes, pc->length);
        } else { // a cold file, or the part of one cut short since it was planned
            rc = st_load_pread(L->fd, L->path, buf, pc->file_offset, pc->length, &e);
            if (!rc) rc = repack(L, pc, buf, out, &e);
        }
        if (rc) {
            fail(L, &e);
            break;
        }
        if (L->drop_behind) drop_behind(L, pc->file_offset);
        uint64_t done = atomic_fetch_add(&L->done_bytes, pc->length) + pc->length;
        if (L->pr->on && pc->length >= (1u << 20)) st_load_draw(L->pr, done, L->pr->total);
    }
    free(out);
    free(buf);
    return NULL;
}

// Maps a cached file and keeps the mapping where part of it is mapped huge
// (all: keeps it).  Each 2 MiB part is mapped by populating one page of it:
// the kernel maps a whole folio of that size with its PMD, and smaller ones
// by a few pages.  Populating all of it was cheaper for a cache of large
// folios (2-3 ms for l3b against 7), but for one of 68% cost 30 ms, and 15
// more to unmap, on pages then read with pread.
static void map_file(struct loader *L, uint64_t size, bool all)
{
    uint8_t *map = mmap(NULL, size, PROT_READ, MAP_SHARED, L->fd, 0);
    if (map == MAP_FAILED) return;
    uint64_t n = size / HUGE_BYTES + 1, any = all;
    bool ok = !all && (L->huge = malloc(n * sizeof *L->huge)) != NULL;
    for (uint64_t at = 0; ok && at < size; at += HUGE_BYTES)
        ok = !madvise(map + at, 1, MADV_POPULATE_READ) || errno == EFAULT; // EFAULT: cut short, pread says so
    if (ok && !st_map_huge_chunks(map, size, HUGE_BYTES, L->huge))
        for (uint64_t c = 0; c < n; c++) any += L->huge[c];
    if (!any) { // none huge, or older kernels: no MADV_POPULATE_READ (5.14) or PAGEMAP_SCAN (6.7)
        munmap(map, size);
        free(L->huge);
        L->huge = NULL;
        return;
    }
    L->map = map;
    L->map_len = size;
}

int st_load_resident(const struct st_load_plan *p, const struct st_load_span *sp, const struct st_load_dest *d,
                     enum st_load_through through, struct st_load_progress *pr, struct st_load_stats *stats,
                     struct st_error *e)
{
    const struct st_llama_model *m = p->models[sp->model];
    bool drop_behind = through == ST_LOAD_THROUGH_COLD;
    struct loader L = {.path = p->paths[sp->model], .d = d, .drop_behind = drop_behind, .pr = pr,
                       .err_lock = PTHREAD_MUTEX_INITIALIZER};
    uint64_t cap = 0;
    int rc = -1;
    L.fd = open(L.path, O_RDONLY | O_CLOEXEC);
    if (L.fd < 0) return st_error_set(e, "open(%s): %s", L.path, strerror(errno));
    struct stat sb;
    bool all = through == ST_LOAD_THROUGH_MAP;
    if (!drop_behind && !fstat(L.fd, &sb) && sb.st_size > 0 &&
        (all || st_page_cache_fraction(L.fd, 0, (uint64_t)sb.st_size) >= ST_LOAD_RESIDENT_FRACTION))
        map_file(&L, (uint64_t)sb.st_size, all); // else everything by pread, as for a cold file
    if (sp->embd && add_copy(&L, &cap, m->gguf->data_offset + m->tok_embd->offset, m->tok_embd->n_bytes,
                             p->dir.model[sp->model].embd_offset))
        goto oom;
    for (uint32_t j = sp->j0; j < sp->j1; j++) {
        const struct job *jb = &p->jobs[j];
        int r = jb->dst->run_type == jb->dst->gguf_type ? add_copy(&L, &cap, jb->file_offset, jb->t->n_bytes, jb->dst->offset)
                                                         : add_rows(&L, &cap, jb);
        if (r) goto oom;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int n = ncpu < 1 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (int)ncpu;
    qsort(L.pieces, L.n_pieces, sizeof *L.pieces, by_offset); // sequential reads; drop-behind needs it
    if (L.n_pieces) atomic_store(&L.dropped_to, L.pieces[0].file_offset / DROP_UNIT * DROP_UNIT);
    L.drop_lag = 2 * (uint64_t)n * COPY_BYTES;
    struct sigaction bus = {.sa_handler = on_sigbus}, old_bus;
    sigemptyset(&bus.sa_mask);
    bool guard = L.map && !sigaction(SIGBUS, &bus, &old_bus);
    pthread_t th[MAX_THREADS];
    int started = 1;
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, worker, &L)) break;
    worker(&L);
    for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
    if (guard) sigaction(SIGBUS, &old_bus, NULL);
    if (drop_behind && L.n_pieces) {
        const struct piece *last = &L.pieces[L.n_pieces - 1];
        drop_until(&L, last->file_offset + last->length);
    }
    pr->base += atomic_load(&L.done_bytes);
    stats->mapped_bytes += atomic_load(&L.mapped_bytes);
    if (atomic_load(&L.failed)) {
        *e = L.e;
        goto out;
    }
    rc = 0;
    goto out;
oom:
    st_error_set(e, "load: out of memory");
out:
    free(L.pieces);
    if (L.map) munmap((void *)L.map, L.map_len);
    free(L.huge);
    close(L.fd);
    return rc;
}
