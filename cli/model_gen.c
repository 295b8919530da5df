// `subternary model gen`: writes a synthetic target/draft pair (or one of
// them).  Exit codes: 0 done, 1 generation or measurement failed, 2 bad
// arguments.
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/args.h"
#include "cli/model_tools.h"
#include "kernels/types.h"
#include "model/synth.h"

static void shape_line(FILE *f, const char *preset, const char *role, const char *name)
{
    const struct st_synth_shape *s = st_synth_shape_find(name);
    fprintf(f, "  %-6s %-6s %-10s dim %u, %u layers, %u/%u heads, ffn %u, %s, eps %g\n", preset, role, s->name, s->dim,
            s->n_layer, s->n_head, s->n_head_kv, s->n_ff, st_type_name((uint32_t)s->type), s->eps);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: subternary model gen [--preset P] [--out-target T.gguf] [--out-draft D.gguf] [options]\n"
               "\n"
               "Writes a synthetic Llama target/draft pair with random full-size weights whose\n"
               "greedy agreement is set by eps (see model/synth.h).  Only the files named are\n"
               "written; a model written alone is the same as when written with its partner.\n"
               "\n"
               "presets (greedy acceptance about 0.75 at K=4 with 32000 tokens):\n");
    const char *presets[] = {"demo", "l3b", "l1b"};
    for (int i = 0; i < 3; i++) {
        const struct st_synth_shape *s = st_synth_shape_find(presets[i]);
        shape_line(f, s->name, "target", s->name);
        shape_line(f, "", "draft", s->draft);
    }
    fprintf(f, "  (l3b and l1b are the Llama-3.2-3B and -1B shapes)\n"
               "  --draft-shape S     another draft shape (%s)\n"
               "\n"
               "shared options:\n"
               "  --vocab N           our own SentencePiece-style vocabulary of N tokens (default 32000)\n"
               "  --vocab-from F      copy the tokenizer of GGUF file F instead\n"
               "  --seed S            pair seed (default 1)\n"
               "  --measure N         then measure greedy acceptance over N generated tokens with the\n"
               "                      reference forward pass (slow beyond demo sizes)\n"
               "  --k K               drafts per round for --measure (default 4)\n"
               "  --quiet             no progress bar, no notes\n"
               "per-model options: --X V sets both models, --target-X V / --draft-X V one of them:\n"
               "  eps E, gain G (default 3), attn-sharpness A (default 10),\n"
               "  type T, attn-type T, mlp-type T, embd-type T, output-type T\n"
               "  (%s; ternary types keep token_embd and output at Q8_0 unless set),\n"
               "  dim N, layers N, heads N, kv-heads N, ffn N, ctx N\n"
               "e.g. subternary model gen --preset demo --out-target models/demo-target.q8_0.gguf \\\n"
               "         --out-draft models/demo-draft.q4_0.gguf\n",
            st_synth_shape_list(), st_quant_type_list());
}

static const char *const model_opts[] = {"eps", "gain", "type", "attn-type", "mlp-type", "embd-type",
                                         "output-type", "dim", "layers", "heads", "kv-heads", "ffn", "ctx",
                                         "attn-sharpness"};

static int parse_u32(const char *opt, const char *s, uint32_t *v)
{
    return st_args_u32("model gen", opt, s, 0, UINT32_MAX, v);
}

static int parse_f32(const char *opt, const char *s, float *v)
{
    return st_args_f32("model gen", opt, s, -FLT_MAX, FLT_MAX, v);
}

// Applies "--NAME VAL" (NAME without the role prefix) to one model.
static int apply(struct st_synth_model *m, const char *name, const char *val)
{
    char opt[64];
    struct st_error e;
    snprintf(opt, sizeof opt, "--%s", name);
    int rc = st_quant_plan_option(&m->plan, opt, val, &e);
    if (rc < 0) fprintf(stderr, "subternary model gen: %s\n", e.msg);
    if (rc <= 0) return rc;
    struct st_synth_shape *s = &m->shape;
    if (!strcmp(name, "eps")) return parse_f32(opt, val, &s->eps);
    if (!strcmp(name, "gain")) return parse_f32(opt, val, &m->gain);
    if (!strcmp(name, "attn-sharpness")) return parse_f32(opt, val, &m->attn_sharpness);
    if (!strcmp(name, "dim")) return parse_u32(opt, val, &s->dim);
    if (!strcmp(name, "layers")) return parse_u32(opt, val, &s->n_layer);
    if (!strcmp(name, "heads")) return parse_u32(opt, val, &s->n_head);
    if (!strcmp(name, "kv-heads")) return parse_u32(opt, val, &s->n_head_kv);
    if (!strcmp(name, "ffn")) return parse_u32(opt, val, &s->n_ff);
    if (!strcmp(name, "ctx")) return parse_u32(opt, val, &s->n_ctx);
    return -1;
}

static void model_init(struct st_synth_model *m, const struct st_synth_shape *s, const char *role)
{
    memset(m, 0, sizeof *m);
    m->shape = *s;
    m->role = role;
    m->gain = 3.0f;
    m->attn_sharpness = 10.0f;
    st_quant_plan_init(&m->plan, s->type);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int write_one(const char *path, struct st_synth_model *m, const struct st_synth_vocab *v, bool quiet)
{
    struct st_error e;
    snprintf(m->name, sizeof m->name, "subternary synthetic %s %s", m->shape.name, m->role);
    double t0 = now();
    if (st_synth_write(path, m, v, !quiet, quiet, &e)) {
        fprintf(stderr, "subternary model gen: %s\n", e.msg);
        return -1;
    }
    double dt = now() - t0;
    struct stat st;
    double mib = stat(path, &st) == 0 ? st.st_size / 1048576.0 : 0.0;
    const struct st_synth_shape *s = &m->shape;
    printf("%s: %s %s, dim %u, %u layers, %u/%u heads, ffn %u, vocab %u, eps %g, %s: %.1f MiB in %.1f s (%.0f MiB/s)\n",
           path, s->name, m->role, s->dim, s->n_layer, s->n_head, s->n_head_kv, s->n_ff, v->n, s->eps,
           st_type_name((uint32_t)m->plan.base), mib, dt, dt > 0 ? mib / dt : 0.0);
    return 0;
}

// BOS and a few normal tokens picked by the seed.
static uint32_t make_prompt(const struct st_synth_vocab *v, uint64_t seed, int32_t *p, uint32_t want)
{
    uint32_t n = 0;
    p[n++] = (int32_t)v->bos;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 12345;
    for (uint32_t tries = 0; n < want && tries < 100000; tries++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t id = (uint32_t)((x >> 33) % v->n);
        if (v->types[id] == ST_SYNTH_TOKEN_NORMAL) p[n++] = (int32_t)id;
    }
    return n;
}

static int measure(const char *tpath, const char *dpath, const struct st_synth_vocab *v, uint64_t seed,
                   uint32_t n_gen, uint32_t k)
{
    struct st_error e;
    struct st_llama_model *t = NULL, *d = NULL;
    int32_t prompt[8];
    uint32_t np = make_prompt(v, seed, prompt, 8);
    struct st_synth_accept r;
    double t0 = now();
    int rc = -1;
    if (st_llama_open(tpath, &t, &e) || st_llama_open(dpath, &d, &e) ||
        st_synth_acceptance(t, d, prompt, np, n_gen, k, NULL, &r, &e)) {
        fprintf(stderr, "subternary model gen: measuring acceptance: %s\n", e.msg);
        goto out;
    }
    printf("greedy acceptance at K=%u over %u tokens: %.3f (%llu of %llu drafts, %u rounds, %.2f tokens/round; "
           "measured in %.0f s)\n",
           k, r.n_generated, r.rate, (unsigned long long)r.n_accepted, (unsigned long long)r.n_drafted, r.n_rounds,
           (double)r.n_generated / r.n_rounds, now() - t0);
    rc = 0;
out:
    st_llama_close(&t);
    st_llama_close(&d);
    return rc;
}

int st_model_gen_main(int argc, char **argv)
{
    const char *preset = "demo", *draft_shape = NULL, *out_t = NULL, *out_d = NULL, *vocab_from = NULL;
    uint32_t n_vocab = 32000, n_measure = 0, k = 4;
    uint64_t seed = 1;
    bool quiet = false;
    // Pass 1: everything but the per-model options, which need the shapes.
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (strncmp(a, "--", 2)) {
            fprintf(stderr, "subternary model gen: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "subternary model gen: option %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--preset")) preset = val;
        else if (!strcmp(a, "--draft-shape")) draft_shape = val;
        else if (!strcmp(a, "--out-target")) out_t = val;
        else if (!strcmp(a, "--out-draft")) out_d = val;
        else if (!strcmp(a, "--vocab-from")) vocab_from = val;
        else if (!strcmp(a, "--vocab")) { if (parse_u32(a, val, &n_vocab)) return 2; }
        else if (!strcmp(a, "--measure")) { if (parse_u32(a, val, &n_measure)) return 2; }
        else if (!strcmp(a, "--k")) { if (parse_u32(a, val, &k)) return 2; }
        else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            seed = strtoull(val, &end, 0);
            if (errno || end == val || *end || val[0] == '-') {
                fprintf(stderr, "subternary model gen: --seed: '%s' is not a non-negative integer\n", val);
                return 2;
            }
        } else {
            const char *name = a + 2;
            if (!strncmp(name, "target-", 7)) name += 7;
            else if (!strncmp(name, "draft-", 6)) name += 6;
            bool known = false;
            for (size_t j = 0; j < sizeof model_opts / sizeof model_opts[0]; j++) known |= !strcmp(name, model_opts[j]);
            if (!known) {
                fprintf(stderr, "subternary model gen: unknown option '%s'\n", a);
                usage(stderr);
                return 2;
            }
        }
    }
    const struct st_synth_shape *ts = st_synth_shape_find(preset);
    if (!ts || !strcmp(preset, "demo-draft")) {
        fprintf(stderr, "subternary model gen: unknown preset '%s' (demo, l3b, l1b)\n", preset);
        return 2;
    }
    const struct st_synth_shape *ds = st_synth_shape_find(draft_shape ? draft_shape : ts->draft);
    if (!ds) {
        fprintf(stderr, "subternary model gen: unknown draft shape '%s' (%s)\n", draft_shape, st_synth_shape_list());
        return 2;
    }
    if (!out_t && !out_d) {
        fprintf(stderr, "subternary model gen: nothing to write: give --out-target and/or --out-draft\n");
        usage(stderr);
        return 2;
    }
    if (n_measure && (!out_t || !out_d || !k || k > 64)) {
        fprintf(stderr, "subternary model gen: --measure needs both --out-target and --out-draft, and 1 <= --k <= 64\n");
        return 2;
    }
    struct st_synth_model tm, dm;
    model_init(&tm, ts, "target");
    model_init(&dm, ds, "draft");
    tm.seed = dm.seed = seed;
    // Pass 2: per-model options, in order.
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quiet")) continue;
        const char *name = a + 2;
        bool to_t = true, to_d = true;
        if (!strncmp(name, "target-", 7)) name += 7, to_d = false;
        else if (!strncmp(name, "draft-", 6) && strcmp(name, "draft-shape")) name += 6, to_t = false;
        bool per_model = false;
        for (size_t j = 0; j < sizeof model_opts / sizeof model_opts[0]; j++) per_model |= !strcmp(name, model_opts[j]);
        if (per_model && ((to_t && apply(&tm, name, argv[i + 1])) || (to_d && apply(&dm, name, argv[i + 1]))))
            return 2;
        i++;
    }
    struct st_synth_vocab *v = NULL;
    struct st_error e;
    int rc = 1;
    if (vocab_from ? st_synth_vocab_from(vocab_from, &v, &e) : st_synth_vocab_build(n_vocab, &v, &e)) {
        fprintf(stderr, "subternary model gen: %s\n", e.msg);
        return vocab_from ? 1 : 2;
    }
    if ((out_t && st_synth_check(&tm, v, &e)) || (out_d && st_synth_check(&dm, v, &e))) {
        fprintf(stderr, "subternary model gen: %s\n", e.msg);
        rc = 2;
        goto out;
    }
    if ((out_t && write_one(out_t, &tm, v, quiet)) || (out_d && write_one(out_d, &dm, v, quiet))) goto out;
    if (n_measure && measure(out_t, out_d, v, seed, n_measure, k)) goto out;
    rc = 0;
out:
    st_synth_vocab_free(&v);
    return rc;
}
