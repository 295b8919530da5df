#include "worker/chunks.h"

#define CHUNK_MIN_BYTES ((int64_t)512 << 10)
#define CHUNKS_PER_RANK 8
#define UNIT 16 // rows: whole pairs of q8_0x8 groups

static int64_t round_up(int64_t n) { return (n + UNIT - 1) / UNIT * UNIT; }

// Rows of the chunk that starts at the walk's position.
static int64_t chunk_size(const struct st_chunks *c)
{
    int64_t rest = c->rows[c->w] - c->r0, s = c->fixed[c->w];
    if (!s) {
        s = round_up((c->left + 2 * (int64_t)c->n_ranks - 1) / (2 * (int64_t)c->n_ranks));
        if (s < c->min_rows[c->w]) s = c->min_rows[c->w];
    }
    return s < rest ? s : rest;
}

static void walk_start(struct st_chunks *c)
{
    c->index = 0, c->w = 0, c->r0 = 0, c->left = 0;
    for (int i = 0; i < c->n_w; i++) c->left += c->rows[i];
    while (c->w < c->n_w && c->rows[c->w] == 0) c->w++;
    c->r1 = c->w < c->n_w ? chunk_size(c) : 0;
}

static void walk_next(struct st_chunks *c)
{
    c->left -= c->r1 - c->r0;
    c->index++;
    c->r0 = c->r1;
    while (c->w < c->n_w && c->r0 >= c->rows[c->w]) c->w++, c->r0 = 0;
    c->r1 = c->w < c->n_w ? c->r0 + chunk_size(c) : c->r0;
}

void st_chunks_plan(struct st_chunks *c, const struct st_kern_weight *const *ws, int n_w, int share, uint32_t M,
                    uint32_t n_ranks)
{
    ST_ASSERT(n_w >= 1 && n_w <= ST_CHUNKS_MAX_W && share >= 1 && n_ranks >= 1);
    c->n_w = n_w;
    c->n_ranks = n_ranks;
    for (int i = 0; i < n_w; i++) {
        const struct st_kern_weight *w = ws[i];
        c->rows[i] = w->rows;
        int64_t row_bytes = (int64_t)st_kern_run_size(w->type, w->rows, w->cols) / (w->rows ? w->rows : 1) * share;
        if (row_bytes < 1) row_bytes = 1;
        c->min_rows[i] = round_up((CHUNK_MIN_BYTES + row_bytes - 1) / row_bytes);
        if (c->min_rows[i] < UNIT) c->min_rows[i] = UNIT;
        c->fixed[i] = 0;
        if (M > 16) {
            c->fixed[i] = round_up(w->rows / ((int64_t)n_ranks * CHUNKS_PER_RANK));
            if (c->fixed[i] < UNIT) c->fixed[i] = UNIT;
        }
    }
    walk_start(c);
    while (c->w < c->n_w) walk_next(c);
    c->count = c->index;
    walk_start(c);
}

void st_chunks_seek(struct st_chunks *c, uint64_t index)
{
    ST_ASSERT(index >= c->index && index < c->count);
    while (c->index < index) walk_next(c);
}
