// GGUF reader (versions 2 and 3).  The file is mapped read-only; metadata
// strings and tensor data point into the mapping.  Every count, length, offset
// and dimension is validated against the file size before use, so a hostile
// file gives an error naming the file, the field and the problem.
#ifndef ST_MODEL_GGUF_H
#define ST_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define ST_GGUF_MAGIC 0x46554747u // "GGUF" little-endian
#define ST_GGUF_MAX_DIMS 4
#define ST_GGUF_DEFAULT_ALIGNMENT 32

enum st_gguf_vtype {
    ST_GGUF_UINT8 = 0,
    ST_GGUF_INT8 = 1,
    ST_GGUF_UINT16 = 2,
    ST_GGUF_INT16 = 3,
    ST_GGUF_UINT32 = 4,
    ST_GGUF_INT32 = 5,
    ST_GGUF_FLOAT32 = 6,
    ST_GGUF_BOOL = 7,
    ST_GGUF_STRING = 8,
    ST_GGUF_ARRAY = 9,
    ST_GGUF_UINT64 = 10,
    ST_GGUF_INT64 = 11,
    ST_GGUF_FLOAT64 = 12,
    ST_GGUF_VTYPE_COUNT
};

// A string inside the file: not NUL-terminated.
struct st_gguf_str {
    uint64_t len;
    const char *ptr;
};

struct st_gguf_kv {
    char *key;           // NUL-terminated copy
    uint32_t type;       // enum st_gguf_vtype
    union {
        uint64_t u;      // unsigned integers and bool
        int64_t i;       // signed integers
        double f;        // floats
        struct st_gguf_str s;
    } v;
    // Arrays (type == ST_GGUF_ARRAY):
    uint32_t arr_type;   // element type (never ARRAY)
    uint64_t arr_n;      // element count
    const uint8_t *arr_data;      // first element, for fixed-size elements
    struct st_gguf_str *arr_strs; // [arr_n] for string arrays, else NULL
};

struct st_gguf_tensor {
    char *name;          // NUL-terminated copy
    uint32_t n_dims;
    int64_t ne[ST_GGUF_MAX_DIMS]; // ne[0] is the row length; unused dims are 1
    uint32_t type;       // enum st_type (kernels/types.h)
    uint64_t offset;     // from the start of the data section
    uint64_t n_bytes;    // size of the data
    const void *data;    // into the mapping
};

struct st_gguf {
    char *path;
    const uint8_t *base; // whole file
    size_t size;
    bool mapped;         // base is an mmap of the file (else borrowed)
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    struct st_gguf_kv *kv;         // [n_kv]
    uint64_t n_tensors;
    struct st_gguf_tensor *tensors; // [n_tensors]
};

// Opens and maps a file.  On failure *out is NULL and e names the problem.
int st_gguf_open(const char *path, struct st_gguf **out, struct st_error *e);
// Parses a buffer the caller keeps alive (used by the fuzzer and tests).
int st_gguf_parse(const uint8_t *buf, size_t size, const char *name,
                  struct st_gguf **out, struct st_error *e);
void st_gguf_close(struct st_gguf **g);

const struct st_gguf_kv *st_gguf_find_kv(const struct st_gguf *g, const char *key);
const struct st_gguf_tensor *st_gguf_find_tensor(const struct st_gguf *g, const char *name);

// Typed getters.  Missing key: returns 1 (not an error) and leaves *out.
// Present but of an unusable type or out of range: returns -1 with e set.
int st_gguf_get_u32(const struct st_gguf *g, const char *key, uint32_t *out, struct st_error *e);
int st_gguf_get_f32(const struct st_gguf *g, const char *key, float *out, struct st_error *e);
int st_gguf_get_bool(const struct st_gguf *g, const char *key, bool *out, struct st_error *e);
// Copies a string value into buf (NUL-terminated, truncated to cap-1).
int st_gguf_get_str(const struct st_gguf *g, const char *key, char *buf, size_t cap, struct st_error *e);
// An array of the given element type; *n and *data describe it.
int st_gguf_get_arr(const struct st_gguf *g, const char *key, uint32_t elem_type,
                    const struct st_gguf_kv **out, struct st_error *e);

// Reads element i of a numeric array as a double (any numeric element type).
double st_gguf_arr_num(const struct st_gguf_kv *kv, uint64_t i);

const char *st_gguf_vtype_name(uint32_t t);
uint64_t st_gguf_tensor_nelements(const struct st_gguf_tensor *t);
// Number of rows: product of ne[1..].
uint64_t st_gguf_tensor_nrows(const struct st_gguf_tensor *t);

#endif
