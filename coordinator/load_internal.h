// Private to the loader (coordinator/load*.c): the plan and the progress bar.
#ifndef ST_COORDINATOR_LOAD_INTERNAL_H
#define ST_COORDINATOR_LOAD_INTERNAL_H

#include "coordinator/load.h"
#include "shm/uring_read.h"

// One matrix to place: where it comes from and where it goes.
struct job {
    const struct st_gguf_tensor *t;
    uint32_t model;
    uint64_t file_offset;
    struct st_layout_mat *dst; // into the plan's directory image
};

struct st_load_plan {
    uint32_t n_models;
    struct st_llama_model *const *models;
    const char *paths[ST_LAYOUT_MAX_MODELS];
    struct st_layout_dir dir;
    struct st_layout_layer *layers[ST_LAYOUT_MAX_MODELS]; // [n_layer] images
    struct job *jobs;
    uint32_t n_jobs;
    uint64_t bytes;
    uint64_t act_row_max;
};

struct st_load_progress {
    bool on;
    uint64_t base, total; // bytes before the current read; of the whole load
    double t0;
};

double st_load_now_s(void);
// Draws the bar for `done` bytes past pr->base (an st_uring_opts progress callback).
void st_load_draw(void *pr, uint64_t done, uint64_t total);

// Reads len bytes at off of the file fd (named path in errors), whole or an error.
int st_load_pread(int fd, const char *path, void *dst, uint64_t off, uint64_t len, struct st_error *e);

// Where the weights go: the section as the coordinator maps it, and, for a
// region in small pages, its memfd, which the loader writes with pwrite
// instead (coordinator/load_write.c says why).
struct st_load_dest {
    uint8_t *w;      // the weights section, mapped writable
    int fd;          // -1: write through w; else the region's memfd
    uint64_t fd_off; // offset of w in fd
};

// Scratch bytes st_load_put_rows is best given when writing to the fd.
#define ST_LOAD_PUT_SCRATCH (UINT64_C(1) << 20)

// Repacks rows [r0, r1) of matrix m from src (row r0's bytes, in the file's
// layout) into the weights section.  Through the fd it goes in pieces that
// fit scratch (scratch_bytes of it, at least one 8-row group's worth).
int st_load_put_rows(const struct st_load_dest *d, const struct st_layout_mat *m, const uint8_t *src, int64_t r0,
                     int64_t r1, uint8_t *scratch, uint64_t scratch_bytes, struct st_error *e);
// Copies len bytes to offset off of the weights section.
int st_load_put_bytes(const struct st_load_dest *d, uint64_t off, const void *src, uint64_t len, struct st_error *e);

// The part of a model's load one path takes: jobs [j0, j1) of the plan (all
// of model `model`) and, if embd, the model's token embeddings.
struct st_load_span {
    uint32_t model, j0, j1;
    bool embd;
};

// Whether a file is cached well enough for st_load_resident to beat io_uring
// (at least this fraction of its pages).
#define ST_LOAD_RESIDENT_FRACTION 0.95
bool st_load_is_resident(const char *path);
// How st_load_resident reads a file.
enum st_load_through {
    ST_LOAD_THROUGH_COLD,  // pread into L2-sized buffers, dropping the pages behind
    ST_LOAD_THROUGH_CACHE, // a cached file: out of its mapping where mapped huge, else pread
    ST_LOAD_THROUGH_MAP,   // every piece out of the mapping, huge or not (st_load_opts.map_all)
};

// Loads a span through the page cache (cached or not): threads on every
// CPU repack it piece by piece straight into the weights section, out of
// a mapping of the file or out of L2-sized pread buffers.  COLD: each
// piece's pages leave the cache once repacked, so a cold load reuses the
// same few pages instead of filling the cache with a second copy of the
// weights (on a VM whose host takes freed memory back, fresh pages cost the
// host's work: l3b read at 0.65 GB/s, 2.5 with drop-behind).  Adds the bytes
// repacked out of the mapping to stats->mapped_bytes.
int st_load_resident(const struct st_load_plan *p, const struct st_load_span *sp, const struct st_load_dest *d,
                     enum st_load_through through, struct st_load_progress *pr, struct st_load_stats *stats,
                     struct st_error *e);

#define ST_LOAD_STAGES 3 // batches in flight, each with its own staging buffer

// The staging buffers, kept from one st_load_staged call to the next: fresh
// memory costs a page fault per page, and on a VM whose host took freed
// memory back, the host's work too (0.6 GB/s here).
struct st_load_staging {
    uint8_t *buf[ST_LOAD_STAGES];
    uint64_t cap[ST_LOAD_STAGES];
};

// Allocates and touches every buffer at the batch size (before a timed part).
int st_load_staging_reserve(struct st_load_staging *sg, struct st_error *e);
void st_load_staging_free(struct st_load_staging *sg);

// Reads the span's matrices that need repacking with io_uring into the
// staging buffers and repacks them into the weights section, one batch
// repacking while the next is read.  uo->progress_ctx is the st_load_progress.
int st_load_staged(const struct st_load_plan *p, const struct st_load_span *sp, const struct st_load_dest *d,
                   const struct st_uring_opts *uo, struct st_load_staging *sg, struct st_load_stats *stats,
                   struct st_error *e);

#endif
