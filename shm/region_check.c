// Validation of a region header image: everything a worker relies on is
// checked before it maps the region, so a stale or foreign fd gives an error
// naming the field instead of a crash later.
#include "shm/region.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

static const char *const section_names[ST_REGION_N_SECTIONS] = {
    [ST_REGION_CONTROL] = "control",
    [ST_REGION_KV] = "kv",
    [ST_REGION_SCRATCH] = "scratch",
    [ST_REGION_WEIGHTS] = "weights",
};

const char *st_region_section_name(enum st_region_section s)
{
    return (unsigned)s < ST_REGION_N_SECTIONS ? section_names[s] : "?";
}

uint64_t st_region_header_checksum(const struct st_region_header *h)
{
    return st_shm_fnv1a(ST_SHM_FNV_SEED, h, offsetof(struct st_region_header, checksum));
}

static bool is_pow2(uint64_t x)
{
    return x && !(x & (x - 1));
}

int st_region_header_check(const struct st_region_header *h, uint64_t file_bytes,
                           struct st_error *e)
{
    if (h->magic != ST_REGION_MAGIC)
        return st_error_set(e, "bad magic 0x%016" PRIx64 " (expected 0x%016" PRIx64
                               "): not a SubTernary region", h->magic, ST_REGION_MAGIC);
    if (h->version != ST_REGION_VERSION)
        return st_error_set(e, "layout version %" PRIu32 ", this build reads version %u",
                            h->version, ST_REGION_VERSION);
    if (h->header_bytes != sizeof *h)
        return st_error_set(e, "header is %" PRIu32 " bytes, this build expects %zu",
                            h->header_bytes, sizeof *h);
    if (h->total_bytes != file_bytes)
        return st_error_set(e, "header says %" PRIu64 " bytes but the memfd is %" PRIu64
                               " bytes", h->total_bytes, file_bytes);
    if (!is_pow2(h->align) || h->align < 4096)
        return st_error_set(e, "section alignment %" PRIu64 " is not a power of two >= 4096",
                            h->align);
    if (h->total_bytes % h->align)
        return st_error_set(e, "size %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                            h->total_bytes, h->align);
    if (h->n_sections != ST_REGION_N_SECTIONS)
        return st_error_set(e, "%" PRIu32 " sections, expected %d", h->n_sections,
                            ST_REGION_N_SECTIONS);
    if (h->n_models > ST_REGION_MAX_MODELS)
        return st_error_set(e, "%" PRIu32 " models, at most %d", h->n_models,
                            ST_REGION_MAX_MODELS);
    if (h->huge > ST_REGION_HUGE_EXPLICIT)
        return st_error_set(e, "unknown huge page kind %" PRIu32, h->huge);

    uint64_t end = (sizeof *h + h->align - 1) & ~(h->align - 1); // first free byte
    for (int s = 0; s < ST_REGION_N_SECTIONS; s++) {
        const struct st_region_section_entry *sec = &h->sections[s];
        if (memchr(sec->name, 0, sizeof sec->name) == NULL || strcmp(sec->name, section_names[s]))
            return st_error_set(e, "section %d is named '%.*s', expected '%s'", s,
                                (int)sizeof sec->name, sec->name, section_names[s]);
        if (sec->offset % h->align)
            return st_error_set(e, "section %s offset %" PRIu64 " is not a multiple of %" PRIu64,
                                sec->name, sec->offset, h->align);
        if (sec->offset < end)
            return st_error_set(e, "section %s offset %" PRIu64 " overlaps the previous part "
                                   "(which ends at %" PRIu64 ")", sec->name, sec->offset, end);
        if (sec->size > h->total_bytes || sec->offset > h->total_bytes - sec->size)
            return st_error_set(e, "section %s [%" PRIu64 ", +%" PRIu64 ") lies outside the %"
                                   PRIu64 "-byte region", sec->name, sec->offset, sec->size,
                                h->total_bytes);
        end = sec->offset + sec->size;
    }
    uint64_t sum = st_region_header_checksum(h);
    if (sum != h->checksum)
        return st_error_set(e, "header checksum 0x%016" PRIx64 " does not match its contents "
                               "(0x%016" PRIx64 "): corrupted header", h->checksum, sum);
    return 0;
}
