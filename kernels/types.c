#include "kernels/types.h"

#include <strings.h>

static const struct st_type_info type_table[ST_TYPE_COUNT] = {
    [ST_TYPE_F32] = {"f32", 1, 4, st_dequant_f32},
    [ST_TYPE_F16] = {"f16", 1, 2, st_dequant_f16},
    [ST_TYPE_BF16] = {"bf16", 1, 2, st_dequant_bf16},
    [ST_TYPE_Q8_0] = {"q8_0", ST_QK8_0, sizeof(struct st_block_q8_0), st_dequant_q8_0},
    [ST_TYPE_Q4_0] = {"q4_0", ST_QK4_0, sizeof(struct st_block_q4_0), st_dequant_q4_0},
    [ST_TYPE_Q4_K] = {"q4_k", ST_QK_K, sizeof(struct st_block_q4_k), st_dequant_q4_k},
    [ST_TYPE_Q6_K] = {"q6_k", ST_QK_K, sizeof(struct st_block_q6_k), st_dequant_q6_k},
    [ST_TYPE_Q8_K] = {"q8_k", ST_QK_K, sizeof(struct st_block_q8_k), NULL},
    [ST_TYPE_TQ1_0] = {"tq1_0", ST_QK_K, sizeof(struct st_block_tq1_0), st_dequant_tq1_0},
    [ST_TYPE_TQ2_0] = {"tq2_0", ST_QK_K, sizeof(struct st_block_tq2_0), st_dequant_tq2_0},
};

const struct st_type_info *st_type_get(uint32_t type)
{
    if (type >= ST_TYPE_COUNT || !type_table[type].name) return NULL;
    return &type_table[type];
}

const char *st_type_name(uint32_t type)
{
    const struct st_type_info *ti = st_type_get(type);
    return ti ? ti->name : "unknown";
}

int st_type_from_name(const char *name)
{
    for (int t = 0; t < ST_TYPE_COUNT; t++)
        if (type_table[t].name && strcasecmp(type_table[t].name, name) == 0) return t;
    return -1;
}

size_t st_type_row_bytes(uint32_t type, int64_t n)
{
    const struct st_type_info *ti = st_type_get(type);
    if (!ti || n < 0 || n % ti->block_elems) return 0;
    return (size_t)(n / ti->block_elems) * ti->block_bytes;
}

int st_dequant_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    const struct st_type_info *ti = st_type_get(type);
    if (!ti || !ti->dequant || n % ti->block_elems) return -1;
    ti->dequant(src, dst, n);
    return 0;
}
