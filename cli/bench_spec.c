// `subternary bench spec`: autoregressive vs speculative decoding of the same
// prompt, alternating, per draft file, for a K sweep and adaptive K.
// `subternary bench governor`: matching vs non-matching draft, governor on
// and off (the SubTernary paper's Table 10).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_llamacpp.h"
#include "cli/bench_suites.h"
#include "cli/bench_util.h"

struct pair_result {
    struct st_bench_stat ar, sp, ratio, acc, mean_k;
    struct st_bench_stat ar_steal, sp_steal; // share of CPU time stolen, runs where /proc/stat told
};

// "AR/spec" steal in percent for the table; "-" where unknown.
static const char *steal_cell(const struct pair_result *pr, char *buf, size_t n)
{
    if (!pr->ar_steal.n || !pr->sp_steal.n) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.1f/%.1f", 100 * st_bench_mean(&pr->ar_steal), 100 * st_bench_mean(&pr->sp_steal));
    return buf;
}

// runs x (autoregressive, speculative) alternating on one rig.
static int measure(struct st_bench_rig *rig, const struct st_gen_params *spec_gp, uint32_t n, int runs,
                   struct pair_result *out)
{
    memset(out, 0, sizeof *out);
    struct st_gen_params ar = *spec_gp;
    ar.speculate = false;
    for (int r = 0; r < runs; r++) {
        struct st_session_stats a, s;
        ar.max_tokens = n;
        if (st_bench_rig_run(rig, &ar, &a)) return -1;
        if (!isnan(rig->steal)) st_bench_add(&out->ar_steal, rig->steal);
        if (st_bench_rig_run(rig, spec_gp, &s)) return -1;
        if (!isnan(rig->steal)) st_bench_add(&out->sp_steal, rig->steal);
        double ta = a.tokens / a.seconds, ts = s.tokens / s.seconds;
        st_bench_add(&out->ar, ta);
        st_bench_add(&out->sp, ts);
        st_bench_add(&out->ratio, ts / ta);
        st_bench_add(&out->acc, s.drafted ? (double)s.accepted / s.drafted : 0);
        uint32_t sr = s.rounds - s.suspended_rounds;
        st_bench_add(&out->mean_k, sr ? s.k_sum / sr : 0);
    }
    return 0;
}

int st_bench_spec(int argc, char **argv)
{
    struct st_bench_common c;
    st_bench_common_defaults(&c);
    const char *drafts = NULL, *klist = NULL;
    struct st_llamacpp_opts lo;
    st_llamacpp_opts_defaults(&lo);
    for (int i = 1; i < argc; i++) {
        int r = st_bench_common_opt(argc, argv, &i, &c);
        if (!r) r = st_llamacpp_opt(argc, argv, &i, &lo);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--drafts") && i + 1 < argc) drafts = argv[++i];
        else if (!strcmp(argv[i], "--ks") && i + 1 < argc) klist = argv[++i];
        else {
            fprintf(stderr, "usage: subternary bench spec [-m TARGET] [-d DRAFT | --drafts D1,D2,...] [--ks 1,2,..,0]\n"
                            "         [-p TEXT | --tokens IDS | --prompt-len N] [-n N] [--runs R] [--results DIR] [--quick]\n"
                            "         [--compare-llamacpp DIR [--llamacpp-draft 3,5,8] [--compare-k K]]\n"
                            "K 0 means adaptive.  Defaults: the demo pair of `make models`, K 1..8 and adaptive.\n"
                            "--compare-llamacpp: DIR holds llama.cpp's llama-bench and llama-speculative; after each\n"
                            "draft's sweep, R repetitions of (ours AR, ours K, llama-bench, llama-speculative per\n"
                            "--draft-max) and the ratios pair by pair, then each AR run beside the read bandwidth\n"
                            "probed just before it; results/spec-llamacpp.csv and .log.\n");
            return 2;
        }
    }
    if (c.quick) {
        if (!klist) klist = "2,4,0";
        if (c.runs == 5) c.runs = 3;
        if (c.n_tokens == 128) c.n_tokens = 64;
    }
    uint32_t ks[16];
    int nk = st_bench_parse_list(klist ? klist : "1,2,3,4,5,6,7,8,0", ks, 16);
    if (nk < 1) return 2;
    // The engine's longest draft covers every K asked for: a session
    // silently shortens a longer one.
    c.o.k_max = lo.our_k;
    for (int k = 0; k < nk; k++)
        if (ks[k] > c.o.k_max) c.o.k_max = ks[k];
    char dl[4096];
    snprintf(dl, sizeof dl, "%s", drafts ? drafts : c.o.draft);
    struct st_llamacpp_cmp cmp = {0};
    if (lo.dir && st_llamacpp_cmp_open(&cmp, &lo, &c, "spec-llamacpp")) return 1;
    FILE *csv = st_bench_csv(c.results, "spec");
    if (!csv) {
        st_llamacpp_cmp_close(&cmp);
        return 1;
    }
    fprintf(csv, "draft,k,ar_tps_mean,ar_tps_std,spec_tps_mean,spec_tps_std,acceptance,mean_k,ratio_mean,ratio_std,"
                 "ar_steal,spec_steal\n");
    printf("bench spec: target %s, %u tokens, %d alternating runs each (mean ± std; ratio pair by pair;\n"
           "steal: %% of the CPU time the hypervisor gave other guests during the AR/speculative runs)\n",
           st_bench_basename(c.o.target), c.n_tokens, c.runs);
    printf("%-24s %4s %18s %18s %7s %7s %14s %10s\n", "draft", "K", "autoregressive t/s", "speculative t/s", "accept",
           "mean K", "ratio", "steal %");
    int rc = 0, n_drafts = 0;
    char *save;
    // The plot: one datablock per draft (K, speculative t/s), one for AR.
    size_t cap = 65536, len = 0;
    char *plot = calloc(1, cap), plots[4096] = "";
    size_t pl = 0;
    for (char *d = strtok_r(dl, ",", &save); d && !rc; d = strtok_r(NULL, ",", &save), n_drafts++) {
        struct st_bench_rig rig;
        const char *dn = st_bench_basename(d);
        c.o.draft = d;
        if (st_bench_rig_open(&rig, &c.o)) {
            rc = 1;
            break;
        }
        len += (size_t)snprintf(plot + len, cap - len, "$d%d << EOD\n", n_drafts);
        pl += (size_t)snprintf(plots + pl, sizeof plots - pl, "%s$d%d using 1:2 with linespoints title '%s', "
                                 "$d%d using 1:3 with points title 'autoregressive (%s run)'",
                                 n_drafts ? ", " : "plot ", n_drafts, dn, n_drafts, dn);
        for (int k = 0; k < nk && !rc; k++) {
            struct st_gen_params gp = {.max_tokens = c.n_tokens, .speculate = true, .k = ks[k], .governor = false,
                                       .stop_at_eos = false};
            struct pair_result pr;
            if ((rc = measure(&rig, &gp, c.n_tokens, c.runs, &pr))) break;
            char kname[16], steal[32];
            snprintf(kname, sizeof kname, ks[k] ? "%u" : "adapt", ks[k]);
            printf("%-24s %4s %11.2f ± %5.2f %11.2f ± %5.2f %7.3f %7.2f %7.3f ± %.3f %10s\n", dn, kname,
                   st_bench_mean(&pr.ar), st_bench_std(&pr.ar), st_bench_mean(&pr.sp), st_bench_std(&pr.sp),
                   st_bench_mean(&pr.acc), st_bench_mean(&pr.mean_k), st_bench_mean(&pr.ratio), st_bench_std(&pr.ratio),
                   steal_cell(&pr, steal, sizeof steal));
            fflush(stdout);
            len += (size_t)snprintf(plot + len, cap - len, "%u,%.4f,%.4f\n", ks[k] ? ks[k] : 9, st_bench_mean(&pr.sp),
                                    st_bench_mean(&pr.ar));
            fprintf(csv, "%s,%u,%.4f,%.4f,%.4f,%.4f,%.4f,%.3f,%.4f,%.4f,", dn, ks[k], st_bench_mean(&pr.ar),
                    st_bench_std(&pr.ar), st_bench_mean(&pr.sp), st_bench_std(&pr.sp), st_bench_mean(&pr.acc),
                    st_bench_mean(&pr.mean_k), st_bench_mean(&pr.ratio), st_bench_std(&pr.ratio));
            if (pr.ar_steal.n && pr.sp_steal.n)
                fprintf(csv, "%.4f,%.4f", st_bench_mean(&pr.ar_steal), st_bench_mean(&pr.sp_steal));
            fprintf(csv, "\n");
        }
        len += (size_t)snprintf(plot + len, cap - len, "EOD\n");
        if (!rc && lo.dir) rc = st_bench_llamacpp(&cmp, &rig, &c, d);
        st_bench_rig_close(&rig);
    }
    fclose(csv);
    st_llamacpp_cmp_close(&cmp);
    len += (size_t)snprintf(plot + len, cap - len,
                            "set title 'tokens/s against draft length K (9 = adaptive)'\nset xlabel 'K'\n"
                            "set ylabel 'tokens/s'\nset xrange [0:10]\nset yrange [0:*]\n%s\n", plots);
    st_bench_plot(c.results, "spec", plot);
    free(plot);
    return rc ? 1 : 0;
}

int st_bench_governor(int argc, char **argv)
{
    struct st_bench_common c;
    st_bench_common_defaults(&c);
    const char *mismatch = "models/demo-draft-mismatch.q4_0.gguf";
    for (int i = 1; i < argc; i++) {
        int r = st_bench_common_opt(argc, argv, &i, &c);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--mismatch") && i + 1 < argc) mismatch = argv[++i];
        else {
            fprintf(stderr, "usage: subternary bench governor [-m TARGET] [-d DRAFT] [--mismatch DRAFT2] [-n N] [--runs R] "
                            "[--quick]\nDRAFT2: a draft that does not agree with the target (`make models` makes one).\n");
            return 2;
        }
    }
    if (c.quick && c.runs == 5) c.runs = 3;
    if (c.quick && c.n_tokens == 128) c.n_tokens = 64;
    FILE *csv = st_bench_csv(c.results, "governor");
    if (!csv) return 1;
    fprintf(csv, "draft,governor,ar_tps,spec_tps,acceptance,ratio_mean,ratio_std,suspended_share\n");
    printf("bench governor: target %s, %u tokens, %d alternating runs\n", st_bench_basename(c.o.target), c.n_tokens,
           c.runs);
    printf("%-30s %8s %12s %12s %7s %14s %10s\n", "draft", "governor", "AR t/s", "spec t/s", "accept", "ratio",
           "suspended");
    const char *ds[2] = {c.o.draft, mismatch};
    for (int d = 0; d < 2; d++) {
        struct st_bench_rig rig;
        const char *dn = st_bench_basename(ds[d]);
        c.o.draft = ds[d];
        if (st_bench_rig_open(&rig, &c.o)) return 1;
        for (int g = 1; g >= 0; g--) {
            struct st_gen_params gp = {.max_tokens = c.n_tokens, .speculate = true, .governor = g, .stop_at_eos = false};
            struct pair_result pr;
            struct st_session_stats last;
            if (measure(&rig, &gp, c.n_tokens, c.runs, &pr)) return 1;
            last = *st_session_stats(rig.s);
            double susp = last.rounds ? (double)last.suspended_rounds / last.rounds : 0;
            printf("%-30s %8s %12.2f %12.2f %7.3f %7.3f ± %.3f %9.0f%%\n", dn, g ? "on" : "off",
                   st_bench_mean(&pr.ar), st_bench_mean(&pr.sp), st_bench_mean(&pr.acc), st_bench_mean(&pr.ratio),
                   st_bench_std(&pr.ratio), 100 * susp);
            fprintf(csv, "%s,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.3f\n", dn, g ? "on" : "off", st_bench_mean(&pr.ar),
                    st_bench_mean(&pr.sp), st_bench_mean(&pr.acc), st_bench_mean(&pr.ratio), st_bench_std(&pr.ratio), susp);
            fflush(stdout);
        }
        st_bench_rig_close(&rig);
    }
    fclose(csv);
    char script[1024];
    snprintf(script, sizeof script,
             "set title 'speculative / autoregressive tokens/s'\nset style data histograms\nset style fill solid 0.6\n"
             "set ylabel 'ratio'\nset yrange [0:*]\nplot '%s/governor.csv' every ::1 using 6:xtic(stringcolumn(1).' gov '.stringcolumn(2)) "
             "title 'ratio'",
             c.results);
    st_bench_plot(c.results, "governor", script);
    return 0;
}
