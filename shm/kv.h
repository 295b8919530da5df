// Transactional KV cache in the region's KV section.
//
// Per session slot, per model (target, draft), per layer: K and V as
// [n_ctx][n_kv_heads][head_dim] F16.  Per slot and model a control word holds
// the committed length, the owning session and a generation number.  A step
// only writes positions at or past the committed length; commit moves the
// length forward, rollback moves it back with one store (nothing is copied,
// freed or remapped), so rollback costs the same at any context length.
// Readers of a slot see positions below committed + the step's in-flight
// window only, so a re-reserved slot (committed = 0) never shows the previous
// owner's data and reuse needs no clearing.
//
// Who calls what: the coordinator reserves, commits, rolls back and releases
// (it alone moves `committed`); workers write and read inside steps.
#ifndef ST_SHM_KV_H
#define ST_SHM_KV_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/error.h"

#define ST_KV_MAGIC UINT64_C(0x31454843414356) // "VCACHE1" little-endian
#define ST_KV_VERSION 1u
#define ST_KV_MAX_MODELS 2

enum st_kv_model { ST_KV_TARGET = 0, ST_KV_DRAFT = 1 };

struct st_kv_shape {
    uint32_t n_layers;
    uint32_t n_kv_heads;
    uint32_t head_dim;
};

struct st_kv_config {
    uint32_t n_slots;  // concurrent sessions
    uint32_t n_ctx;    // positions per slot
    uint32_t n_models; // 1 (target only) or 2 (target, draft)
    struct st_kv_shape model[ST_KV_MAX_MODELS];
};

// One per slot and model, on its own cache line.
struct st_kv_ctrl {
    _Alignas(64) _Atomic uint32_t committed; // [0, committed) final; release/acquire
    uint32_t pad0;
    _Atomic uint64_t owner;      // session id, 0 = free (model 0's word is the slot lock)
    _Atomic uint64_t generation; // bumped at each reserve
};

// At the start of the KV section; written once by st_kv_init.
struct st_kv_header {
    uint64_t magic;   // ST_KV_MAGIC
    uint32_t version; // ST_KV_VERSION
    uint32_t n_slots;
    uint32_t n_ctx;
    uint32_t n_models;
    struct st_kv_shape model[ST_KV_MAX_MODELS];
    uint64_t ctrl_offset;                    // [n_slots][n_models] struct st_kv_ctrl
    uint64_t data_offset[ST_KV_MAX_MODELS];  // [n_slots][n_layers][K,V] planes
    uint64_t plane_bytes[ST_KV_MAX_MODELS];  // one [n_ctx][heads][dim] F16 array, 64-aligned
    uint64_t total_bytes;                    // bytes used from the section start
};

// Process-local view of a formatted KV section.
struct st_kv {
    struct st_kv_header *hdr;
    uint8_t *base;           // section start
    struct st_kv_ctrl *ctrl; // [n_slots][n_models]
};

// Bytes a configuration needs in the KV section (validated, overflow-checked).
int st_kv_size(const struct st_kv_config *cfg, uint64_t *bytes, struct st_error *e);

// Fails with a clear error when the cache would not fit in MemAvailable.
int st_kv_check_memory(const struct st_kv_config *cfg, struct st_error *e);

// Formats `size` bytes at `base` (the creator, once); every slot free.
int st_kv_init(struct st_kv *kv, void *base, uint64_t size, const struct st_kv_config *cfg,
               struct st_error *e);

// Validates a formatted section (an attaching worker).
int st_kv_open(struct st_kv *kv, void *base, uint64_t size, struct st_error *e);

// Claims a free slot for `session` (nonzero): bumps every model's
// generation and sets its committed length to 0.
int st_kv_reserve(struct st_kv *kv, uint64_t session, uint32_t *slot, uint64_t *generation,
                  struct st_error *e);

// Frees a slot owned by `session`.
int st_kv_release(struct st_kv *kv, uint32_t slot, uint64_t session, struct st_error *e);

// Rows [pos, pos + n_rows) of one layer, to be written: *k and *v point at
// row `pos` of [n_ctx][n_kv_heads][head_dim].  Refused when pos < committed,
// when the rows pass n_ctx, or when the slot is free.
int st_kv_write(struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t layer, uint32_t pos,
                uint32_t n_rows, uint16_t **k, uint16_t **v, struct st_error *e);

// committed := n, for n >= committed (and n <= n_ctx).
int st_kv_commit(struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t n,
                 struct st_error *e);

// committed := n, for n <= committed: one store.
int st_kv_rollback(struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t n,
                   struct st_error *e);

// Rows [0, n_pos) of one layer, to be read by attention; allowed while
// n_pos <= committed + in_flight (the rows the current step writes).
int st_kv_read(const struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t layer,
               uint32_t n_pos, uint32_t in_flight, const uint16_t **k, const uint16_t **v,
               struct st_error *e);

uint32_t st_kv_committed(const struct st_kv *kv, uint32_t slot, uint32_t model);
uint64_t st_kv_owner(const struct st_kv *kv, uint32_t slot);
uint64_t st_kv_generation(const struct st_kv *kv, uint32_t slot, uint32_t model);
uint64_t st_kv_row_elems(const struct st_kv *kv, uint32_t model); // n_kv_heads * head_dim

#endif
