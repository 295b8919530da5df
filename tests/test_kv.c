// Transactional KV cache: random sequences of reserve / write / commit /
// rollback / read / release against a simple model of the semantics;
// rollback time at committed lengths 128 ... 32768 (flat); a slot written by
// one process read by another that attached the region through its fd;
// capacity errors.
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static uint32_t below(uint32_t n) { return (uint32_t)(rnd() % n); }

// The value of element j of a K (kv = 0) or V (kv = 1) row written with `stamp`.
static uint16_t cell(uint32_t stamp, uint32_t layer, uint64_t j, int kv)
{
    uint64_t h = (uint64_t)stamp * 0x9e3779b97f4a7c15u ^ (layer * 131u + j * 7u + (uint64_t)kv);
    h ^= h >> 29;
    return (uint16_t)(h * 0xbf58476d1ce4e5b9u >> 48);
}

// A region holding one KV section for `cfg`.
static struct st_region *kv_region(const struct st_kv_config *cfg, struct st_kv *kv)
{
    struct st_error e = {{0}};
    uint64_t bytes;
    if (st_kv_size(cfg, &bytes, &e) < 0) fail_msg("%s", e.msg);
    struct st_region_config rc = {.name = "test_kv", .mem_node = 0, .huge = ST_REGION_HUGE_AUTO,
                                  .section_bytes = {[ST_REGION_KV] = bytes}};
    struct st_region *r;
    if (st_region_create(&rc, &r, &e) < 0) fail_msg("%s", e.msg);
    uint64_t size;
    void *base = st_region_section(r, ST_REGION_KV, &size);
    if (st_kv_init(kv, base, size, cfg, &e) < 0) fail_msg("%s", e.msg);
    return r;
}

// ---- property test --------------------------------------------------------

#define P_SLOTS 3
#define P_CTX 48

struct model_slot {
    uint64_t owner;
    uint64_t gen[2];
    uint32_t committed[2];
    uint32_t stamp[2][P_CTX]; // last stamp written since the reserve, 0: none
};

static const struct st_kv_config p_cfg = {
    .n_slots = P_SLOTS, .n_ctx = P_CTX, .n_models = 2,
    .model = {{.n_layers = 3, .n_kv_heads = 2, .head_dim = 4},
              {.n_layers = 2, .n_kv_heads = 1, .head_dim = 8}},
};

// Every readable position of every slot holds what the model says.
static void check_all(struct st_kv *kv, const struct model_slot *ms)
{
    struct st_error e;
    for (uint32_t s = 0; s < P_SLOTS; s++) {
        assert_int_equal(st_kv_owner(kv, s), ms[s].owner);
        for (uint32_t m = 0; m < 2; m++) {
            assert_int_equal(st_kv_generation(kv, s, m), ms[s].gen[m]);
            if (!ms[s].owner) continue;
            assert_int_equal(st_kv_committed(kv, s, m), ms[s].committed[m]);
            uint64_t row = st_kv_row_elems(kv, m);
            for (uint32_t l = 0; l < p_cfg.model[m].n_layers; l++) {
                const uint16_t *k, *v;
                assert_int_equal(st_kv_read(kv, s, m, l, P_CTX, P_CTX, &k, &v, &e), 0);
                for (uint32_t p = 0; p < P_CTX; p++) {
                    uint32_t st = ms[s].stamp[m][p];
                    if (!st) continue;
                    for (uint64_t j = 0; j < row; j++) {
                        assert_int_equal(k[p * row + j], cell(st, l, j, 0));
                        assert_int_equal(v[p * row + j], cell(st, l, j, 1));
                    }
                }
            }
        }
    }
}

static void test_property(void **state)
{
    (void)state;
    struct st_kv kv;
    struct st_region *r = kv_region(&p_cfg, &kv);
    struct model_slot ms[P_SLOTS];
    memset(ms, 0, sizeof ms);
    uint64_t next_session = 1;
    uint32_t stamp = 1;
    unsigned counts[7][2] = {{0}}; // op x (accepted, refused)
    struct st_error e;
    for (int step = 0; step < 40000; step++) {
        uint32_t s = below(P_SLOTS), m = below(2), op = below(100);
        struct model_slot *x = &ms[s];
        uint32_t c = x->committed[m];
        int rc = -2, want, kind;
        if (op < 5) { // reserve
            kind = 0;
            uint64_t sess = next_session++;
            uint32_t slot = 99;
            uint64_t gen;
            int free_slot = -1;
            for (int i = P_SLOTS - 1; i >= 0; i--)
                if (!ms[i].owner) free_slot = i;
            want = free_slot >= 0 ? 0 : -1;
            rc = st_kv_reserve(&kv, sess, &slot, &gen, &e);
            if (want == 0) {
                assert_int_equal(slot, (uint32_t)free_slot);
                struct model_slot *y = &ms[slot];
                y->owner = sess;
                for (int mm = 0; mm < 2; mm++) {
                    y->gen[mm]++;
                    y->committed[mm] = 0;
                }
                memset(y->stamp, 0, sizeof y->stamp);
                assert_int_equal(gen, y->gen[1]);
            }
        } else if (op < 8) { // release, sometimes by the wrong session
            kind = 1;
            uint64_t sess = below(4) ? x->owner : x->owner + 1000;
            want = sess && sess == x->owner ? 0 : -1;
            rc = st_kv_release(&kv, s, sess, &e);
            if (want == 0) {
                x->owner = 0;
                x->committed[0] = x->committed[1] = 0;
            }
        } else if (op < 50) { // write rows, mostly at or past committed
            kind = 2;
            uint32_t n = 1 + below(6);
            uint32_t pos = below(5) ? c + below(4) : below(P_CTX);
            if (below(20) == 0) pos = P_CTX - below(3);
            want = x->owner && pos >= c && pos + n <= P_CTX ? 0 : -1;
            uint16_t *kp = NULL, *vp = NULL;
            for (uint32_t l = 0; l < p_cfg.model[m].n_layers; l++) {
                rc = st_kv_write(&kv, s, m, l, pos, n, &kp, &vp, &e);
                if (rc != want) break;
                if (rc < 0) continue;
                uint64_t row = st_kv_row_elems(&kv, m);
                for (uint32_t p = 0; p < n; p++)
                    for (uint64_t j = 0; j < row; j++) {
                        kp[p * row + j] = cell(stamp + p, l, j, 0);
                        vp[p * row + j] = cell(stamp + p, l, j, 1);
                    }
            }
            if (want == 0)
                for (uint32_t p = 0; p < n; p++) x->stamp[m][pos + p] = stamp + p;
            stamp += n;
        } else if (op < 70) { // commit
            kind = 3;
            uint32_t n = below(4) ? c + below(6) : below(P_CTX + 3);
            want = x->owner && n >= c && n <= P_CTX ? 0 : -1;
            rc = st_kv_commit(&kv, s, m, n, &e);
            if (want == 0) x->committed[m] = n;
        } else if (op < 85) { // rollback
            kind = 4;
            uint32_t n = below(4) ? (c ? below(c + 1) : 0) : below(P_CTX + 3);
            want = x->owner && n <= c ? 0 : -1;
            rc = st_kv_rollback(&kv, s, m, n, &e);
            if (want == 0) x->committed[m] = n; // rows past n stay, unread
        } else { // read within or past the bound
            kind = 5;
            uint32_t in_flight = below(4), n_pos = below(P_CTX + 2);
            uint32_t bound = c + in_flight < P_CTX ? c + in_flight : P_CTX;
            want = x->owner && n_pos <= bound ? 0 : -1;
            const uint16_t *k, *v;
            rc = st_kv_read(&kv, s, m, below(p_cfg.model[m].n_layers), n_pos, in_flight, &k, &v,
                            &e);
        }
        if (rc != want)
            fail_msg("step %d: op %d slot %u model %u: got %d, model says %d (%s)", step, kind, s,
                     m, rc, want, rc < 0 ? e.msg : "");
        counts[kind][rc < 0]++;
        if (step % 97 == 0) check_all(&kv, ms);
    }
    check_all(&kv, ms);
    const char *names[] = {"reserve", "release", "write", "commit", "rollback", "read"};
    for (int i = 0; i < 6; i++) {
        printf("  %-8s %5u accepted %5u refused\n", names[i], counts[i][0], counts[i][1]);
        assert_true(counts[i][0] > 0 && counts[i][1] > 0); // both paths exercised
    }
    st_region_close(&r);
}

// ---- specific semantics ---------------------------------------------------

static void test_reuse_and_errors(void **state)
{
    (void)state;
    struct st_kv kv;
    struct st_region *r = kv_region(&p_cfg, &kv);
    struct st_error e;
    uint32_t slot, other;
    uint64_t gen;
    uint16_t *k, *v;
    const uint16_t *ck, *cv;
    assert_int_equal(st_kv_reserve(&kv, 7, &slot, &gen, &e), 0);
    assert_int_equal(gen, 1);
    assert_int_equal(st_kv_write(&kv, slot, 0, 0, 0, 10, &k, &v, &e), 0);
    memset(k, 0x11, 10 * st_kv_row_elems(&kv, 0) * 2);
    assert_int_equal(st_kv_commit(&kv, slot, 0, 10, &e), 0);
    assert_int_equal(st_kv_write(&kv, slot, 0, 0, 9, 1, &k, &v, &e), -1);
    printf("  %s\n", e.msg);
    assert_non_null(strstr(e.msg, "below the committed length 10"));
    assert_int_equal(st_kv_commit(&kv, slot, 0, 9, &e), -1);
    assert_int_equal(st_kv_rollback(&kv, slot, 0, 11, &e), -1);
    assert_non_null(strstr(e.msg, "above the committed length"));
    assert_int_equal(st_kv_read(&kv, slot, 0, 0, 12, 1, &ck, &cv, &e), -1);
    printf("  %s\n", e.msg);
    assert_int_equal(st_kv_read(&kv, slot, 0, 0, 11, 1, &ck, &cv, &e), 0);
    assert_int_equal(st_kv_write(&kv, slot, 0, 3, 10, 1, &k, &v, &e), -1); // layer 3 of 3
    assert_int_equal(st_kv_write(&kv, 5, 0, 0, 10, 1, &k, &v, &e), -1);
    assert_int_equal(st_kv_write(&kv, slot + 1, 0, 0, 0, 1, &k, &v, &e), -1);
    assert_non_null(strstr(e.msg, "not reserved"));

    // Released and reserved again by someone else: nothing of the old data
    // is readable, the generation moved.
    assert_int_equal(st_kv_release(&kv, slot, 8, &e), -1);
    assert_non_null(strstr(e.msg, "owned by session 7"));
    assert_int_equal(st_kv_release(&kv, slot, 7, &e), 0);
    assert_int_equal(st_kv_reserve(&kv, 9, &other, &gen, &e), 0);
    assert_int_equal(other, slot);
    assert_int_equal(gen, 2);
    assert_int_equal(st_kv_committed(&kv, slot, 0), 0);
    assert_int_equal(st_kv_read(&kv, slot, 0, 0, 1, 0, &ck, &cv, &e), -1);
    assert_int_equal(st_kv_read(&kv, slot, 0, 0, 0, 0, &ck, &cv, &e), 0);

    // Every slot taken: a clear error.
    for (uint32_t i = 1; i < P_SLOTS; i++) assert_int_equal(st_kv_reserve(&kv, 100 + i, &other, NULL, &e), 0);
    assert_int_equal(st_kv_reserve(&kv, 200, &other, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "all 3 slots are in use"));
    assert_int_equal(st_kv_reserve(&kv, 0, &other, NULL, &e), -1);

    // A worker's view validates the header.
    struct st_kv view;
    uint64_t size;
    uint8_t *base = st_region_section(r, ST_REGION_KV, &size);
    assert_int_equal(st_kv_open(&view, base, size, &e), 0);
    assert_int_equal(st_kv_committed(&view, slot, 0), 0);
    struct st_kv_header saved = *kv.hdr;
    kv.hdr->plane_bytes[1] += 64;
    assert_int_equal(st_kv_open(&view, base, size, &e), -1);
    assert_non_null(strstr(e.msg, "corrupted header"));
    *kv.hdr = saved;
    kv.hdr->magic = 0;
    assert_int_equal(st_kv_open(&view, base, size, &e), -1);
    assert_non_null(strstr(e.msg, "bad magic"));
    *kv.hdr = saved;
    assert_int_equal(st_kv_open(&view, base, 100, &e), -1);
    st_region_close(&r);
}

static void test_capacity(void **state)
{
    (void)state;
    struct st_error e;
    uint64_t bytes, avail;
    struct st_kv_config cfg = {.n_slots = 4, .n_ctx = 4096, .n_models = 2,
                               .model = {{32, 8, 128}, {22, 4, 64}}};
    assert_int_equal(st_kv_size(&cfg, &bytes, &e), 0);
    // Target: 4 slots x 32 layers x 2 x 4096 x 8 x 128 x 2 bytes; draft likewise.
    uint64_t want = 4ull * 32 * 2 * 4096 * 8 * 128 * 2 + 4ull * 22 * 2 * 4096 * 4 * 64 * 2;
    assert_true(bytes >= want && bytes < want + 4096);
    assert_int_equal(st_shm_mem_available(&avail, &e), 0);
    cfg.n_slots = (uint32_t)(avail / (bytes / 4)) * 8 + 8; // ~8x the slots that fit
    assert_int_equal(st_kv_check_memory(&cfg, &e), -1);
    printf("  %s\n", e.msg);
    assert_non_null(strstr(e.msg, "slots x 4096 positions) needs"));
    cfg.n_slots = 1;
    assert_int_equal(st_kv_check_memory(&cfg, &e), 0);
    cfg.n_slots = UINT32_MAX;
    cfg.n_ctx = UINT32_MAX;
    assert_int_equal(st_kv_size(&cfg, &bytes, &e), -1);
    assert_non_null(strstr(e.msg, "overflows"));
    cfg.n_models = 3;
    assert_int_equal(st_kv_size(&cfg, &bytes, &e), -1);
    cfg = (struct st_kv_config){.n_slots = 1, .n_ctx = 8, .n_models = 1, .model = {{1, 0, 4}}};
    assert_int_equal(st_kv_size(&cfg, &bytes, &e), -1);
    assert_non_null(strstr(e.msg, "0 KV heads"));
    cfg.model[0].n_kv_heads = 1;
    _Alignas(64) uint8_t small[256];
    struct st_kv kv;
    assert_int_equal(st_kv_init(&kv, small, sizeof small, &cfg, &e), -1);
    assert_non_null(strstr(e.msg, "the KV section has 256"));
}

// ---- rollback cost ----------------------------------------------------------

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_rollback_flat(void **state)
{
    (void)state;
    const struct st_kv_config cfg = {.n_slots = 1, .n_ctx = 32768, .n_models = 2,
                                     .model = {{2, 2, 64}, {1, 1, 64}}};
    struct st_kv kv;
    struct st_region *r = kv_region(&cfg, &kv);
    struct st_error e;
    uint32_t slot;
    assert_int_equal(st_kv_reserve(&kv, 1, &slot, NULL, &e), 0);
    // A rollback takes a few nanoseconds, below the clock's resolution: time
    // batches of B rollbacks to decreasing lengths L-1 ... L-B, each batch
    // after a commit back to L, and take the median per rollback.
    enum { N = 4000, B = 64 };
    uint64_t *t = malloc(N * sizeof *t);
    assert_non_null(t);
    const uint32_t lens[] = {128, 1024, 8192, 32768};
    double med[4];
    for (int li = 0; li < 4; li++) {
        uint32_t L = lens[li];
        for (int i = 0; i < N; i++) {
            assert_int_equal(st_kv_commit(&kv, slot, 0, L, &e), 0);
            int bad = 0;
            uint64_t t0 = st_shm_now_ns();
            for (uint32_t j = 1; j <= B; j++) bad |= st_kv_rollback(&kv, slot, 0, L - j, &e);
            t[i] = st_shm_now_ns() - t0;
            assert_int_equal(bad, 0);
            assert_int_equal(st_kv_committed(&kv, slot, 0), L - B);
        }
        qsort(t, N, sizeof *t, cmp_u64);
        med[li] = (double)t[N / 2] / B;
        printf("  rollback at committed %5u: %.1f ns median, %.1f ns p99 (per rollback, "
               "batches of %d)\n", L, med[li], (double)t[N * 99 / 100] / B, B);
    }
    double lo = med[0], hi = med[0];
    for (int i = 1; i < 4; i++) {
        lo = med[i] < lo ? med[i] : lo;
        hi = med[i] > hi ? med[i] : hi;
    }
    assert_true(hi < 2000);          // nanoseconds, not a copy
    assert_true(hi <= 4 * lo + 50);  // flat in the context length
    free(t);
    st_region_close(&r);
}

// ---- two processes -------------------------------------------------------

static const struct st_kv_config x_cfg = {
    .n_slots = 2, .n_ctx = 256, .n_models = 2,
    .model = {{.n_layers = 4, .n_kv_heads = 2, .head_dim = 16},
              {.n_layers = 2, .n_kv_heads = 1, .head_dim = 16}},
};

static void fill(uint16_t *k, uint16_t *v, uint64_t row, uint32_t pos, uint32_t n, uint32_t layer)
{
    for (uint32_t p = 0; p < n; p++)
        for (uint64_t j = 0; j < row; j++) {
            k[p * row + j] = cell(pos + p, layer, j, 0);
            v[p * row + j] = cell(pos + p, layer, j, 1);
        }
}

static int verify(const uint16_t *k, const uint16_t *v, uint64_t row, uint32_t n, uint32_t layer)
{
    for (uint32_t p = 0; p < n; p++)
        for (uint64_t j = 0; j < row; j++)
            if (k[p * row + j] != cell(p, layer, j, 0) || v[p * row + j] != cell(p, layer, j, 1))
                return -1;
    return 0;
}

// The child attaches the region through the fd, checks the 100 committed
// rows of every layer and model, and writes rows 100..109 (in flight).
static int child(int fd, uint32_t slot)
{
    struct st_region *r;
    struct st_kv kv;
    struct st_error e;
    uint64_t size;
    if (st_region_attach(fd, NULL, &r, &e) < 0) {
        fprintf(stderr, "child: %s\n", e.msg);
        return 2;
    }
    void *base = st_region_section(r, ST_REGION_KV, &size);
    if (st_kv_open(&kv, base, size, &e) < 0) {
        fprintf(stderr, "child: %s\n", e.msg);
        return 2;
    }
    for (uint32_t m = 0; m < 2; m++) {
        uint64_t row = st_kv_row_elems(&kv, m);
        if (st_kv_committed(&kv, slot, m) != 100) return 3;
        for (uint32_t l = 0; l < x_cfg.model[m].n_layers; l++) {
            const uint16_t *k, *v;
            uint16_t *wk, *wv;
            if (st_kv_read(&kv, slot, m, l, 100, 0, &k, &v, &e) < 0) return 4;
            if (verify(k, v, row, 100, l) < 0) return 5;
            if (st_kv_write(&kv, slot, m, l, 99, 1, &wk, &wv, &e) == 0) return 6;
            if (st_kv_write(&kv, slot, m, l, 100, 10, &wk, &wv, &e) < 0) return 7;
            fill(wk, wv, row, 100, 10, l);
        }
    }
    st_region_close(&r);
    return 0;
}

static void test_two_processes(void **state)
{
    (void)state;
    struct st_kv kv;
    struct st_region *r = kv_region(&x_cfg, &kv);
    struct st_error e;
    uint32_t slot, decoy;
    assert_int_equal(st_kv_reserve(&kv, 41, &decoy, NULL, &e), 0);
    assert_int_equal(st_kv_reserve(&kv, 42, &slot, NULL, &e), 0);
    for (uint32_t m = 0; m < 2; m++) {
        uint64_t row = st_kv_row_elems(&kv, m);
        for (uint32_t l = 0; l < x_cfg.model[m].n_layers; l++) {
            uint16_t *k, *v;
            assert_int_equal(st_kv_write(&kv, slot, m, l, 0, 100, &k, &v, &e), 0);
            fill(k, v, row, 0, 100, l);
            assert_int_equal(st_kv_write(&kv, decoy, m, l, 0, 256, &k, &v, &e), 0);
            memset(k, 0xee, 256 * row * 2); // the other slot must not leak in
            memset(v, 0xee, 256 * row * 2);
        }
        assert_int_equal(st_kv_commit(&kv, slot, m, 100, &e), 0);
    }
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(child(st_region_fd(r), slot));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    for (uint32_t m = 0; m < 2; m++) {
        uint64_t row = st_kv_row_elems(&kv, m);
        for (uint32_t l = 0; l < x_cfg.model[m].n_layers; l++) {
            const uint16_t *k, *v;
            assert_int_equal(st_kv_read(&kv, slot, m, l, 111, 10, &k, &v, &e), -1);
            assert_int_equal(st_kv_read(&kv, slot, m, l, 110, 10, &k, &v, &e), 0);
            assert_int_equal(verify(k, v, row, 110, l), 0);
        }
        assert_int_equal(st_kv_commit(&kv, slot, m, 110, &e), 0);
    }
    st_region_close(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_reuse_and_errors),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_rollback_flat),
        cmocka_unit_test(test_two_processes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
