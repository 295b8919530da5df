// Run formats: their names, sizes, and the repacking of GGUF tensors into
// them at load.  The layouts are described in kernels.h and kern_internal.h;
// st_kern_x8_unpack() below is their specification.
#include <string.h>

#include "kernels/kern_internal.h"

const char *st_kern_run_name(uint32_t run_type)
{
    switch (run_type) {
    case ST_KERN_RUN_Q8_0X8: return "q8_0x8";
    case ST_KERN_RUN_Q4_0X8: return "q4_0x8";
    case ST_KERN_RUN_TERNARY_MASK: return "ternary-mask";
    case ST_KERN_RUN_TERNARY_CODE: return "ternary-code";
    default: return st_type_name(run_type);
    }
}

// GGUF types the kernels multiply in their own layout.
static bool row_type_supported(uint32_t t)
{
    switch (t) {
    case ST_TYPE_F32: case ST_TYPE_F16: case ST_TYPE_BF16: case ST_TYPE_Q8_0:
    case ST_TYPE_Q4_0: case ST_TYPE_Q4_K: case ST_TYPE_Q6_K: case ST_TYPE_TQ1_0:
    case ST_TYPE_TQ2_0:
        return true;
    default:
        return false;
    }
}

uint32_t st_kern_run_default(uint32_t gguf_type)
{
    switch (gguf_type) {
    case ST_TYPE_Q8_0: return ST_KERN_RUN_Q8_0X8;
    case ST_TYPE_Q4_0: return ST_KERN_RUN_Q4_0X8;
    case ST_TYPE_TQ1_0: case ST_TYPE_TQ2_0: return ST_KERN_RUN_TERNARY_DEFAULT;
    default: return row_type_supported(gguf_type) ? gguf_type : UINT32_MAX;
    }
}

bool st_kern_run_accepts(uint32_t run_type, uint32_t gguf_type)
{
    switch (run_type) {
    case ST_KERN_RUN_Q8_0X8: return gguf_type == ST_TYPE_Q8_0;
    case ST_KERN_RUN_Q4_0X8: return gguf_type == ST_TYPE_Q4_0;
    case ST_KERN_RUN_TERNARY_MASK:
    case ST_KERN_RUN_TERNARY_CODE:
        return gguf_type == ST_TYPE_TQ1_0 || gguf_type == ST_TYPE_TQ2_0;
    default: return run_type == gguf_type && row_type_supported(gguf_type);
    }
}

size_t st_kern_run_size(uint32_t run_type, int64_t rows, int64_t cols)
{
    if (rows < 0 || cols <= 0) return 0;
    if (st_kern_is_x8(run_type)) {
        if (cols % st_kern_x8_block_elems(run_type)) return 0;
        int64_t u = st_kern_x8_unit(run_type), unit_rows = ST_KERN_X8 * u;
        return (size_t)((rows + unit_rows - 1) / unit_rows * u) * st_kern_x8_stride(run_type, cols);
    }
    if (!row_type_supported(run_type)) return 0;
    return (size_t)rows * st_type_row_bytes(run_type, cols);
}

int64_t st_kern_run_row_align(uint32_t run_type)
{
    return st_kern_is_x8(run_type) ? ST_KERN_X8 * st_kern_x8_unit(run_type) : 1;
}

size_t st_kern_runfmt_size(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t *run_type)
{
    uint32_t rt = st_kern_run_default(gguf_type);
    if (run_type) *run_type = rt;
    return rt == UINT32_MAX ? 0 : st_kern_run_size(rt, rows, cols);
}

int st_kern_weight_init(struct st_kern_weight *w, uint32_t run_type, int64_t rows, int64_t cols,
                        const void *data, struct st_error *e)
{
    if (st_kern_run_size(run_type, rows, cols) == 0)
        return st_error_set(e, "st_kern_weight_init(type=%s, rows=%lld, cols=%lld): "
                               "unsupported type or shape",
                            st_kern_run_name(run_type), (long long)rows, (long long)cols);
    w->type = run_type;
    w->rows = rows;
    w->cols = cols;
    w->data = data;
    if (st_kern_is_x8(run_type)) {
        w->group = ST_KERN_X8;
        w->stride = st_kern_x8_stride(run_type, cols);
    } else {
        w->group = 1;
        w->stride = st_type_row_bytes(run_type, cols);
    }
    return 0;
}

// --- ternary trits of GGUF blocks -------------------------------------------

// TQ1_0 packs 5 trits per byte as a base-3 fraction: multiplying by 3^k
// (mod 256) brings trit k to the top, and (q * 3) >> 8 reads it.
static int8_t tq1_trit(uint8_t byte, int k)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t q = (uint8_t)(byte * pow3[k]);
    return (int8_t)((((uint16_t)q * 3) >> 8) - 1);
}

void st_kern_tq1_0_trits(const struct st_block_tq1_0 *b, int8_t *t)
{
    int e = 0;
    for (int k = 0; k < 5; k++) // qs[0..31]: elements 0..159
        for (int m = 0; m < 32; m++) t[e++] = tq1_trit(b->qs[m], k);
    for (int k = 0; k < 5; k++) // qs[32..47]: elements 160..239
        for (int m = 0; m < 16; m++) t[e++] = tq1_trit(b->qs[32 + m], k);
    for (int k = 0; k < 4; k++) // qh[0..3]: elements 240..255
        for (int j = 0; j < 4; j++) t[e++] = tq1_trit(b->qh[j], k);
}

bool st_kern_tq2_0_trits(const struct st_block_tq2_0 *b, int8_t *t)
{
    bool ok = true;
    for (int j = 0; j < 2; j++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++) {
                int c = (b->qs[32 * j + m] >> (2 * l)) & 3;
                ok &= c != 3;
                t[128 * j + 32 * l + m] = (int8_t)(c - 1);
            }
    return ok;
}

// --- x8 layouts ---------------------------------------------------------------

// Byte offset from a group's block, and bit position, of row lane l (0..7),
// column c of the block.
static void x8_locate(uint32_t type, int l, int c, size_t *off, int *shift)
{
    int t = c % 4, grp = c / 4; // groups of 4 columns
    switch (type) {
    case ST_KERN_RUN_Q8_0X8: // vector grp, 64 bytes apart
        *off = (size_t)grp * st_kern_x8_vstep(type) + (size_t)l * 4 + t;
        *shift = 0;
        break;
    case ST_KERN_RUN_Q4_0X8: // vector grp % 4, low nibble for columns < 16
        *off = (size_t)(grp % 4) * 32 + (size_t)l * 4 + t;
        *shift = grp < 4 ? 0 : 4;
        break;
    case ST_KERN_RUN_TERNARY_CODE: // vector grp / 4, 2-bit plane grp % 4
        *off = (size_t)(grp / 4) * 32 + (size_t)l * 4 + t;
        *shift = 2 * (grp % 4);
        break;
    default: // ternary mask: nonzero vector 2*(grp/8), sign vector after it, bit grp % 8
        *off = (size_t)(grp / 8) * 64 + (size_t)l * 4 + t;
        *shift = grp % 8;
        break;
    }
}

void st_kern_x8_unpack(const struct st_kern_weight *w, int64_t row, int64_t b, int8_t *q,
                       uint16_t *d)
{
    int l = (int)(row % ST_KERN_X8);
    int be = (int)st_kern_x8_block_elems(w->type);
    const uint8_t *blk = st_kern_x8_group_q(w, row / ST_KERN_X8) + (size_t)b * st_kern_x8_bstep(w->type);
    *d = st_kern_x8_group_d(w, row / ST_KERN_X8)[b * ST_KERN_X8 + l];
    for (int c = 0; c < be; c++) {
        size_t off;
        int sh;
        x8_locate(w->type, l, c, &off, &sh);
        switch (w->type) {
        case ST_KERN_RUN_Q8_0X8: q[c] = (int8_t)blk[off]; break;
        case ST_KERN_RUN_Q4_0X8: q[c] = (int8_t)(((blk[off] >> sh) & 15) - 8); break;
        case ST_KERN_RUN_TERNARY_CODE: q[c] = (int8_t)(((blk[off] >> sh) & 3) - 1); break;
        default: {
            int nz = (blk[off] >> sh) & 1, neg = (blk[off + 32] >> sh) & 1;
            q[c] = (int8_t)(nz ? (neg ? -1 : 1) : 0);
        }
        }
    }
}

void st_kern_x8_decode_block(uint32_t type, const uint8_t *blk, int8_t (*q)[256])
{
    for (int l = 0; l < ST_KERN_X8; l++) {
        const uint8_t *lane = blk + 4 * l;
        int8_t *o = q[l];
        switch (type) {
        case ST_KERN_RUN_Q8_0X8:
            for (int g = 0; g < 8; g++) memcpy(o + 4 * g, lane + st_kern_x8_vstep(type) * g, 4);
            break;
        case ST_KERN_RUN_Q4_0X8:
            for (int v = 0; v < 4; v++)
                for (int t = 0; t < 4; t++) {
                    o[4 * v + t] = (int8_t)((lane[32 * v + t] & 15) - 8);
                    o[16 + 4 * v + t] = (int8_t)((lane[32 * v + t] >> 4) - 8);
                }
            break;
        case ST_KERN_RUN_TERNARY_CODE:
            for (int k = 0; k < 16; k++)
                for (int t = 0; t < 4; t++)
                    for (int p = 0; p < 4; p++)
                        o[16 * k + 4 * p + t] = (int8_t)(((lane[32 * k + t] >> (2 * p)) & 3) - 1);
            break;
        default:
            for (int k = 0; k < 8; k++)
                for (int t = 0; t < 4; t++)
                    for (int j = 0; j < 8; j++) {
                        int nz = (lane[64 * k + t] >> j) & 1, neg = (lane[64 * k + 32 + t] >> j) & 1;
                        o[32 * k + 4 * j + t] = (int8_t)(nz ? (neg ? -1 : 1) : 0);
                    }
            break;
        }
    }
}

// Writes lane l (one row) of a block from its values q (as unpack returns
// them).  Every byte of the lane is written whole, so no clearing is needed;
// this is the load-time path, st_kern_x8_unpack the specification it is
// tested against.
static void x8_write_lane(uint32_t type, uint8_t *blk, int l, const int8_t *q)
{
    uint8_t *lane = blk + 4 * l;
    switch (type) {
    case ST_KERN_RUN_Q8_0X8: // vector g: columns 4g..4g+3
        for (int g = 0; g < 8; g++) memcpy(lane + st_kern_x8_vstep(type) * g, q + 4 * g, 4);
        break;
    case ST_KERN_RUN_Q4_0X8: // vector v: low nibbles 4v.., high 16+4v..
        for (int v = 0; v < 4; v++)
            for (int t = 0; t < 4; t++)
                lane[32 * v + t] = (uint8_t)((q[4 * v + t] + 8) | (q[16 + 4 * v + t] + 8) << 4);
        break;
    case ST_KERN_RUN_TERNARY_CODE: // vector k, plane p: group 4k + p
        for (int k = 0; k < 16; k++)
            for (int t = 0; t < 4; t++) {
                const int8_t *c = q + 16 * k + t;
                lane[32 * k + t] = (uint8_t)((c[0] + 1) | (c[4] + 1) << 2 | (c[8] + 1) << 4 | (c[12] + 1) << 6);
            }
        break;
    default: // ternary mask: vector pair k, bit j: group 8k + j
        for (int k = 0; k < 8; k++)
            for (int t = 0; t < 4; t++) {
                uint8_t nz = 0, neg = 0;
                for (int j = 0; j < 8; j++) {
                    int v = q[32 * k + 4 * j + t];
                    nz |= (uint8_t)((v != 0) << j);
                    neg |= (uint8_t)((v < 0) << j);
                }
                lane[64 * k + t] = nz;
                lane[64 * k + 32 + t] = neg;
            }
        break;
    }
}

// One source block of a GGUF row as small integers and its f16 scale, in
// the convention of st_kern_x8_unpack.  Returns false on a TQ2_0 code 3.
static bool source_block(uint32_t gguf_type, const uint8_t *row, int64_t b, int8_t *q,
                         uint16_t *d)
{
    switch (gguf_type) {
    case ST_TYPE_Q8_0: {
        const struct st_block_q8_0 *blk = (const struct st_block_q8_0 *)row + b;
        memcpy(q, blk->qs, ST_QK8_0);
        *d = blk->d;
        return true;
    }
    case ST_TYPE_Q4_0: {
        const struct st_block_q4_0 *blk = (const struct st_block_q4_0 *)row + b;
        for (int j = 0; j < ST_QK4_0 / 2; j++) {
            q[j] = (int8_t)((blk->qs[j] & 15) - 8);
            q[j + 16] = (int8_t)((blk->qs[j] >> 4) - 8);
        }
        *d = blk->d;
        return true;
    }
    case ST_TYPE_TQ1_0: {
        const struct st_block_tq1_0 *blk = (const struct st_block_tq1_0 *)row + b;
        st_kern_tq1_0_trits(blk, q);
        *d = blk->d;
        return true;
    }
    default: {
        const struct st_block_tq2_0 *blk = (const struct st_block_tq2_0 *)row + b;
        *d = blk->d;
        return st_kern_tq2_0_trits(blk, q);
    }
    }
}

// Q8_0 and Q4_0 blocks keep their bytes in the interleaved formats: lane l
// of vector g is bytes 4g..4g+3 of row l's block (Q4_0: low nibbles are
// columns 4g.., high ones 16+4g..), so a whole unit (Q8_0: 16 rows, Q4_0: 8)
// is 4-byte copies, block by block, reading the rows side by side.  Loading
// a model spends most of its CPU time here.
static bool repack_unit_copy(uint32_t gguf_type, const struct st_kern_weight *w, const uint8_t *rows, size_t src_row,
                             int64_t g)
{
    size_t sb; // source block bytes
    if (gguf_type == ST_TYPE_Q8_0 && w->type == ST_KERN_RUN_Q8_0X8)
        sb = sizeof(struct st_block_q8_0);
    else if (gguf_type == ST_TYPE_Q4_0 && w->type == ST_KERN_RUN_Q4_0X8)
        sb = sizeof(struct st_block_q4_0);
    else
        return false;
    int64_t nb = w->cols / 32, u = st_kern_x8_unit(w->type);
#if defined(__x86_64__)
    if (st_kern_cpu.level >= ST_KERN_LEVEL_AVX2) {
        uint8_t *unit = (uint8_t *)st_kern_x8_group_q(w, g);
        if (sb == sizeof(struct st_block_q8_0))
            st_kern_repack_q8_0x8_pair_avx2(rows, src_row, nb, unit);
        else
            st_kern_repack_q4_0x8_group_avx2(rows, src_row, nb, unit);
        return true;
    }
#endif
    size_t bs = st_kern_x8_bstep(w->type), vs = st_kern_x8_vstep(w->type);
    int nv = (int)(st_kern_x8_qbytes(w->type) / 32); // vectors per block: 8 (Q8_0) or 4 (Q4_0)
    for (int64_t h = 0; h < u; h++) {
        uint8_t *q = (uint8_t *)st_kern_x8_group_q(w, g + h);
        uint16_t *scales = (uint16_t *)st_kern_x8_group_d(w, g + h);
        for (int64_t b = 0; b < nb; b++)
            for (int l = 0; l < ST_KERN_X8; l++) {
                const uint8_t *sblk = rows + (size_t)(ST_KERN_X8 * h + l) * src_row + (size_t)b * sb;
                memcpy(&scales[b * ST_KERN_X8 + l], sblk, sizeof(uint16_t));
                for (int v = 0; v < nv; v++) memcpy(q + b * bs + vs * v + 4 * l, sblk + 2 + 4 * v, 4);
            }
    }
    return true;
}

// Repacks rows [row_begin, row_end) into out, which holds their units from
// the one of row_begin on (the whole tensor's data when that is 0).
static int repack_x8(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t run_type,
                     const void *src, int64_t row_begin, int64_t row_end, void *out,
                     struct st_error *e)
{
    struct st_kern_weight w;
    if (st_kern_weight_init(&w, run_type, rows, cols, out, e)) return -1;
    int64_t nb = cols / st_kern_x8_block_elems(run_type), u = st_kern_x8_unit(run_type);
    int64_t unit_rows = ST_KERN_X8 * u, g0 = row_begin / ST_KERN_X8;
    size_t src_row = st_type_row_bytes(gguf_type, cols), bs = st_kern_x8_bstep(run_type);
    int8_t q[256];
    int64_t last = row_end == rows ? (rows + unit_rows - 1) / unit_rows * unit_rows : row_end;
    size_t used = (size_t)nb * (bs + (size_t)u * 8 * sizeof(uint16_t)), unit_bytes = (size_t)u * w.stride;
    for (int64_t r = row_begin; r < last; r++) {
        int64_t g = r / ST_KERN_X8 - g0; // group in out
        int l = (int)(r % ST_KERN_X8);
        uint8_t *gq = (uint8_t *)st_kern_x8_group_q(&w, g);
        uint16_t *scales = (uint16_t *)st_kern_x8_group_d(&w, g);
        const uint8_t *row = (const uint8_t *)src + (size_t)(r - row_begin) * src_row;
        if (r % unit_rows == 0) {
            memset((uint8_t *)out + (size_t)g * w.stride + used, 0, unit_bytes - used); // alignment pad
            if (r + unit_rows <= row_end && repack_unit_copy(gguf_type, &w, row, src_row, g)) {
                r += unit_rows - 1;
                continue;
            }
        }
        for (int64_t b = 0; b < nb; b++) {
            uint16_t d = 0;
            if (r >= rows) { // padding row
                memset(q, 0, sizeof q);
            } else if (!source_block(gguf_type, row, b, q, &d)) {
                return st_error_set(e, "st_kern_repack(%s -> %s): row %lld block %lld has "
                                       "code 3, not a ternary value",
                                    st_type_name(gguf_type), st_kern_run_name(run_type),
                                    (long long)r, (long long)b);
            }
            x8_write_lane(run_type, gq + (size_t)b * bs, l, q);
            scales[b * ST_KERN_X8 + l] = d;
        }
    }
    return 0;
}

void st_kern_repack_span(uint32_t run_type, int64_t cols, int64_t row_begin, int64_t row_end, size_t *off,
                         size_t *len)
{
    if (st_kern_is_x8(run_type)) {
        size_t stride = st_kern_x8_stride(run_type, cols);
        int64_t u = st_kern_x8_unit(run_type), unit_rows = ST_KERN_X8 * u;
        int64_t g0 = row_begin / unit_rows * u, g1 = (row_end + unit_rows - 1) / unit_rows * u;
        *off = (size_t)g0 * stride;
        *len = (size_t)(g1 - g0) * stride;
    } else {
        size_t rb = st_type_row_bytes(run_type, cols);
        *off = (size_t)row_begin * rb;
        *len = (size_t)(row_end - row_begin) * rb;
    }
}

static int check_repack(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t run_type, int64_t row_begin,
                        int64_t row_end, struct st_error *e)
{
    size_t need = st_kern_run_size(run_type, rows, cols);
    if (!st_kern_run_accepts(run_type, gguf_type) || need == 0)
        return st_error_set(e, "st_kern_repack(%s -> %s, %lld x %lld): unsupported",
                            st_type_name(gguf_type), st_kern_run_name(run_type),
                            (long long)rows, (long long)cols);
    int64_t align = st_kern_run_row_align(run_type);
    if (row_begin < 0 || row_end > rows || row_begin > row_end || row_begin % align ||
        (row_end % align && row_end != rows))
        return st_error_set(e, "st_kern_repack(%s -> %s, %lld rows): bad row range [%lld, %lld)",
                            st_type_name(gguf_type), st_kern_run_name(run_type),
                            (long long)rows, (long long)row_begin, (long long)row_end);
    return 0;
}

// Repacks validated rows [row_begin, row_end) into part, which holds their
// span (st_kern_repack_span) and is at least len bytes long.
static int repack_span(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t run_type, const void *src,
                       int64_t row_begin, int64_t row_end, void *part, size_t len, struct st_error *e)
{
    if (!st_kern_is_x8(run_type)) {
        memcpy(part, src, len);
        return 0;
    }
    return repack_x8(gguf_type, rows, cols, run_type, src, row_begin, row_end, part, e);
}

int st_kern_repack_part(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t run_type, const void *src,
                        int64_t row_begin, int64_t row_end, void *part, size_t part_size, struct st_error *e)
{
    if (check_repack(gguf_type, rows, cols, run_type, row_begin, row_end, e)) return -1;
    size_t off, len;
    st_kern_repack_span(run_type, cols, row_begin, row_end, &off, &len);
    if (part_size < len)
        return st_error_set(e, "st_kern_repack(%s -> %s, rows [%lld, %lld)): %zu bytes given, %zu needed",
                            st_type_name(gguf_type), st_kern_run_name(run_type), (long long)row_begin,
                            (long long)row_end, part_size, len);
    return repack_span(gguf_type, rows, cols, run_type, src, row_begin, row_end, part, len, e);
}

int st_kern_repack(uint32_t gguf_type, int64_t rows, int64_t cols, uint32_t run_type,
                   const void *src, int64_t row_begin, int64_t row_end, void *dst,
                   size_t dst_size, struct st_error *e)
{
    if (check_repack(gguf_type, rows, cols, run_type, row_begin, row_end, e)) return -1;
    size_t need = st_kern_run_size(run_type, rows, cols), off, len;
    if (dst_size < need)
        return st_error_set(e, "st_kern_repack(%s -> %s, %lld x %lld): %zu bytes given, %zu needed",
                            st_type_name(gguf_type), st_kern_run_name(run_type),
                            (long long)rows, (long long)cols, dst_size, need);
    st_kern_repack_span(run_type, cols, row_begin, row_end, &off, &len);
    return repack_span(gguf_type, rows, cols, run_type, src, row_begin, row_end, (uint8_t *)dst + off, len, e);
}

void st_kern_weight_row(const struct st_kern_weight *w, int64_t row, float *dst)
{
    if (!st_kern_is_x8(w->type)) {
        st_dequant_row(w->type, (const uint8_t *)w->data + (size_t)row * w->stride, dst, w->cols);
        return;
    }
    int64_t be = st_kern_x8_block_elems(w->type);
    int8_t q[256];
    for (int64_t b = 0; b < w->cols / be; b++) {
        uint16_t d;
        st_kern_x8_unpack(w, row, b, q, &d);
        float df = st_f16_to_f32(d);
        for (int64_t c = 0; c < be; c++) dst[b * be + c] = q[c] * df;
    }
}
