#include "cli/bench_util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "cli/args.h"
#include "cli/cpu_ticks.h"
#include "coordinator/rundir.h"

double st_bench_target_weight_bytes(const struct st_bench_rig *r)
{
    uint64_t n;
    const struct st_layout_dir *dir = st_region_section(r->eng->node[0].region, ST_REGION_WEIGHTS, &n);
    return (double)dir->model[ST_MODEL_TARGET].weight_bytes;
}

double st_bench_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void *st_bench_huge_alloc(size_t n)
{
    size_t align = (size_t)2 << 20;
    n = (n + align - 1) / align * align;
    void *p = aligned_alloc(align, n);
    if (p) madvise(p, n, MADV_HUGEPAGE);
    return p;
}

void st_bench_add(struct st_bench_stat *s, double v)
{
    if (s->n < ST_BENCH_MAX_RUNS) s->v[s->n++] = v;
}

double st_bench_mean(const struct st_bench_stat *s)
{
    double m = 0;
    for (int i = 0; i < s->n; i++) m += s->v[i];
    return s->n ? m / s->n : 0;
}

double st_bench_std(const struct st_bench_stat *s)
{
    double m = st_bench_mean(s), v = 0;
    for (int i = 0; i < s->n; i++) v += (s->v[i] - m) * (s->v[i] - m);
    return s->n > 1 ? sqrt(v / (s->n - 1)) : 0;
}

void st_bench_synthetic_ids(uint32_t *ids, size_t n, uint32_t n_vocab)
{
    uint64_t x = 88172645463325252ull; // xorshift64
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (uint32_t)(x % n_vocab);
    }
}

int st_bench_rig_engine(struct st_bench_rig *r, const struct st_bench_opts *o, struct st_error *e)
{
    memset(r, 0, sizeof *r);
    r->steal = NAN;
    if (st_self_exe(r->exe, sizeof r->exe, e) || st_rundir_new(r->dir, sizeof r->dir, e)) return -1;
    struct st_engine_config ec = {.target_path = o->target, .draft_path = o->draft, .n_slots = o->n_slots, .n_ctx = o->n_ctx,
                                  .k_max = o->k_max > ST_ENGINE_K_DEFAULT ? o->k_max : ST_ENGINE_K_DEFAULT, .exe = r->exe, .run_dir = r->dir, .progress = true, .cpus = o->cpus,
                                  .n_nodes = o->n_nodes, .workers_per_node = o->workers, .prefill_chunk = o->prefill_chunk, .quiet = false};
    r->zctx = zmq_ctx_new();
    if (!r->zctx) return st_error_set(e, "zmq_ctx_new failed");
    return st_engine_open(&ec, r->zctx, &r->eng, e);
}

int st_bench_rig_open(struct st_bench_rig *r, const struct st_bench_opts *o)
{
    struct st_error e = {{0}};
    int32_t *prompt = NULL;
    size_t n = 0;
    if (st_bench_rig_engine(r, o, &e)) goto fail;
    if (o->prompt_ids) {
        if (st_args_parse_ids(o->prompt_ids, &prompt, &n, &e)) goto fail;
    } else if (o->prompt_len) { // deterministic pseudo-random ids
        n = o->prompt_len;
        prompt = malloc(n * sizeof *prompt);
        if (!prompt) {
            st_error_set(&e, "out of memory");
            goto fail;
        }
        st_bench_synthetic_ids((uint32_t *)prompt, n, r->eng->n_vocab);
        if (r->eng->tok && st_tok_bos(r->eng->tok) >= 0) prompt[0] = st_tok_bos(r->eng->tok);
    } else {
        const char *text = o->prompt_text ? o->prompt_text : ST_BENCH_PROMPT;
        if (!r->eng->tok) {
            st_error_set(&e, "%s has no tokenizer: give --tokens or --prompt-len", o->target);
            goto fail;
        }
        if (st_tok_encode(r->eng->tok, text, strlen(text), true, &prompt, &n, &e)) goto fail;
    }
    struct st_gen_params gp = {.max_tokens = 1, .speculate = o->draft != NULL};
    if (st_session_start(r->eng, &gp, prompt, (uint32_t)n, ++r->eng->next_session, &r->s, &e)) goto fail;
    free(prompt);
    return 0;
fail:
    fprintf(stderr, "subternary bench: %s\n", e.msg);
    free(prompt);
    st_bench_rig_close(r);
    return -1;
}

void st_bench_rig_close(struct st_bench_rig *r)
{
    st_session_end(&r->s);
    st_engine_close(&r->eng);
    if (r->zctx) zmq_ctx_term(r->zctx);
    r->zctx = NULL;
    if (r->dir[0]) st_rundir_remove(r->dir);
    r->dir[0] = 0;
}

int st_bench_rig_run(struct st_bench_rig *r, const struct st_gen_params *gp, struct st_session_stats *st)
{
    struct st_error e;
    struct st_cpu_ticks t0, t1;
    if (st_session_rewind(r->s, gp, &e)) goto fail;
    int32_t buf[64];
    enum st_finish fin = ST_FINISH_NONE;
    st_cpu_ticks_now(&t0);
    while (fin == ST_FINISH_NONE)
        if (st_session_round(r->s, buf, 64, &fin, &e) < 0) goto fail;
    st_cpu_ticks_now(&t1);
    r->steal = st_cpu_steal_share(&t0, &t1);
    *st = *st_session_stats(r->s);
    return 0;
fail:
    fprintf(stderr, "subternary bench: %s\n", e.msg);
    return -1;
}

FILE *st_bench_csv(const char *dir, const char *name)
{
    char path[1024];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s.csv", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "subternary bench: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

void st_bench_plot(const char *dir, const char *name, const char *script)
{
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "(gnuplot not installed: no %s/%s.png; `make deps` installs it)\n", dir, name);
        return;
    }
    char path[1024], cmd[2300];
    snprintf(path, sizeof path, "%s/%s.gp", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "set terminal pngcairo size 900,560 noenhanced\nset output '%s/%s.png'\nset datafile separator ','\n"
               "set key outside right\nset grid\n%s\n", dir, name, script);
    fclose(f);
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>/dev/null || gnuplot -e \"set terminal png\" '%s' >/dev/null 2>&1", path, path);
    if (system(cmd) == 0) fprintf(stderr, "plot: %s/%s.png\n", dir, name);
}

const char *st_bench_basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int st_bench_parse_list(const char *s, uint32_t *v, int cap)
{
    int n = 0;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || n >= cap) return -1;
        v[n++] = (uint32_t)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

void st_bench_common_defaults(struct st_bench_common *c)
{
    memset(c, 0, sizeof *c);
    c->o.target = "models/demo-target.q8_0.gguf";
    c->o.draft = "models/demo-draft.q4_0.gguf";
    c->n_tokens = 128;
    c->runs = 5;
    c->results = "results";
}

int st_bench_common_opt(int argc, char **argv, int *i, struct st_bench_common *c)
{
    const char *o = argv[*i];
    bool has = *i + 1 < argc;
    if (!strcmp(o, "--quick")) {
        c->quick = true;
        return 1;
    }
    const char *keys[] = {"-m", "-d", "-p", "--tokens", "--prompt-len", "-n", "--runs", "--results", "--cpus",
                          "--nodes", "--workers", "--ctx", "--prefill-chunk", NULL};
    int k = 0;
    while (keys[k] && strcmp(o, keys[k])) k++;
    if (!keys[k]) return 0;
    if (!has) {
        fprintf(stderr, "subternary bench: %s needs a value\n", o);
        return -1;
    }
    const char *v = argv[++*i];
    uint32_t runs = (uint32_t)c->runs;
    int bad = 0;
    switch (k) {
    case 0: c->o.target = v; break;
    case 1: c->o.draft = v; break;
    case 2: c->o.prompt_text = v; break;
    case 3: c->o.prompt_ids = v; break;
    case 4: bad = st_args_u32("bench", o, v, 1, 1 << 20, &c->o.prompt_len); break;
    case 5: bad = st_args_u32("bench", o, v, 1, 1 << 20, &c->n_tokens); break;
    case 6: bad = st_args_u32("bench", o, v, 1, ST_BENCH_MAX_RUNS, &runs); break;
    case 7: c->results = v; break;
    case 8: c->o.cpus = v; break;
    case 9: bad = st_args_u32("bench", o, v, 1, ST_ENGINE_MAX_NODES, &c->o.n_nodes); break;
    case 10: bad = st_args_u32("bench", o, v, 1, 128, &c->o.workers); break;
    case 11: bad = st_args_u32("bench", o, v, 16, 1 << 20, &c->o.n_ctx); break;
    case 12: bad = st_args_u32("bench", o, v, 1, 1024, &c->o.prefill_chunk); break;
    }
    if (bad) return -1;
    c->runs = (int)runs;
    return 1;
}
