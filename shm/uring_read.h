// Reading many byte ranges of one file into memory with io_uring: large
// reads (ST_URING_DEFAULT_IO_BYTES each) with many in flight.  The aligned
// middle of each range goes through O_DIRECT (no page-cache copy, and the
// device sees deep queues) unless its pages are already cached; unaligned
// heads and tails, cached parts, and files whose filesystem refuses O_DIRECT
// are read buffered.  O_DIRECT needs the destination to have the same
// misalignment as the file offset ((dst - offset) % ST_URING_DIRECT_ALIGN
// == 0); place destinations at the file offset's skew, or a range is read
// buffered (slower on a cold cache).  Short reads are continued; reads past
// the end of the file are an error.  This is how model tensors are loaded
// into a region.
#ifndef ST_SHM_URING_READ_H
#define ST_SHM_URING_READ_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define ST_URING_DEFAULT_QUEUE_DEPTH 32
#define ST_URING_DEFAULT_IO_BYTES (UINT64_C(2) << 20)
#define ST_URING_DIRECT_ALIGN 4096 // offset, length and memory alignment for O_DIRECT

struct st_read_range {
    uint64_t offset; // in the file
    uint64_t length; // bytes
    void *dst;       // [length] bytes
};

enum st_uring_mode {
    ST_URING_AUTO = 0,     // O_DIRECT for aligned, uncached parts
    ST_URING_BUFFERED = 1, // never O_DIRECT
    ST_URING_DIRECT = 2,   // O_DIRECT for every aligned part, cached or not
};

struct st_uring_opts {
    enum st_uring_mode mode;
    uint32_t queue_depth; // reads in flight; 0: ST_URING_DEFAULT_QUEUE_DEPTH
    uint64_t io_bytes;    // largest single read; 0: ST_URING_DEFAULT_IO_BYTES
    // Called after each completed read, from the calling thread.
    void (*progress)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_ctx;
};

struct st_uring_stats {
    uint64_t bytes;          // total read
    uint64_t direct_bytes;   // of which through O_DIRECT
    uint64_t n_reads;        // reads submitted (including continuations)
    uint64_t short_reads;    // reads that returned fewer bytes than asked
    bool direct_available;   // the O_DIRECT open succeeded
    double seconds;
    double gbps;             // bytes / seconds / 1e9
};

// Reads every range of `path`.  opts and stats may be NULL.
int st_uring_read(const char *path, const struct st_read_range *ranges, uint64_t n_ranges,
                  const struct st_uring_opts *opts, struct st_uring_stats *stats,
                  struct st_error *e);

// Fraction of the pages of [off, off + len) of the file in the page cache,
// -1 when unknown (or len is 0).
double st_page_cache_fraction(int fd, uint64_t off, uint64_t len);
// Fraction of the file's pages in the page cache, -1 when unknown.
double st_page_cache_resident(const char *path);

#endif
