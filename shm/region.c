// Creating, attaching and mapping shared regions (layout in shm/region.h).
#include "shm/region.h"

#include "shm/map_huge.h"
#include "shm/populate.h"
#include "shm/private_tmpfs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <numa.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26) // log2(2 MiB) << MFD_HUGE_SHIFT, from linux/memfd.h
#endif

struct st_region {
    int fd;
    bool bound;                 // mbind to header.mem_node succeeded
    enum st_region_huge huge;
    char huge_note[192];
    double alloc_seconds;       // preallocating and mapping the pages at creation
    struct st_region_header *hdr; // start of the read-write mapping
    uint64_t rw_bytes;          // length of that mapping
    uint8_t *weights;           // weights section, in its own mapping when read-only
    uint64_t weights_map_bytes; // length of that own mapping, 0 when inside rw
};

static int align_up(uint64_t x, uint64_t a, uint64_t *out)
{
    if (x > UINT64_MAX - (a - 1)) return -1;
    *out = (x + a - 1) & ~(a - 1);
    return 0;
}

// Offsets of every section; `total` is the memfd size.
static int layout(const uint64_t sizes[ST_REGION_N_SECTIONS], uint64_t align,
                  struct st_region_section_entry out[ST_REGION_N_SECTIONS], uint64_t *total,
                  struct st_error *e)
{
    uint64_t off = 0;
    align_up(sizeof(struct st_region_header), align, &off);
    for (int s = 0; s < ST_REGION_N_SECTIONS; s++) {
        memset(&out[s], 0, sizeof out[s]);
        snprintf(out[s].name, sizeof out[s].name, "%s", st_region_section_name(s));
        out[s].offset = off;
        out[s].size = sizes[s];
        if (sizes[s] > UINT64_MAX - off || align_up(off + sizes[s], align, &off))
            return st_error_set(e, "section %s of %" PRIu64 " bytes overflows the region size",
                                out[s].name, sizes[s]);
    }
    *total = off;
    return 0;
}

void st_region_shmem_thp(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    if (!f) return;
    char line[256];
    if (fgets(line, sizeof line, f)) {
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b) snprintf(buf, n, "%.*s", (int)(b - a - 1), a + 1);
    }
    fclose(f);
}

// A number from a sysfs file, or -1 when unreadable.
static long read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long n = -1;
    if (f) {
        if (fscanf(f, "%ld", &n) != 1) n = -1;
        fclose(f);
    }
    return n;
}

// Free 2 MiB pages in `node`'s pool, or -1 when unknown.
static long node_free_huge_pages(int32_t node)
{
    char path[128];
    snprintf(path, sizeof path,
             "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/free_hugepages", node);
    return read_long(path);
}

// Free 2 MiB pages for a region bound to `node` (-1: any node), 0 when unknown.
static long free_huge_pages(int32_t node)
{
    long n = node >= 0 && numa_available() >= 0 ? node_free_huge_pages(node) : -1;
    if (n < 0) n = read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
    return n < 0 ? 0 : n;
}

// Explicit huge pages: fails quietly (returns -1) when too few are
// reserved, which mmap reports as ENOMEM because it reserves the pages up
// front.  That reservation is global, but a bound region faults its pages
// from its node's pool only (SIGBUS when it runs dry), so the node's pool
// is checked first.
static int try_hugetlb(const char *name, uint64_t total, int32_t node, int *fd_out,
                       void **base_out)
{
    if (node >= 0 && numa_available() >= 0) {
        long free_pages = node_free_huge_pages(node);
        if (free_pages >= 0 && (uint64_t)free_pages < total / ST_REGION_HUGE_BYTES) return -1;
    }
    int fd = memfd_create(name, MFD_HUGETLB | MFD_HUGE_2MB);
    if (fd < 0) return -1;
    if (ftruncate(fd, (off_t)total) < 0) goto fail;
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) goto fail;
    *fd_out = fd;
    *base_out = p;
    return 0;
fail:
    close(fd);
    return -1;
}

// Binds [base, +len) to `node` before first touch.  A kernel or sandbox that
// refuses mbind altogether (ENOSYS, EPERM) leaves the region unbound, which
// is only slower; any other refusal is a configuration error.
static int bind_node(void *base, uint64_t len, int32_t node, bool *bound, struct st_error *e)
{
    *bound = false;
    if (node < 0 || numa_available() < 0) return 0;
    if (node > numa_max_node())
        return st_error_set(e, "NUMA node %d does not exist (highest is %d)", node,
                            numa_max_node());
    unsigned long mask[16] = {0};
    if ((size_t)node >= sizeof mask * 8)
        return st_error_set(e, "NUMA node %d is beyond the supported %zu", node, sizeof mask * 8);
    mask[node / (8 * sizeof mask[0])] |= 1ul << (node % (8 * sizeof mask[0]));
    if (mbind(base, len, MPOL_BIND, mask, sizeof mask * 8, 0) == 0) {
        *bound = true;
        return 0;
    }
    if (errno == ENOSYS || errno == EPERM) return 0;
    return st_error_set(e, "mbind(node=%d, %" PRIu64 " bytes): %s", node, len, strerror(errno));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// Allocates every page of the region now, under the node binding just set.
// Faulting pages in one by one while loading costs several microseconds
// each (much more under a hypervisor); populating does the same work in
// bulk, and a machine without the memory fails here with a clear error
// instead of a SIGBUS later.  Huge pages are populated through the mapping
// (whose advice asks for transparent ones) by a thread per CPU: on a VM
// most of the time is the host backing fresh memory, at a rate per vCPU.
// Small pages are allocated by fallocate but not mapped: the loader writes
// them with pwrite (coordinator/load_write.c) and the KV cache is the
// workers', so the coordinator touches few of them, and mapping l3b's
// 800,000 took this VM 0.95-5.7 s against 0.26 for fallocate alone.
//
// Both calls stop with EINTR when the thread has a signal to handle (or, in
// recent kernels, task work such as io_uring's); `bench shm --model` failed
// so once, creating a region right after a load.  Both are simply called
// again: the pages already allocated stay.
static int preallocate(int fd, void *base, uint64_t total, enum st_region_huge huge, struct st_error *e)
{
    int rc;
    if (huge != ST_REGION_HUGE_NONE) {
        if (st_shm_populate(base, total, ST_REGION_HUGE_BYTES) == 0) return 0;
        if (errno != EINVAL)
            return st_error_set(e, "cannot allocate %" PRIu64 " bytes of shared memory: %s", total,
                                strerror(errno));
        if (huge == ST_REGION_HUGE_TRANSPARENT) return 0; // kernel < 5.14: pages come at first touch
    }
    do rc = fallocate(fd, 0, 0, (off_t)total);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        if (errno == EOPNOTSUPP || errno == ENOSYS) return 0; // pages come at first touch
        return st_error_set(e, "cannot allocate %" PRIu64 " bytes of shared memory: %s", total,
                            strerror(errno));
    }
    if (huge == ST_REGION_HUGE_NONE) return 0;
    void *p = mmap(base, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED)
        return st_error_set(e, "mmap(MAP_POPULATE, %" PRIu64 " bytes): %s", total, strerror(errno));
    return 0;
}

// Transparent huge pages are taken where the kernel finds free 2 MiB
// blocks; on a fragmented machine part of a region stays in small pages.
// Says how much did not, where the kernel can tell (PAGEMAP_SCAN).
static void note_huge_share(const void *base, uint64_t total, char *note, size_t cap)
{
    uint64_t n = total / ST_REGION_HUGE_BYTES;
    int64_t huge = n ? st_map_huge_count(base, n * ST_REGION_HUGE_BYTES, ST_REGION_HUGE_BYTES) : -1;
    if (huge < 0) return;
    size_t len = strlen(note);
    if (len && note[len - 1] == ')' && len < cap)
        snprintf(note + len - 1, cap - (len - 1), ", %.0f%% huge)", 100.0 * (double)huge / (double)n);
}

int st_region_create(const struct st_region_config *cfg, struct st_region **out,
                     struct st_error *e)
{
    const char *name = cfg->name ? cfg->name : "subternary";
    struct st_region *r = NULL;
    void *base = MAP_FAILED;
    int fd = -1;
    *out = NULL;

    if (cfg->n_models > ST_REGION_MAX_MODELS)
        return st_error_set(e, "st_region_create(%s): %" PRIu32 " models, at most %d", name,
                            cfg->n_models, ST_REGION_MAX_MODELS);
    uint64_t align = cfg->huge == ST_REGION_HUGE_OFF ? (uint64_t)sysconf(_SC_PAGESIZE)
                                                     : ST_REGION_HUGE_BYTES;
    struct st_region_section_entry sections[ST_REGION_N_SECTIONS];
    uint64_t total = 0;
    if (layout(cfg->section_bytes, align, sections, &total, e) < 0) goto fail;
    if (st_shm_mem_check(total, "shared region", e) < 0) goto fail;

    r = calloc(1, sizeof *r);
    if (!r) {
        st_error_set(e, "out of memory");
        goto fail;
    }
    r->huge = ST_REGION_HUGE_NONE;
    if (cfg->huge == ST_REGION_HUGE_AUTO && try_hugetlb(name, total, cfg->mem_node, &fd, &base) == 0) {
        r->huge = ST_REGION_HUGE_EXPLICIT;
        snprintf(r->huge_note, sizeof r->huge_note, "explicit 2 MiB pages (hugetlbfs)");
    } else {
        // Where shmem THP is "never", a tmpfs instance of our own still gives
        // transparent huge pages ("deny" forbids them everywhere).
        char setting[32], tmpfs_why[96] = "";
        st_region_shmem_thp(setting, sizeof setting);
        bool own_tmpfs = cfg->huge != ST_REGION_HUGE_OFF && !strcmp(setting, "never");
        if (own_tmpfs) {
            fd = st_private_tmpfs_open(total, ST_PRIVATE_TMPFS_AUTO, tmpfs_why, sizeof tmpfs_why);
            own_tmpfs = fd >= 0;
        }
        if (!own_tmpfs) fd = memfd_create(name, 0); // no MFD_CLOEXEC: exec'd workers inherit it
        if (fd < 0) {
            st_error_set(e, "memfd_create(%s): %s", name, strerror(errno));
            goto fail;
        }
        if (ftruncate(fd, (off_t)total) < 0) {
            st_error_set(e, "ftruncate(%s %s, %" PRIu64 " bytes): %s",
                         own_tmpfs ? "private tmpfs file" : "memfd", name, total, strerror(errno));
            goto fail;
        }
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) {
            st_error_set(e, "mmap(%s, %" PRIu64 " bytes): %s", name, total, strerror(errno));
            goto fail;
        }
        // The advice also lets the fault path compact memory for a huge page
        // (THP defrag "madvise").
        if (cfg->huge == ST_REGION_HUGE_OFF) {
            snprintf(r->huge_note, sizeof r->huge_note, "small pages (huge pages not requested)");
        } else if (madvise(base, total, MADV_HUGEPAGE) < 0) {
            snprintf(r->huge_note, sizeof r->huge_note, "small pages (madvise: %s)",
                     strerror(errno));
        } else if (own_tmpfs) {
            r->huge = ST_REGION_HUGE_TRANSPARENT;
            snprintf(r->huge_note, sizeof r->huge_note,
                     "transparent huge pages (private tmpfs, huge=always; shmem THP never)");
        } else if (!strcmp(setting, "never") || !strcmp(setting, "deny")) {
            // Say how many explicit pages a pool would need (deploy/ has a sysctl file).
            char pool[64] = "";
            if (cfg->huge == ST_REGION_HUGE_AUTO)
                snprintf(pool, sizeof pool, "%ld of %" PRIu64 " 2 MiB huge pages free, ",
                         free_huge_pages(cfg->mem_node), (total + ST_REGION_HUGE_BYTES - 1) / ST_REGION_HUGE_BYTES);
            snprintf(r->huge_note, sizeof r->huge_note, "small pages (%sshmem THP %s%s%s)", pool,
                     setting, tmpfs_why[0] ? "; private tmpfs: " : "", tmpfs_why);
        } else {
            r->huge = ST_REGION_HUGE_TRANSPARENT;
            snprintf(r->huge_note, sizeof r->huge_note, "transparent huge pages (shmem THP %s)",
                     setting);
        }
    }
    if (bind_node(base, total, cfg->mem_node, &r->bound, e) < 0) goto fail;
    double t0 = now_s();
    if (preallocate(fd, base, total, r->huge, e) < 0) goto fail;
    r->alloc_seconds = now_s() - t0;
    if (r->huge == ST_REGION_HUGE_TRANSPARENT) note_huge_share(base, total, r->huge_note, sizeof r->huge_note);

    // First touch: after the binding, so the header page lands on the node.
    struct st_region_header *h = base;
    memset(h, 0, sizeof *h);
    h->magic = ST_REGION_MAGIC;
    h->version = ST_REGION_VERSION;
    h->header_bytes = sizeof *h;
    h->total_bytes = total;
    h->align = align;
    h->mem_node = r->bound ? cfg->mem_node : -1;
    h->huge = r->huge;
    h->n_sections = ST_REGION_N_SECTIONS;
    h->n_models = cfg->n_models;
    memcpy(h->sections, sections, sizeof sections);
    memcpy(h->models, cfg->models, cfg->n_models * sizeof cfg->models[0]);
    h->checksum = st_region_header_checksum(h);
    for (int s = 0; s < ST_REGION_N_SECTIONS; s++) atomic_init(&h->used[s], 0);

    r->fd = fd;
    r->hdr = h;
    r->rw_bytes = total;
    r->weights = (uint8_t *)base + sections[ST_REGION_WEIGHTS].offset;
    *out = r;
    return 0;
fail:
    if (base != MAP_FAILED) munmap(base, total);
    if (fd >= 0) close(fd);
    free(r);
    return st_error_wrap(e, "st_region_create(%s, node %d)", name, cfg->mem_node);
}

static bool identity_equal(const struct st_file_identity *a, const struct st_file_identity *b)
{
    return a->path_hash == b->path_hash && a->size == b->size && a->mtime_ns == b->mtime_ns &&
           a->head_hash == b->head_hash;
}

static int check_models(const struct st_region_header *h, const struct st_region_attach_opts *o,
                        struct st_error *e)
{
    if (!o || o->n_models == 0) return 0;
    if (o->n_models != h->n_models)
        return st_error_set(e, "region holds %" PRIu32 " models, the worker expects %" PRIu32,
                            h->n_models, o->n_models);
    for (uint32_t i = 0; i < o->n_models; i++) {
        const struct st_file_identity *a = &h->models[i], *b = &o->models[i];
        if (!identity_equal(a, b))
            return st_error_set(e, "model %" PRIu32 " differs: region has path hash 0x%016"
                                   PRIx64 " size %" PRIu64 " mtime %" PRId64 " head 0x%016" PRIx64
                                   ", expected 0x%016" PRIx64 " size %" PRIu64 " mtime %" PRId64
                                   " head 0x%016" PRIx64 " (loaded from another file?)", i,
                                a->path_hash, a->size, a->mtime_ns, a->head_hash, b->path_hash,
                                b->size, b->mtime_ns, b->head_hash);
    }
    return 0;
}

int st_region_attach(int fd, const struct st_region_attach_opts *opts, struct st_region **out,
                     struct st_error *e)
{
    struct st_region *r = NULL;
    struct st_region_header h;
    struct stat st;
    void *rw = MAP_FAILED, *ro = MAP_FAILED;
    uint64_t rw_bytes = 0, ro_bytes = 0;
    *out = NULL;

    if (fstat(fd, &st) < 0) {
        st_error_set(e, "fstat: %s", strerror(errno));
        goto fail;
    }
    if ((uint64_t)st.st_size < sizeof h) {
        st_error_set(e, "the memfd is %lld bytes, smaller than the %zu-byte header",
                     (long long)st.st_size, sizeof h);
        goto fail;
    }
    ssize_t got = pread(fd, &h, sizeof h, 0);
    if (got != (ssize_t)sizeof h) {
        st_error_set(e, "pread(header, %zu bytes): %s", sizeof h,
                     got < 0 ? strerror(errno) : "short read");
        goto fail;
    }
    if (st_region_header_check(&h, (uint64_t)st.st_size, e) < 0) goto fail;
    if (check_models(&h, opts, e) < 0) goto fail;

    r = calloc(1, sizeof *r);
    if (!r) {
        st_error_set(e, "out of memory");
        goto fail;
    }
    const struct st_region_section_entry *w = &h.sections[ST_REGION_WEIGHTS];
    bool split = !(opts && opts->weights_writable) && w->size > 0;
    rw_bytes = split ? w->offset : h.total_bytes;
    rw = mmap(NULL, rw_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (rw == MAP_FAILED) {
        st_error_set(e, "mmap(read-write, %" PRIu64 " bytes): %s", rw_bytes, strerror(errno));
        goto fail;
    }
    if (split) {
        ro_bytes = h.total_bytes - w->offset;
        ro = mmap(NULL, ro_bytes, PROT_READ, MAP_SHARED, fd, (off_t)w->offset);
        if (ro == MAP_FAILED) {
            st_error_set(e, "mmap(weights read-only, %" PRIu64 " bytes at %" PRIu64 "): %s",
                         ro_bytes, w->offset, strerror(errno));
            goto fail;
        }
    }
    // THP for shmem is decided per mapping at fault time: the attacher asks too.
    if (h.huge == ST_REGION_HUGE_TRANSPARENT) {
        madvise(rw, rw_bytes, MADV_HUGEPAGE);
        if (split) madvise(ro, ro_bytes, MADV_HUGEPAGE);
    }
    r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) {
        st_error_set(e, "dup: %s", strerror(errno));
        goto fail;
    }
    r->bound = h.mem_node >= 0;
    r->huge = (enum st_region_huge)h.huge;
    snprintf(r->huge_note, sizeof r->huge_note, "%s (as created)", st_region_huge_name(r->huge));
    r->hdr = rw;
    r->rw_bytes = rw_bytes;
    r->weights = split ? ro : (uint8_t *)rw + w->offset;
    r->weights_map_bytes = split ? ro_bytes : 0;
    *out = r;
    return 0;
fail:
    if (ro != MAP_FAILED) munmap(ro, ro_bytes);
    if (rw != MAP_FAILED) munmap(rw, rw_bytes);
    free(r);
    return st_error_wrap(e, "st_region_attach(fd=%d)", fd);
}

void st_region_close(struct st_region **rp)
{
    struct st_region *r = *rp;
    if (!r) return;
    if (r->weights_map_bytes) munmap(r->weights, r->weights_map_bytes);
    munmap(r->hdr, r->rw_bytes);
    close(r->fd);
    free(r);
    *rp = NULL;
}

int st_region_fd(const struct st_region *r)
{
    return r->fd;
}

const struct st_region_header *st_region_header(const struct st_region *r)
{
    return r->hdr;
}

enum st_region_huge st_region_huge_kind(const struct st_region *r)
{
    return r->huge;
}

const char *st_region_huge_note(const struct st_region *r)
{
    return r->huge_note;
}

const char *st_region_huge_name(enum st_region_huge h)
{
    switch (h) {
    case ST_REGION_HUGE_NONE: return "small pages";
    case ST_REGION_HUGE_TRANSPARENT: return "transparent huge pages";
    case ST_REGION_HUGE_EXPLICIT: return "explicit huge pages";
    }
    return "?";
}

bool st_region_bound(const struct st_region *r)
{
    return r->bound;
}

void *st_region_section(const struct st_region *r, enum st_region_section s, uint64_t *bytes)
{
    ST_ASSERT((unsigned)s < ST_REGION_N_SECTIONS);
    const struct st_region_section_entry *sec = &r->hdr->sections[s];
    if (bytes) *bytes = sec->size;
    if (s == ST_REGION_WEIGHTS) return r->weights;
    return (uint8_t *)r->hdr + sec->offset;
}

int st_region_alloc(struct st_region *r, enum st_region_section s, uint64_t bytes, uint64_t align,
                    uint64_t *offset, struct st_error *e)
{
    if ((unsigned)s >= ST_REGION_N_SECTIONS)
        return st_error_set(e, "st_region_alloc: no section %d", (int)s);
    // Sections start on header.align, so offsets aligned within the section
    // are aligned in memory too, up to that alignment.
    if (align < 64 || (align & (align - 1)) || align > r->hdr->align)
        return st_error_set(e, "st_region_alloc(%s, %" PRIu64 " bytes): alignment %" PRIu64
                               " is not a power of two in [64, %" PRIu64 "]",
                            st_region_section_name(s), bytes, align, r->hdr->align);
    uint64_t size = r->hdr->sections[s].size;
    _Atomic uint64_t *used = &r->hdr->used[s];
    uint64_t old = atomic_load_explicit(used, memory_order_relaxed), begin;
    do {
        if (align_up(old, align, &begin) < 0 || begin > size || bytes > size - begin)
            return st_error_set(e, "st_region_alloc(%s, %" PRIu64 " bytes, align %" PRIu64
                                   "): section is full (%" PRIu64 " of %" PRIu64 " bytes used)",
                                st_region_section_name(s), bytes, align, old, size);
    } while (!atomic_compare_exchange_weak_explicit(used, &old, begin + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    *offset = begin;
    return 0;
}

double st_region_alloc_seconds(const struct st_region *r) { return r->alloc_seconds; }
