// GGUF v3 writer, streaming.  Metadata and tensor infos are collected first;
// st_gguf_writer_begin writes the whole header (every tensor's offset is known
// from its type and shape), then the tensors' data is written in the order
// the tensors were added, in pieces of any size, so that a model never has to
// be in memory whole.  Output goes to "PATH.part", renamed to PATH only by a
// successful st_gguf_writer_finish: a file at PATH is always complete.
//
// Setters record the first failure in the writer (they still return -1);
// st_gguf_writer_begin reports it.
#ifndef ST_MODEL_GGUF_WRITE_H
#define ST_MODEL_GGUF_WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "model/gguf.h"

struct st_gguf_writer;

int st_gguf_writer_new(struct st_gguf_writer **out, struct st_error *e);
// Closes and deletes an unfinished output file.
void st_gguf_writer_free(struct st_gguf_writer **w);

// Metadata.  Setting an existing key replaces its value in place (the key
// keeps its position).  Values are copied.
int st_gguf_writer_set_u32(struct st_gguf_writer *w, const char *key, uint32_t v);
int st_gguf_writer_set_i32(struct st_gguf_writer *w, const char *key, int32_t v);
int st_gguf_writer_set_f32(struct st_gguf_writer *w, const char *key, float v);
int st_gguf_writer_set_bool(struct st_gguf_writer *w, const char *key, bool v);
int st_gguf_writer_set_str(struct st_gguf_writer *w, const char *key, const char *v);
// Any scalar type (not STRING or ARRAY); v points to the value's C type
// (uint8_t for u8 and bool, double for f64, ...).
int st_gguf_writer_set_scalar(struct st_gguf_writer *w, const char *key, uint32_t vtype, const void *v);
// Array of n fixed-size elements of elem_type, packed little-endian at data.
int st_gguf_writer_set_arr(struct st_gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                           uint64_t n);
// String arrays: NUL-terminated strings, or strings with lengths.
int st_gguf_writer_set_arr_str(struct st_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
int st_gguf_writer_set_arr_strn(struct st_gguf_writer *w, const char *key, const struct st_gguf_str *strs,
                                uint64_t n);
// Copies a key/value pair from a file being read (any type).
int st_gguf_writer_copy_kv(struct st_gguf_writer *w, const struct st_gguf_kv *kv);
// Returns 0 if the key was removed, 1 if it was not there.
int st_gguf_writer_remove(struct st_gguf_writer *w, const char *key);

// Declares the next tensor: ne[0] is the row length, which must be a multiple
// of the type's block.  Names are unique.
int st_gguf_writer_add_tensor(struct st_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne);

// Shows a progress bar on stderr while writing, if stderr is a terminal.
void st_gguf_writer_progress(struct st_gguf_writer *w, const char *label);

// Creates PATH.part and writes the header (alignment: general.alignment if
// set, a power-of-two u32, else 32).  No metadata or tensor may be added after.
int st_gguf_writer_begin(struct st_gguf_writer *w, const char *path, struct st_error *e);
// The next n bytes of tensor data, in the order the tensors were added.  A
// piece may not run past the end of the current tensor; padding between
// tensors is written by the writer.
int st_gguf_writer_write(struct st_gguf_writer *w, const void *data, uint64_t n, struct st_error *e);
// Name, type and size in bytes of the tensor whose data comes next (NULL when
// all data is written).
const char *st_gguf_writer_current(const struct st_gguf_writer *w, uint32_t *type, uint64_t *n_bytes);
// Checks that every tensor's data was written, flushes, and renames PATH.part
// to PATH.
int st_gguf_writer_finish(struct st_gguf_writer *w, struct st_error *e);

// Total tensor data in bytes (valid after begin), for reports.
uint64_t st_gguf_writer_data_bytes(const struct st_gguf_writer *w);

#endif
