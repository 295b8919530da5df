// `subternary bench ctx`: tokens/s and rollback cost at context lengths 128 ..
// 8192 (the SubTernary paper's Table 2).  Rollback is one store of the
// committed length, so its cost must not grow with the context.  Speculative
// runs go with full draft attention (the default) and with a draft window.
// `subternary bench contention`: the same comparison with a CPU hog on one
// core, started and stopped by the benchmark (the "noisy neighbour" claim).
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/bench_kernels.h"
#include "cli/bench_suites.h"
#include "cli/bench_util.h"
#include "kernels/kernels.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// ns per rollback of the session's target slot from L + 8 to L.
static double rollback_ns(struct st_bench_rig *rig)
{
    struct st_kv *kv = &rig->eng->node[st_session_node(rig->s)].kv;
    uint32_t slot = st_session_slot(rig->s), L = st_kv_committed(kv, slot, 0);
    struct st_error e;
    const int n = 200000;
    double best = 1e18;
    for (int rep = 0; rep < 3; rep++) {
        double sum = 0;
        for (int i = 0; i < n; i++) {
            st_kv_commit(kv, slot, 0, L + 8, &e);
            double t0 = now_ns();
            st_kv_rollback(kv, slot, 0, L, &e);
            sum += now_ns() - t0;
        }
        if (sum / n < best) best = sum / n;
    }
    return best;
}

// Bytes an autoregressive step reads: the target's matrices, and the K and
// V rows of every layer up to its position (F16).  Tokens/s can only stay
// flat where the second is small beside the first; the bytes read per
// second (the "AR GB/s" column) is what should stay flat.
struct ar_bytes {
    double weights, kv_per_pos;
};

static struct ar_bytes ar_bytes_of(const struct st_bench_rig *rig)
{
    const struct st_engine_node *nd = &rig->eng->node[0];
    double row = (double)st_kv_row_elems(&nd->kv, ST_MODEL_TARGET) * sizeof(uint16_t); // one position's K (or V)
    return (struct ar_bytes){st_bench_target_weight_bytes(rig), 2.0 * row * rig->eng->target->hp.n_layer};
}

int st_bench_ctx(int argc, char **argv)
{
    struct st_bench_common c;
    st_bench_common_defaults(&c);
    const char *lens = NULL;
    uint32_t window = 4096;
    for (int i = 1; i < argc; i++) {
        int r = st_bench_common_opt(argc, argv, &i, &c);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--lengths") && i + 1 < argc) lens = argv[++i];
        else if (!strcmp(argv[i], "--draft-window") && i + 1 < argc) {
            if (st_args_u32("bench", argv[i], argv[i + 1], 1, UINT32_MAX, &window)) return 2;
            i++;
        } else {
            fprintf(stderr, "usage: subternary bench ctx [-m TARGET] [-d DRAFT] [--lengths 128,1024,4096,8192] [-n N] "
                            "[--runs R] [--draft-window N] [--quick]\n");
            return 2;
        }
    }
    if (c.quick) {
        if (!lens) lens = "128,1024,4096";
        if (c.runs == 5) c.runs = 2;
        if (c.n_tokens == 128) c.n_tokens = 48;
    }
    uint32_t L[16];
    int nl = st_bench_parse_list(lens ? lens : "128,1024,4096,8192", L, 16);
    if (nl < 1) return 2;
    FILE *csv = st_bench_csv(c.results, "ctx");
    if (!csv) return 1;
    fprintf(csv, "context,ar_tps,ar_gbps,probe_gbps,spec_tps,ratio,acceptance,spec_window_tps,ratio_window,"
                 "acceptance_window,commit_ns_per_round,rollback_ns,steal\n");
    printf("bench ctx: %s + %s, %u tokens after prompts of each length, %d alternating runs\n", c.o.target, c.o.draft,
           c.n_tokens, c.runs);
    printf("spec: the draft attends every position; window: the first %d and the last %u\n", ST_KERN_ATTN_SEG, window);
    printf("AR GB/s: what an AR step reads (the target's matrices, and the F16 K and V up to its position, on\n"
           "average the context + n/2) times AR t/s; flat when the steps read memory equally fast at every length\n");
    printf("probe: the read bandwidth measured just before each length's runs (this host's phase at the time)\n");
    printf("steal: %% of the CPU time the hypervisor gave other guests during the length's runs\n");
    printf("%8s %10s %8s %6s %10s %7s %7s %12s %7s %7s %16s %12s %7s\n", "context", "AR t/s", "AR GB/s", "probe",
           "spec t/s", "ratio", "accept", "window t/s", "ratio", "accept", "commit ns/round", "rollback ns", "steal %");
    double gbps_first = 0, last_gbps = 0, last_bytes = 0, last_kv = 0, share_first = 0, last_share = 0;
    int probe_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    char plot[8192];
    size_t pl = (size_t)snprintf(plot, sizeof plot, "$d << EOD\n");
    for (int k = 0; k < nl; k++) {
        struct st_bench_rig rig;
        c.o.prompt_len = L[k];
        c.o.n_ctx = L[k] + c.n_tokens + 64;
        if (st_bench_rig_open(&rig, &c.o)) return 1;
        // The host's read bandwidth now: on the development VM it moved by a
        // quarter within the hour, and the lengths run one after another, so
        // AR GB/s as a share of it tells the length's effect from the hour's.
        double probe = st_bench_read_probe(probe_threads, 2);
        struct st_bench_stat ar = {0}, sp[2], ratio[2], acc[2], cns = {0}, steal = {0};
        memset(sp, 0, sizeof sp);
        memset(ratio, 0, sizeof ratio);
        memset(acc, 0, sizeof acc);
        for (int r = 0; r < c.runs; r++) {
            struct st_gen_params gp = {.max_tokens = c.n_tokens, .speculate = false, .stop_at_eos = false};
            struct st_session_stats a, s;
            if (st_bench_rig_run(&rig, &gp, &a)) return 1;
            if (!isnan(rig.steal)) st_bench_add(&steal, rig.steal);
            st_bench_add(&ar, a.tokens / a.seconds);
            for (int w = 0; w < 2; w++) {
                gp.speculate = true;
                gp.draft_window = w ? window : 0;
                if (st_bench_rig_run(&rig, &gp, &s)) return 1;
                if (!isnan(rig.steal)) st_bench_add(&steal, rig.steal);
                st_bench_add(&sp[w], s.tokens / s.seconds);
                st_bench_add(&ratio[w], (s.tokens / s.seconds) / (a.tokens / a.seconds));
                st_bench_add(&acc[w], s.drafted ? (double)s.accepted / s.drafted : 0);
                if (!w) st_bench_add(&cns, s.commits ? s.commit_ns_sum / s.commits : 0);
            }
        }
        double rb = rollback_ns(&rig);
        struct ar_bytes by = ar_bytes_of(&rig);
        double step_bytes = by.weights + by.kv_per_pos * (L[k] + c.n_tokens / 2.0);
        double gbps = st_bench_mean(&ar) * step_bytes / 1e9;
        double share = probe > 0 ? gbps / probe : 0;
        if (k == 0) gbps_first = gbps, share_first = share;
        last_gbps = gbps;
        last_share = share;
        last_bytes = step_bytes;
        last_kv = step_bytes - by.weights;
        char sc[16] = "-";
        if (steal.n) snprintf(sc, sizeof sc, "%.1f", 100 * st_bench_mean(&steal));
        printf("%8u %10.2f %8.2f %6.1f %10.2f %7.3f %7.3f %12.2f %7.3f %7.3f %16.0f %12.1f %7s\n", L[k],
               st_bench_mean(&ar), gbps, probe, st_bench_mean(&sp[0]), st_bench_mean(&ratio[0]),
               st_bench_mean(&acc[0]), st_bench_mean(&sp[1]), st_bench_mean(&ratio[1]), st_bench_mean(&acc[1]),
               st_bench_mean(&cns), rb, sc);
        fflush(stdout);
        fprintf(csv, "%u,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.1f,%.2f,", L[k], st_bench_mean(&ar), gbps,
                probe, st_bench_mean(&sp[0]), st_bench_mean(&ratio[0]), st_bench_mean(&acc[0]), st_bench_mean(&sp[1]),
                st_bench_mean(&ratio[1]), st_bench_mean(&acc[1]), st_bench_mean(&cns), rb);
        if (steal.n) fprintf(csv, "%.4f", st_bench_mean(&steal));
        fprintf(csv, "\n");
        pl += (size_t)snprintf(plot + pl, sizeof plot - pl, "%u,%.4f,%.4f,%.2f\n", L[k], st_bench_mean(&ar),
                               st_bench_mean(&sp[0]), rb);
        st_bench_rig_close(&rig);
    }
    fclose(csv);
    if (nl > 1)
        printf("AR GB/s at %u: %.2fx of at %u (bytes an AR step reads there: %.2f GB, of which K and V %.2f)\n",
               L[nl - 1], last_gbps / gbps_first, L[0], last_bytes / 1e9, last_kv / 1e9);
    if (nl > 1 && share_first > 0 && last_share > 0)
        printf("AR GB/s as a share of the probe: %.2f at %u, %.2f at %u (%.2fx)\n", share_first, L[0], last_share,
               L[nl - 1], last_share / share_first);
    snprintf(plot + pl, sizeof plot - pl,
             "EOD\nset title 'tokens/s and rollback cost against context length'\nset logscale x 2\nset xlabel 'context'\n"
             "set ylabel 'tokens/s'\nset y2label 'rollback ns'\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\n"
             "plot $d using 1:2 with linespoints title 'autoregressive', $d using 1:3 with linespoints title 'speculative', "
             "$d using 1:4 axes x1y2 with linespoints title 'rollback (ns)'");
    st_bench_plot(c.results, "ctx", plot);
    return 0;
}

// A process that spins on one CPU until killed.
static pid_t hog_start(int cpu)
{
    pid_t pid = fork();
    if (pid == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
        volatile unsigned long x = 0;
        for (;;) x++;
    }
    return pid;
}

static void hog_stop(pid_t pid)
{
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int st_bench_contention(int argc, char **argv)
{
    struct st_bench_common c;
    st_bench_common_defaults(&c);
    int hog_cpu = -1;
    for (int i = 1; i < argc; i++) {
        int r = st_bench_common_opt(argc, argv, &i, &c);
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--hog-cpu") && i + 1 < argc) {
            uint32_t cpu;
            if (st_args_u32("bench", argv[i], argv[i + 1], 0, CPU_SETSIZE - 1, &cpu)) return 2;
            hog_cpu = (int)cpu;
            i++;
        } else {
            fprintf(stderr, "usage: subternary bench contention [-m TARGET] [-d DRAFT] [--hog-cpu C] [-n N] [--runs R] "
                            "[--quick]\nA CPU hog competes for one core (default: the last allowed CPU).\n");
            return 2;
        }
    }
    if (c.quick && c.runs == 5) c.runs = 3;
    if (c.quick && c.n_tokens == 128) c.n_tokens = 64;
    if (hog_cpu < 0) {
        cpu_set_t set;
        sched_getaffinity(0, sizeof set, &set);
        for (int i = 0; i < CPU_SETSIZE; i++)
            if (CPU_ISSET(i, &set)) hog_cpu = i;
    }
    struct st_bench_rig rig;
    if (st_bench_rig_open(&rig, &c.o)) return 1;
    FILE *csv = st_bench_csv(c.results, "contention");
    if (!csv) return 1;
    fprintf(csv, "hog,ar_tps_mean,ar_tps_std,spec_tps_mean,spec_tps_std,ratio_mean,ratio_std,acceptance\n");
    printf("bench contention: %s + %s, %u tokens, %d alternating runs; hog on CPU %d\n", c.o.target, c.o.draft,
           c.n_tokens, c.runs, hog_cpu);
    printf("%-8s %18s %18s %14s %7s\n", "hog", "AR t/s", "spec t/s", "ratio", "accept");
    double ratio_of[2] = {0, 0};
    for (int h = 0; h < 2; h++) {
        struct st_bench_stat ar = {0}, sp = {0}, ratio = {0}, acc = {0};
        for (int r = 0; r < c.runs; r++) {
            struct st_gen_params gp = {.max_tokens = c.n_tokens, .speculate = false, .stop_at_eos = false};
            struct st_session_stats a, s;
            pid_t hog = h ? hog_start(hog_cpu) : 0;
            int bad = st_bench_rig_run(&rig, &gp, &a);
            gp.speculate = true;
            bad |= st_bench_rig_run(&rig, &gp, &s);
            hog_stop(hog);
            if (bad) return 1;
            st_bench_add(&ar, a.tokens / a.seconds);
            st_bench_add(&sp, s.tokens / s.seconds);
            st_bench_add(&ratio, (s.tokens / s.seconds) / (a.tokens / a.seconds));
            st_bench_add(&acc, s.drafted ? (double)s.accepted / s.drafted : 0);
        }
        ratio_of[h] = st_bench_mean(&ratio);
        printf("%-8s %11.2f ± %5.2f %11.2f ± %5.2f %7.3f ± %.3f %7.3f\n", h ? "on" : "off", st_bench_mean(&ar),
               st_bench_std(&ar), st_bench_mean(&sp), st_bench_std(&sp), st_bench_mean(&ratio), st_bench_std(&ratio),
               st_bench_mean(&acc));
        fflush(stdout);
        fprintf(csv, "%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", h ? "on" : "off", st_bench_mean(&ar), st_bench_std(&ar),
                st_bench_mean(&sp), st_bench_std(&sp), st_bench_mean(&ratio), st_bench_std(&ratio), st_bench_mean(&acc));
    }
    printf("speculative / autoregressive: %.3fx without the hog, %.3fx with it\n", ratio_of[0], ratio_of[1]);
    fclose(csv);
    st_bench_rig_close(&rig);
    char script[1024];
    snprintf(script, sizeof script,
             "set title 'tokens/s with and without a CPU hog'\nset style data histograms\nset style fill solid 0.6\n"
             "set yrange [0:*]\nplot '%s/contention.csv' every ::1 using 2:xtic(1) title 'autoregressive', '' every ::1 "
             "using 4 title 'speculative'",
             c.results);
    st_bench_plot(c.results, "contention", script);
    return 0;
}
