#include "coordinator/load.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "shm/uring_read.h"
#include "coordinator/load_internal.h"


static uint64_t take(uint64_t *at, uint64_t bytes, uint64_t align)
{
    uint64_t off = (*at + align - 1) / align * align;
    *at = off + bytes;
    return off;
}

static int plan_mat(struct st_load_plan *p, uint32_t model, const struct st_gguf_tensor *t, struct st_layout_mat *m,
                    uint64_t *at, struct st_error *e)
{
    uint32_t run;
    size_t bytes = st_kern_runfmt_size(t->type, t->ne[1], t->ne[0], &run);
    if (!bytes)
        return st_error_set(e, "tensor '%s' (%s, %lld x %lld): no kernel run format", t->name,
                            st_type_name(t->type), (long long)t->ne[1], (long long)t->ne[0]);
    *m = (struct st_layout_mat){.offset = take(at, bytes, 4096), .bytes = bytes, .run_type = run,
                                .gguf_type = t->type, .rows = t->ne[1], .cols = t->ne[0]};
    uint64_t act = st_kern_act_row_bytes(run, t->ne[0]);
    if (act > p->act_row_max) p->act_row_max = act;
    p->jobs[p->n_jobs++] = (struct job){t, model, p->models[model]->gguf->data_offset + t->offset, m};
    p->dir.model[model].weight_bytes += bytes;
    return 0;
}

int st_load_plan_new(struct st_llama_model *const *models, const char *const *paths, uint32_t n_models,
                     struct st_load_plan **out, uint64_t *bytes, struct st_error *e)
{
    *out = NULL;
    struct st_load_plan *p = calloc(1, sizeof *p);
    if (!p) return st_error_set(e, "out of memory");
    p->n_models = n_models;
    p->models = models;
    p->dir.magic = ST_LAYOUT_MAGIC;
    p->dir.n_models = n_models;
    uint32_t max_jobs = 0;
    for (uint32_t i = 0; i < n_models; i++) max_jobs += 7 * models[i]->hp.n_layer + 1;
    p->jobs = calloc(max_jobs, sizeof *p->jobs);
    if (!p->jobs) goto oom;
    uint64_t at = sizeof p->dir;
    for (uint32_t i = 0; i < n_models; i++) {
        const struct st_llama_model *m = models[i];
        struct st_layout_model *lm = &p->dir.model[i];
        p->paths[i] = paths[i];
        lm->hp = m->hp;
        lm->embd_type = m->tok_embd->type;
        lm->embd_row_bytes = st_type_row_bytes(m->tok_embd->type, m->hp.n_embd);
        lm->embd_offset = take(&at, m->tok_embd->n_bytes, 4096);
        lm->output_norm = (struct st_layout_vec){take(&at, m->hp.n_embd * 4, 64), m->hp.n_embd, 0};
        lm->rope_freqs = (struct st_layout_vec){take(&at, m->hp.n_rot / 2 * 4 + 4, 64), m->hp.n_rot / 2, 0};
        lm->layers_offset = take(&at, m->hp.n_layer * sizeof(struct st_layout_layer), 64);
        p->layers[i] = calloc(m->hp.n_layer, sizeof(struct st_layout_layer));
        if (!p->layers[i]) goto oom;
        if (plan_mat(p, i, m->output, &lm->output, &at, e)) goto fail;
        for (uint32_t l = 0; l < m->hp.n_layer; l++) {
            const struct st_llama_layer *L = &m->layers[l];
            struct st_layout_layer *ll = &p->layers[i][l];
            ll->attn_norm = (struct st_layout_vec){take(&at, m->hp.n_embd * 4, 64), m->hp.n_embd, 0};
            ll->ffn_norm = (struct st_layout_vec){take(&at, m->hp.n_embd * 4, 64), m->hp.n_embd, 0};
            if (plan_mat(p, i, L->wq, &ll->wq, &at, e) || plan_mat(p, i, L->wk, &ll->wk, &at, e) ||
                plan_mat(p, i, L->wv, &ll->wv, &at, e) || plan_mat(p, i, L->wo, &ll->wo, &at, e) ||
                plan_mat(p, i, L->ffn_gate, &ll->gate, &at, e) || plan_mat(p, i, L->ffn_up, &ll->up, &at, e) ||
                plan_mat(p, i, L->ffn_down, &ll->down, &at, e))
                goto fail;
        }
    }
    p->bytes = (at + 4095) / 4096 * 4096;
    *bytes = p->bytes;
    *out = p;
    return 0;
oom:
    st_error_set(e, "load plan: out of memory");
fail:
    st_load_plan_free(&p);
    return -1;
}

void st_load_plan_free(struct st_load_plan **pp)
{
    struct st_load_plan *p = *pp;
    if (!p) return;
    for (int i = 0; i < ST_LAYOUT_MAX_MODELS; i++) free(p->layers[i]);
    free(p->jobs);
    free(p);
    *pp = NULL;
}

uint64_t st_load_plan_act_row_max(const struct st_load_plan *p) { return p->act_row_max; }

double st_load_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void st_load_draw(void *ctx, uint64_t done, uint64_t total)
{
    (void)total;
    struct st_load_progress *pr = ctx;
    if (!pr->on) return;
    uint64_t d = pr->base + done;
    int w = 40, fill = (int)(w * (double)d / (double)(pr->total ? pr->total : 1));
    double el = st_load_now_s() - pr->t0;
    fprintf(stderr, "\rloading [%.*s%*s] %5.1f%% %.2f GB/s", fill, "########################################",
            w - fill, "", 100.0 * d / (pr->total ? pr->total : 1), el > 0 ? d / el / 1e9 : 0.0);
}

int st_load_pread(int fd, const char *path, void *dst, uint64_t off, uint64_t len, struct st_error *e)
{
    uint8_t *d = dst;
    while (len > 0) {
        ssize_t got = pread(fd, d, len, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return st_error_set(e, "read(%s, offset %llu): %s", path, (unsigned long long)off, strerror(errno));
        if (got == 0)
            return st_error_set(e, "read(%s, offset %llu): unexpected end of file (was it truncated?)", path,
                                (unsigned long long)off);
        d += got;
        off += (uint64_t)got;
        len -= (uint64_t)got;
    }
    return 0;
}

// One norm vector, read with pread: touching it through the mapping would
// fault in the file around it (mmap read-around, up to read_ahead_kb: 8 MiB
// on our test VM), so that a cold load read much of the file twice (40% of
// l3b's pages were in the page cache after a cold load that was meant to
// bypass it).
static int read_vec(int fd, const char *path, const struct st_llama_model *m, const struct st_gguf_tensor *t,
                    float *out, int64_t n, uint8_t *buf, struct st_error *e)
{
    if (st_load_pread(fd, path, buf, m->gguf->data_offset + t->offset, t->n_bytes, e))
        return st_error_wrap(e, "tensor '%s'", t->name);
    st_dequant_row(t->type, buf, out, n);
    return 0;
}

// The layer table, norms and RoPE frequencies of model i.
static int small_parts(const struct st_load_plan *p, uint32_t i, uint8_t *w, struct st_error *e)
{
    const struct st_llama_model *m = p->models[i];
    const struct st_layout_model *lm = &p->dir.model[i];
    memcpy(w + lm->layers_offset, p->layers[i], m->hp.n_layer * sizeof(struct st_layout_layer));
    st_llama_rope_freqs(m, (float *)(w + lm->rope_freqs.offset));
    int fd = open(p->paths[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_error_set(e, "open(%s): %s", p->paths[i], strerror(errno));
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); // a norm's own pages, no readahead
    uint64_t most = m->output_norm->n_bytes;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        if (m->layers[l].attn_norm->n_bytes > most) most = m->layers[l].attn_norm->n_bytes;
        if (m->layers[l].ffn_norm->n_bytes > most) most = m->layers[l].ffn_norm->n_bytes;
    }
    uint8_t *buf = malloc(most ? most : 1);
    int rc = buf ? read_vec(fd, p->paths[i], m, m->output_norm, (float *)(w + lm->output_norm.offset), m->hp.n_embd, buf, e)
                 : st_error_set(e, "load: out of memory");
    for (uint32_t l = 0; l < m->hp.n_layer && !rc; l++) {
        const struct st_layout_layer *ll = &p->layers[i][l];
        rc = read_vec(fd, p->paths[i], m, m->layers[l].attn_norm, (float *)(w + ll->attn_norm.offset), m->hp.n_embd, buf, e);
        if (!rc)
            rc = read_vec(fd, p->paths[i], m, m->layers[l].ffn_norm, (float *)(w + ll->ffn_norm.offset), m->hp.n_embd, buf, e);
    }
    free(buf);
    close(fd);
    return rc;
}

// Model i's jobs: [*j0, *j1) (the plan lays the models out one after another).
static void model_jobs(const struct st_load_plan *p, uint32_t i, uint32_t *j0, uint32_t *j1)
{
    uint32_t j = 0;
    while (j < p->n_jobs && p->jobs[j].model != i) j++;
    *j0 = j;
    while (j < p->n_jobs && p->jobs[j].model == i) j++;
    *j1 = j;
}

static uint64_t span_bytes(const struct st_load_plan *p, const struct st_load_span *sp)
{
    uint64_t n = sp->embd ? p->models[sp->model]->tok_embd->n_bytes : 0;
    for (uint32_t j = sp->j0; j < sp->j1; j++) n += p->jobs[j].t->n_bytes;
    return n;
}

// The io_uring path for a span: what is already in its run format is read
// in place, the rest staged and repacked.
static int uring_span(const struct st_load_plan *p, const struct st_load_span *sp, const struct st_load_dest *d,
                      const struct st_uring_opts *uo, struct st_load_staging *sg, struct st_load_progress *pr,
                      struct st_load_stats *stats, struct st_error *e)
{
    const struct st_llama_model *m = p->models[sp->model];
    struct st_read_range *ranges = calloc(sp->j1 - sp->j0 + 1, sizeof *ranges);
    if (!ranges) return st_error_set(e, "load: out of memory");
    uint32_t n = 0;
    uint64_t direct_bytes = 0;
    if (sp->embd) {
        ranges[n++] = (struct st_read_range){m->gguf->data_offset + m->tok_embd->offset, m->tok_embd->n_bytes,
                                             d->w + p->dir.model[sp->model].embd_offset};
        direct_bytes += m->tok_embd->n_bytes;
    }
    for (uint32_t j = sp->j0; j < sp->j1; j++) {
        const struct job *jb = &p->jobs[j];
        if (jb->dst->run_type != jb->dst->gguf_type) continue;
        ranges[n++] = (struct st_read_range){jb->file_offset, jb->t->n_bytes, d->w + jb->dst->offset};
        direct_bytes += jb->t->n_bytes;
    }
    struct st_uring_stats us;
    double tr = st_load_now_s();
    int rc = n ? st_uring_read(p->paths[sp->model], ranges, n, uo, &us, e) : 0;
    free(ranges);
    if (rc) return -1;
    stats->read_seconds += st_load_now_s() - tr;
    pr->base += direct_bytes;
    return st_load_staged(p, sp, d, uo, sg, stats, e);
}

// Jobs from j0 on until at least `bytes` of tensor data (or j1).
static uint32_t jobs_for(const struct st_load_plan *p, uint32_t j0, uint32_t j1, uint64_t bytes)
{
    uint64_t n = 0;
    while (j0 < j1 && n < bytes) n += p->jobs[j0++].t->n_bytes;
    return j0;
}

// A file the page cache does not hold, ST_LOAD_AUTO: a probe of each path,
// then the rest by the faster (see st_load_run in load.h).  The threads go
// first and the staging buffers are touched before io_uring's turn: either
// way round, one probe would reuse memory the other had just freed, which a
// VM's host still backs, and look up to 1.5x faster than it is.
static int probe_and_load(const struct st_load_plan *p, uint32_t i, const struct st_load_dest *d, const struct st_load_opts *o,
                          const struct st_uring_opts *uo, struct st_load_staging *sg, struct st_load_progress *pr,
                          struct st_load_stats *stats, struct st_error *e)
{
    uint64_t probe = o->probe_bytes ? o->probe_bytes : ST_LOAD_PROBE_BYTES;
    uint32_t j0, j1;
    model_jobs(p, i, &j0, &j1);
    uint32_t a = jobs_for(p, j0, j1, probe), b = jobs_for(p, a, j1, probe);
    if (b == j1) { // too small to split three ways: io_uring for all of it
        struct st_load_span all = {i, j0, j1, true};
        return uring_span(p, &all, d, uo, sg, pr, stats, e);
    }
    struct st_load_span st = {i, j0, a, false}, su = {i, a, b, false}, rest = {i, b, j1, true};
    double t0 = st_load_now_s();
    if (st_load_resident(p, &st, d, ST_LOAD_THROUGH_COLD, pr, stats, e)) return -1;
    double t1 = st_load_now_s();
    if (st_load_staging_reserve(sg, e)) return -1;
    double t2 = st_load_now_s();
    if (uring_span(p, &su, d, uo, sg, pr, stats, e)) return -1;
    double t3 = st_load_now_s();
    stats->probe_gbps[0] = span_bytes(p, &su) / (t3 - t2) / 1e9;
    stats->probe_gbps[1] = span_bytes(p, &st) / (t1 - t0) / 1e9;
    stats->probed_files++;
    bool threads = o->pick == ST_LOAD_PICK_THREADS ||
                   (o->pick == ST_LOAD_PICK_FASTER && stats->probe_gbps[1] > stats->probe_gbps[0]);
    if (!threads) return uring_span(p, &rest, d, uo, sg, pr, stats, e);
    stats->threads_won++;
    return st_load_resident(p, &rest, d, ST_LOAD_THROUGH_COLD, pr, stats, e);
}

int st_load_run(const struct st_load_plan *p, struct st_region *r, bool progress, enum st_load_mode mode,
                struct st_load_stats *stats, struct st_error *e)
{
    struct st_load_opts o = {.mode = mode, .progress = progress};
    return st_load_run_opts(p, r, &o, stats, e);
}

int st_load_run_opts(const struct st_load_plan *p, struct st_region *r, const struct st_load_opts *o,
                     struct st_load_stats *stats, struct st_error *e)
{
    uint64_t wbytes;
    uint8_t *w = st_region_section(r, ST_REGION_WEIGHTS, &wbytes);
    if (wbytes < p->bytes)
        return st_error_set(e, "weights section of %llu bytes is smaller than the %llu the models need",
                            (unsigned long long)wbytes, (unsigned long long)p->bytes);
    double t0 = st_load_now_s();
    memset(stats, 0, sizeof *stats);
    struct st_load_dest d = {.w = w, .fd = -1};
    if (o->write == ST_LOAD_WRITE_FD || (o->write == ST_LOAD_WRITE_AUTO && st_region_huge_kind(r) == ST_REGION_HUGE_NONE)) {
        d.fd = st_region_fd(r);
        d.fd_off = st_region_header(r)->sections[ST_REGION_WEIGHTS].offset;
        stats->written_by_fd = true;
    }
    // Directory, layer tables, norms and RoPE frequencies: small.
    struct st_layout_dir *dir = (struct st_layout_dir *)w;
    *dir = p->dir;
    for (uint32_t i = 0; i < p->n_models; i++)
        if (small_parts(p, i, w, e)) return -1;
    uint64_t total = 0;
    for (uint32_t j = 0; j < p->n_jobs; j++) total += p->jobs[j].t->n_bytes;
    for (uint32_t i = 0; i < p->n_models; i++) total += p->models[i]->tok_embd->n_bytes;
    struct st_load_progress pr = {o->progress && isatty(2), 0, total, t0};
    struct st_uring_opts uo = {.progress = st_load_draw, .progress_ctx = &pr};
    struct st_load_staging sg;
    memset(&sg, 0, sizeof sg);
    int rc = 0;
    for (uint32_t i = 0; i < p->n_models && !rc; i++) {
        struct st_load_span all = {i, 0, 0, true};
        model_jobs(p, i, &all.j0, &all.j1);
        if (o->mode == ST_LOAD_CACHED || (o->mode == ST_LOAD_AUTO && st_load_is_resident(p->paths[i]))) {
            rc = st_load_resident(p, &all, &d, o->map_all ? ST_LOAD_THROUGH_MAP : ST_LOAD_THROUGH_CACHE, &pr, stats, e);
            stats->cached_files++;
        } else if (o->mode == ST_LOAD_IO_URING) {
            rc = uring_span(p, &all, &d, &uo, &sg, &pr, stats, e);
        } else {
            rc = probe_and_load(p, i, &d, o, &uo, &sg, &pr, stats, e);
        }
    }
    st_load_staging_free(&sg);
    if (rc) return -1;
    stats->file_bytes = total;
    stats->region_bytes = p->bytes;
    stats->seconds = st_load_now_s() - t0;
    stats->gbps = total / stats->seconds / 1e9;
    if (pr.on) fprintf(stderr, "\n");
    return 0;
}
