// `subternary bench kernels` (see cli/bench_kernels.h).
//
// Every measurement streams more than 4x the last-level cache of weight
// bytes, cycling over copies of the matrix that together exceed 4x the LLC
// (the vCPUs of a VM may sit on different LLC slices), so the figures are
// memory figures, as a model's layers are.  T
// threads each take an equal share of the rows (whole 8-row groups) and meet
// at a barrier after every product, as the ranks of a worker set do
// (--dynamic: rows claimed in chunks from a shared counter instead, as the
// worker sets do, so that a thread slowed by a neighbour costs less).
// Activations are quantised before timing.  Each figure is the best of
// --trials runs: the machine may be shared; `cpu` reports how many cores'
// worth of CPU the threads actually got in that run (below T: neighbours).
// Within a trial every type, M and the read probe run in turn, so that
// ratios compare runs that saw the same machine.
#include "cli/bench_kernels.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cli/args.h"
#include "cli/bench_util.h"
#include "kernels/kernels.h"

#define MAX_THREADS 64
#define MAX_LIST 32

struct shape {
    int64_t rows, cols;
};

struct bench_type {
    const char *name; // as printed
    uint32_t src;     // GGUF type generated
    uint32_t run;     // run format measured
};

static const struct bench_type TYPES[] = {
    {"q8_0", ST_TYPE_Q8_0, ST_KERN_RUN_Q8_0X8},
    {"q4_0", ST_TYPE_Q4_0, ST_KERN_RUN_Q4_0X8},
    {"ternary-mask", ST_TYPE_TQ2_0, ST_KERN_RUN_TERNARY_MASK},
    {"ternary-code", ST_TYPE_TQ2_0, ST_KERN_RUN_TERNARY_CODE},
    {"f16", ST_TYPE_F16, ST_TYPE_F16},
    {"q4_k", ST_TYPE_Q4_K, ST_TYPE_Q4_K},
    {"q6_k", ST_TYPE_Q6_K, ST_TYPE_Q6_K},
    {"f32", ST_TYPE_F32, ST_TYPE_F32},
    {"bf16", ST_TYPE_BF16, ST_TYPE_BF16},
    {"tq1_0", ST_TYPE_TQ1_0, ST_TYPE_TQ1_0},
    {"tq2_0", ST_TYPE_TQ2_0, ST_TYPE_TQ2_0},
};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])
#define N_DEFAULT_TYPES 7 // the first seven

struct opts {
    int threads, trials;
    bool json, dynamic;
    struct shape shapes[MAX_LIST];
    int n_shapes;
    int types[MAX_LIST], n_types;
    int ms[MAX_LIST], n_ms;
    int level; // -1: best
};

// ---- threads ------------------------------------------------------------------

// A sense-reversing barrier: spin briefly, then yield (the machine may be
// shared, and a descheduled partner must not be spun against for long).
struct barrier {
    _Atomic int count;
    _Atomic int gen;
    int n;
};

static void barrier_wait(struct barrier *b)
{
    int gen = atomic_load_explicit(&b->gen, memory_order_acquire);
    if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) == b->n - 1) {
        atomic_store_explicit(&b->count, 0, memory_order_relaxed);
        atomic_store_explicit(&b->gen, gen + 1, memory_order_release);
        return;
    }
    for (int spins = 0; atomic_load_explicit(&b->gen, memory_order_acquire) == gen; spins++)
        if (spins > 2000) sched_yield();
}

enum job_kind { JOB_NONE, JOB_MATMUL, JOB_READ, JOB_EXIT };

struct pool {
    int n;
    pthread_t tid[MAX_THREADS];
    struct worker_arg { struct pool *p; int t; } args[MAX_THREADS];
    struct barrier bar;
    // The current job, set by thread 0 before the start barrier.
    enum job_kind kind;
    const struct st_kern_weight *copies; // [n_copies]
    int n_copies, iters, M; // M: activation rows, or streams for the read probe
    const void *xq;
    float *y;
    _Atomic int64_t *claims; // per iteration, when rows are claimed dynamically
    const uint8_t *buf;      // read probe
    size_t buf_bytes;
    _Atomic uint64_t sink;
};


// CPU seconds used by all threads of the process (the bench's own).
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

// Sums the bytes of S equal streams over [p, p + n), 64 bytes from each in
// turn (plain SSE2: a stream at memory speed needs no wider loads).  Several
// streams keep more memory requests in flight than one; the probe reports
// the best stream count, so the kernels are held to the machine's real peak.
static uint64_t read_stream(const uint8_t *p, size_t n, int S)
{
    size_t len = n / (size_t)S / 64 * 64;
#if defined(__SSE2__)
    __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
    for (size_t i = 0; i < len; i += 64)
        for (int s = 0; s < S; s++) {
            const uint8_t *q = p + (size_t)s * len + i;
            a = _mm_add_epi64(a, _mm_load_si128((const __m128i *)q));
            b = _mm_add_epi64(b, _mm_load_si128((const __m128i *)(q + 16)));
            c = _mm_add_epi64(c, _mm_load_si128((const __m128i *)(q + 32)));
            d = _mm_add_epi64(d, _mm_load_si128((const __m128i *)(q + 48)));
        }
    a = _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d));
    uint64_t out[2];
    _mm_storeu_si128((__m128i *)out, a);
    return out[0] + out[1];
#else
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < len; i += 64)
        for (int s = 0; s < S; s++) {
            const uint64_t *q = (const uint64_t *)(p + (size_t)s * len + i);
            s0 += q[0] + q[4];
            s1 += q[1] + q[5];
            s2 += q[2] + q[6];
            s3 += q[3] + q[7];
        }
    return s0 + s1 + s2 + s3;
#endif
}

// Rows of thread t: equal shares in whole 8-row groups.
static void share(int64_t rows, int t, int n, int64_t *r0, int64_t *r1)
{
    int64_t groups = (rows + 7) / 8;
    *r0 = groups * t / n * 8;
    *r1 = groups * (t + 1) / n * 8;
    if (*r0 > rows) *r0 = rows;
    if (*r1 > rows) *r1 = rows;
}

#define CLAIM_ROWS 64 // rows per dynamically claimed chunk

static void run_job(struct pool *p, int t)
{
    if (p->kind == JOB_MATMUL) {
        const struct st_kern_weight *w0 = &p->copies[0];
        int64_t r0, r1;
        share(w0->rows, t, p->n, &r0, &r1);
        for (int it = 0; it < p->iters; it++) {
            const struct st_kern_weight *w = &p->copies[it % p->n_copies];
            if (!p->claims) {
                st_kern_matmul(w, p->xq, p->M, p->y, r0, r1);
            } else { // as a worker set does: a slowed thread's chunks go to the others
                int64_t c;
                while ((c = atomic_fetch_add(&p->claims[it], CLAIM_ROWS)) < w->rows)
                    st_kern_matmul(w, p->xq, p->M, p->y, c, c + CLAIM_ROWS < w->rows ? c + CLAIM_ROWS : w->rows);
            }
            barrier_wait(&p->bar);
        }
    } else if (p->kind == JOB_READ) {
        size_t per = p->buf_bytes / (size_t)p->n / 64 * 64;
        uint64_t s = 0;
        for (int it = 0; it < p->iters; it++) s += read_stream(p->buf + per * (size_t)t, per, p->M);
        atomic_fetch_add(&p->sink, s);
        barrier_wait(&p->bar);
    }
}

static void *worker(void *arg)
{
    struct pool *p = ((struct worker_arg *)arg)->p;
    int t = ((struct worker_arg *)arg)->t;
    for (;;) {
        barrier_wait(&p->bar); // start
        if (p->kind == JOB_EXIT) return NULL;
        run_job(p, t);
    }
}

// Runs the current job on every thread; returns its seconds.
static double pool_run(struct pool *p)
{
    barrier_wait(&p->bar);
    double t0 = st_bench_seconds();
    run_job(p, 0);
    return st_bench_seconds() - t0;
}

static void pool_stop(struct pool *p)
{
    p->kind = JOB_EXIT;
    barrier_wait(&p->bar);
    for (int i = 1; i < p->n; i++) pthread_join(p->tid[i], NULL);
}

static int pool_start(struct pool *p, int n)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->bar.n = n;
    for (int i = 1; i < n; i++) {
        p->args[i] = (struct worker_arg){p, i};
        if (pthread_create(&p->tid[i], NULL, worker, &p->args[i])) {
            // Stop the i - 1 started, which wait in the pool the callers
            // free: once all of them wait at the barrier, it is one of i.
            while (atomic_load(&p->bar.count) < i - 1) sched_yield();
            p->n = p->bar.n = i;
            pool_stop(p);
            return -1;
        }
    }
    return 0;
}

// ---- data -----------------------------------------------------------------------

static uint64_t rng = 0x853c49e6748fea9bu;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void)
{
    return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f;
}

// A GGUF tensor of random but well-formed content (finite scales, ternary
// codes 0..2) so that every kernel runs its normal path.
static void *gen_tensor(uint32_t type, int64_t rows, int64_t cols)
{
    size_t n = st_type_row_bytes(type, cols) * (size_t)rows;
    uint8_t *p = st_bench_huge_alloc(n);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
    int64_t nel = rows * cols;
    const struct st_type_info *ti = st_type_get(type);
    for (int64_t i = 0; i < nel / ti->block_elems; i++) {
        uint8_t *b = p + (size_t)i * ti->block_bytes;
        uint16_t d = st_f32_to_f16(rndf() * 0.01f);
        switch (type) {
        case ST_TYPE_F32: ((float *)p)[i] = rndf(); break;
        case ST_TYPE_F16: ((uint16_t *)p)[i] = st_f32_to_f16(rndf()); break;
        case ST_TYPE_BF16: ((uint16_t *)p)[i] = st_f32_to_bf16(rndf()); break;
        case ST_TYPE_Q8_0: ((struct st_block_q8_0 *)b)->d = d; break;
        case ST_TYPE_Q4_0: ((struct st_block_q4_0 *)b)->d = d; break;
        case ST_TYPE_Q4_K:
            ((struct st_block_q4_k *)b)->d = d;
            ((struct st_block_q4_k *)b)->dmin = d;
            break;
        case ST_TYPE_Q6_K: ((struct st_block_q6_k *)b)->d = d; break;
        case ST_TYPE_TQ1_0: ((struct st_block_tq1_0 *)b)->d = d; break;
        case ST_TYPE_TQ2_0: {
            struct st_block_tq2_0 *t = (struct st_block_tq2_0 *)b;
            for (int j = 0; j < 64; j++)
                if ((t->qs[j] & 0xaa) & ((t->qs[j] & 0x55) << 1)) t->qs[j] &= 0x55; // no code 3
            t->d = d;
            break;
        }
        }
    }
    return p;
}

// Last-level cache size from sysfs (cpuid-based sysconf figures are wrong in
// some VMs); 32 MiB if unknown.
static size_t llc_bytes(void)
{
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            size_t v = strtoull(buf, &end, 10);
            if (*end == 'K') v <<= 10;
            else if (*end == 'M') v <<= 20;
            best = v > best ? v : best;
        }
        fclose(f);
    }
    return best ? best : (size_t)32 << 20;
}

// ---- measurements -----------------------------------------------------------------

// Best read bandwidth in GB/s over the probe buffer (8x the LLC, allocated
// once), over trials and 1, 4 or 8 streams per thread.
static double probe_read(struct pool *p, int trials)
{
    p->kind = JOB_READ;
    p->iters = 2;
    double best = 0;
    static const int streams[] = {1, 4, 8};
    for (int t = 0; t < trials; t++)
        for (int si = 0; si < 3; si++) {
            p->M = streams[si];
            size_t per = p->buf_bytes / (size_t)p->n / 64 * 64, len = per / (size_t)p->M / 64 * 64;
            double s = pool_run(p);
            double gbps = (double)len * p->M * p->n * p->iters / s / 1e9;
            if (gbps > best) best = gbps;
        }
    return best;
}

static int probe_init(struct pool *p)
{
    size_t n = 8 * llc_bytes();
    uint8_t *buf = st_bench_huge_alloc(n);
    if (!buf) return -1;
    memset(buf, 1, n);
    p->buf = buf;
    p->buf_bytes = n;
    return 0;
}

struct result {
    int64_t rows, cols;
    const char *type;
    int m;
    double seconds, gbps, gops;
    double cpu;     // cores' worth of CPU the threads got in the best trial
    double read_bw; // the probe's best over the same trials, interleaved
};

// One type's weights for one shape, ready to run: copies exceeding 4x the
// LLC, each streamed once per trial, and quantised activations.
struct prepared {
    const struct bench_type *bt;
    size_t run_bytes;
    uint8_t *arena;
    struct st_kern_weight *copies;
    int n_copies;
    void *xq;
    float *y;
};

static void release(struct prepared *pr)
{
    free(pr->arena);
    free(pr->copies);
    free(pr->xq);
    free(pr->y);
    memset(pr, 0, sizeof *pr);
}

static int prepare(const struct opts *o, struct shape sh, const struct bench_type *bt, struct prepared *pr)
{
    struct st_error e;
    *pr = (struct prepared){.bt = bt, .run_bytes = st_kern_run_size(bt->run, sh.rows, sh.cols)};
    if (pr->run_bytes == 0) {
        fprintf(stderr, "bench kernels: %s cannot hold %lldx%lld\n", bt->name, (long long)sh.rows,
                (long long)sh.cols);
        return -1;
    }
    pr->n_copies = (int)((4 * llc_bytes() + pr->run_bytes - 1) / pr->run_bytes) + 1;
    int mmax = 1;
    for (int i = 0; i < o->n_ms; i++) mmax = o->ms[i] > mmax ? o->ms[i] : mmax;
    pr->arena = st_bench_huge_alloc(pr->run_bytes * (size_t)pr->n_copies);
    pr->copies = calloc((size_t)pr->n_copies, sizeof *pr->copies);
    pr->xq = malloc(st_kern_act_row_bytes(bt->run, sh.cols) * (size_t)mmax);
    pr->y = malloc(sizeof(float) * (size_t)mmax * sh.rows);
    void *src = gen_tensor(bt->src, sh.rows, sh.cols);
    float *x = malloc(sizeof(float) * (size_t)mmax * sh.cols);
    int rc = -1;
    if (!pr->arena || !pr->copies || !pr->xq || !pr->y || !src || !x) {
        fprintf(stderr, "bench kernels: out of memory for %s %lldx%lld\n", bt->name, (long long)sh.rows,
                (long long)sh.cols);
        goto out;
    }
    if (st_kern_repack(bt->src, sh.rows, sh.cols, bt->run, src, 0, sh.rows, pr->arena, pr->run_bytes, &e)) {
        fprintf(stderr, "bench kernels: %s\n", e.msg);
        goto out;
    }
    for (int c = 0; c < pr->n_copies; c++) {
        if (c) memcpy(pr->arena + pr->run_bytes * c, pr->arena, pr->run_bytes);
        if (st_kern_weight_init(&pr->copies[c], bt->run, sh.rows, sh.cols, pr->arena + pr->run_bytes * c, &e)) {
            fprintf(stderr, "bench kernels: %s\n", e.msg);
            goto out;
        }
    }
    for (int64_t i = 0; i < (int64_t)mmax * sh.cols; i++) x[i] = rndf();
    st_kern_quantize_act(bt->run, x, pr->xq, mmax, sh.cols);
    rc = 0;
out:
    free(src);
    free(x);
    if (rc) release(pr);
    return rc;
}

// One trial of M rows against every copy once: seconds per product.
static int run_trial(struct pool *p, const struct opts *o, struct prepared *pr, int M, double *seconds,
                     double *cpu)
{
    p->kind = JOB_MATMUL;
    p->copies = pr->copies;
    p->n_copies = p->iters = pr->n_copies;
    p->M = M;
    p->xq = pr->xq;
    p->y = pr->y;
    p->claims = NULL;
    if (o->dynamic && !(p->claims = calloc((size_t)p->iters, sizeof *p->claims))) {
        fprintf(stderr, "bench kernels: out of memory for %d row counters\n", p->iters);
        return -1;
    }
    double c0 = cpu_s(), wall = pool_run(p);
    *seconds = wall / p->iters;
    *cpu = (cpu_s() - c0) / wall;
    free(p->claims);
    p->claims = NULL;
    return 0;
}

// Measures one shape: every type and M, and the read probe, in turn within
// each trial, so that the ratios between them (share of bandwidth, M = 8
// over M = 1, ternary over Q4_0) compare runs that saw the same machine;
// on a shared host the bandwidth drifts by tens of percent over seconds.
// Appends one result per type and M.
static int measure_shape(struct pool *p, const struct opts *o, struct shape sh, struct result *res, int *n_res)
{
    struct prepared pr[MAX_LIST] = {0};
    int rc = -1, first = *n_res;
    for (int t = 0; t < o->n_types; t++)
        if (prepare(o, sh, &TYPES[o->types[t]], &pr[t])) goto out;
    for (int t = 0; t < o->n_types; t++)
        for (int i = 0; i < o->n_ms; i++)
            res[first + t * o->n_ms + i] = (struct result){
                .rows = sh.rows, .cols = sh.cols, .type = TYPES[o->types[t]].name, .m = o->ms[i], .seconds = INFINITY};
    double bw = 0;
    for (int trial = 0; trial < o->trials; trial++) {
        double b = probe_read(p, 1);
        bw = b > bw ? b : bw;
        for (int t = 0; t < o->n_types; t++)
            for (int i = 0; i < o->n_ms; i++) {
                struct result *r = &res[first + t * o->n_ms + i];
                double s, cpu;
                if (run_trial(p, o, &pr[t], r->m, &s, &cpu)) goto out;
                if (s < r->seconds) {
                    r->seconds = s;
                    r->cpu = cpu;
                }
            }
    }
    *n_res += o->n_types * o->n_ms;
    for (int k = first; k < *n_res; k++) {
        struct result *r = &res[k];
        const struct prepared *q = &pr[(k - first) / o->n_ms];
        r->gbps = q->run_bytes / r->seconds / 1e9;
        r->gops = 2.0 * sh.rows * sh.cols * r->m / r->seconds / 1e9;
        r->read_bw = bw;
        if (!o->json)
            printf("%6lldx%-6lld %-13s M=%-3d %9.3f ms %7.2f GB/s %8.2f GOP/s  cpu %.2f\n", (long long)sh.rows,
                   (long long)sh.cols, r->type, r->m, r->seconds * 1e3, r->gbps, r->gops, r->cpu);
    }
    if (!o->json) {
        printf("%6lldx%-6lld read probe            %7.2f GB/s (best of the same trials)\n", (long long)sh.rows,
               (long long)sh.cols, bw);
        fflush(stdout);
    }
    rc = 0;
out:
    for (int t = 0; t < o->n_types; t++) release(&pr[t]);
    return rc;
}

static const struct result *find(const struct result *res, int n, int64_t rows, int64_t cols, const char *type,
                                 int m)
{
    for (int i = 0; i < n; i++)
        if (res[i].rows == rows && res[i].cols == cols && res[i].m == m && !strcmp(res[i].type, type))
            return &res[i];
    return NULL;
}

// The targets, for the shapes measured.
static void summary(const struct result *res, int n)
{
    printf("\n(shares of the read bandwidth the probe measured between the same trials)\n");
    for (int i = 0; i < n; i++) {
        const struct result *r = &res[i];
        if (r->m != 1) continue;
        if (!strcmp(r->type, "q8_0") || !strcmp(r->type, "q4_0"))
            printf("%-5s GEMV %lldx%lld: %.0f%% of read bandwidth %.2f GB/s (target >= 90%%)\n", r->type,
                   (long long)r->rows, (long long)r->cols, 100 * r->gbps / r->read_bw, r->read_bw);
        if (!strcmp(r->type, "q8_0")) {
            const struct result *r5 = find(res, n, r->rows, r->cols, "q8_0", 5);
            const struct result *r8 = find(res, n, r->rows, r->cols, "q8_0", 8);
            if (r5) printf("      M=5 / M=1 time: %.2f (target <= 1.6)\n", r5->seconds / r->seconds);
            if (r8) printf("      M=8 / M=1 time: %.2f (target <= 2.0)\n", r8->seconds / r->seconds);
        }
        if (!strncmp(r->type, "ternary", 7)) {
            const struct result *q4 = find(res, n, r->rows, r->cols, "q4_0", 1);
            if (q4)
                printf("%s GEMV %lldx%lld: %.2fx faster than q4_0 (target >= 1.8)\n", r->type,
                       (long long)r->rows, (long long)r->cols, q4->seconds / r->seconds);
        }
    }
}

// ---- options ------------------------------------------------------------------------

static int usage(void)
{
    fprintf(stderr,
            "usage: subternary bench kernels [--threads T] [--json] [--quick] [--trials N] [--dynamic]\n"
            "       [--shapes RxC,...] [--types NAME,...] [--m M,...] [--level scalar|avx2|avx512|amx]\n"
            "types:");
    for (int i = 0; i < N_TYPES; i++) fprintf(stderr, " %s", TYPES[i].name);
    fprintf(stderr, "\n");
    return 2;
}

static int parse_list(char *s, int *out, int cap, int (*one)(const char *))
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        int v = one(tok);
        if (v < 0 || n == cap) return -1;
        out[n++] = v;
    }
    return n;
}

static int type_index(const char *name)
{
    for (int i = 0; i < N_TYPES; i++)
        if (!strcmp(name, TYPES[i].name)) return i;
    return -1;
}

static int m_value(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return end != s && !*end && v >= 1 && v <= 512 ? (int)v : -1;
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct shape full[] = {{3072, 3072}, {1024, 3072}, {8192, 3072}, {3072, 8192},
                                        {2048, 2048}, {8192, 2048}, {2048, 8192}};
    static const struct shape quick[] = {{3072, 3072}, {2048, 8192}, {8192, 2048}};
    static const int full_m[] = {1, 2, 4, 5, 8, 16}, quick_m[] = {1, 5, 8};
    *o = (struct opts){.threads = 2, .trials = 3, .level = -1};
    bool q = false;
    char *shapes = NULL, *types = NULL, *ms = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--dynamic")) o->dynamic = true;
        else if (!strcmp(a, "--quick")) q = true;
        else if (!strcmp(a, "--threads") && v) {
            if (st_args_int("bench kernels", a, argv[++i], 1, MAX_THREADS, &o->threads)) return 2;
        } else if (!strcmp(a, "--trials") && v) {
            if (st_args_int("bench kernels", a, argv[++i], 1, 1000, &o->trials)) return 2;
        }
        else if (!strcmp(a, "--shapes") && v) shapes = argv[++i];
        else if (!strcmp(a, "--types") && v) types = argv[++i];
        else if (!strcmp(a, "--m") && v) ms = argv[++i];
        else if (!strcmp(a, "--level") && v) {
            o->level = -1;
            for (int l = 0; l < ST_KERN_LEVEL_COUNT; l++)
                if (!strcmp(v, st_kern_level_name((enum st_kern_level)l))) o->level = l;
            if (o->level < 0) return usage();
            i++;
        } else
            return usage();
    }
    if (o->threads < 1 || o->threads > MAX_THREADS || o->trials < 1) return usage();
    const struct shape *sl = q ? quick : full;
    o->n_shapes = q ? 3 : 7;
    memcpy(o->shapes, sl, sizeof(struct shape) * o->n_shapes);
    if (shapes) {
        o->n_shapes = 0;
        for (char *tok = strtok(shapes, ","); tok; tok = strtok(NULL, ",")) {
            long long r, c;
            if (sscanf(tok, "%lldx%lld", &r, &c) != 2 || r < 1 || c < 1 || o->n_shapes == MAX_LIST) return usage();
            o->shapes[o->n_shapes++] = (struct shape){r, c};
        }
    }
    o->n_types = q ? 4 : N_DEFAULT_TYPES;
    for (int i = 0; i < o->n_types; i++) o->types[i] = i;
    if (types && (o->n_types = parse_list(types, o->types, MAX_LIST, type_index)) < 1) return usage();
    o->n_ms = q ? 3 : 6;
    memcpy(o->ms, q ? quick_m : full_m, sizeof(int) * o->n_ms);
    if (ms && (o->n_ms = parse_list(ms, o->ms, MAX_LIST, m_value)) < 1) return usage();
    return 0;
}

int st_bench_kernels(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o)) return 2;
    st_kern_init();
    if (o.level >= 0 && st_kern_set_level((enum st_kern_level)o.level)) {
        fprintf(stderr, "bench kernels: level %s not available on this CPU\n",
                st_kern_level_name((enum st_kern_level)o.level));
        return 1;
    }
    struct pool *p = calloc(1, sizeof *p);
    struct result *res = calloc((size_t)o.n_shapes * o.n_types * o.n_ms, sizeof *res);
    int n_res = 0, rc = 1;
    if (!p || !res || pool_start(p, o.threads)) {
        fprintf(stderr, "bench kernels: cannot start %d threads\n", o.threads);
        free(p);
        free(res);
        return 1;
    }
    if (probe_init(p)) {
        fprintf(stderr, "bench kernels: out of memory for the read probe\n");
        goto out;
    }
    double bw = probe_read(p, o.trials);
    if (!o.json)
        printf("kernels: level %s, %d threads (rows %s), LLC %zu MiB, read bandwidth %.2f GB/s\n",
               st_kern_level_name(st_kern_cpu.level), o.threads, o.dynamic ? "claimed dynamically" : "in equal shares",
               llc_bytes() >> 20, bw);
    for (int s = 0; s < o.n_shapes; s++)
        if (measure_shape(p, &o, o.shapes[s], res, &n_res)) goto out;
    for (int i = 0; i < n_res; i++) bw = res[i].read_bw > bw ? res[i].read_bw : bw;
    if (o.json) {
        printf("{\"threads\": %d, \"level\": \"%s\", \"rows_split\": \"%s\", \"read_bw_gbps\": %.3f, "
               "\"results\": [",
               o.threads, st_kern_level_name(st_kern_cpu.level), o.dynamic ? "dynamic" : "halves", bw);
        for (int i = 0; i < n_res; i++)
            printf("%s\n  {\"rows\": %lld, \"cols\": %lld, \"type\": \"%s\", \"m\": %d, \"seconds\": %.9f, "
                   "\"gbps\": %.3f, \"gops\": %.3f, \"cpu\": %.2f, \"read_bw_gbps\": %.3f}",
                   i ? "," : "", (long long)res[i].rows, (long long)res[i].cols, res[i].type, res[i].m,
                   res[i].seconds, res[i].gbps, res[i].gops, res[i].cpu, res[i].read_bw);
        printf("]}\n");
    } else {
        summary(res, n_res);
    }
    rc = 0;
out:
    pool_stop(p);
    free((void *)p->buf);
    free(p);
    free(res);
    return rc;
}

double st_bench_read_probe(int threads, int trials)
{
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads; // the pool's arrays
    struct pool *p = calloc(1, sizeof *p);
    if (!p) return 0;
    if (pool_start(p, threads)) {
        free(p);
        return 0;
    }
    double bw = probe_init(p) ? 0 : probe_read(p, trials);
    pool_stop(p);
    free((void *)p->buf);
    free(p);
    return bw;
}
