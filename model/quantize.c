// Quantisers: the inverse of kernels/dequant_ref.c, block by block.
#include "model/quantize.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "kernels/types.h"

// roundf (halves away from zero) for |v| < 2^22, inline: adding and
// subtracting 1.5 * 2^23 rounds to nearest even, and exact halves are then
// moved away from zero.  Without SSE4.1, roundf is a library call that would
// dominate the quantisers' time.
static inline float round_away(float v)
{
    float t = (v + 12582912.0f) - 12582912.0f;
    float diff = v - t;
    return diff == 0.5f || diff == -0.5f ? v + (v > 0 ? 0.5f : -0.5f) : t;
}

static void quant_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, (size_t)n * sizeof(float)); }

static void quant_f16(const float *x, void *dst, int64_t n)
{
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++) y[i] = st_f32_to_f16(x[i]);
}

static void quant_bf16(const float *x, void *dst, int64_t n)
{
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++) y[i] = st_f32_to_bf16(x[i]);
}

// ggml's quantize_row_q8_0_ref: the scale is taken from the f32 d, the block
// stores d rounded to f16.
static void quant_q8_0(const float *x, void *dst, int64_t n)
{
    struct st_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / ST_QK8_0; i++, x += ST_QK8_0) {
        float amax = 0;
        for (int j = 0; j < ST_QK8_0; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = st_f32_to_f16(d);
        for (int j = 0; j < ST_QK8_0; j++) y[i].qs[j] = (int8_t)round_away(x[j] * id);
    }
}

// ggml's quantize_row_q4_0_ref: the element of largest magnitude maps to -8
// exactly, so the full signed range [-8, 7] is used.
static void quant_q4_0(const float *x, void *dst, int64_t n)
{
    struct st_block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / ST_QK4_0; i++, x += ST_QK4_0) {
        float amax = 0, max = 0;
        for (int j = 0; j < ST_QK4_0; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
        y[i].d = st_f32_to_f16(d);
        for (int j = 0; j < ST_QK4_0 / 2; j++) {
            int q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[j + ST_QK4_0 / 2] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

// Ternary codes of one 256-element block (t[j] in {-1, 0, 1}) and its scale.
static float ternary_block(const float *x, int8_t *t)
{
    double sum = 0;
    for (int j = 0; j < ST_QK_K; j++) sum += fabsf(x[j]);
    float s = (float)(sum / ST_QK_K);
    if (!(s > 0)) {
        memset(t, 0, ST_QK_K);
        return 0;
    }
    double dsum = 0;
    int nnz = 0;
    for (int j = 0; j < ST_QK_K; j++) {
        float r = round_away(x[j] / s);
        t[j] = (int8_t)(r > 1 ? 1 : r < -1 ? -1 : r);
        if (t[j]) {
            dsum += fabsf(x[j]);
            nnz++;
        }
    }
    return nnz ? (float)(dsum / nnz) : 0.0f;
}

static void quant_tq2_0(const float *x, void *dst, int64_t n)
{
    struct st_block_tq2_0 *y = dst;
    int8_t t[ST_QK_K];
    for (int64_t i = 0; i < n / ST_QK_K; i++, x += ST_QK_K) {
        y[i].d = st_f32_to_f16(ternary_block(x, t));
        // Element 128*h + 32*l + m lives in bits 2l..2l+1 of qs[32*h + m].
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 32; m++) {
                const int8_t *te = t + 128 * h + m;
                y[i].qs[32 * h + m] = (uint8_t)((te[0] + 1) | (te[32] + 1) << 2 | (te[64] + 1) << 4 | (te[96] + 1) << 6);
            }
    }
}

// n base-3 digits (most significant first) as a byte holding the fraction
// v / 3^5, rounded up so that the dequantiser's (q * 3^k mod 256) * 3 >> 8
// reads digit k back exactly.
static uint8_t tq1_pack(const int8_t *trits, int n, int stride)
{
    int v = 0;
    for (int k = 0; k < 5; k++) v = v * 3 + (k < n ? trits[k * stride] + 1 : 0);
    return (uint8_t)((v * 256 + 242) / 243);
}

static void quant_tq1_0(const float *x, void *dst, int64_t n)
{
    struct st_block_tq1_0 *y = dst;
    int8_t t[ST_QK_K];
    for (int64_t i = 0; i < n / ST_QK_K; i++, x += ST_QK_K) {
        y[i].d = st_f32_to_f16(ternary_block(x, t));
        // Elements 0..159: qs[m] digit k is element 32k + m; 160..239:
        // qs[32 + m] digit k is element 160 + 16k + m; 240..255: qh[j]
        // digit k (of 4) is element 240 + 4k + j.
        for (int m = 0; m < 32; m++) y[i].qs[m] = tq1_pack(t + m, 5, 32);
        for (int m = 0; m < 16; m++) y[i].qs[32 + m] = tq1_pack(t + 160 + m, 5, 16);
        for (int j = 0; j < 4; j++) y[i].qh[j] = tq1_pack(t + 240 + j, 4, 4);
    }
}

typedef void (*quant_fn)(const float *x, void *dst, int64_t n);

static quant_fn quant_of(uint32_t type)
{
    switch (type) {
    case ST_TYPE_F32: return quant_f32;
    case ST_TYPE_F16: return quant_f16;
    case ST_TYPE_BF16: return quant_bf16;
    case ST_TYPE_Q8_0: return quant_q8_0;
    case ST_TYPE_Q4_0: return quant_q4_0;
    case ST_TYPE_TQ1_0: return quant_tq1_0;
    case ST_TYPE_TQ2_0: return quant_tq2_0;
    default: return NULL;
    }
}

bool st_quant_supported(uint32_t type) { return quant_of(type) != NULL; }

int st_quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
    quant_fn f = quant_of(type);
    const struct st_type_info *ti = st_type_get(type);
    if (!f || !ti || n < 0 || n % ti->block_elems) return -1;
    f(src, dst, n);
    return 0;
}

uint32_t st_quant_ftype(uint32_t type)
{
    switch (type) {
    case ST_TYPE_F32: return 0;
    case ST_TYPE_F16: return 1;
    case ST_TYPE_Q4_0: return 2;
    case ST_TYPE_Q8_0: return 7;
    case ST_TYPE_BF16: return 32;
    case ST_TYPE_TQ1_0: return 36;
    case ST_TYPE_TQ2_0: return 37;
    default: return 1;
    }
}

enum st_quant_role st_quant_role_of(const char *name, uint32_t n_dims)
{
    if (n_dims < 2) return ST_QROLE_NORM;
    if (!strcmp(name, "token_embd.weight")) return ST_QROLE_EMBD;
    if (!strcmp(name, "output.weight")) return ST_QROLE_OUTPUT;
    if (!strncmp(name, "blk.", 4)) {
        if (strstr(name, ".attn_")) return ST_QROLE_ATTN;
        if (strstr(name, ".ffn_")) return ST_QROLE_MLP;
    }
    return ST_QROLE_OTHER;
}

const char *st_quant_role_name(enum st_quant_role r)
{
    static const char *names[] = {"norm", "embd", "output", "attn", "mlp", "other"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

void st_quant_plan_init(struct st_quant_plan *p, int base)
{
    p->base = base;
    p->attn = p->mlp = p->embd = p->output = -1;
}

const char *st_quant_type_list(void) { return "F32 F16 BF16 Q8_0 Q4_0 TQ2_0 TQ1_0"; }

int st_quant_plan_option(struct st_quant_plan *p, const char *opt, const char *val, struct st_error *e)
{
    int *slot;
    if (!strcmp(opt, "--type")) slot = &p->base;
    else if (!strcmp(opt, "--attn-type")) slot = &p->attn;
    else if (!strcmp(opt, "--mlp-type")) slot = &p->mlp;
    else if (!strcmp(opt, "--embd-type")) slot = &p->embd;
    else if (!strcmp(opt, "--output-type")) slot = &p->output;
    else return 1;
    int t = val ? st_type_from_name(val) : -1;
    if (t < 0 || !st_quant_supported((uint32_t)t))
        return st_error_set(e, "%s: unknown or unsupported tensor type '%s' (supported: %s)", opt,
                            val ? val : "", st_quant_type_list());
    *slot = t;
    return 0;
}

static bool is_ternary(int t) { return t == ST_TYPE_TQ1_0 || t == ST_TYPE_TQ2_0; }

uint32_t st_quant_pick(const struct st_quant_plan *p, const char *name, uint32_t n_dims, int64_t ne0,
                       char *note, size_t cap)
{
    if (cap) note[0] = 0;
    int t;
    switch (st_quant_role_of(name, n_dims)) {
    case ST_QROLE_NORM: return ST_TYPE_F32;
    case ST_QROLE_EMBD: t = p->embd >= 0 ? p->embd : is_ternary(p->base) ? ST_TYPE_Q8_0 : p->base; break;
    case ST_QROLE_OUTPUT: t = p->output >= 0 ? p->output : is_ternary(p->base) ? ST_TYPE_Q8_0 : p->base; break;
    case ST_QROLE_ATTN: t = p->attn >= 0 ? p->attn : p->base; break;
    case ST_QROLE_MLP: t = p->mlp >= 0 ? p->mlp : p->base; break;
    default: t = p->base; break;
    }
    const struct st_type_info *ti = st_type_get((uint32_t)t);
    if (ne0 % ti->block_elems == 0) return (uint32_t)t;
    // Ternary falls back to the nearest small type (as llama.cpp does), the
    // 32-element formats to F16, which fits any row.
    int fb = is_ternary(t) && ne0 % ST_QK4_0 == 0 ? ST_TYPE_Q4_0 : ST_TYPE_F16;
    if (cap)
        snprintf(note, cap, "%s: row length %lld is not a multiple of the %s block (%u): using %s", name,
                 (long long)ne0, ti->name, ti->block_elems, st_type_name((uint32_t)fb));
    return (uint32_t)fb;
}

struct range_job {
    void (*fn)(void *ctx, int64_t r0, int64_t r1);
    void *ctx;
    int64_t r0, r1;
};

static void *range_main(void *arg)
{
    struct range_job *j = arg;
    j->fn(j->ctx, j->r0, j->r1);
    return NULL;
}

void st_quant_parallel(int64_t n, void (*fn)(void *ctx, int64_t r0, int64_t r1), void *ctx)
{
    enum { MAX_THREADS = 16 };
    cpu_set_t set;
    int nt = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (nt > MAX_THREADS) nt = MAX_THREADS;
    if (nt > n) nt = (int)n;
    if (nt <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    struct range_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int i = 0; i < nt; i++) jobs[i] = (struct range_job){fn, ctx, n * i / nt, n * (i + 1) / nt};
    // Thread 0's range runs here; a thread that cannot start runs here too.
    for (int i = 1; i < nt; i++) started[i] = pthread_create(&th[i], NULL, range_main, &jobs[i]) == 0;
    range_main(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else range_main(&jobs[i]);
    }
}
