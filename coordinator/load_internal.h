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

// Whether a file is cached well enough for st_load_resident to beat io_uring.
bool st_load_is_resident(const char *path);
// Loads model `model` of the plan from a file the page cache holds: threads
// on every CPU copy L2-sized pieces out of the cache and repack them straight
// into the weights section w.
int st_load_resident(const struct st_load_plan *p, uint32_t model, uint8_t *w, struct st_load_progress *pr,
                     struct st_error *e);

// Reads model `model`'s matrices that need repacking with io_uring into
// staging buffers and repacks them into w, one batch repacking while the
// next is read.  uo->progress_ctx is the st_load_progress.
int st_load_staged(const struct st_load_plan *p, uint32_t model, uint8_t *w, const struct st_uring_opts *uo,
                   struct st_load_stats *stats, struct st_error *e);

#endif
