// GGUF reader.  A cursor walks the file; every read checks the remaining
// length first, and every size is checked for overflow before it is used.
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/types.h"

// Limits that no real model reaches; they keep a hostile header from making
// us allocate gigabytes of bookkeeping before the file size check catches it.
#define MAX_KEY_LEN (1u << 16)
#define MAX_NAME_LEN (1u << 16)

struct cursor {
    const uint8_t *base;
    const uint8_t *p;
    size_t left;
    const char *file;
    struct st_error *e;
};

static int need(struct cursor *c, uint64_t n, const char *what)
{
    if (n > c->left)
        return st_error_set(c->e, "%s: truncated file: %s needs %llu bytes at offset %zu, %zu left",
                            c->file, what, (unsigned long long)n,
                            (size_t)(c->p - c->base), c->left);
    return 0;
}

static int rd(struct cursor *c, void *dst, size_t n, const char *what)
{
    if (need(c, n, what)) return -1;
    memcpy(dst, c->p, n);
    c->p += n;
    c->left -= n;
    return 0;
}

static int rd_u32(struct cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(struct cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

static int rd_str(struct cursor *c, struct st_gguf_str *s, uint64_t max, const char *what)
{
    if (rd_u64(c, &s->len, what)) return -1;
    if (s->len > max)
        return st_error_set(c->e, "%s: %s: string length %llu exceeds the limit %llu", c->file, what,
                            (unsigned long long)s->len, (unsigned long long)max);
    if (need(c, s->len, what)) return -1;
    s->ptr = (const char *)c->p;
    c->p += s->len;
    c->left -= s->len;
    return 0;
}

static char *dup_str(const struct st_gguf_str *s)
{
    char *r = malloc(s->len + 1);
    if (!r) return NULL;
    memcpy(r, s->ptr, s->len);
    r[s->len] = 0;
    return r;
}

static size_t vtype_size(uint32_t t)
{
    switch (t) {
    case ST_GGUF_UINT8: case ST_GGUF_INT8: case ST_GGUF_BOOL: return 1;
    case ST_GGUF_UINT16: case ST_GGUF_INT16: return 2;
    case ST_GGUF_UINT32: case ST_GGUF_INT32: case ST_GGUF_FLOAT32: return 4;
    case ST_GGUF_UINT64: case ST_GGUF_INT64: case ST_GGUF_FLOAT64: return 8;
    default: return 0; // string, array, unknown
    }
}

const char *st_gguf_vtype_name(uint32_t t)
{
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                  "string", "array", "u64", "i64", "f64"};
    return t < ST_GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

// Reads one scalar of type t into kv->v.
static int rd_scalar(struct cursor *c, uint32_t t, struct st_gguf_kv *kv, const char *key)
{
    uint8_t buf[8];
    size_t n = vtype_size(t);
    if (rd(c, buf, n, key)) return -1;
    switch (t) {
    case ST_GGUF_UINT8: kv->v.u = buf[0]; break;
    case ST_GGUF_BOOL:
        if (buf[0] > 1)
            return st_error_set(c->e, "%s: key '%s': bool value %u is not 0 or 1", c->file, key, buf[0]);
        kv->v.u = buf[0];
        break;
    case ST_GGUF_INT8: kv->v.i = (int8_t)buf[0]; break;
    case ST_GGUF_UINT16: { uint16_t x; memcpy(&x, buf, 2); kv->v.u = x; break; }
    case ST_GGUF_INT16: { int16_t x; memcpy(&x, buf, 2); kv->v.i = x; break; }
    case ST_GGUF_UINT32: { uint32_t x; memcpy(&x, buf, 4); kv->v.u = x; break; }
    case ST_GGUF_INT32: { int32_t x; memcpy(&x, buf, 4); kv->v.i = x; break; }
    case ST_GGUF_FLOAT32: { float x; memcpy(&x, buf, 4); kv->v.f = x; break; }
    case ST_GGUF_UINT64: memcpy(&kv->v.u, buf, 8); break;
    case ST_GGUF_INT64: memcpy(&kv->v.i, buf, 8); break;
    case ST_GGUF_FLOAT64: memcpy(&kv->v.f, buf, 8); break;
    default: return st_error_set(c->e, "%s: key '%s': bad scalar type %u", c->file, key, t);
    }
    return 0;
}

static int rd_kv(struct cursor *c, struct st_gguf_kv *kv, uint64_t idx)
{
    struct st_gguf_str key;
    char what[64];
    snprintf(what, sizeof what, "key %llu", (unsigned long long)idx);
    if (rd_str(c, &key, MAX_KEY_LEN, what)) return -1;
    if (key.len == 0) return st_error_set(c->e, "%s: %s: empty key", c->file, what);
    if (!(kv->key = dup_str(&key))) return st_error_set(c->e, "%s: out of memory", c->file);
    if (rd_u32(c, &kv->type, kv->key)) return -1;
    if (kv->type == ST_GGUF_STRING) return rd_str(c, &kv->v.s, c->left, kv->key);
    if (kv->type != ST_GGUF_ARRAY) {
        if (!vtype_size(kv->type))
            return st_error_set(c->e, "%s: key '%s': unknown value type %u", c->file, kv->key, kv->type);
        return rd_scalar(c, kv->type, kv, kv->key);
    }
    if (rd_u32(c, &kv->arr_type, kv->key) || rd_u64(c, &kv->arr_n, kv->key)) return -1;
    if (kv->arr_type == ST_GGUF_STRING) {
        // Each string needs at least its 8-byte length: bound n before allocating.
        if (kv->arr_n > c->left / 8)
            return st_error_set(c->e, "%s: key '%s': string array of %llu elements cannot fit in the %zu bytes left",
                                c->file, kv->key, (unsigned long long)kv->arr_n, c->left);
        kv->arr_strs = calloc(kv->arr_n ? kv->arr_n : 1, sizeof *kv->arr_strs);
        if (!kv->arr_strs) return st_error_set(c->e, "%s: out of memory", c->file);
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (rd_str(c, &kv->arr_strs[i], c->left, kv->key)) return -1;
        return 0;
    }
    size_t es = vtype_size(kv->arr_type);
    if (!es)
        return st_error_set(c->e, "%s: key '%s': unsupported array element type %u (%s)", c->file,
                            kv->key, kv->arr_type, st_gguf_vtype_name(kv->arr_type));
    if (kv->arr_n > c->left / es)
        return st_error_set(c->e, "%s: key '%s': array of %llu x %zu bytes runs past the end of the file",
                            c->file, kv->key, (unsigned long long)kv->arr_n, es);
    kv->arr_data = c->p;
    c->p += kv->arr_n * es;
    c->left -= kv->arr_n * es;
    if (kv->arr_type == ST_GGUF_BOOL)
        for (uint64_t i = 0; i < kv->arr_n; i++)
            if (kv->arr_data[i] > 1)
                return st_error_set(c->e, "%s: key '%s': bool element %llu is %u", c->file, kv->key,
                                    (unsigned long long)i, kv->arr_data[i]);
    return 0;
}

static int rd_tensor_info(struct cursor *c, struct st_gguf_tensor *t, uint64_t idx)
{
    struct st_gguf_str name;
    char what[64];
    snprintf(what, sizeof what, "tensor info %llu", (unsigned long long)idx);
    if (rd_str(c, &name, MAX_NAME_LEN, what)) return -1;
    if (name.len == 0) return st_error_set(c->e, "%s: %s: empty tensor name", c->file, what);
    if (!(t->name = dup_str(&name))) return st_error_set(c->e, "%s: out of memory", c->file);
    if (rd_u32(c, &t->n_dims, t->name)) return -1;
    if (t->n_dims < 1 || t->n_dims > ST_GGUF_MAX_DIMS)
        return st_error_set(c->e, "%s: tensor '%s': n_dims %u is not in 1..%d", c->file, t->name,
                            t->n_dims, ST_GGUF_MAX_DIMS);
    for (int d = 0; d < ST_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (rd_u64(c, &ne, t->name)) return -1;
        if (ne == 0 || ne > (uint64_t)INT64_MAX / 2)
            return st_error_set(c->e, "%s: tensor '%s': dimension %u is %llu", c->file, t->name, d,
                                (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if (rd_u32(c, &t->type, t->name) || rd_u64(c, &t->offset, t->name)) return -1;
    const struct st_type_info *ti = st_type_get(t->type);
    if (!ti || !ti->dequant)
        return st_error_set(c->e, "%s: tensor '%s': unsupported tensor type %u", c->file, t->name, t->type);
    if (t->ne[0] % ti->block_elems)
        return st_error_set(c->e, "%s: tensor '%s': row length %lld is not a multiple of the %s block (%u)",
                            c->file, t->name, (long long)t->ne[0], ti->name, ti->block_elems);
    // Element count and byte size, checked for overflow dimension by dimension.
    uint64_t rows = 1;
    for (int d = 1; d < ST_GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(rows, (uint64_t)t->ne[d], &rows))
            return st_error_set(c->e, "%s: tensor '%s': element count overflows", c->file, t->name);
    uint64_t row_bytes = (uint64_t)(t->ne[0] / ti->block_elems) * ti->block_bytes;
    if (__builtin_mul_overflow(rows, row_bytes, &t->n_bytes))
        return st_error_set(c->e, "%s: tensor '%s': byte size overflows", c->file, t->name);
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    const struct st_gguf_tensor *x = *(struct st_gguf_tensor *const *)a;
    const struct st_gguf_tensor *y = *(struct st_gguf_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp((*(struct st_gguf_kv *const *)a)->key, (*(struct st_gguf_kv *const *)b)->key);
}

// Rejects duplicate names among tensors and among keys (sorted copies).
static int check_duplicates(struct st_gguf *g, struct st_error *e)
{
    uint64_t n = g->n_tensors > g->n_kv ? g->n_tensors : g->n_kv;
    void **v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return st_error_set(e, "%s: out of memory", g->path);
    int rc = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) v[i] = &g->tensors[i];
    qsort(v, g->n_tensors, sizeof *v, cmp_name);
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++)
        if (!cmp_name(&v[i - 1], &v[i]))
            rc = st_error_set(e, "%s: duplicate tensor name '%s'", g->path,
                              ((struct st_gguf_tensor *)v[i])->name);
    for (uint64_t i = 0; i < g->n_kv && !rc; i++) v[i] = &g->kv[i];
    if (!rc) qsort(v, g->n_kv, sizeof *v, cmp_key);
    for (uint64_t i = 1; i < g->n_kv && !rc; i++)
        if (!cmp_key(&v[i - 1], &v[i]))
            rc = st_error_set(e, "%s: duplicate metadata key '%s'", g->path, ((struct st_gguf_kv *)v[i])->key);
    free(v);
    return rc;
}

int st_gguf_parse(const uint8_t *buf, size_t size, const char *name, struct st_gguf **out,
                  struct st_error *e)
{
    *out = NULL;
    struct st_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(name ? name : "(buffer)"))) {
        free(g);
        return st_error_set(e, "%s: out of memory", name);
    }
    g->base = buf;
    g->size = size;
    struct cursor c = {buf, buf, size, g->path, e};
    uint32_t magic;
    if (rd_u32(&c, &magic, "magic")) goto fail;
    if (magic != ST_GGUF_MAGIC) {
        st_error_set(e, "%s: not a GGUF file (magic 0x%08x)", g->path, magic);
        goto fail;
    }
    if (rd_u32(&c, &g->version, "version")) goto fail;
    if (g->version != 2 && g->version != 3) {
        st_error_set(e, "%s: unsupported GGUF version %u (2 and 3 are supported)", g->path, g->version);
        goto fail;
    }
    if (rd_u64(&c, &g->n_tensors, "tensor count") || rd_u64(&c, &g->n_kv, "metadata count")) goto fail;
    // A key needs >= 12 bytes and a tensor info >= 28: bound the counts by
    // what is left before allocating.
    if (g->n_kv > c.left / 12 || g->n_tensors > c.left / 28) {
        st_error_set(e, "%s: header claims %llu keys and %llu tensors, more than %zu bytes can hold",
                     g->path, (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors, c.left);
        goto fail;
    }
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        st_error_set(e, "%s: out of memory", g->path);
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (rd_kv(&c, &g->kv[i], i)) goto fail;
    g->alignment = ST_GGUF_DEFAULT_ALIGNMENT;
    const struct st_gguf_kv *al = st_gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->type != ST_GGUF_UINT32 || al->v.u == 0 || (al->v.u & (al->v.u - 1))) {
            st_error_set(e, "%s: general.alignment must be a power of two u32", g->path);
            goto fail;
        }
        g->alignment = al->v.u;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (rd_tensor_info(&c, &g->tensors[i], i)) goto fail;
    if (check_duplicates(g, e)) goto fail;
    uint64_t pos = size - c.left;
    g->data_offset = (pos + g->alignment - 1) / g->alignment * g->alignment;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct st_gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        if (t->offset % g->alignment) {
            st_error_set(e, "%s: tensor '%s': data offset %llu is not aligned to %llu", g->path, t->name,
                         (unsigned long long)t->offset, (unsigned long long)g->alignment);
            goto fail;
        }
        if (__builtin_add_overflow(g->data_offset, t->offset, &end) ||
            __builtin_add_overflow(end, t->n_bytes, &end) || end > size) {
            st_error_set(e, "%s: tensor '%s': data (offset %llu, %llu bytes) runs past the end of the file (%zu bytes)",
                         g->path, t->name, (unsigned long long)t->offset, (unsigned long long)t->n_bytes, size);
            goto fail;
        }
        t->data = buf + g->data_offset + t->offset;
    }
    *out = g;
    return 0;
fail:
    st_gguf_close(&g);
    return -1;
}

int st_gguf_open(const char *path, struct st_gguf **out, struct st_error *e)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_error_set(e, "open(%s): %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        st_error_set(e, "fstat(%s): %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return st_error_set(e, "%s: not a regular non-empty file", path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return st_error_set(e, "mmap(%s, %lld bytes): %s", path, (long long)st.st_size, strerror(errno));
    if (st_gguf_parse(m, (size_t)st.st_size, path, out, e)) {
        munmap(m, (size_t)st.st_size);
        return -1;
    }
    (*out)->mapped = true;
    return 0;
}

void st_gguf_close(struct st_gguf **gp)
{
    struct st_gguf *g = *gp;
    if (!g) return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            free(g->kv[i].arr_strs);
        }
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g->path);
    free(g);
    *gp = NULL;
}

const struct st_gguf_kv *st_gguf_find_kv(const struct st_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key && !strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const struct st_gguf_tensor *st_gguf_find_tensor(const struct st_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name && !strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static bool is_unsigned(uint32_t t)
{
    return t == ST_GGUF_UINT8 || t == ST_GGUF_UINT16 || t == ST_GGUF_UINT32 || t == ST_GGUF_UINT64 ||
           t == ST_GGUF_BOOL;
}
static bool is_signed(uint32_t t)
{
    return t == ST_GGUF_INT8 || t == ST_GGUF_INT16 || t == ST_GGUF_INT32 || t == ST_GGUF_INT64;
}

int st_gguf_get_u32(const struct st_gguf *g, const char *key, uint32_t *out, struct st_error *e)
{
    const struct st_gguf_kv *kv = st_gguf_find_kv(g, key);
    if (!kv) return 1;
    if (is_unsigned(kv->type) && kv->v.u <= UINT32_MAX) {
        *out = (uint32_t)kv->v.u;
        return 0;
    }
    if (is_signed(kv->type) && kv->v.i >= 0 && kv->v.i <= UINT32_MAX) {
        *out = (uint32_t)kv->v.i;
        return 0;
    }
    return st_error_set(e, "%s: key '%s' (%s) is not an unsigned 32-bit integer", g->path, key,
                        st_gguf_vtype_name(kv->type));
}

int st_gguf_get_f32(const struct st_gguf *g, const char *key, float *out, struct st_error *e)
{
    const struct st_gguf_kv *kv = st_gguf_find_kv(g, key);
    if (!kv) return 1;
    if (kv->type == ST_GGUF_FLOAT32 || kv->type == ST_GGUF_FLOAT64) *out = (float)kv->v.f;
    else if (is_unsigned(kv->type)) *out = (float)kv->v.u;
    else if (is_signed(kv->type)) *out = (float)kv->v.i;
    else return st_error_set(e, "%s: key '%s' (%s) is not a number", g->path, key, st_gguf_vtype_name(kv->type));
    return 0;
}

int st_gguf_get_bool(const struct st_gguf *g, const char *key, bool *out, struct st_error *e)
{
    const struct st_gguf_kv *kv = st_gguf_find_kv(g, key);
    if (!kv) return 1;
    if (kv->type != ST_GGUF_BOOL)
        return st_error_set(e, "%s: key '%s' (%s) is not a bool", g->path, key, st_gguf_vtype_name(kv->type));
    *out = kv->v.u != 0;
    return 0;
}

int st_gguf_get_str(const struct st_gguf *g, const char *key, char *buf, size_t cap, struct st_error *e)
{
    const struct st_gguf_kv *kv = st_gguf_find_kv(g, key);
    if (!kv) return 1;
    if (kv->type != ST_GGUF_STRING)
        return st_error_set(e, "%s: key '%s' (%s) is not a string", g->path, key, st_gguf_vtype_name(kv->type));
    size_t n = kv->v.s.len < cap - 1 ? kv->v.s.len : cap - 1;
    memcpy(buf, kv->v.s.ptr, n);
    buf[n] = 0;
    return 0;
}

int st_gguf_get_arr(const struct st_gguf *g, const char *key, uint32_t elem_type,
                    const struct st_gguf_kv **out, struct st_error *e)
{
    const struct st_gguf_kv *kv = st_gguf_find_kv(g, key);
    if (!kv) return 1;
    if (kv->type != ST_GGUF_ARRAY || kv->arr_type != elem_type)
        return st_error_set(e, "%s: key '%s' is %s%s%s, expected an array of %s", g->path, key,
                            st_gguf_vtype_name(kv->type), kv->type == ST_GGUF_ARRAY ? " of " : "",
                            kv->type == ST_GGUF_ARRAY ? st_gguf_vtype_name(kv->arr_type) : "",
                            st_gguf_vtype_name(elem_type));
    *out = kv;
    return 0;
}

double st_gguf_arr_num(const struct st_gguf_kv *kv, uint64_t i)
{
    const uint8_t *p = kv->arr_data + i * vtype_size(kv->arr_type);
    switch (kv->arr_type) {
    case ST_GGUF_UINT8: case ST_GGUF_BOOL: return *p;
    case ST_GGUF_INT8: return (int8_t)*p;
    case ST_GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); return x; }
    case ST_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); return x; }
    case ST_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case ST_GGUF_INT32: { int32_t x; memcpy(&x, p, 4); return x; }
    case ST_GGUF_FLOAT32: { float x; memcpy(&x, p, 4); return x; }
    case ST_GGUF_UINT64: { uint64_t x; memcpy(&x, p, 8); return (double)x; }
    case ST_GGUF_INT64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case ST_GGUF_FLOAT64: { double x; memcpy(&x, p, 8); return x; }
    default: return 0;
    }
}

uint64_t st_gguf_tensor_nrows(const struct st_gguf_tensor *t)
{
    return (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
}

uint64_t st_gguf_tensor_nelements(const struct st_gguf_tensor *t)
{
    return (uint64_t)t->ne[0] * st_gguf_tensor_nrows(t);
}
