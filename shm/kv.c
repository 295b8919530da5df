// Transactional KV cache (semantics in shm/kv.h).
#include "shm/kv.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "shm/region.h"

#define KV_ALIGN 64

static int add_ovf(uint64_t *acc, uint64_t x)
{
    if (x > UINT64_MAX - *acc) return -1;
    *acc += x;
    return 0;
}

static int mul_ovf(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > UINT64_MAX / a) return -1;
    *out = a * b;
    return 0;
}

static int round64(uint64_t *x)
{
    if (*x > UINT64_MAX - (KV_ALIGN - 1)) return -1;
    *x = (*x + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
    return 0;
}

// Fills every derived field of `h` from the configuration in it.
static int layout(struct st_kv_header *h, struct st_error *e)
{
    if (h->n_slots == 0 || h->n_ctx == 0)
        return st_error_set(e, "KV config: %" PRIu32 " slots x %" PRIu32 " positions; both must "
                               "be at least 1", h->n_slots, h->n_ctx);
    if (h->n_models == 0 || h->n_models > ST_KV_MAX_MODELS)
        return st_error_set(e, "KV config: %" PRIu32 " models, expected 1 to %d", h->n_models,
                            ST_KV_MAX_MODELS);
    uint64_t off = sizeof *h;
    round64(&off);
    h->ctrl_offset = off;
    if (add_ovf(&off, (uint64_t)h->n_slots * h->n_models * sizeof(struct st_kv_ctrl))) goto ovf;
    for (uint32_t m = 0; m < h->n_models; m++) {
        const struct st_kv_shape *s = &h->model[m];
        if (s->n_layers == 0 || s->n_kv_heads == 0 || s->head_dim == 0)
            return st_error_set(e, "KV config: model %" PRIu32 " has %" PRIu32 " layers, %"
                                   PRIu32 " KV heads, head size %" PRIu32 "; all must be >= 1",
                                m, s->n_layers, s->n_kv_heads, s->head_dim);
        uint64_t plane, data;
        if (mul_ovf((uint64_t)h->n_ctx * s->n_kv_heads, (uint64_t)s->head_dim * 2, &plane) ||
            round64(&plane))
            goto ovf;
        h->plane_bytes[m] = plane;
        if (mul_ovf(plane, (uint64_t)h->n_slots * s->n_layers * 2, &data)) goto ovf;
        if (round64(&off)) goto ovf;
        h->data_offset[m] = off;
        if (add_ovf(&off, data)) goto ovf;
    }
    h->total_bytes = off;
    return 0;
ovf:
    return st_error_set(e, "KV config: %" PRIu32 " slots x %" PRIu32 " positions overflows 64 "
                           "bits", h->n_slots, h->n_ctx);
}

static void header_from_config(struct st_kv_header *h, const struct st_kv_config *cfg)
{
    memset(h, 0, sizeof *h);
    h->magic = ST_KV_MAGIC;
    h->version = ST_KV_VERSION;
    h->n_slots = cfg->n_slots;
    h->n_ctx = cfg->n_ctx;
    h->n_models = cfg->n_models;
    for (uint32_t m = 0; m < cfg->n_models && m < ST_KV_MAX_MODELS; m++)
        h->model[m] = cfg->model[m];
}

int st_kv_size(const struct st_kv_config *cfg, uint64_t *bytes, struct st_error *e)
{
    struct st_kv_header h;
    header_from_config(&h, cfg);
    if (layout(&h, e) < 0) return -1;
    *bytes = h.total_bytes;
    return 0;
}

int st_kv_check_memory(const struct st_kv_config *cfg, struct st_error *e)
{
    uint64_t bytes;
    if (st_kv_size(cfg, &bytes, e) < 0) return -1;
    char what[96];
    snprintf(what, sizeof what, "the KV cache (%" PRIu32 " slots x %" PRIu32 " positions)",
             cfg->n_slots, cfg->n_ctx);
    return st_shm_mem_check(bytes, what, e);
}

int st_kv_init(struct st_kv *kv, void *base, uint64_t size, const struct st_kv_config *cfg,
               struct st_error *e)
{
    struct st_kv_header h;
    header_from_config(&h, cfg);
    if (layout(&h, e) < 0) return st_error_wrap(e, "st_kv_init");
    if (h.total_bytes > size)
        return st_error_set(e, "st_kv_init: %" PRIu32 " slots x %" PRIu32 " positions need %"
                               PRIu64 " bytes, the KV section has %" PRIu64, cfg->n_slots,
                            cfg->n_ctx, h.total_bytes, size);
    memcpy(base, &h, sizeof h);
    kv->base = base;
    kv->hdr = base;
    kv->ctrl = (struct st_kv_ctrl *)((uint8_t *)base + h.ctrl_offset);
    for (uint64_t i = 0; i < (uint64_t)h.n_slots * h.n_models; i++) {
        atomic_init(&kv->ctrl[i].committed, 0);
        atomic_init(&kv->ctrl[i].owner, 0);
        atomic_init(&kv->ctrl[i].generation, 0);
    }
    return 0;
}

int st_kv_open(struct st_kv *kv, void *base, uint64_t size, struct st_error *e)
{
    const struct st_kv_header *in = base;
    if (size < sizeof *in)
        return st_error_set(e, "st_kv_open: section of %" PRIu64 " bytes holds no header", size);
    if (in->magic != ST_KV_MAGIC)
        return st_error_set(e, "st_kv_open: bad magic 0x%016" PRIx64 ": KV section not "
                               "formatted", in->magic);
    if (in->version != ST_KV_VERSION)
        return st_error_set(e, "st_kv_open: layout version %" PRIu32 ", this build reads %u",
                            in->version, ST_KV_VERSION);
    // Recompute the layout from the stored configuration; any difference in
    // the derived fields means a corrupted or foreign header.
    struct st_kv_header h;
    struct st_kv_config cfg = {in->n_slots, in->n_ctx, in->n_models, {{0}}};
    for (uint32_t m = 0; m < in->n_models && m < ST_KV_MAX_MODELS; m++) cfg.model[m] = in->model[m];
    header_from_config(&h, &cfg);
    if (layout(&h, e) < 0) return st_error_wrap(e, "st_kv_open");
    if (memcmp(&h, in, sizeof h))
        return st_error_set(e, "st_kv_open: stored offsets do not match the stored "
                               "configuration: corrupted header");
    if (h.total_bytes > size)
        return st_error_set(e, "st_kv_open: layout needs %" PRIu64 " bytes, the section has %"
                               PRIu64, h.total_bytes, size);
    kv->base = base;
    kv->hdr = base;
    kv->ctrl = (struct st_kv_ctrl *)((uint8_t *)base + h.ctrl_offset);
    return 0;
}

static struct st_kv_ctrl *ctrl_of(const struct st_kv *kv, uint32_t slot, uint32_t model)
{
    return &kv->ctrl[(uint64_t)slot * kv->hdr->n_models + model];
}

static int check_slot(const struct st_kv *kv, const char *fn, uint32_t slot, uint32_t model,
                      struct st_error *e)
{
    if (slot >= kv->hdr->n_slots || model >= kv->hdr->n_models)
        return st_error_set(e, "%s(slot %" PRIu32 ", model %" PRIu32 "): only %" PRIu32
                               " slots and %" PRIu32 " models", fn, slot, model,
                            kv->hdr->n_slots, kv->hdr->n_models);
    if (atomic_load_explicit(&ctrl_of(kv, slot, 0)->owner, memory_order_acquire) == 0)
        return st_error_set(e, "%s(slot %" PRIu32 ", model %" PRIu32 "): slot is not reserved",
                            fn, slot, model);
    return 0;
}

int st_kv_reserve(struct st_kv *kv, uint64_t session, uint32_t *slot, uint64_t *generation,
                  struct st_error *e)
{
    if (session == 0) return st_error_set(e, "st_kv_reserve: session id 0 means 'free'");
    for (uint32_t s = 0; s < kv->hdr->n_slots; s++) {
        uint64_t expect = 0;
        struct st_kv_ctrl *c0 = ctrl_of(kv, s, 0);
        if (!atomic_compare_exchange_strong_explicit(&c0->owner, &expect, session,
                                                     memory_order_acq_rel, memory_order_relaxed))
            continue;
        uint64_t gen = 0;
        for (uint32_t m = 0; m < kv->hdr->n_models; m++) {
            struct st_kv_ctrl *c = ctrl_of(kv, s, m);
            gen = atomic_fetch_add_explicit(&c->generation, 1, memory_order_relaxed) + 1;
            atomic_store_explicit(&c->committed, 0, memory_order_release);
            if (m > 0) atomic_store_explicit(&c->owner, session, memory_order_release);
        }
        *slot = s;
        if (generation) *generation = gen;
        return 0;
    }
    return st_error_set(e, "st_kv_reserve(session %" PRIu64 "): all %" PRIu32 " slots are in use",
                        session, kv->hdr->n_slots);
}

int st_kv_release(struct st_kv *kv, uint32_t slot, uint64_t session, struct st_error *e)
{
    if (slot >= kv->hdr->n_slots || session == 0)
        return st_error_set(e, "st_kv_release(slot %" PRIu32 ", session %" PRIu64 "): only %"
                               PRIu32 " slots, and session 0 means 'free'", slot, session,
                            kv->hdr->n_slots);
    struct st_kv_ctrl *c0 = ctrl_of(kv, slot, 0);
    uint64_t owner = atomic_load_explicit(&c0->owner, memory_order_acquire);
    if (owner != session)
        return st_error_set(e, "st_kv_release(slot %" PRIu32 ", session %" PRIu64 "): slot is "
                               "owned by session %" PRIu64, slot, session, owner);
    for (uint32_t m = kv->hdr->n_models; m-- > 0;) {
        struct st_kv_ctrl *c = ctrl_of(kv, slot, m);
        atomic_store_explicit(&c->committed, 0, memory_order_release);
        atomic_store_explicit(&c->owner, 0, memory_order_release); // model 0 last: frees the slot
    }
    return 0;
}

static uint8_t *plane(const struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t layer,
                      int which)
{
    const struct st_kv_header *h = kv->hdr;
    uint64_t idx = ((uint64_t)slot * h->model[model].n_layers + layer) * 2 + (uint64_t)which;
    return kv->base + h->data_offset[model] + idx * h->plane_bytes[model];
}

uint64_t st_kv_row_elems(const struct st_kv *kv, uint32_t model)
{
    return (uint64_t)kv->hdr->model[model].n_kv_heads * kv->hdr->model[model].head_dim;
}

int st_kv_write(struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t layer, uint32_t pos,
                uint32_t n_rows, uint16_t **k, uint16_t **v, struct st_error *e)
{
    if (check_slot(kv, "st_kv_write", slot, model, e) < 0) return -1;
    const struct st_kv_header *h = kv->hdr;
    if (layer >= h->model[model].n_layers)
        return st_error_set(e, "st_kv_write(slot %" PRIu32 ", model %" PRIu32 "): layer %" PRIu32
                               " of %" PRIu32, slot, model, layer, h->model[model].n_layers);
    uint32_t c = atomic_load_explicit(&ctrl_of(kv, slot, model)->committed, memory_order_acquire);
    if (pos < c)
        return st_error_set(e, "st_kv_write(slot %" PRIu32 ", model %" PRIu32 ", pos %" PRIu32
                               "): refused, below the committed length %" PRIu32, slot, model,
                            pos, c);
    if (n_rows > h->n_ctx || pos > h->n_ctx - n_rows)
        return st_error_set(e, "st_kv_write(slot %" PRIu32 ", model %" PRIu32 ", pos %" PRIu32
                               ", %" PRIu32 " rows): past the context of %" PRIu32, slot, model,
                            pos, n_rows, h->n_ctx);
    uint64_t row = st_kv_row_elems(kv, model) * sizeof(uint16_t);
    *k = (uint16_t *)(plane(kv, slot, model, layer, 0) + pos * row);
    *v = (uint16_t *)(plane(kv, slot, model, layer, 1) + pos * row);
    return 0;
}

int st_kv_commit(struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t n, struct st_error *e)
{
    if (check_slot(kv, "st_kv_commit", slot, model, e) < 0) return -1;
    struct st_kv_ctrl *c = ctrl_of(kv, slot, model);
    uint32_t cur = atomic_load_explicit(&c->committed, memory_order_relaxed);
    if (n < cur || n > kv->hdr->n_ctx)
        return st_error_set(e, "st_kv_commit(slot %" PRIu32 ", model %" PRIu32 ", %" PRIu32
                               "): must lie in [committed %" PRIu32 ", n_ctx %" PRIu32 "]",
                            slot, model, n, cur, kv->hdr->n_ctx);
    atomic_store_explicit(&c->committed, n, memory_order_release);
    return 0;
}

int st_kv_rollback(struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t n,
                   struct st_error *e)
{
    if (check_slot(kv, "st_kv_rollback", slot, model, e) < 0) return -1;
    struct st_kv_ctrl *c = ctrl_of(kv, slot, model);
    uint32_t cur = atomic_load_explicit(&c->committed, memory_order_relaxed);
    if (n > cur)
        return st_error_set(e, "st_kv_rollback(slot %" PRIu32 ", model %" PRIu32 ", %" PRIu32
                               "): above the committed length %" PRIu32, slot, model, n, cur);
    atomic_store_explicit(&c->committed, n, memory_order_release); // the whole rollback
    return 0;
}

int st_kv_read(const struct st_kv *kv, uint32_t slot, uint32_t model, uint32_t layer,
               uint32_t n_pos, uint32_t in_flight, const uint16_t **k, const uint16_t **v,
               struct st_error *e)
{
    if (check_slot(kv, "st_kv_read", slot, model, e) < 0) return -1;
    const struct st_kv_header *h = kv->hdr;
    if (layer >= h->model[model].n_layers)
        return st_error_set(e, "st_kv_read(slot %" PRIu32 ", model %" PRIu32 "): layer %" PRIu32
                               " of %" PRIu32, slot, model, layer, h->model[model].n_layers);
    uint64_t c = atomic_load_explicit(&ctrl_of(kv, slot, model)->committed, memory_order_acquire);
    uint64_t bound = c + in_flight < h->n_ctx ? c + in_flight : h->n_ctx;
    if (n_pos > bound)
        return st_error_set(e, "st_kv_read(slot %" PRIu32 ", model %" PRIu32 ", %" PRIu32
                               " positions): only %" PRIu64 " are readable (committed %" PRIu64
                               " + in flight %" PRIu32 ")", slot, model, n_pos, bound, c,
                            in_flight);
    *k = (const uint16_t *)plane(kv, slot, model, layer, 0);
    *v = (const uint16_t *)plane(kv, slot, model, layer, 1);
    return 0;
}

uint32_t st_kv_committed(const struct st_kv *kv, uint32_t slot, uint32_t model)
{
    return atomic_load_explicit(&ctrl_of(kv, slot, model)->committed, memory_order_acquire);
}

uint64_t st_kv_owner(const struct st_kv *kv, uint32_t slot)
{
    return atomic_load_explicit(&ctrl_of(kv, slot, 0)->owner, memory_order_acquire);
}

uint64_t st_kv_generation(const struct st_kv *kv, uint32_t slot, uint32_t model)
{
    return atomic_load_explicit(&ctrl_of(kv, slot, model)->generation, memory_order_acquire);
}
