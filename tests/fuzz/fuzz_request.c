// libFuzzer target: the server's request decoder, validator and dispatcher
// (coordinator/server_core.c, server_validate.c) on arbitrary frames, mixed
// with the scheduler's own moves (admit, a step with a message arriving
// during it, a streamed chunk, finish, fail, deadline, disconnect, a peer
// that stops reading).  Replies are re-decoded and checked; the lists'
// invariants and the session count are checked after every operation.  No
// engine and no socket: the dispatcher is the code the server runs.  The
// tokenizer is the pico target's when ../shared is there ($ST_SHARED).
// Built by scripts/fuzz.sh; tests/test_server_proto.c replays its corpus.
// The generated protocol code comes from the plain build tree (run `make` first).
// sources: common/error.c kernels/types.c kernels/dequant_ref.c model/gguf.c model/tokenizer.c model/tokenizer_bpe.c model/tokenizer_spm.c model/tokenizer_load.c model/tokenizer_map.c model/unicode.c coordinator/server_core.c coordinator/server_stats.c coordinator/server_validate.c build-fuzz/proto/subternary.pb-c.c -lprotobuf-c -lpcre2-8
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/server_core.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

struct fz {
    const uint8_t *p;
    size_t n;
    int live_sessions;      // admitted and not yet released
    bool peer_gone;         // sends fail with EHOSTUNREACH while set
    uint64_t replies;
};

static int fz_byte(struct fz *z)
{
    if (!z->n) return -1;
    z->n--;
    return *z->p++;
}

static int fz_send(void *ctx, const uint8_t *ident, size_t ident_len, const Subternary__Envelope *env)
{
    struct fz *z = ctx;
    (void)ident;
    if (ident_len > ST_WIRE_MAX_IDENTITY) abort();
    // Every reply must encode to a valid server message.
    size_t len = protobuf_c_message_get_packed_size(&env->base);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return 0;
    protobuf_c_message_pack(&env->base, buf);
    Subternary__Envelope *back = subternary__envelope__unpack(NULL, len, buf);
    free(buf);
    if (!back) abort();
    if (back->msg_case != SUBTERNARY__ENVELOPE__MSG_CHUNK && back->msg_case != SUBTERNARY__ENVELOPE__MSG_DONE &&
        back->msg_case != SUBTERNARY__ENVELOPE__MSG_ERROR && back->msg_case != SUBTERNARY__ENVELOPE__MSG_STATS &&
        back->msg_case != SUBTERNARY__ENVELOPE__MSG_HEALTH)
        abort();
    subternary__envelope__free_unpacked(back, NULL);
    z->replies++;
    if (z->peer_gone) {
        errno = EHOSTUNREACH;
        return -1;
    }
    return 0;
}

static void fz_release(void *ctx, struct st_srv_req *r)
{
    struct fz *z = ctx;
    if (r->session != (void *)r || r->stepping) abort();
    z->live_sessions--;
    r->session = NULL;
}

static void check_list(const struct st_srv_list *l, enum st_srv_state st)
{
    uint32_t n = 0;
    const struct st_srv_req *prev = NULL;
    for (const struct st_srv_req *r = l->head; r; r = r->next, n++) {
        if (r->prev != prev || r->state != st) abort();
        prev = r;
    }
    if (n != l->n || l->tail != prev) abort();
}

static void check(const struct st_srv_core *c, const struct fz *z)
{
    check_list(&c->queued, ST_SRV_QUEUED);
    check_list(&c->active, ST_SRV_ACTIVE);
    check_list(&c->finished, ST_SRV_FINISHED);
    if (c->active.n > c->lim.slots || c->queued.n + c->active.n > c->lim.slots + c->lim.queue ||
        c->finished.n > c->lim.finished_cache)
        abort();
    if (z->live_sessions < 0 || (uint32_t)z->live_sessions != c->active.n) abort();
}

static const struct st_tokenizer *fz_tokenizer(void)
{
    static bool tried;
    static struct st_tokenizer *tok;
    if (tried) return tok;
    tried = true;
    const char *shared = getenv("ST_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/pico-target.q8_0.gguf", shared && *shared ? shared : "../shared");
    struct st_gguf *g;
    struct st_error e;
    if (st_gguf_open(path, &g, &e) == 0) {
        if (st_tok_load(g, &tok, &e)) tok = NULL;
        st_gguf_close(&g);
    }
    return tok;
}

// One message: identity selector, frame count, then frames as
// [2-byte little-endian length][bytes] (the last takes what remains if short).
static void fz_message(struct st_srv_core *c, struct fz *z)
{
    static const uint8_t idents[4][2] = {{'A', 0}, {'B', 0}, {'C', 1}, {'D', 2}};
    int who = fz_byte(z), nf = fz_byte(z);
    if (who < 0 || nf < 0) return;
    struct st_srv_frames f = {.n = 1 + nf % 4};
    f.f[0] = idents[who % 4];
    f.len[0] = 1 + (who % 4 >= 2);
    for (int i = 1; i < f.n; i++) {
        int lo = fz_byte(z), hi = fz_byte(z);
        size_t len = lo < 0 ? 0 : (size_t)lo | (size_t)(hi < 0 ? 0 : hi) << 8;
        if (len > z->n) len = z->n;
        if (i < 3) {
            f.f[i] = z->p;
            f.len[i] = len;
        }
        z->p += len;
        z->n -= len;
    }
    st_srv_dispatch(c, &f, who % 4);
}

// A step of the next active request: messages may arrive during it, then
// it streams, finishes or fails.
static void fz_step(struct st_srv_core *c, struct fz *z)
{
    struct st_srv_req *r = st_srv_next(c, NULL, NULL);
    int how = fz_byte(z);
    if (!r || how < 0) return;
    r->stepping = true;
    for (int k = 0; k < (how & 3); k++) fz_message(c, z);
    if (st_srv_after_step(c, r)) return;
    int32_t ids[12];
    uint32_t n = (how >> 2) % 12;
    for (uint32_t i = 0; i < n; i++) ids[i] = fz_byte(z) & 0x1ff;
    if (n && st_srv_chunk(c, r, ids, n, "xy", (how & 0x40) ? 2 : 0)) return;
    if (how & 0x80) {
        Subternary__Done d = SUBTERNARY__DONE__INIT;
        d.tokens = r->n_out;
        d.drafted = how;
        d.accepted = how / 2;
        st_srv_finish(c, r, &d);
    } else if ((how & 0x30) == 0x30) {
        st_srv_fail(c, r, SUBTERNARY__ERROR_CODE__ERR_INTERNAL, "step failed: fuzz %d", how);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz z = {.p = data, .n = size};
    struct st_srv_limits lim = {.n_vocab = 512, .n_ctx = 64, .k_max = 8, .slots = 2, .queue = 3,
                                .max_tokens_default = 16, .max_prompt_bytes = 512, .finished_cache = 4,
                                .max_deadline_ms = 1000, .has_draft = true, .tok = fz_tokenizer()};
    struct st_srv_core c;
    st_srv_core_init(&c, &lim, fz_send, fz_release, &z);
    c.view.n_nodes = 1;
    c.view.workers = c.view.workers_ready = 2;
    for (int op; (op = fz_byte(&z)) >= 0;) {
        switch (op % 8) {
        case 0: case 1: case 2: case 3: fz_message(&c, &z); break;
        case 4: {
            struct st_srv_req *r;
            while ((r = st_srv_admit(&c))) {
                r->session = r;
                z.live_sessions++;
            }
            break;
        }
        case 5: fz_step(&c, &z); break;
        case 6: st_srv_expire(&c, st_srv_now_ns() + (uint64_t)(op >> 3) * 100000000u); break;
        case 7:
            if (op & 0x80) z.peer_gone = !z.peer_gone;
            else st_srv_disconnect(&c, (op >> 3) % 5);
            break;
        }
        check(&c, &z);
    }
    z.peer_gone = false;
    st_srv_shutdown(&c);
    check(&c, &z);
    st_srv_core_free(&c);
    if (z.live_sessions != 0) abort();
    return 0;
}
