// Loading models into a region's weights section: a directory (model/layout.h)
// at the start, every matrix in its kernel run format, norms as floats.  The
// tensors are read with io_uring (many large reads in flight, O_DIRECT where
// aligned); those whose run format differs from the file's layout are read
// into a staging buffer and repacked.  A file the page cache already holds
// is repacked by threads on every CPU instead, piece by piece, out of a
// mapping of it where that is mapped huge (coordinator/load_resident.c); a file it does not hold goes whichever of
// the two ways a probe finds faster (st_load_run).
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
    uint32_t cached_files; // files found in the page cache, repacked out of it by every CPU
    uint64_t mapped_bytes; // of file_bytes, repacked straight out of a mapping of the file
    bool written_by_fd;    // the weights section went in with pwrite (small pages)
    uint32_t probed_files; // cold files read both ways first (ST_LOAD_AUTO)
    uint32_t threads_won;  // of those, files whose rest went through the page cache
    double probe_gbps[2];  // the last probe's rates: io_uring, threads
};

// Lays out the models (target first, then the draft if any); *bytes is the
// weights section size they need.
int st_load_plan_new(struct st_llama_model *const *models, const char *const *paths, uint32_t n_models,
                     struct st_load_plan **out, uint64_t *bytes, struct st_error *e);
void st_load_plan_free(struct st_load_plan **p);
// Largest activation row, in bytes, any matrix of the plan multiplies with.
uint64_t st_load_plan_act_row_max(const struct st_load_plan *p);

enum st_load_mode {
    ST_LOAD_AUTO = 0,   // per file: the page-cache path when it is cached, else as ST_LOAD_PROBE
    ST_LOAD_IO_URING,   // always io_uring (O_DIRECT where aligned)
    ST_LOAD_CACHED,     // always threads through the page cache (out of a huge mapping, else pread)
    ST_LOAD_PROBE,      // always what AUTO does with an uncached file: probe both, then the faster
};

// Fills the weights section of a region created with at least that size
// (mapped writable by its creator).  progress: draw a bar on stderr.
//
// ST_LOAD_AUTO reads a file the page cache does not hold both ways first:
// about probe_bytes of its matrices with threads through the page cache
// (dropping the pages behind them), as many with io_uring, and the rest the
// way that was faster.  On a real disk O_DIRECT should win; on our test VM
// either can, depending on the state of its memory (README, "Loading").
int st_load_run(const struct st_load_plan *p, struct st_region *r, bool progress, enum st_load_mode mode,
                struct st_load_stats *stats, struct st_error *e);

#define ST_LOAD_PROBE_BYTES (UINT64_C(128) << 20)

// AUTO: with pwrite on the region's memfd where the region is in small
// pages (coordinator/load_write.c), else through its mapping.  Tests force
// either.
enum st_load_write { ST_LOAD_WRITE_AUTO = 0, ST_LOAD_WRITE_MAPPED, ST_LOAD_WRITE_FD };

enum st_load_pick { ST_LOAD_PICK_FASTER = 0, ST_LOAD_PICK_URING, ST_LOAD_PICK_THREADS };

struct st_load_opts {
    enum st_load_mode mode;
    bool progress;
    uint64_t probe_bytes;      // 0: ST_LOAD_PROBE_BYTES
    enum st_load_pick pick;    // after the probe (tests force either way)
    bool map_all;              // cached files: every piece out of the mapping, where
                               // mapped huge or not (tests: small files are never huge)
    enum st_load_write write;  // how the weights section is written
};

int st_load_run_opts(const struct st_load_plan *p, struct st_region *r, const struct st_load_opts *o,
                     struct st_load_stats *stats, struct st_error *e);

#endif
