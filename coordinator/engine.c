#include "coordinator/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"

int st_engine_parse_cpus(const char *s, int *cpus, int cap)
{
    int n = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0) return -1;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a) return -1;
        }
        for (long c = a; c <= b; c++) {
            if (n >= cap) return -1;
            cpus[n++] = (int)c;
        }
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

// Assigns CPUs to nodes: from the topology, split into virtual nodes when
// asked, restricted to an explicit CPU list.
static int place_cpus(struct st_engine *eng, struct st_error *e)
{
    struct st_topology topo, split;
    if (st_topology_detect(&topo, e)) return -1;
    const struct st_topology *t = &topo;
    if (eng->cfg.n_nodes > 1 && topo.n_nodes == 1) {
        if (st_topology_split(&topo, eng->cfg.n_nodes, &split, e)) return -1;
        t = &split;
    }
    int allow[1024], n_allow = -1;
    if (eng->cfg.cpus && (n_allow = st_engine_parse_cpus(eng->cfg.cpus, allow, 1024)) < 0)
        return st_error_set(e, "bad CPU list '%s'", eng->cfg.cpus);
    eng->n_nodes = 0;
    for (uint32_t i = 0; i < t->n_nodes && eng->n_nodes < ST_ENGINE_MAX_NODES; i++) {
        struct st_engine_node *nd = &eng->node[eng->n_nodes];
        nd->n_cpus = 0;
        for (int c = 0; c < CPU_SETSIZE && nd->n_cpus < ST_SET_MAX_RANKS; c++) {
            if (!CPU_ISSET(c, &t->node[i].cpus)) continue;
            bool ok = n_allow < 0;
            for (int k = 0; k < n_allow && !ok; k++) ok = allow[k] == c;
            if (ok) nd->cpus[nd->n_cpus++] = c;
        }
        if (!nd->n_cpus) continue;
        if (eng->cfg.workers_per_node) { // more or fewer workers than CPUs: wrap around
            int base[ST_SET_MAX_RANKS];
            uint32_t nb = nd->n_cpus;
            memcpy(base, nd->cpus, sizeof base);
            nd->n_cpus = eng->cfg.workers_per_node < ST_SET_MAX_RANKS ? eng->cfg.workers_per_node : ST_SET_MAX_RANKS;
            for (uint32_t k = 0; k < nd->n_cpus; k++) nd->cpus[k] = base[k % nb];
        }
        nd->index = eng->n_nodes;
        eng->n_nodes++;
        (void)t->node[i].mem_node;
    }
    if (!eng->n_nodes) return st_error_set(e, "no usable CPUs%s%s", eng->cfg.cpus ? " in " : "", eng->cfg.cpus ? eng->cfg.cpus : "");
    return 0;
}

static int open_node(struct st_engine *eng, struct st_engine_node *nd, int32_t mem_node, const struct st_load_plan *plan,
                     uint64_t wbytes, struct st_error *e)
{
    struct st_kv_config kc = {.n_slots = eng->cfg.n_slots, .n_ctx = eng->n_ctx, .n_models = eng->n_models};
    const struct st_llama_model *ms[2] = {eng->target, eng->draft};
    const struct st_llama_hparams *hps[2];
    for (uint32_t i = 0; i < eng->n_models; i++) {
        kc.model[i] = (struct st_kv_shape){ms[i]->hp.n_layer, ms[i]->hp.n_head_kv, ms[i]->hp.head_dim};
        hps[i] = &ms[i]->hp;
    }
    uint64_t kbytes;
    if (st_kv_size(&kc, &kbytes, e)) return -1;
    if (st_scratch_plan(hps, eng->n_models, eng->m_max, eng->k_max, eng->n_lanes, nd->n_cpus, eng->n_ctx,
                        st_load_plan_act_row_max(plan), &nd->sl, e))
        return -1;
    struct st_region_config rc = {.name = "subternary", .mem_node = mem_node, .huge = ST_REGION_HUGE_AUTO,
                                  .n_models = eng->n_models};
    rc.section_bytes[ST_REGION_CONTROL] = sizeof(struct st_set_control) + sizeof(struct st_scratch_layout);
    rc.section_bytes[ST_REGION_KV] = kbytes;
    rc.section_bytes[ST_REGION_SCRATCH] = nd->sl.total;
    rc.section_bytes[ST_REGION_WEIGHTS] = wbytes;
    const char *paths[2] = {eng->cfg.target_path, eng->cfg.draft_path};
    for (uint32_t i = 0; i < eng->n_models; i++)
        if (st_file_identity_get(paths[i], &rc.models[i], e)) return -1;
    if (st_region_create(&rc, &nd->region, e)) return -1;
    uint64_t cb, sb;
    uint8_t *c = st_region_section(nd->region, ST_REGION_CONTROL, &cb);
    void *kv = st_region_section(nd->region, ST_REGION_KV, &kbytes);
    nd->scratch = st_region_section(nd->region, ST_REGION_SCRATCH, &sb);
    nd->ctl = (struct st_set_control *)c;
    memset(nd->ctl, 0, sizeof *nd->ctl);
    nd->ctl->magic = ST_SET_MAGIC;
    nd->ctl->n_ranks = nd->n_cpus;
    nd->ctl->node = nd->index;
    // More ranks than CPUs: a spinning rank would only keep a runnable one
    // off its CPU, so sleep at once.
    bool oversubscribed = false;
    for (uint32_t a = 0; a < nd->n_cpus && !oversubscribed; a++)
        for (uint32_t b = a + 1; b < nd->n_cpus; b++) oversubscribed |= nd->cpus[a] == nd->cpus[b];
    st_barrier_init(&nd->ctl->barrier, nd->n_cpus, oversubscribed ? 0 : ST_BARRIER_DEFAULT_SPIN_NS);
    memcpy(c + sizeof *nd->ctl, &nd->sl, sizeof nd->sl);
    return st_kv_init(&nd->kv, kv, kbytes, &kc, e);
}

uint32_t st_engine_prefill_rows(const struct st_engine_config *cfg)
{
    uint32_t k_max = cfg->k_max ? cfg->k_max : ST_ENGINE_K_DEFAULT;
    uint32_t m = cfg->prefill_chunk ? cfg->prefill_chunk : ST_ENGINE_PREFILL_CHUNK;
    return m < k_max + 1 ? k_max + 1 : m;
}

int st_engine_open(const struct st_engine_config *cfg, void *zctx, struct st_engine **out, struct st_error *e)
{
    *out = NULL;
    if (cfg->k_max > ST_ENGINE_K_LIMIT)
        return st_error_set(e, "longest draft %u is over the limit of %u", cfg->k_max, ST_ENGINE_K_LIMIT);
    struct st_engine *eng = calloc(1, sizeof *eng);
    if (!eng) return st_error_set(e, "out of memory");
    eng->cfg = *cfg;
    eng->zctx = zctx;
    if (!eng->cfg.n_slots) eng->cfg.n_slots = 1;
    eng->k_max = cfg->k_max ? cfg->k_max : ST_ENGINE_K_DEFAULT;
    eng->m_max = st_engine_prefill_rows(cfg);
    eng->n_lanes = eng->m_max / (eng->k_max + 1);
    if (eng->n_lanes > ST_ENGINE_MAX_LANES) eng->n_lanes = ST_ENGINE_MAX_LANES;
    if (eng->n_lanes > eng->cfg.n_slots) eng->n_lanes = eng->cfg.n_slots;
    if (cfg->max_batch && eng->n_lanes > cfg->max_batch) eng->n_lanes = cfg->max_batch;
    struct st_load_plan *plan = NULL;
    st_kern_init();
    if (st_llama_open(cfg->target_path, &eng->target, e)) goto fail;
    if (cfg->draft_path && st_llama_open(cfg->draft_path, &eng->draft, e)) goto fail;
    eng->n_models = eng->draft ? 2 : 1;
    eng->n_vocab = eng->target->hp.n_vocab;
    if (eng->draft && eng->draft->hp.n_vocab != eng->n_vocab) {
        st_error_set(e, "draft %s has %u tokens, target %s has %u: they must share the vocabulary", cfg->draft_path,
                     eng->draft->hp.n_vocab, cfg->target_path, eng->n_vocab);
        goto fail;
    }
    if (st_tok_load(eng->target->gguf, &eng->tok, e)) {
        eng->tok = NULL; // token ids still work; text does not
        e->msg[0] = 0;
    }
    eng->n_ctx = cfg->n_ctx ? cfg->n_ctx : (eng->target->hp.n_ctx_train < 4096 ? eng->target->hp.n_ctx_train : 4096);
    if (eng->n_ctx < 16 || eng->n_ctx > (1u << 20)) {
        st_error_set(e, "context length %u out of range (16 .. 1048576)", eng->n_ctx);
        goto fail;
    }
    if (place_cpus(eng, e)) goto fail;
    struct st_llama_model *models[2] = {eng->target, eng->draft};
    const char *paths[2] = {cfg->target_path, cfg->draft_path};
    uint64_t wbytes;
    if (st_load_plan_new(models, paths, eng->n_models, &plan, &wbytes, e)) goto fail;
    struct st_topology topo;
    if (st_topology_detect(&topo, e)) goto fail;
    for (uint32_t i = 0; i < eng->n_nodes; i++) {
        int32_t mem = topo.n_nodes == eng->n_nodes ? topo.node[i].mem_node : topo.node[0].mem_node;
        if (open_node(eng, &eng->node[i], mem, plan, wbytes, e)) goto fail;
        uint64_t wb;
        void *w = st_region_section(eng->node[i].region, ST_REGION_WEIGHTS, &wb);
        if (i == 0) {
            if (st_load_run(plan, eng->node[0].region, cfg->progress, ST_LOAD_AUTO, &eng->load, e)) goto fail;
        } else { // the other replicas: copies of node 0's, first-touched on their node
            const void *w0 = st_region_section(eng->node[0].region, ST_REGION_WEIGHTS, &wb);
            memcpy(w, w0, wbytes);
        }
    }
    eng->huge_note = st_region_huge_note(eng->node[0].region);
    if (!cfg->quiet) {
        const struct st_load_stats *ls = &eng->load;
        char how[160];
        if (ls->cached_files == eng->n_models) snprintf(how, sizeof how, "page cache");
        else if (!ls->probed_files) snprintf(how, sizeof how, "%s", ls->cached_files ? "partly cached" : "io_uring");
        else // the last probe's figures
            snprintf(how, sizeof how, "%s%s; probe: io_uring %.2f GB/s, threads %.2f GB/s", ls->cached_files ? "partly cached, " : "",
                     ls->threads_won == ls->probed_files ? "threads through the page cache"
                     : ls->threads_won                  ? "io_uring and threads"
                                                        : "io_uring",
                     ls->probe_gbps[0], ls->probe_gbps[1]);
        fprintf(stderr, "loaded %s%s%s: %.1f MB in %.2f s (%.2f GB/s, %s), %u node(s), %s; region allocated in %.2f s\n",
                cfg->target_path, cfg->draft_path ? " + " : "", cfg->draft_path ? cfg->draft_path : "",
                ls->file_bytes / 1e6, ls->seconds, ls->gbps, how, eng->n_nodes, eng->huge_note,
                st_region_alloc_seconds(eng->node[0].region));
    }
    st_load_plan_free(&plan);
    for (uint32_t i = 0; i < eng->n_nodes; i++) {
        struct st_engine_node *nd = &eng->node[i];
        snprintf(nd->endpoint, sizeof nd->endpoint, "ipc://%s/node%u", cfg->run_dir, i);
        struct st_pool_config pc = {.node = i, .n_ranks = nd->n_cpus, .exe = cfg->exe, .endpoint = nd->endpoint,
                                    .region_fd = st_region_fd(nd->region), .ctl = nd->ctl, .hang_ms = cfg->hang_ms};
        memcpy(pc.cpus, nd->cpus, sizeof pc.cpus);
        if (st_pool_start(&pc, zctx, &nd->pool, e)) goto fail;
    }
    *out = eng;
    return 0;
fail:
    st_load_plan_free(&plan);
    st_engine_close(&eng);
    return -1;
}

void st_engine_close(struct st_engine **ep)
{
    struct st_engine *eng = *ep;
    if (!eng) return;
    for (uint32_t i = 0; i < ST_ENGINE_MAX_NODES; i++) {
        st_pool_stop(&eng->node[i].pool);
        st_region_close(&eng->node[i].region);
    }
    st_tok_free(&eng->tok);
    st_llama_close(&eng->target);
    st_llama_close(&eng->draft);
    free(eng);
    *ep = NULL;
}

int st_engine_step(struct st_engine *eng, uint32_t node, Subternary__StepCommand *cmd, struct st_step_result *res,
                   struct st_error *e)
{
    return st_pool_step(eng->node[node].pool, cmd, res, e);
}

uint32_t st_engine_workers(const struct st_engine *eng, uint32_t *ready)
{
    uint32_t n = 0, r = 0;
    for (uint32_t i = 0; i < eng->n_nodes; i++) {
        n += st_pool_ranks(eng->node[i].pool);
        r += st_pool_ready(eng->node[i].pool);
    }
    if (ready) *ready = r;
    return n;
}

uint64_t st_engine_restarts(const struct st_engine *eng)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < eng->n_nodes; i++) n += st_pool_restarts(eng->node[i].pool);
    return n;
}

int st_engine_logits(struct st_engine *eng, uint32_t model, const int32_t *tokens, uint32_t n, float *out,
                     struct st_error *e)
{
    struct st_engine_node *nd = &eng->node[0];
    if (model >= eng->n_models) return st_error_set(e, "no model %u", model);
    if (n == 0 || n > eng->n_ctx) return st_error_set(e, "%u tokens do not fit the context of %u", n, eng->n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= eng->n_vocab)
            return st_error_set(e, "token %d out of range (vocabulary %u)", tokens[i], eng->n_vocab);
    uint32_t slot;
    uint64_t gen, id = ++eng->next_session;
    if (st_kv_reserve(&nd->kv, id, &slot, &gen, e)) return -1;
    int rc = 0;
    for (uint32_t at = 0; at < n && !rc;) {
        uint32_t m = n - at < eng->k_max + 1 ? n - at : eng->k_max + 1;
        Subternary__StepCommand cmd = SUBTERNARY__STEP_COMMAND__INIT;
        cmd.kind = SUBTERNARY__STEP_KIND__STEP_PREFILL;
        cmd.slot = slot;
        cmd.model = model;
        cmd.tokens = (uint32_t *)(tokens + at);
        cmd.n_tokens = m;
        cmd.pos = at;
        cmd.want_logits = true;
        struct st_step_result res;
        rc = st_engine_step(eng, 0, &cmd, &res, e);
        if (!rc) {
            memcpy(out + (size_t)at * eng->n_vocab, nd->scratch + nd->sl.logits, (size_t)m * eng->n_vocab * sizeof(float));
            rc = st_kv_commit(&nd->kv, slot, model, at + m, e);
        }
        at += m;
    }
    struct st_error e2;
    st_kv_release(&nd->kv, slot, id, &e2);
    return rc;
}

void st_engine_test_crash(struct st_engine *eng, uint64_t step, uint32_t rank, uint32_t barrier)
{
    st_pool_test_crash(eng->node[0].pool, step, rank, barrier);
}

void st_engine_test_poison(struct st_engine *eng, bool on, uint32_t slot, uint32_t rank, uint32_t barrier,
                           bool killed)
{
    st_pool_test_poison(eng->node[0].pool, on, slot, rank, barrier, killed);
}

uint64_t st_engine_steps(const struct st_engine *eng) { return st_pool_steps(eng->node[0].pool); }

int st_engine_ping(struct st_engine *eng, uint32_t node, uint32_t n, uint32_t barriers, double *seconds,
                   struct st_error *e)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (uint32_t i = 0; i < n; i++) {
        Subternary__StepCommand cmd = SUBTERNARY__STEP_COMMAND__INIT;
        cmd.kind = SUBTERNARY__STEP_KIND__STEP_PING;
        cmd.k = barriers;
        struct st_step_result res;
        if (st_engine_step(eng, node, &cmd, &res, e)) return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    *seconds = ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9) / n;
    return 0;
}
