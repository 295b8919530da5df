// Internal to shm/: cutting read ranges into the pieces st_uring_read
// submits.  Not part of the public face (shm/shm.h).
#ifndef ST_SHM_URING_PLAN_H
#define ST_SHM_URING_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "shm/uring_read.h"

struct st_uring_piece {
    uint64_t offset; // in the file; advances on short reads
    uint64_t length; // bytes still to read
    uint8_t *dst;
    bool direct;     // offset, length and dst are ST_URING_DIRECT_ALIGN-aligned
};

// Cuts every range into an unaligned head, an aligned middle and an
// unaligned tail (the middle only when the destination has the same
// misalignment as the file offset), then each part into pieces of at most
// io_bytes (rounded down to the alignment).  Middles are marked direct when
// allow_direct.  *out is malloc'd.
int st_uring_plan(const struct st_read_range *ranges, uint64_t n_ranges, uint64_t io_bytes,
                  bool allow_direct, struct st_uring_piece **out, uint64_t *n_out,
                  struct st_error *e);

#endif
