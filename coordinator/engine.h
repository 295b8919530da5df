// The engine: the models, one region and one worker set per (virtual) node,
// and the KV slots of every node.  It loads the weights once into node 0's
// region, replicates them to the other nodes, and starts the worker sets.
#ifndef ST_COORDINATOR_ENGINE_H
#define ST_COORDINATOR_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/accept_stats.h"
#include "coordinator/load.h"
#include "coordinator/pool.h"
#include "coordinator/round_cost.h"
#include "model/layout.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "shm/kv.h"
#include "shm/region.h"
#include "shm/topology.h"

#define ST_ENGINE_K_LIMIT ST_ACCEPT_MAX_K // largest --k-max: the per-depth acceptance counts hold 1..32
#define ST_ENGINE_K_DEFAULT 8           // the longest draft when none is configured

#define ST_ENGINE_MAX_NODES 16
#define ST_ENGINE_MAX_LANES ST_SCRATCH_MAX_LANES
// Rows of a prefill forward by default.  Larger forwards prefill faster (on
// the AMX host, the 3B target's 1024-token prompt: 64 rows 87.6 tokens/s,
// 128 rows 99.2, 256 rows 102.5); the server keeps the forwards of its
// batched steps shorter (st_server_config.step_rows), so this costs the
// sessions decoding beside a prompt nothing.
#define ST_ENGINE_PREFILL_CHUNK 256

struct st_engine_config {
    const char *target_path;
    const char *draft_path;  // NULL: target alone
    uint32_t n_slots;        // KV slots per node (0: 1)
    uint32_t n_ctx;          // positions per slot (0: min(4096, trained context))
    uint32_t k_max;          // longest draft (0: 8)
    uint32_t prefill_chunk;  // rows per prefill forward (0: ST_ENGINE_PREFILL_CHUNK)
    // Sessions of one node whose rounds go through one batched step (the
    // weights are read once for all of them): 0 = as many as the slots, up
    // to 8 and to prefill_chunk / (k_max + 1); 1 = one session a step.
    uint32_t max_batch;
    uint32_t n_nodes;        // split the CPUs into this many virtual nodes (0: the NUMA nodes)
    const char *cpus;        // CPU list "0,1" or "0-3" (NULL: all allowed)
    uint32_t workers_per_node; // 0: one per CPU
    const char *exe;         // the subternary binary (workers are exec'd from it)
    const char *run_dir;     // directory for ipc endpoints (mode 0700)
    bool progress;           // loading progress bar on a TTY
    uint32_t hang_ms;        // liveness timeout (0: 5000)
    bool quiet;              // no load report on stderr
};

struct st_engine_node {
    uint32_t index;
    struct st_region *region;
    struct st_set_control *ctl;
    struct st_scratch_layout sl;
    uint8_t *scratch;        // the scratch section (coordinator's view)
    struct st_kv kv;
    struct st_pool *pool;
    uint32_t n_cpus;
    int cpus[ST_SET_MAX_RANKS];
    uint32_t sessions;       // placed here
    char endpoint[256];
    // Measured step costs, shared by the sessions of this node (adaptive K):
    double ema_ar;           // seconds of a target-only decode step
    struct st_round_cost round_cost; // seconds of a round by its K
    // Acceptance over the node's sessions' rounds: a new session starts from
    // it rather than a guess.
    struct st_accept_stats accept;
};

struct st_engine {
    struct st_engine_config cfg;
    struct st_llama_model *target, *draft;
    struct st_tokenizer *tok; // from the target file; NULL if it has none
    uint32_t n_models, n_ctx, k_max, m_max, n_vocab;
    uint32_t n_lanes;        // sessions a batched step carries (1: no batching)
    uint32_t n_nodes;
    struct st_engine_node node[ST_ENGINE_MAX_NODES];
    struct st_load_stats load;
    const char *huge_note;
    void *zctx;
    uint64_t next_session;
};

int st_engine_open(const struct st_engine_config *cfg, void *zctx, struct st_engine **out, struct st_error *e);
// The rows of a prefill forward cfg gives (its chunk or the default, at
// least a round's K+1): the engine's m_max.
uint32_t st_engine_prefill_rows(const struct st_engine_config *cfg);
void st_engine_close(struct st_engine **eng);

// Runs a step on a node's worker set.
int st_engine_step(struct st_engine *eng, uint32_t node, Subternary__StepCommand *cmd, struct st_step_result *res,
                   struct st_error *e);

// Mean round trip of a no-op step (coordinator -> every rank, `barriers`
// barriers, -> coordinator) over n steps, in seconds.
int st_engine_ping(struct st_engine *eng, uint32_t node, uint32_t n, uint32_t barriers, double *seconds,
                   struct st_error *e);

// Total workers and ready ones, restarts.
uint32_t st_engine_workers(const struct st_engine *eng, uint32_t *ready);
uint64_t st_engine_restarts(const struct st_engine *eng);

// Parses a CPU list ("0-3,6") into cpus[]; returns the count or -1.
int st_engine_parse_cpus(const char *s, int *cpus, int cap);



// Logits of every position of a token sequence, evaluated by the worker set
// of node 0 through the fast kernels: out[n][n_vocab].  model: 0 target,
// 1 draft.  Uses (and releases) a KV slot.
int st_engine_logits(struct st_engine *eng, uint32_t model, const int32_t *tokens, uint32_t n, float *out,
                     struct st_error *e);

// Test hook: the first attempt of the step number `step` (counted from 1
// over the engine's life on node 0) makes rank `rank` _exit at its barrier
// `barrier`.  0 disables.
void st_engine_test_crash(struct st_engine *eng, uint64_t step, uint32_t rank, uint32_t barrier);
// Test hook, a poison request: every attempt of every step on node 0 that
// carries a round of KV slot `slot` (alone or batched) makes rank `rank`
// _exit (or, `killed`, SIGKILL itself as if from outside) at barrier
// `barrier`, until a step of that round alone has failed.
void st_engine_test_poison(struct st_engine *eng, bool on, uint32_t slot, uint32_t rank, uint32_t barrier,
                           bool killed);
// Steps node 0's set has started (the test hook counts these).
uint64_t st_engine_steps(const struct st_engine *eng);

#endif
