#include "cli/bench_llamacpp.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/bench_kernels.h"
#include "cli/child.h"
#include "cli/cpu_ticks.h"
#include "cli/llamacpp_parse.h"

#define CHILD_TIMEOUT_S 900.0 // one llama.cpp run, model load included

void st_llamacpp_opts_defaults(struct st_llamacpp_opts *o)
{
    memset(o, 0, sizeof *o);
    o->ks[0] = 3, o->ks[1] = 5, o->ks[2] = 8;
    o->nk = 3;
}

int st_llamacpp_opt(int argc, char **argv, int *i, struct st_llamacpp_opts *o)
{
    const char *opt = argv[*i];
    if (strcmp(opt, "--compare-llamacpp") && strcmp(opt, "--llamacpp-draft") && strcmp(opt, "--compare-k")) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "subternary bench: %s needs a value\n", opt);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(opt, "--compare-llamacpp")) {
        o->dir = v;
    } else if (!strcmp(opt, "--llamacpp-draft")) {
        o->nk = st_bench_parse_list(v, o->ks, ST_LLAMACPP_MAX_K);
        for (int k = 0; k < o->nk; k++)
            if (o->ks[k] < 1) o->nk = -1;
        if (o->nk < 1) {
            fprintf(stderr, "subternary bench: --llamacpp-draft wants 1 to %d draft lengths >= 1, e.g. 3,5,8\n",
                    ST_LLAMACPP_MAX_K);
            return -1;
        }
    } else {
        if (st_args_u32("bench", opt, v, 0, ST_ENGINE_K_LIMIT, &o->our_k)) return -1;
    }
    return 1;
}

// Says once, before any run, which llama.cpp program cannot run at all.
static bool have_program(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (access(path, X_OK) == 0) return true;
    fprintf(stderr, "subternary bench: %s is missing or not executable: no %s figures (the bench goes on)\n", path,
            name);
    return false;
}

int st_llamacpp_cmp_open(struct st_llamacpp_cmp *m, const struct st_llamacpp_opts *o,
                         const struct st_bench_common *c, const char *name)
{
    memset(m, 0, sizeof *m);
    m->o = *o;
    if (c->o.prompt_ids || c->o.prompt_len) {
        fprintf(stderr, "subternary bench: --compare-llamacpp needs a text prompt (-p TEXT or the default), "
                        "not --tokens or --prompt-len\n");
        return -1;
    }
    m->prompt = c->o.prompt_text ? c->o.prompt_text : ST_BENCH_PROMPT;
    snprintf(m->log_path, sizeof m->log_path, "%s/%s.log", c->results, name);
    if (!(m->csv = st_bench_csv(c->results, name))) return -1;
    if (!(m->log = fopen(m->log_path, "w"))) {
        fprintf(stderr, "subternary bench: cannot write %s\n", m->log_path);
        st_llamacpp_cmp_close(m);
        return -1;
    }
    fprintf(m->csv, "draft,row,k,mean,std,n,acceptance,best,steal\n");
    return 0;
}

void st_llamacpp_cmp_close(struct st_llamacpp_cmp *m)
{
    if (m->csv) fclose(m->csv);
    if (m->log) fclose(m->log);
    m->csv = m->log = NULL;
}

// One measured series: a figure per repetition, NAN where a run failed.
struct series {
    double tps[ST_BENCH_MAX_RUNS], acc[ST_BENCH_MAX_RUNS];
    double steal[ST_BENCH_MAX_RUNS]; // share of CPU time stolen during the run (llama.cpp's: load included)
    bool off; // missing program, or failed once: the same error would repeat
};

struct cmp_runs {
    struct series our_ar, our_sp, ll_ar, ll_sp[ST_LLAMACPP_MAX_K];
    // The read bandwidth just before our AR run and just before
    // llama-bench's, GB/s (NAN: not measured): on a shared host it moves by
    // a third within minutes, and an AR decode follows it.
    double probe_ours[ST_BENCH_MAX_RUNS], probe_ll[ST_BENCH_MAX_RUNS];
    double weight_bytes; // the target's matrices: what an AR step streams
    char threads[16], n[16];
};

static int run_failed(struct st_llamacpp_cmp *m, struct series *s, const char *what, int r, const struct st_error *e)
{
    fprintf(stderr, "subternary bench: %s, repetition %d: %s (see %s); no more runs of it\n", what, r + 1, e->msg,
            m->log_path);
    s->off = true;
    s->steal[r] = NAN; // no figure of this run, so no steal beside it
    return -1;
}

// Runs one llama.cpp program (`what` names it in messages); a failure turns
// its series off with a message.
static int run_child(struct st_llamacpp_cmp *m, char **argv, struct series *s, const char *what, int r,
                     struct st_child_out *out)
{
    struct st_error e;
    fprintf(m->log, "\n#### %s, repetition %d\n", what, r + 1);
    struct st_cpu_ticks t0, t1;
    st_cpu_ticks_now(&t0);
    int rc = st_child_run(argv, CHILD_TIMEOUT_S, m->log, out, &e);
    st_cpu_ticks_now(&t1);
    s->steal[r] = st_cpu_steal_share(&t0, &t1);
    if (rc == 0) return 0;
    st_child_out_free(out);
    return run_failed(m, s, what, r, &e);
}

static void llama_ar(struct st_llamacpp_cmp *m, const struct st_bench_common *c, struct cmp_runs *cr, int r)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/llama-bench", m->o.dir);
    char *argv[] = {path, "-m", (char *)c->o.target, "-n", cr->n, "-p", "0", "-t", cr->threads, "-r", "1",
                    "-o", "json", NULL};
    struct st_child_out out;
    struct st_error e;
    if (run_child(m, argv, &cr->ll_ar, "llama-bench", r, &out)) return;
    if (st_llamacpp_parse_bench(out.out, &cr->ll_ar.tps[r], &e)) run_failed(m, &cr->ll_ar, "llama-bench", r, &e);
    st_child_out_free(&out);
}

static void llama_spec(struct st_llamacpp_cmp *m, const struct st_bench_common *c, const char *draft,
                       struct cmp_runs *cr, int ki, int r)
{
    char path[1024], k[16], what[64];
    snprintf(path, sizeof path, "%s/llama-speculative", m->o.dir);
    snprintf(k, sizeof k, "%u", m->o.ks[ki]);
    snprintf(what, sizeof what, "llama-speculative --draft-max %s", k);
    // Greedy, as our runs; the rest (draft-p-min, context) are llama.cpp's defaults.
    char *argv[] = {path, "-m", (char *)c->o.target, "-md", (char *)draft, "-p", (char *)m->prompt, "-n", cr->n,
                    "-t", cr->threads, "-td", cr->threads, "--draft-max", k, "--draft-min", "0", "--temp", "0", NULL};
    struct series *s = &cr->ll_sp[ki];
    struct st_child_out out;
    struct st_error e;
    struct st_llamacpp_spec_figures f;
    if (run_child(m, argv, s, what, r, &out)) return;
    if (st_llamacpp_parse_spec(out.err, &f, &e)) {
        run_failed(m, s, what, r, &e);
    } else {
        s->tps[r] = f.tps;
        s->acc[r] = f.accept >= 0 ? f.accept : NAN;
    }
    st_child_out_free(&out);
}

// One repetition in the fixed order: ours AR, ours speculative, llama-bench,
// llama-speculative per K.
static int repetition(struct st_llamacpp_cmp *m, struct st_bench_rig *rig, const struct st_bench_common *c,
                      const char *draft, struct cmp_runs *cr, int r)
{
    struct st_gen_params gp = {.max_tokens = c->n_tokens, .speculate = false, .stop_at_eos = false};
    struct st_session_stats a, s;
    const int threads = (int)rig->eng->node[0].n_cpus; // as llama.cpp's -t
    cr->probe_ours[r] = st_bench_read_probe(threads, 1);
    if (st_bench_rig_run(rig, &gp, &a)) return -1;
    cr->our_ar.steal[r] = rig->steal;
    gp.speculate = true, gp.k = m->o.our_k, gp.governor = false;
    if (st_bench_rig_run(rig, &gp, &s)) return -1;
    cr->our_sp.steal[r] = rig->steal;
    cr->our_ar.tps[r] = a.tokens / a.seconds;
    cr->our_sp.tps[r] = s.tokens / s.seconds;
    cr->our_sp.acc[r] = s.drafted ? (double)s.accepted / s.drafted : 0;
    if (!cr->ll_ar.off) {
        cr->probe_ll[r] = st_bench_read_probe(threads, 1);
        llama_ar(m, c, cr, r);
    }
    for (int k = 0; k < m->o.nk; k++)
        if (!cr->ll_sp[k].off) llama_spec(m, c, draft, cr, k, r);
    return 0;
}

// Mean ± std over the repetitions that produced a figure.
static struct st_bench_stat stat_of(const double *v, int n)
{
    struct st_bench_stat s = {0};
    for (int r = 0; r < n; r++)
        if (!isnan(v[r])) st_bench_add(&s, v[r]);
    return s;
}

// a[r] / b[r] over the repetitions where both ran: the ratio pair by pair,
// so a slow moment of the machine cancels out.  NULL: a series that never ran.
static struct st_bench_stat ratio_of(const double *a, const double *b, int n)
{
    struct st_bench_stat s = {0};
    for (int r = 0; a && b && r < n; r++)
        if (!isnan(a[r]) && !isnan(b[r]) && b[r] > 0) st_bench_add(&s, a[r] / b[r]);
    return s;
}

// The K of llama-speculative with the highest mean tokens/s; -1 if none ran.
static int best_k(const struct cmp_runs *cr, int nk, int runs)
{
    int best = -1;
    double top = 0;
    for (int k = 0; k < nk; k++) {
        struct st_bench_stat s = stat_of(cr->ll_sp[k].tps, runs);
        if (s.n && st_bench_mean(&s) > top) top = st_bench_mean(&s), best = k;
    }
    return best;
}

// One line of the table and of the CSV; acc NULL: no acceptance column,
// steal NULL: no steal column (the ratios).
static void emit(struct st_llamacpp_cmp *m, const char *draft, const char *row, uint32_t k, const char *label,
                 const struct st_bench_stat *s, const double *acc, const double *steal, int runs, bool best)
{
    struct st_bench_stat a = acc ? stat_of(acc, runs) : (struct st_bench_stat){0};
    struct st_bench_stat st = steal ? stat_of(steal, runs) : (struct st_bench_stat){0};
    char ac[16] = "", sc[16] = "";
    if (a.n) snprintf(ac, sizeof ac, "%.3f", st_bench_mean(&a));
    if (st.n) snprintf(sc, sizeof sc, "%.1f", 100 * st_bench_mean(&st));
    bool ratio = !strncmp(row, "ratio", 5);
    if (!s->n) printf("%-36s %19s\n", label, "(no figures)");
    else if (ratio) printf("%-36s %8.3f ± %6.3f   (%d pairs)\n", label, st_bench_mean(s), st_bench_std(s), s->n);
    else printf("%-36s %8.2f ± %6.2f %8s %8s%s\n", label, st_bench_mean(s), st_bench_std(s), ac, sc,
                best ? "  <- best K" : "");
    fprintf(m->csv, "%s,%s,%u,%.4f,%.4f,%d,", draft, row, k, st_bench_mean(s), st_bench_std(s), s->n);
    if (a.n) fprintf(m->csv, "%.4f", st_bench_mean(&a));
    fprintf(m->csv, ",%d,", best);
    if (st.n) fprintf(m->csv, "%.4f", st_bench_mean(&st));
    fprintf(m->csv, "\n");
}

// GB/s of the target's matrices at `tps`, and its share of the probe.
static void ar_cells(const struct cmp_runs *cr, double probe, double tps, char *buf, size_t n)
{
    if (isnan(tps)) {
        snprintf(buf, n, "%8s %8s %6s %6s", "-", "-", "-", "-");
        return;
    }
    double gbps = tps * cr->weight_bytes / 1e9;
    if (isnan(probe) || probe <= 0) snprintf(buf, n, "%8.2f %8.1f %6s %6s", tps, gbps, "-", "-");
    else snprintf(buf, n, "%8.2f %8.1f %6.1f %5.0f%%", tps, gbps, probe, 100 * gbps / probe);
}

// The AR pair of each repetition beside the read bandwidth measured just
// before each run: it tells the host's state from the programs' speed.
static void report_ar_runs(struct st_llamacpp_cmp *m, const char *draft, const struct cmp_runs *cr, int runs)
{
    printf("autoregressive runs one by one: t/s, the target's matrices read per second (%.2f GB a token),\n"
           "the read probe just before the run, and that GB/s as a share of it\n",
           cr->weight_bytes / 1e9);
    printf("%4s | %8s %8s %6s %6s | %8s %8s %6s %6s | %7s\n", "rep", "ours t/s", "GB/s", "probe", "share",
           "llama", "GB/s", "probe", "share", "ratio");
    for (int r = 0; r < runs; r++) {
        char a[64], b[64], ratio[16] = "-";
        ar_cells(cr, cr->probe_ours[r], cr->our_ar.tps[r], a, sizeof a);
        ar_cells(cr, cr->probe_ll[r], cr->ll_ar.tps[r], b, sizeof b);
        if (!isnan(cr->our_ar.tps[r]) && !isnan(cr->ll_ar.tps[r]) && cr->ll_ar.tps[r] > 0)
            snprintf(ratio, sizeof ratio, "%.3f", cr->our_ar.tps[r] / cr->ll_ar.tps[r]);
        printf("%4d | %s | %s | %7s\n", r + 1, a, b, ratio);
    }
    static const char *const rows[2] = {"read_probe_ours_ar", "read_probe_llama_ar"};
    for (int i = 0; i < 2; i++) {
        struct st_bench_stat s = stat_of(i ? cr->probe_ll : cr->probe_ours, runs);
        if (s.n)
            fprintf(m->csv, "%s,%s,0,%.4f,%.4f,%d,,0,\n", draft, rows[i], st_bench_mean(&s), st_bench_std(&s), s.n);
    }
}

static void report(struct st_llamacpp_cmp *m, const char *draft, const struct cmp_runs *cr, int runs)
{
    char label[64], ours[32];
    snprintf(ours, sizeof ours, m->o.our_k ? "K %u" : "adaptive K", m->o.our_k);
    printf("%-36s %19s %8s %8s\n", "", "tokens/s mean ± std", "accept", "steal %");
    struct st_bench_stat s = stat_of(cr->our_ar.tps, runs);
    emit(m, draft, "ours_ar", 0, "ours autoregressive", &s, NULL, cr->our_ar.steal, runs, false);
    s = stat_of(cr->our_sp.tps, runs);
    snprintf(label, sizeof label, "ours speculative (%s)", ours);
    emit(m, draft, "ours_spec", m->o.our_k, label, &s, cr->our_sp.acc, cr->our_sp.steal, runs, false);
    s = stat_of(cr->ll_ar.tps, runs);
    snprintf(label, sizeof label, "llama-bench tg%s", cr->n);
    emit(m, draft, "llama_ar", 0, label, &s, NULL, cr->ll_ar.steal, runs, false);
    int b = best_k(cr, m->o.nk, runs);
    for (int k = 0; k < m->o.nk; k++) {
        s = stat_of(cr->ll_sp[k].tps, runs);
        snprintf(label, sizeof label, "llama-speculative --draft-max %u", m->o.ks[k]);
        emit(m, draft, "llama_spec", m->o.ks[k], label, &s, cr->ll_sp[k].acc, cr->ll_sp[k].steal, runs, k == b);
    }
    printf("ratios, pair by pair per repetition\n");
    const double *ll_sp = b >= 0 ? cr->ll_sp[b].tps : NULL;
    char kb[16] = "best K";
    if (b >= 0) snprintf(kb, sizeof kb, "K %u", m->o.ks[b]);
    uint32_t kv = b >= 0 ? m->o.ks[b] : 0;
    s = ratio_of(cr->our_ar.tps, cr->ll_ar.tps, runs);
    emit(m, draft, "ratio_ours_ar_llama_ar", 0, "ours AR / llama-bench AR", &s, NULL, NULL, runs, false);
    s = ratio_of(cr->our_sp.tps, ll_sp, runs);
    snprintf(label, sizeof label, "ours spec / llama spec (%s)", kb);
    emit(m, draft, "ratio_ours_spec_llama_spec", kv, label, &s, NULL, NULL, runs, false);
    s = ratio_of(ll_sp, cr->ll_ar.tps, runs);
    snprintf(label, sizeof label, "llama spec (%s) / llama AR", kb);
    emit(m, draft, "ratio_llama_spec_llama_ar", kv, label, &s, NULL, NULL, runs, false);
    s = ratio_of(cr->our_sp.tps, cr->our_ar.tps, runs);
    emit(m, draft, "ratio_ours_spec_ours_ar", m->o.our_k, "ours spec / ours AR", &s, NULL, NULL, runs, false);
    report_ar_runs(m, draft, cr, runs);
    fflush(stdout);
    fflush(m->csv);
}

static void series_init(struct series *s, bool off)
{
    for (int r = 0; r < ST_BENCH_MAX_RUNS; r++) s->tps[r] = s->acc[r] = s->steal[r] = NAN;
    s->off = off;
}

int st_bench_llamacpp(struct st_llamacpp_cmp *m, struct st_bench_rig *rig, const struct st_bench_common *c,
                      const char *draft)
{
    struct cmp_runs *cr = calloc(1, sizeof *cr);
    if (!cr) return -1;
    // llama.cpp gets as many threads as our session's worker set has ranks.
    snprintf(cr->threads, sizeof cr->threads, "%u", rig->eng->node[0].n_cpus);
    snprintf(cr->n, sizeof cr->n, "%u", c->n_tokens);
    printf("\nllama.cpp comparison: %s + %s, %u tokens, %s threads, %d alternating runs (their output: %s)\n",
           st_bench_basename(c->o.target), st_bench_basename(draft), c->n_tokens, cr->threads, c->runs, m->log_path);
    fflush(stdout);
    for (int r = 0; r < ST_BENCH_MAX_RUNS; r++) cr->probe_ours[r] = cr->probe_ll[r] = NAN;
    cr->weight_bytes = st_bench_target_weight_bytes(rig);
    series_init(&cr->our_ar, false);
    series_init(&cr->our_sp, false);
    series_init(&cr->ll_ar, !have_program(m->o.dir, "llama-bench"));
    bool spec = have_program(m->o.dir, "llama-speculative");
    for (int k = 0; k < m->o.nk; k++) series_init(&cr->ll_sp[k], !spec);
    int rc = 0;
    for (int r = 0; r < c->runs && !rc; r++) rc = repetition(m, rig, c, draft, cr, r);
    if (!rc) report(m, st_bench_basename(draft), cr, c->runs);
    free(cr);
    return rc;
}
