// `subternary model quantize IN.gguf OUT.gguf TYPE [role options]`.
// Exit codes: 0 done, 1 the conversion failed (input or output file), 2 bad
// arguments.
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/model_tools.h"
#include "kernels/types.h"
#include "model/quantize.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: subternary model quantize IN.gguf OUT.gguf TYPE [options]\n"
            "\n"
            "Converts every matrix of IN to TYPE (%s); 1-D tensors (norms)\n"
            "stay F32; all metadata is copied, general.file_type updated.\n"
            "With a ternary TYPE, token_embd and output default to Q8_0.\n"
            "A tensor whose row length does not fit TYPE's block gets a type that fits\n"
            "(ternary: Q4_0, else F16), with a note on stderr.\n"
            "\n"
            "options:\n"
            "  --attn-type T    blk.N.attn_* matrices\n"
            "  --mlp-type T     blk.N.ffn_* matrices\n"
            "  --embd-type T    token_embd.weight\n"
            "  --output-type T  output.weight\n"
            "  --quiet          no notes, no progress bar\n"
            "e.g. a draft with ternary MLP and 8-bit attention:\n"
            "  subternary model quantize draft.f16.gguf draft.mix.gguf TQ2_0 --attn-type Q8_0\n",
            st_quant_type_list());
}

int st_model_quantize_main(int argc, char **argv)
{
    const char *pos[3];
    int npos = 0;
    bool quiet = false;
    struct st_quant_plan plan;
    struct st_error e;
    st_quant_plan_init(&plan, -1);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (!strncmp(a, "--", 2)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "subternary model quantize: option %s needs a value\n", a);
                return 2;
            }
            int rc = st_quant_plan_option(&plan, a, argv[i + 1], &e);
            if (rc) {
                if (rc > 0) st_error_set(&e, "unknown option '%s'", a);
                fprintf(stderr, "subternary model quantize: %s\n", e.msg);
                if (rc > 0) usage(stderr);
                return 2;
            }
            i++;
            continue;
        }
        if (npos == 3) {
            fprintf(stderr, "subternary model quantize: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        pos[npos++] = a;
    }
    if (npos < 2 || (npos == 2 && plan.base < 0)) {
        fprintf(stderr, "subternary model quantize: expected IN.gguf OUT.gguf TYPE\n");
        usage(stderr);
        return 2;
    }
    if (npos == 3 && st_quant_plan_option(&plan, "--type", pos[2], &e)) {
        fprintf(stderr, "subternary model quantize: TYPE: %s\n", e.msg);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct st_quant_report rep;
    if (st_quantize_file(pos[0], pos[1], &plan, !quiet, quiet, &rep, &e)) {
        fprintf(stderr, "subternary model quantize: %s\n", e.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("%s: %llu tensors, %.1f MiB -> %.1f MiB (%s%s) in %.1f s\n", pos[1], (unsigned long long)rep.n_tensors,
           rep.in_bytes / 1048576.0, rep.out_bytes / 1048576.0, st_type_name((uint32_t)plan.base),
           rep.n_fallback ? ", with fallbacks" : "", s);
    return 0;
}
