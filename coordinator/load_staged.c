// The io_uring path for matrices that need repacking (coordinator/load_internal.h):
// batches of tensors are read into one of two staging buffers while the
// previous batch is repacked from the other, so on a cold cache the repack
// hides behind the reads.
#include "coordinator/load_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/kernels.h"

#define BATCH_BYTES (UINT64_C(64) << 20) // per staging buffer (a larger tensor gets its own)
#define MAX_PARTS 8

struct stage {
    const struct st_load_plan *p;
    uint8_t *w, *buf;
    uint64_t cap;
    uint32_t a, b;         // jobs [a, b) of the batch
    const void **src;      // [b - a] staged tensor, NULL if not in the batch
    struct st_read_range *sr;
    pthread_t th;
    bool busy;
    int rc;
    struct st_error e;
};

// One part of a batch's repack: rows split evenly (in 8-row groups).
struct part {
    const struct stage *st;
    uint32_t part, parts;
    int rc;
    struct st_error e;
};

static void *repack_part(void *v)
{
    struct part *pa = v;
    const struct stage *st = pa->st;
    for (uint32_t j = st->a; j < st->b && !pa->rc; j++) {
        const struct st_layout_mat *m = st->p->jobs[j].dst;
        const uint8_t *src = st->src[j - st->a];
        if (!src) continue;
        int64_t per = (m->rows + pa->parts - 1) / pa->parts;
        per = (per + 7) / 8 * 8;
        int64_t r0 = per * pa->part, r1 = r0 + per < m->rows ? r0 + per : m->rows;
        if (r0 >= r1) continue;
        size_t rb = st_type_row_bytes(m->gguf_type, m->cols);
        pa->rc = st_kern_repack(m->gguf_type, m->rows, m->cols, m->run_type, src + r0 * rb, r0, r1,
                                st->w + m->offset, m->bytes, &pa->e);
    }
    return NULL;
}

// Repacks a staged batch on every CPU (run on its own thread).
static void *repack_batch(void *v)
{
    struct stage *st = v;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t parts = ncpu > 1 ? (ncpu > MAX_PARTS ? MAX_PARTS : (uint32_t)ncpu) : 1;
    pthread_t th[MAX_PARTS];
    struct part pa[MAX_PARTS];
    for (uint32_t t = 0; t < parts; t++) {
        pa[t] = (struct part){st, t, parts, 0, {{0}}};
        if (t > 0 && pthread_create(&th[t], NULL, repack_part, &pa[t])) parts = t;
    }
    repack_part(&pa[0]);
    for (uint32_t t = 1; t < parts; t++) pthread_join(th[t], NULL);
    st->rc = 0;
    for (uint32_t t = 0; t < parts && !st->rc; t++)
        if (pa[t].rc) {
            st->rc = -1;
            st->e = pa[t].e;
        }
    return NULL;
}

static int finish(struct stage *st, struct st_error *e)
{
    if (!st->busy) return 0;
    pthread_join(st->th, NULL);
    st->busy = false;
    if (st->rc) *e = st->e;
    return st->rc;
}

static bool needs_repack(const struct job *jb, uint32_t model)
{
    return jb->model == model && jb->dst->run_type != jb->dst->gguf_type;
}

// Each tensor gets its own 4 KiB-aligned room plus the file offset's
// position in its page, so O_DIRECT can read it.
static uint64_t room(const struct job *jb) { return (jb->t->n_bytes + 4096 + 4095) / 4096 * 4096; }

int st_load_staged(const struct st_load_plan *p, uint32_t model, uint8_t *w, const struct st_uring_opts *uo,
                   struct st_load_stats *stats, struct st_error *e)
{
    struct stage sg[2] = {{.p = p, .w = w}, {.p = p, .w = w}};
    struct st_load_progress *pr = uo->progress_ctx;
    int rc = -1;
    for (int k = 0; k < 2; k++) {
        sg[k].src = calloc(p->n_jobs ? p->n_jobs : 1, sizeof *sg[k].src);
        sg[k].sr = calloc(p->n_jobs ? p->n_jobs : 1, sizeof *sg[k].sr);
        if (!sg[k].src || !sg[k].sr) {
            st_error_set(e, "load: out of memory");
            goto out;
        }
    }
    uint32_t a = 0;
    for (int k = 0; a < p->n_jobs; k ^= 1) {
        uint64_t staged = 0;
        uint32_t b = a, ns = 0;
        for (; b < p->n_jobs; b++) {
            if (!needs_repack(&p->jobs[b], model)) continue;
            if (staged && staged + room(&p->jobs[b]) > BATCH_BYTES) break;
            staged += room(&p->jobs[b]);
        }
        if (!staged) break;
        struct stage *st = &sg[k];
        if (finish(st, e)) goto out; // its previous batch must be repacked before the buffer is reused
        if (st->cap < staged) {
            free(st->buf);
            st->cap = staged > BATCH_BYTES ? staged : BATCH_BYTES;
            if (!(st->buf = aligned_alloc(4096, st->cap))) {
                st->cap = 0;
                st_error_set(e, "load: cannot allocate a %llu-byte staging buffer", (unsigned long long)staged);
                goto out;
            }
        }
        uint64_t off = 0;
        for (uint32_t j = a; j < b; j++) {
            const struct job *jb = &p->jobs[j];
            st->src[j - a] = NULL;
            if (!needs_repack(jb, model)) continue;
            uint8_t *at = st->buf + off + jb->file_offset % 4096;
            st->src[j - a] = at;
            st->sr[ns++] = (struct st_read_range){jb->file_offset, jb->t->n_bytes, at};
            off += room(jb);
        }
        st->a = a;
        st->b = b;
        double tr = st_load_now_s();
        struct st_uring_stats us;
        if (st_uring_read(p->paths[model], st->sr, ns, uo, &us, e)) goto out;
        stats->read_seconds += st_load_now_s() - tr;
        for (uint32_t j = 0; j < ns; j++) pr->base += st->sr[j].length;
        if (pthread_create(&st->th, NULL, repack_batch, st)) {
            repack_batch(st); // no thread: repack here
            if (st->rc) {
                *e = st->e;
                goto out;
            }
        } else {
            st->busy = true;
        }
        a = b;
    }
    rc = 0;
out:
    for (int k = 0; k < 2; k++) {
        struct st_error e2 = {{0}};
        if (finish(&sg[k], &e2) && rc == 0) {
            *e = e2;
            rc = -1;
        }
        free(sg[k].buf);
        free(sg[k].src);
        free(sg[k].sr);
    }
    return rc;
}
