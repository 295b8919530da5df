// CPU feature detection and kernel selection: the process-wide feature
// table and one kernel table per level, built once.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/kern_internal.h"

struct st_kern_cpu st_kern_cpu;

static struct st_kern_ops tables[ST_KERN_LEVEL_COUNT];
static bool table_ok[ST_KERN_LEVEL_COUNT];
static const struct st_kern_ops *active;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static const char *const level_names[ST_KERN_LEVEL_COUNT] = {"scalar", "avx2", "avx512", "amx"};

const char *st_kern_level_name(enum st_kern_level level)
{
    return (unsigned)level < ST_KERN_LEVEL_COUNT ? level_names[level] : "unknown";
}

static void detect(struct st_kern_cpu *c)
{
    memset(c, 0, sizeof *c);
#if defined(__x86_64__)
    __builtin_cpu_init();
    c->avx2 = __builtin_cpu_supports("avx2");
    c->fma = __builtin_cpu_supports("fma");
    c->f16c = __builtin_cpu_supports("f16c");
    c->avx512f = __builtin_cpu_supports("avx512f");
    c->avx512bw = __builtin_cpu_supports("avx512bw");
    c->avx512vl = __builtin_cpu_supports("avx512vl");
    c->avx512dq = __builtin_cpu_supports("avx512dq");
    c->avx512vnni = __builtin_cpu_supports("avx512vnni");
    c->amx = c->avx512vnni && st_kern_amx_usable();
#endif
}

static void build_tables(void)
{
    struct st_kern_ops *t = &tables[ST_KERN_LEVEL_SCALAR];
    st_kern_ops_fill_scalar(t);
    table_ok[ST_KERN_LEVEL_SCALAR] = true;
#if defined(__x86_64__)
    const struct st_kern_cpu *c = &st_kern_cpu;
    if (c->avx2 && c->fma && c->f16c) {
        tables[ST_KERN_LEVEL_AVX2] = *t;
        st_kern_ops_fill_avx2(&tables[ST_KERN_LEVEL_AVX2]);
        table_ok[ST_KERN_LEVEL_AVX2] = true;
        if (c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->avx512vnni) {
            tables[ST_KERN_LEVEL_AVX512] = tables[ST_KERN_LEVEL_AVX2];
            st_kern_ops_fill_avx512(&tables[ST_KERN_LEVEL_AVX512]);
            st_kern_attention_fill_avx512(&tables[ST_KERN_LEVEL_AVX512]);
            table_ok[ST_KERN_LEVEL_AVX512] = true;
            if (c->amx) {
                tables[ST_KERN_LEVEL_AMX] = tables[ST_KERN_LEVEL_AVX512];
                st_kern_ops_fill_amx(&tables[ST_KERN_LEVEL_AMX]);
                table_ok[ST_KERN_LEVEL_AMX] = true;
            }
        }
    }
#endif
    for (int l = 0; l < ST_KERN_LEVEL_COUNT; l++) tables[l].level = (enum st_kern_level)l;
}

static void init(void)
{
    detect(&st_kern_cpu);
    build_tables();
    enum st_kern_level best = ST_KERN_LEVEL_SCALAR;
    for (int l = 0; l < ST_KERN_LEVEL_COUNT; l++)
        if (table_ok[l]) best = (enum st_kern_level)l;
    st_kern_cpu.best = best;
    const char *cap = getenv("ST_KERN_LEVEL");
    enum st_kern_level use = best;
    for (int l = 0; cap && l < ST_KERN_LEVEL_COUNT; l++)
        if (!strcasecmp(cap, level_names[l]) && l < (int)use) use = (enum st_kern_level)l;
    st_kern_cpu.level = use;
    __atomic_store_n(&active, &tables[use], __ATOMIC_RELEASE);
}

void st_kern_init(void)
{
    pthread_once(&init_once, init);
}

int st_kern_set_level(enum st_kern_level level)
{
    st_kern_init();
    if ((unsigned)level >= ST_KERN_LEVEL_COUNT || !table_ok[level]) return -1;
    st_kern_cpu.level = level;
    __atomic_store_n(&active, &tables[level], __ATOMIC_RELEASE);
    return 0;
}

const struct st_kern_ops *st_kern_ops_get(enum st_kern_level level)
{
    st_kern_init();
    if ((unsigned)level >= ST_KERN_LEVEL_COUNT || !table_ok[level]) return NULL;
    return &tables[level];
}

const struct st_kern_ops *st_kern_ops_active(void)
{
    st_kern_init();
    return __atomic_load_n(&active, __ATOMIC_ACQUIRE);
}

void st_kern_ops_fill_scalar(struct st_kern_ops *ops)
{
    memset(ops, 0, sizeof *ops);
    for (uint32_t t = 0; t < ST_KERN_RUN_MAX; t++) ops->mm_rows[t] = st_kern_mm_tile(t);
    ops->quantize_q8_32 = st_kern_quantize_q8_32_ref;
    ops->quantize_q8_k = st_kern_quantize_q8_k_ref;
    ops->attention = st_kern_attention_ref;
    st_kern_dot_fill_scalar(ops);
    st_kern_mm_fill_scalar(ops);
    st_kern_ops_fill_scalar_rest(ops);
}
