// GGUF v3 writer.  Values are serialised when they are set, so the header is
// one pass over byte strings at begin; data goes through one large buffer
// and is written with write(2) in big pieces.
#include "model/gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/types.h"

#define WRITE_BUF (8u << 20)

struct wkv {
    char *key;
    uint32_t type;    // enum st_gguf_vtype
    uint8_t *val;     // serialised value (after the type field)
    size_t val_len;
};

struct wtensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[ST_GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t offset;  // from the start of the data section
    uint64_t n_bytes;
};

struct st_gguf_writer {
    struct wkv *kv;           // [n_kv]
    size_t n_kv, cap_kv;
    struct wtensor *t;        // [n_t]
    size_t n_t, cap_t;
    bool failed;              // a setter failed: err holds why
    struct st_error err;
    // Output, after begin:
    bool begun, finished;
    int fd;
    char *path, *part;        // final name, and PATH.part while writing
    uint64_t alignment;
    uint64_t data_bytes;      // data section size, padding included
    uint8_t *buf;             // [WRITE_BUF]
    size_t buf_n;
    size_t cur;               // tensor whose data comes next
    uint64_t cur_done;        // bytes of it written
    uint64_t data_done;       // data bytes written, padding included
    // Progress bar:
    bool progress;
    char label[80];
    double t_start, t_drawn;
};

static size_t vsize(uint32_t t)
{
    switch (t) {
    case ST_GGUF_UINT8: case ST_GGUF_INT8: case ST_GGUF_BOOL: return 1;
    case ST_GGUF_UINT16: case ST_GGUF_INT16: return 2;
    case ST_GGUF_UINT32: case ST_GGUF_INT32: case ST_GGUF_FLOAT32: return 4;
    case ST_GGUF_UINT64: case ST_GGUF_INT64: case ST_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static int fail(struct st_gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct st_gguf_writer *w, const char *fmt, ...)
{
    if (!w->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err.msg, sizeof w->err.msg, fmt, ap);
        va_end(ap);
        w->failed = true;
    }
    return -1;
}

int st_gguf_writer_new(struct st_gguf_writer **out, struct st_error *e)
{
    struct st_gguf_writer *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w) return st_error_set(e, "gguf writer: out of memory");
    w->fd = -1;
    w->alignment = ST_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return 0;
}

void st_gguf_writer_free(struct st_gguf_writer **wp)
{
    struct st_gguf_writer *w = *wp;
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->part && !w->finished) unlink(w->part);
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w->buf);
    free(w->path);
    free(w->part);
    free(w);
    *wp = NULL;
}

static struct wkv *find_kv(struct st_gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) return &w->kv[i];
    return NULL;
}

// Stores an already serialised value (takes ownership of val).
static int put_kv(struct st_gguf_writer *w, const char *key, uint32_t type, uint8_t *val, size_t len)
{
    if (w->begun) {
        free(val);
        return fail(w, "gguf writer: key '%s' set after the header was written", key ? key : "");
    }
    if (!key || !key[0]) {
        free(val);
        return fail(w, "gguf writer: empty metadata key");
    }
    if (!val && len) return fail(w, "gguf writer: key '%s': out of memory", key);
    struct wkv *kv = find_kv(w, key);
    if (kv) {
        free(kv->val);
        kv->type = type;
        kv->val = val;
        kv->val_len = len;
        return 0;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        struct wkv *n = realloc(w->kv, cap * sizeof *n);
        if (!n) {
            free(val);
            return fail(w, "gguf writer: key '%s': out of memory", key);
        }
        w->kv = n;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(val);
        return fail(w, "gguf writer: key '%s': out of memory", key);
    }
    w->kv[w->n_kv++] = (struct wkv){k, type, val, len};
    return 0;
}

int st_gguf_writer_set_scalar(struct st_gguf_writer *w, const char *key, uint32_t vtype, const void *v)
{
    size_t n = vsize(vtype);
    if (!n) return fail(w, "gguf writer: key '%s': %s is not a scalar type", key ? key : "", st_gguf_vtype_name(vtype));
    if (vtype == ST_GGUF_BOOL && *(const uint8_t *)v > 1)
        return fail(w, "gguf writer: key '%s': bool value %u", key ? key : "", *(const uint8_t *)v);
    uint8_t *val = malloc(n);
    if (val) memcpy(val, v, n);
    return put_kv(w, key, vtype, val, n);
}

int st_gguf_writer_set_u32(struct st_gguf_writer *w, const char *key, uint32_t v)
{
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_UINT32, &v);
}
int st_gguf_writer_set_i32(struct st_gguf_writer *w, const char *key, int32_t v)
{
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_INT32, &v);
}
int st_gguf_writer_set_f32(struct st_gguf_writer *w, const char *key, float v)
{
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_FLOAT32, &v);
}
int st_gguf_writer_set_bool(struct st_gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v;
    return st_gguf_writer_set_scalar(w, key, ST_GGUF_BOOL, &b);
}

static uint8_t *ser_str(uint8_t *p, const char *s, uint64_t len)
{
    memcpy(p, &len, 8);
    if (len) memcpy(p + 8, s, len);
    return p + 8 + len;
}

int st_gguf_writer_set_str(struct st_gguf_writer *w, const char *key, const char *v)
{
    uint64_t len = strlen(v);
    uint8_t *val = malloc(8 + len);
    if (val) ser_str(val, v, len);
    return put_kv(w, key, ST_GGUF_STRING, val, 8 + len);
}

int st_gguf_writer_set_arr(struct st_gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                           uint64_t n)
{
    size_t es = vsize(elem_type);
    if (!es)
        return fail(w, "gguf writer: key '%s': array elements of type %s need set_arr_str", key ? key : "",
                    st_gguf_vtype_name(elem_type));
    if (n > (SIZE_MAX - 12) / es) return fail(w, "gguf writer: key '%s': array of %llu elements is too large", key ? key : "", (unsigned long long)n);
    uint8_t *val = malloc(12 + n * es);
    if (val) {
        memcpy(val, &elem_type, 4);
        memcpy(val + 4, &n, 8);
        if (n) memcpy(val + 12, data, n * es);
    }
    return put_kv(w, key, ST_GGUF_ARRAY, val, 12 + n * es);
}

// Serialises a string array given as C strings (cs) or as strings with lengths (ss).
static int set_strs(struct st_gguf_writer *w, const char *key, const char *const *cs,
                    const struct st_gguf_str *ss, uint64_t n)
{
    size_t total = 12;
    for (uint64_t i = 0; i < n; i++) total += 8 + (cs ? strlen(cs[i]) : ss[i].len);
    uint8_t *val = malloc(total);
    if (val) {
        uint32_t et = ST_GGUF_STRING;
        memcpy(val, &et, 4);
        memcpy(val + 4, &n, 8);
        uint8_t *p = val + 12;
        for (uint64_t i = 0; i < n; i++)
            p = cs ? ser_str(p, cs[i], strlen(cs[i])) : ser_str(p, ss[i].ptr, ss[i].len);
    }
    return put_kv(w, key, ST_GGUF_ARRAY, val, total);
}

int st_gguf_writer_set_arr_str(struct st_gguf_writer *w, const char *key, const char *const *strs, uint64_t n)
{
    return set_strs(w, key, strs, NULL, n);
}

int st_gguf_writer_set_arr_strn(struct st_gguf_writer *w, const char *key, const struct st_gguf_str *strs,
                                uint64_t n)
{
    return set_strs(w, key, NULL, strs, n);
}

int st_gguf_writer_copy_kv(struct st_gguf_writer *w, const struct st_gguf_kv *kv)
{
    switch (kv->type) {
    case ST_GGUF_STRING: {
        uint8_t *val = malloc(8 + kv->v.s.len);
        if (val) ser_str(val, kv->v.s.ptr, kv->v.s.len);
        return put_kv(w, kv->key, ST_GGUF_STRING, val, 8 + kv->v.s.len);
    }
    case ST_GGUF_ARRAY:
        if (kv->arr_type == ST_GGUF_STRING) return set_strs(w, kv->key, NULL, kv->arr_strs, kv->arr_n);
        return st_gguf_writer_set_arr(w, kv->key, kv->arr_type, kv->arr_data, kv->arr_n);
    case ST_GGUF_UINT8: case ST_GGUF_BOOL: { uint8_t x = (uint8_t)kv->v.u; return st_gguf_writer_set_scalar(w, kv->key, kv->type, &x); }
    case ST_GGUF_INT8: { int8_t x = (int8_t)kv->v.i; return st_gguf_writer_set_scalar(w, kv->key, kv->type, &x); }
    case ST_GGUF_UINT16: { uint16_t x = (uint16_t)kv->v.u; return st_gguf_writer_set_scalar(w, kv->key, kv->type, &x); }
    case ST_GGUF_INT16: { int16_t x = (int16_t)kv->v.i; return st_gguf_writer_set_scalar(w, kv->key, kv->type, &x); }
    case ST_GGUF_UINT32: { uint32_t x = (uint32_t)kv->v.u; return st_gguf_writer_set_scalar(w, kv->key, kv->type, &x); }
    case ST_GGUF_INT32: { int32_t x = (int32_t)kv->v.i; return st_gguf_writer_set_scalar(w, kv->key, kv->type, &x); }
    case ST_GGUF_FLOAT32: { float x = (float)kv->v.f; return st_gguf_writer_set_scalar(w, kv->key, kv->type, &x); }
    case ST_GGUF_UINT64: return st_gguf_writer_set_scalar(w, kv->key, kv->type, &kv->v.u);
    case ST_GGUF_INT64: return st_gguf_writer_set_scalar(w, kv->key, kv->type, &kv->v.i);
    case ST_GGUF_FLOAT64: return st_gguf_writer_set_scalar(w, kv->key, kv->type, &kv->v.f);
    default: return fail(w, "gguf writer: key '%s': unknown value type %u", kv->key, kv->type);
    }
}

int st_gguf_writer_remove(struct st_gguf_writer *w, const char *key)
{
    struct wkv *kv = find_kv(w, key);
    if (!kv) return 1;
    free(kv->key);
    free(kv->val);
    size_t i = (size_t)(kv - w->kv);
    memmove(kv, kv + 1, (w->n_kv - i - 1) * sizeof *kv);
    w->n_kv--;
    return 0;
}

int st_gguf_writer_add_tensor(struct st_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne)
{
    if (w->begun) return fail(w, "gguf writer: tensor '%s' added after the header was written", name);
    if (!name || !name[0]) return fail(w, "gguf writer: empty tensor name");
    const struct st_type_info *ti = st_type_get(type);
    if (!ti) return fail(w, "gguf writer: tensor '%s': unsupported type %u", name, type);
    if (n_dims < 1 || n_dims > ST_GGUF_MAX_DIMS)
        return fail(w, "gguf writer: tensor '%s': n_dims %u is not in 1..%d", name, n_dims, ST_GGUF_MAX_DIMS);
    struct wtensor t = {.n_dims = n_dims, .type = type, .ne = {1, 1, 1, 1}};
    uint64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) return fail(w, "gguf writer: tensor '%s': dimension %u is %lld", name, d, (long long)ne[d]);
        t.ne[d] = ne[d];
        if (d && __builtin_mul_overflow(rows, (uint64_t)ne[d], &rows))
            return fail(w, "gguf writer: tensor '%s': size overflows", name);
    }
    size_t rb = st_type_row_bytes(type, ne[0]);
    if (!rb)
        return fail(w, "gguf writer: tensor '%s': row length %lld is not a multiple of the %s block (%u)", name,
                    (long long)ne[0], ti->name, ti->block_elems);
    if (__builtin_mul_overflow(rows, (uint64_t)rb, &t.n_bytes))
        return fail(w, "gguf writer: tensor '%s': size overflows", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return fail(w, "gguf writer: duplicate tensor name '%s'", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        struct wtensor *n = realloc(w->t, cap * sizeof *n);
        if (!n) return fail(w, "gguf writer: tensor '%s': out of memory", name);
        w->t = n;
        w->cap_t = cap;
    }
    if (!(t.name = strdup(name))) return fail(w, "gguf writer: tensor '%s': out of memory", name);
    w->t[w->n_t++] = t;
    return 0;
}

void st_gguf_writer_progress(struct st_gguf_writer *w, const char *label)
{
    w->progress = isatty(2);
    snprintf(w->label, sizeof w->label, "%s", label);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void draw(struct st_gguf_writer *w, bool last)
{
    double t = now();
    if (!last && t - w->t_drawn < 0.1) return;
    w->t_drawn = t;
    double frac = w->data_bytes ? (double)w->data_done / w->data_bytes : 1.0;
    int bar = (int)(frac * 30);
    char b[31];
    for (int i = 0; i < 30; i++) b[i] = i < bar ? '#' : '.';
    b[30] = 0;
    double mib = w->data_done / 1048576.0, el = t - w->t_start;
    fprintf(stderr, "\r%s [%s] %3d%% %8.1f/%.1f MiB %6.0f MiB/s%s", w->label, b, (int)(frac * 100), mib,
            w->data_bytes / 1048576.0, el > 0 ? mib / el : 0.0, last ? "\n" : "");
}

static int flush_buf(struct st_gguf_writer *w, struct st_error *e)
{
    size_t off = 0;
    while (off < w->buf_n) {
        ssize_t r = write(w->fd, w->buf + off, w->buf_n - off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return st_error_set(e, "write(%s, %zu bytes): %s", w->part, w->buf_n - off, r < 0 ? strerror(errno) : "no progress");
        off += (size_t)r;
    }
    w->buf_n = 0;
    return 0;
}

// Appends bytes to the output through the buffer.
static int out(struct st_gguf_writer *w, const void *p, uint64_t n, struct st_error *e)
{
    const uint8_t *s = p;
    while (n) {
        size_t k = WRITE_BUF - w->buf_n;
        if (k > n) k = (size_t)n;
        if (s) memcpy(w->buf + w->buf_n, s, k);
        else memset(w->buf + w->buf_n, 0, k);
        w->buf_n += k;
        n -= k;
        if (s) s += k;
        if (w->buf_n == WRITE_BUF && flush_buf(w, e)) return -1;
    }
    return 0;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int st_gguf_writer_begin(struct st_gguf_writer *w, const char *path, struct st_error *e)
{
    if (w->failed) return st_error_set(e, "%s", w->err.msg);
    if (w->begun) return st_error_set(e, "gguf writer: %s: begin called twice", path);
    const struct wkv *al = find_kv(w, "general.alignment");
    if (al) {
        uint32_t a = 0;
        if (al->type == ST_GGUF_UINT32) memcpy(&a, al->val, 4);
        if (!a || (a & (a - 1)))
            return st_error_set(e, "gguf writer: %s: general.alignment must be a power-of-two u32", path);
        w->alignment = a;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off = pad_to(off + w->t[i].n_bytes, w->alignment);
    }
    w->data_bytes = off;
    size_t plen = strlen(path);
    w->path = strdup(path);
    w->part = malloc(plen + 6);
    w->buf = malloc(WRITE_BUF);
    if (!w->path || !w->part || !w->buf) return st_error_set(e, "gguf writer: %s: out of memory", path);
    memcpy(w->part, path, plen);
    memcpy(w->part + plen, ".part", 6);
    w->fd = open(w->part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) return st_error_set(e, "open(%s): %s", w->part, strerror(errno));
    w->begun = true;
    uint32_t magic = ST_GGUF_MAGIC, version = 3;
    uint64_t nt = w->n_t, nkv = w->n_kv, hdr = 24;
    if (out(w, &magic, 4, e) || out(w, &version, 4, e) || out(w, &nt, 8, e) || out(w, &nkv, 8, e)) return -1;
    for (size_t i = 0; i < w->n_kv; i++) {
        uint64_t kl = strlen(w->kv[i].key);
        if (out(w, &kl, 8, e) || out(w, w->kv[i].key, kl, e) || out(w, &w->kv[i].type, 4, e) ||
            out(w, w->kv[i].val, w->kv[i].val_len, e))
            return -1;
        hdr += 8 + kl + 4 + w->kv[i].val_len;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        uint64_t nl = strlen(t->name);
        if (out(w, &nl, 8, e) || out(w, t->name, nl, e) || out(w, &t->n_dims, 4, e)) return -1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (out(w, &t->ne[d], 8, e)) return -1;
        if (out(w, &t->type, 4, e) || out(w, &t->offset, 8, e)) return -1;
        hdr += 8 + nl + 4 + 8 * t->n_dims + 12;
    }
    // The data section starts aligned; a file without tensors ends with its
    // header (as llama.cpp writes it).
    if (w->n_t && out(w, NULL, pad_to(hdr, w->alignment) - hdr, e)) return -1;
    w->t_start = w->t_drawn = now();
    if (w->progress) draw(w, false);
    return 0;
}

int st_gguf_writer_write(struct st_gguf_writer *w, const void *data, uint64_t n, struct st_error *e)
{
    if (!w->begun || w->finished) return st_error_set(e, "gguf writer: data written outside begin/finish");
    if (w->cur >= w->n_t)
        return st_error_set(e, "gguf writer: %s: %llu bytes of data past the last tensor", w->path,
                            (unsigned long long)n);
    const struct wtensor *t = &w->t[w->cur];
    if (n > t->n_bytes - w->cur_done)
        return st_error_set(e, "gguf writer: %s: tensor '%s': %llu bytes written where %llu remain", w->path,
                            t->name, (unsigned long long)n, (unsigned long long)(t->n_bytes - w->cur_done));
    if (out(w, data, n, e)) return -1;
    w->cur_done += n;
    w->data_done += n;
    // A finished tensor is padded up to the alignment of the next offset.
    if (w->cur_done == t->n_bytes) {
        uint64_t pad = pad_to(t->n_bytes, w->alignment) - t->n_bytes;
        if (out(w, NULL, pad, e)) return -1;
        w->data_done += pad;
        w->cur++;
        w->cur_done = 0;
    }
    if (w->progress) draw(w, false);
    return 0;
}

const char *st_gguf_writer_current(const struct st_gguf_writer *w, uint32_t *type, uint64_t *n_bytes)
{
    if (w->cur >= w->n_t) return NULL;
    if (type) *type = w->t[w->cur].type;
    if (n_bytes) *n_bytes = w->t[w->cur].n_bytes;
    return w->t[w->cur].name;
}

int st_gguf_writer_finish(struct st_gguf_writer *w, struct st_error *e)
{
    if (!w->begun || w->finished) return st_error_set(e, "gguf writer: finish without begin");
    if (w->cur < w->n_t)
        return st_error_set(e, "gguf writer: %s: tensor '%s' has %llu of %llu bytes (%zu tensors left)", w->path,
                            w->t[w->cur].name, (unsigned long long)w->cur_done,
                            (unsigned long long)w->t[w->cur].n_bytes, w->n_t - w->cur);
    if (flush_buf(w, e)) return -1;
    int fd = w->fd;
    w->fd = -1;
    if (close(fd)) return st_error_set(e, "close(%s): %s", w->part, strerror(errno));
    if (rename(w->part, w->path)) return st_error_set(e, "rename(%s, %s): %s", w->part, w->path, strerror(errno));
    w->finished = true;
    if (w->progress) draw(w, true);
    return 0;
}

uint64_t st_gguf_writer_data_bytes(const struct st_gguf_writer *w) { return w->data_bytes; }
