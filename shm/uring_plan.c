// Splitting read ranges into O_DIRECT-able and buffered pieces.
#include "shm/uring_plan.h"

#include <inttypes.h>
#include <stdlib.h>

#define A ST_URING_DIRECT_ALIGN

// Appends the pieces of one part [offset, +length) -> dst; counts only when
// out is NULL.
static void cut(uint64_t offset, uint64_t length, uint8_t *dst, bool direct, uint64_t io_bytes,
                struct st_uring_piece *out, uint64_t *n)
{
    while (length > 0) {
        uint64_t len = length < io_bytes ? length : io_bytes;
        if (out) out[*n] = (struct st_uring_piece){offset, len, dst, direct};
        (*n)++;
        offset += len;
        dst += len;
        length -= len;
    }
}

static void plan_range(const struct st_read_range *r, uint64_t io_bytes, bool allow_direct,
                       struct st_uring_piece *out, uint64_t *n)
{
    uint8_t *dst = r->dst;
    uint64_t off = r->offset, len = r->length;
    // O_DIRECT needs file offset and memory address both aligned: possible
    // only when they are misaligned by the same amount.
    if (!allow_direct || ((uintptr_t)dst - off) % A != 0) {
        cut(off, len, dst, false, io_bytes, out, n);
        return;
    }
    uint64_t head = (A - off % A) % A;
    if (head > len) head = len;
    uint64_t mid = (len - head) / A * A;
    cut(off, head, dst, false, io_bytes, out, n);
    cut(off + head, mid, dst + head, true, io_bytes, out, n);
    cut(off + head + mid, len - head - mid, dst + head + mid, false, io_bytes, out, n);
}

int st_uring_plan(const struct st_read_range *ranges, uint64_t n_ranges, uint64_t io_bytes,
                  bool allow_direct, struct st_uring_piece **out, uint64_t *n_out,
                  struct st_error *e)
{
    io_bytes = io_bytes / A * A;
    if (io_bytes == 0) io_bytes = A;
    uint64_t n = 0;
    for (uint64_t i = 0; i < n_ranges; i++) plan_range(&ranges[i], io_bytes, allow_direct, NULL, &n);
    struct st_uring_piece *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) return st_error_set(e, "st_uring_plan: out of memory for %" PRIu64 " pieces", n);
    uint64_t k = 0;
    for (uint64_t i = 0; i < n_ranges; i++) plan_range(&ranges[i], io_bytes, allow_direct, p, &k);
    *out = p;
    *n_out = n;
    return 0;
}
