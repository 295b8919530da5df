// Loading models into a region's weights section: a directory (model/layout.h)
// at the start, every matrix in its kernel run format, norms as floats.  The
// tensors are read with io_uring (many large reads in flight, O_DIRECT where
// aligned); those whose run format differs from the file's layout are read
// into a staging buffer and repacked.  A file the page cache already holds
// is copied out by threads on every CPU instead, piece by piece through L2
// (coordinator/load_resident.c).
#ifndef ST_COORDINATOR_LOAD_H
#define ST_COORDINATOR_LOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "model/layout.h"
#include "model/llama.h"
#include "shm/region.h"

struct st_load_plan;

struct st_load_stats {
    uint64_t file_bytes;   // tensor bytes read from the files
    uint64_t region_bytes; // weights section bytes written
    double seconds;
    double gbps;           // file_bytes / seconds
    double read_seconds;   // of which in io_uring reads
    uint32_t cached_files; // files found in the page cache, copied out by every CPU
};

// Lays out the models (target first, then the draft if any); *bytes is the
// weights section size they need.
int st_load_plan_new(struct st_llama_model *const *models, const char *const *paths, uint32_t n_models,
                     struct st_load_plan **out, uint64_t *bytes, struct st_error *e);
void st_load_plan_free(struct st_load_plan **p);
// Largest activation row, in bytes, any matrix of the plan multiplies with.
uint64_t st_load_plan_act_row_max(const struct st_load_plan *p);

enum st_load_mode {
    ST_LOAD_AUTO = 0,   // per file: the page-cache path when it is cached, else io_uring
    ST_LOAD_IO_URING,   // always io_uring (O_DIRECT where aligned)
    ST_LOAD_CACHED,     // always threads copying out of the page cache
};

// Fills the weights section of a region created with at least that size
// (mapped writable by its creator).  progress: draw a bar on stderr.
int st_load_run(const struct st_load_plan *p, struct st_region *r, bool progress, enum st_load_mode mode,
                struct st_load_stats *stats, struct st_error *e);

#endif
