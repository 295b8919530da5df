// `subternary bench attn --threads N` (see cli/bench_attn_ranks.h).  The
// threads meet at the worker sets' own barrier and claim work from its
// counters through the ranks' own functions (worker/attn_split.h).
#include "cli/bench_attn_ranks.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/bench_util.h"
#include "shm/sync.h"
#include "worker/attn_split.h"

struct rig {
    uint16_t *const *k, *const *v;
    int layers, threads, trials;
    struct st_kern_attn shape;
    float *part, **scratch;
    double *start; // [threads] when each rank left a trial's first barrier
    int n_seg;
    struct st_barrier barrier;
    double best[2];
};

struct thread {
    struct rig *r;
    int rank;
    pthread_t th;
};

// Fails only when the barrier was aborted (threads that could not start).
static int sync_all(struct rig *r)
{
    struct st_error e;
    return st_barrier_wait(&r->barrier, 0, &e);
}

// One layer's attention, this rank's share of it.
static int layer(struct rig *r, int rank, struct st_kern_attn *a, int split)
{
    uint32_t n = (uint32_t)r->threads;
    if (!split) {
        uint64_t b, e;
        struct st_work_counter *wc = st_barrier_work(&r->barrier, 0);
        while (st_work_claim(wc, st_attn_head_chunk(a->n_kv_heads, n), (uint64_t)a->n_kv_heads, &b, &e))
            st_kern_attention(a, (int)b, (int)e, r->scratch[rank]);
        return 0;
    }
    st_attn_split_parts(a, n, st_barrier_work(&r->barrier, 0), r->part, r->n_seg);
    if (sync_all(r)) return -1;
    st_attn_split_merge(a, n, st_barrier_work(&r->barrier, 0), r->part, r->n_seg);
    return 0;
}

static void *run(void *arg)
{
    struct thread *t = arg;
    struct rig *r = t->r;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->rank % (ncpu > 0 ? ncpu : 1), &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    struct st_kern_attn a = r->shape;
    for (int trial = 0; trial < r->trials; trial++)
        for (int split = 0; split < (r->n_seg > 1 ? 2 : 1); split++) {
            if (sync_all(r)) return NULL;
            r->start[t->rank] = st_bench_seconds();
            for (int l = 0; l < r->layers; l++) {
                a.k = r->k[l];
                a.v = r->v[l];
                if (layer(r, t->rank, &a, split) || sync_all(r)) return NULL;
            }
            if (t->rank) continue;
            // From the first rank to start: rank 0's own start alone came
            // late when it was descheduled past the barrier while the others
            // claimed all the work (once 0.11 ms for a 3.3 ms layer).
            double t0 = r->start[0];
            for (int i = 1; i < r->threads; i++) t0 = r->start[i] < t0 ? r->start[i] : t0;
            double s = (st_bench_seconds() - t0) / r->layers;
            if (r->best[split] < 0 || s < r->best[split]) r->best[split] = s;
        }
    return NULL;
}

int st_bench_attn_ranks(uint16_t *const *k, uint16_t *const *v, int layers, const struct st_kern_attn *shape,
                        int threads, int trials, double best[2])
{
    struct rig r = {.k = k, .v = v, .layers = layers, .threads = threads, .trials = trials, .shape = *shape,
                    .n_seg = ST_KERN_ATTN_SEGS(shape->n_ctx), .best = {-1, -1}};
    if (r.n_seg > 1 && !st_kern_attention_splits(shape)) r.n_seg = 1; // the level cannot: heads only
    size_t pn = (size_t)shape->M * shape->n_heads * r.n_seg * ST_KERN_ATTN_PART_FLOATS(shape->head_dim);
    struct thread *th = calloc((size_t)threads, sizeof *th);
    r.part = malloc(pn * sizeof(float));
    r.scratch = calloc((size_t)threads, sizeof *r.scratch);
    r.start = calloc((size_t)threads, sizeof *r.start);
    int rc = -1, started = 0;
    if (!th || !r.part || !r.scratch || !r.start) goto out;
    for (int i = 0; i < threads; i++)
        if (!(r.scratch[i] = malloc((size_t)shape->n_ctx * sizeof(float)))) goto out;
    st_barrier_init(&r.barrier, (uint32_t)threads, ST_BARRIER_DEFAULT_SPIN_NS);
    for (; started < threads; started++) {
        th[started] = (struct thread){.r = &r, .rank = started};
        if (pthread_create(&th[started].th, NULL, run, &th[started])) break;
    }
    if (started < threads) {
        // The started ones wait at the barrier for the rest: abort it.
        st_barrier_abort(&r.barrier);
        fprintf(stderr, "subternary bench attn: could not start %d threads\n", threads);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i].th, NULL);
    if (started == threads) {
        best[0] = r.best[0];
        best[1] = r.best[1];
        rc = 0;
    }
out:
    for (int i = 0; r.scratch && i < threads; i++) free(r.scratch[i]);
    free(r.scratch);
    free(r.start);
    free(r.part);
    free(th);
    return rc;
}
