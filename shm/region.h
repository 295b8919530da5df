// Shared regions: one shared-memory file mapped per (virtual) NUMA node.
// The coordinator creates it, binds it to its node before anything touches
// it, asks for huge pages, and lays out the sections; workers inherit the fd
// (it is not close-on-exec), attach it, validate the header and map the
// weights read-only.  The file is a memfd, or, where shmem THP is "never"
// and no pool of explicit huge pages is reserved, a file on a private tmpfs
// instance that gives transparent ones (shm/private_tmpfs.h).
//
// File layout (every section starts on a multiple of header.align):
//   [header][control][kv][scratch][weights]
// Weights come last so a worker maps [0, weights) read-write and
// [weights, end) read-only with two mappings of the same fd.
#ifndef ST_SHM_REGION_H
#define ST_SHM_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define ST_REGION_MAGIC UINT64_C(0x314e4f4947455254) // "TREGION1" little-endian
#define ST_REGION_VERSION 1u
#define ST_REGION_MAX_MODELS 2
#define ST_REGION_HUGE_BYTES (UINT64_C(2) << 20)

enum st_region_section {
    ST_REGION_CONTROL = 0, // barriers, work counters, worker slots
    ST_REGION_KV = 1,      // transactional KV cache (shm/kv.h)
    ST_REGION_SCRATCH = 2, // activations, proposals, logits
    ST_REGION_WEIGHTS = 3, // model weights in run formats; read-only in workers
    ST_REGION_N_SECTIONS
};

// What the region got.
enum st_region_huge {
    ST_REGION_HUGE_NONE = 0,
    ST_REGION_HUGE_TRANSPARENT = 1, // THP: shmem with madvise, or a private huge=always tmpfs
    ST_REGION_HUGE_EXPLICIT = 2,    // MFD_HUGETLB 2 MiB pages
};

// What the caller asks for.
enum st_region_huge_policy {
    ST_REGION_HUGE_AUTO = 0, // explicit pages if reserved, else transparent
    ST_REGION_HUGE_TRANSPARENT_ONLY = 1,
    ST_REGION_HUGE_OFF = 2,  // small pages, page-aligned sections
};

// Identity of a model file, recorded by the creator and compared by workers
// so that a region loaded from other files is never used.
struct st_file_identity {
    uint64_t path_hash; // FNV-1a of the path as given
    uint64_t size;      // bytes
    int64_t mtime_ns;
    uint64_t head_hash; // FNV-1a of the first 64 KiB (the GGUF header)
};

struct st_region_section_entry {
    char name[16];   // "control", "kv", "scratch", "weights"
    uint64_t offset; // from the start of the region, multiple of align
    uint64_t size;   // bytes
};

// At offset 0 of every region.  Everything up to `checksum` is written once
// by the creator and covered by the checksum; `used` changes afterwards.
struct st_region_header {
    uint64_t magic;        // ST_REGION_MAGIC
    uint32_t version;      // ST_REGION_VERSION
    uint32_t header_bytes; // sizeof(struct st_region_header) of the creator
    uint64_t total_bytes;  // size of the file
    uint64_t align;        // section alignment: page size or 2 MiB
    int32_t mem_node;      // NUMA node the region is bound to, -1 if none
    uint32_t huge;         // enum st_region_huge obtained
    uint32_t n_sections;   // ST_REGION_N_SECTIONS
    uint32_t n_models;     // entries used in models[]
    struct st_region_section_entry sections[ST_REGION_N_SECTIONS];
    struct st_file_identity models[ST_REGION_MAX_MODELS]; // target, draft
    uint64_t checksum;     // FNV-1a of the bytes before this field
    _Alignas(64) _Atomic uint64_t used[ST_REGION_N_SECTIONS]; // bump pointers
};

struct st_region_config {
    const char *name;  // memfd name (shows in /proc/PID/fd), NULL: "subternary"
    int32_t mem_node;  // NUMA node to bind to; -1: no binding
    enum st_region_huge_policy huge;
    uint64_t section_bytes[ST_REGION_N_SECTIONS]; // requested sizes
    uint32_t n_models;
    struct st_file_identity models[ST_REGION_MAX_MODELS];
};

struct st_region_attach_opts {
    bool weights_writable; // map weights read-write (the loader); workers: false
    uint32_t n_models;     // 0: do not check model identities
    const struct st_file_identity *models; // [n_models] expected identities
};

struct st_region; // process-local view: fd and mappings

// Creates the file (memfd or private tmpfs), sizes it, maps it, binds it to
// cfg->mem_node (when NUMA
// is available) and writes the header.  Checks the size against MemAvailable.
int st_region_create(const struct st_region_config *cfg, struct st_region **out,
                     struct st_error *e);

// Validates the region behind `fd` (magic, version, sizes against fstat,
// section table, checksum, model identities) and maps it.  The fd is
// duplicated; the caller keeps its own.  opts may be NULL.
int st_region_attach(int fd, const struct st_region_attach_opts *opts, struct st_region **out,
                     struct st_error *e);

// Unmaps and closes; *r becomes NULL.  The memory lives on while another
// process still maps it.
void st_region_close(struct st_region **r);

// The fd to pass to workers (inherited across fork and exec).
int st_region_fd(const struct st_region *r);
const struct st_region_header *st_region_header(const struct st_region *r);
enum st_region_huge st_region_huge_kind(const struct st_region *r);
const char *st_region_huge_name(enum st_region_huge h);
bool st_region_bound(const struct st_region *r); // mbind succeeded

// Start of a section (read-only for weights unless writable) and its size.
void *st_region_section(const struct st_region *r, enum st_region_section s, uint64_t *bytes);

// Bump allocation inside a section: reserves `bytes` at a multiple of `align`
// (a power of two from 64 up to header.align) and returns the offset from the section
// start.  Safe from several processes (compare-and-swap on header.used).
int st_region_alloc(struct st_region *r, enum st_region_section s, uint64_t bytes, uint64_t align,
                    uint64_t *offset, struct st_error *e);

const char *st_region_section_name(enum st_region_section s);
// Why the region got the huge pages it got ("shmem_enabled=never", ...).
const char *st_region_huge_note(const struct st_region *r);
// The word in brackets of the kernel's shmem THP setting ("never",
// "advise", ...), or "unknown" where it cannot be read.
void st_region_shmem_thp(char *buf, size_t n);
// Seconds st_region_create spent allocating and mapping the pages.
double st_region_alloc_seconds(const struct st_region *r);

// Validates a header image of `file_bytes` (exposed for tests and tools).
int st_region_header_check(const struct st_region_header *h, uint64_t file_bytes,
                           struct st_error *e);
uint64_t st_region_header_checksum(const struct st_region_header *h);

// Model file identity (path hash, size, mtime, hash of the first 64 KiB).
int st_file_identity_get(const char *path, struct st_file_identity *id, struct st_error *e);

// MemAvailable from /proc/meminfo (sysinfo as a fallback), and a check that
// `bytes` fit, with an error naming `what`.
int st_shm_mem_available(uint64_t *bytes, struct st_error *e);
int st_shm_mem_check(uint64_t bytes, const char *what, struct st_error *e);

uint64_t st_shm_fnv1a(uint64_t h, const void *data, uint64_t n);
#define ST_SHM_FNV_SEED UINT64_C(0xcbf29ce484222325)

#endif
