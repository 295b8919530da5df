// The io_uring path for matrices that need repacking (coordinator/load_internal.h):
// batches of tensors are each read into a staging buffer and repacked from
// it by a task of their own, STAGES tasks at a time.  Batches overlap in
// their reads as well as in their repacks: a device with a long latency
// (a VM's virtual disk) keeps its queue full across the end of a batch,
// where one batch at a time drained it (cold l3b loads alternated: 0.63
// GB/s with one batch at a time, 0.76-0.96 with three).
#include "coordinator/load_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/kernels.h"

#define BATCH_BYTES (UINT64_C(64) << 20) // per staging buffer (a larger tensor gets its own)
#define STAGES ST_LOAD_STAGES
#define MAX_PARTS 8

// What the tasks of one st_load_staged call share.
struct shared {
    const char *path;
    struct st_load_progress *pr;
    pthread_mutex_t draw; // one progress line at a time
    _Atomic uint64_t read_bytes;
};

struct stage {
    const struct st_load_plan *p;
    struct shared *sh;
    const struct st_load_dest *d;
    uint8_t **buf; // the staging's buffer of this stage
    uint32_t a, b;         // jobs [a, b) of the batch
    const void **src;      // [b - a] staged tensor, NULL if not in the batch
    struct st_read_range *sr;
    uint32_t ns;           // ranges in sr
    struct st_uring_opts uo;
    double read_seconds;
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
    uint8_t *scratch = NULL; // the repacked rows on their way to the memfd
    if (st->d->fd >= 0 && !(scratch = malloc(ST_LOAD_PUT_SCRATCH))) {
        pa->rc = st_error_set(&pa->e, "load: out of memory");
        return NULL;
    }
    for (uint32_t j = st->a; j < st->b && !pa->rc; j++) {
        const struct st_layout_mat *m = st->p->jobs[j].dst;
        const uint8_t *src = st->src[j - st->a];
        if (!src) continue;
        int64_t per = (m->rows + pa->parts - 1) / pa->parts;
        int64_t align = st_kern_run_row_align(m->run_type);
        per = (per + align - 1) / align * align;
        int64_t r0 = per * pa->part, r1 = r0 + per < m->rows ? r0 + per : m->rows;
        if (r0 >= r1) continue;
        size_t rb = st_type_row_bytes(m->gguf_type, m->cols);
        pa->rc = st_load_put_rows(st->d, m, src + r0 * rb, r0, r1, scratch, ST_LOAD_PUT_SCRATCH, &pa->e);
    }
    free(scratch);
    return NULL;
}

// Repacks a staged batch on every CPU.
static void repack_batch(struct stage *st)
{
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
}

// A batch's task: read it into the stage's buffer, then repack it.
static void *run_batch(void *v)
{
    struct stage *st = v;
    struct shared *sh = st->sh;
    double t0 = st_load_now_s();
    struct st_uring_stats us;
    if (st_uring_read(sh->path, st->sr, st->ns, &st->uo, &us, &st->e)) {
        st->rc = -1;
        return NULL;
    }
    st->read_seconds = st_load_now_s() - t0;
    uint64_t n = 0;
    for (uint32_t j = 0; j < st->ns; j++) n += st->sr[j].length;
    n += atomic_fetch_add(&sh->read_bytes, n);
    pthread_mutex_lock(&sh->draw);
    st_load_draw(sh->pr, n, sh->pr->total);
    pthread_mutex_unlock(&sh->draw);
    repack_batch(st);
    return NULL;
}

static int finish(struct stage *st, struct st_load_stats *stats, struct st_error *e)
{
    if (!st->busy) return 0;
    pthread_join(st->th, NULL);
    st->busy = false;
    stats->read_seconds += st->read_seconds;
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

#define HUGE_BYTES (UINT64_C(2) << 20)

// A staging buffer in transparent huge pages where the system gives them
// (THP "madvise", Debian's default): touching 192 MB of small pages cost a
// VM about 7 us each (0.35 s, a tenth of a cold l3b load), and each O_DIRECT
// read pins 512 times fewer pages.
static uint8_t *buf_alloc(uint64_t cap)
{
    uint8_t *raw = mmap(NULL, cap + HUGE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *b = (uint8_t *)(((uintptr_t)raw + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
    if (b > raw) munmap(raw, (size_t)(b - raw));
    munmap(b + cap, (size_t)(raw + HUGE_BYTES - b));
    madvise(b, cap, MADV_HUGEPAGE);
    return b;
}

// Makes staging buffer k hold at least `bytes` (never less than a batch).
static int grow(struct st_load_staging *sg, int k, uint64_t bytes, struct st_error *e)
{
    if (sg->cap[k] >= bytes) return 0;
    uint64_t cap = (bytes > BATCH_BYTES ? bytes : BATCH_BYTES) + HUGE_BYTES - 1;
    cap -= cap % HUGE_BYTES;
    if (sg->buf[k]) munmap(sg->buf[k], sg->cap[k]);
    if (!(sg->buf[k] = buf_alloc(cap))) {
        sg->cap[k] = 0;
        return st_error_set(e, "load: cannot allocate a %llu-byte staging buffer", (unsigned long long)cap);
    }
    sg->cap[k] = cap;
    return 0;
}

int st_load_staging_reserve(struct st_load_staging *sg, struct st_error *e)
{
    for (int k = 0; k < STAGES; k++) {
        if (sg->cap[k] >= BATCH_BYTES) continue;
        if (grow(sg, k, BATCH_BYTES, e)) return -1;
        memset(sg->buf[k], 0, BATCH_BYTES);
    }
    return 0;
}

void st_load_staging_free(struct st_load_staging *sg)
{
    for (int k = 0; k < STAGES; k++) {
        if (sg->buf[k]) munmap(sg->buf[k], sg->cap[k]);
        sg->buf[k] = NULL;
        sg->cap[k] = 0;
    }
}

int st_load_staged(const struct st_load_plan *p, const struct st_load_span *sp, const struct st_load_dest *d,
                   const struct st_uring_opts *uo, struct st_load_staging *stg, struct st_load_stats *stats,
                   struct st_error *e)
{
    uint32_t model = sp->model;
    struct shared sh = {.path = p->paths[model], .pr = uo->progress_ctx};
    pthread_mutex_init(&sh.draw, NULL);
    struct stage sg[STAGES];
    int rc = -1;
    for (int k = 0; k < STAGES; k++) {
        sg[k] = (struct stage){.p = p, .sh = &sh, .d = d, .buf = &stg->buf[k], .uo = *uo};
        sg[k].uo.progress = NULL; // drawn per batch: the tasks' reads overlap
    }
    for (int k = 0; k < STAGES; k++) {
        sg[k].src = calloc(p->n_jobs ? p->n_jobs : 1, sizeof *sg[k].src);
        sg[k].sr = calloc(p->n_jobs ? p->n_jobs : 1, sizeof *sg[k].sr);
        if (!sg[k].src || !sg[k].sr) {
            st_error_set(e, "load: out of memory");
            goto out;
        }
    }
    uint32_t a = sp->j0;
    for (int k = 0; a < sp->j1; k = (k + 1) % STAGES) {
        uint64_t staged = 0;
        uint32_t b = a;
        for (; b < sp->j1; b++) {
            if (!needs_repack(&p->jobs[b], model)) continue;
            if (staged && staged + room(&p->jobs[b]) > BATCH_BYTES) break;
            staged += room(&p->jobs[b]);
        }
        if (!staged) break;
        struct stage *st = &sg[k];
        if (finish(st, stats, e)) goto out; // its previous batch must be repacked before the buffer is reused
        if (grow(stg, k, staged, e)) goto out;
        uint64_t off = 0;
        st->ns = 0;
        for (uint32_t j = a; j < b; j++) {
            const struct job *jb = &p->jobs[j];
            st->src[j - a] = NULL;
            if (!needs_repack(jb, model)) continue;
            uint8_t *at = *st->buf + off + jb->file_offset % 4096;
            st->src[j - a] = at;
            st->sr[st->ns++] = (struct st_read_range){jb->file_offset, jb->t->n_bytes, at};
            off += room(jb);
        }
        st->a = a;
        st->b = b;
        st->rc = 0;
        if (pthread_create(&st->th, NULL, run_batch, st)) {
            run_batch(st); // no thread: this batch alone, here
            if (st->rc) {
                *e = st->e;
                goto out;
            }
            stats->read_seconds += st->read_seconds;
        } else {
            st->busy = true;
        }
        a = b;
    }
    rc = 0;
out:
    for (int k = 0; k < STAGES; k++) {
        struct st_error e2 = {{0}};
        if (finish(&sg[k], stats, &e2) && rc == 0) {
            *e = e2;
            rc = -1;
        }
        free(sg[k].src);
        free(sg[k].sr);
    }
    sh.pr->base += atomic_load(&sh.read_bytes);
    pthread_mutex_destroy(&sh.draw);
    return rc;
}
