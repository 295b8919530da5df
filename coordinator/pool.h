// One worker set: n pinned worker processes on one (virtual) node, sharing a
// region.  The coordinator starts them, sends them step commands over a
// ROUTER socket, watches each through a pidfd and a liveness check, and on a
// death or a hang aborts the set's barrier, starts a replacement on the same
// CPU (it attaches the region: no model reload) and replays the step from
// the committed state with the same seed.  A hot spare process, attached and
// with its plans built, waits beside the set: a replacement is an Assign
// message to it, not a process start.  A step that crashes workers three
// times in a row fails alone; workers killed from outside (SIGKILL, SIGTERM)
// count only towards a larger limit of attempts.
#ifndef ST_COORDINATOR_POOL_H
#define ST_COORDINATOR_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <zmq.h>

#include "common/error.h"
#include "proto/subternary.pb-c.h"
#include "shm/workset.h"

#define ST_POOL_MAX_CRASHES 3  // attempts a worker crashed in: the step is poison
#define ST_POOL_MAX_ATTEMPTS 8 // attempts in all (workers killed from outside)
#define ST_POOL_MAX_OPS 32

struct st_pool_config {
    uint32_t node;
    uint32_t n_ranks;
    int cpus[ST_SET_MAX_RANKS]; // CPU of each rank, -1 for none
    const char *exe;            // the subternary binary to exec as `worker`
    const char *endpoint;       // ipc:// endpoint the set's ROUTER binds
    int region_fd;
    struct st_set_control *ctl; // in the region's control section
    uint32_t hang_ms;           // no liveness progress for this long: hung (0: 5000)
    uint32_t start_timeout_ms;  // hello from every rank within (0: 60000)
    bool no_spare;              // no hot spare (a replacement is then exec'd on demand)
};

struct st_step_result {
    uint32_t lane;              // the caller's: which lane of a batched step is the session's (0 otherwise)
    double seconds;             // slowest rank
    uint32_t barriers;          // rank 0's
    uint32_t attempts;          // 1 when nothing failed
    uint32_t restarts;          // workers replaced during this step
    // Rank 0's per-op times when asked, by (model, op).
    double op_seconds[ST_POOL_MAX_OPS];
    uint64_t op_bytes[ST_POOL_MAX_OPS];
    uint32_t op_model[ST_POOL_MAX_OPS];
    char op_names[ST_POOL_MAX_OPS][16];
    uint32_t n_ops;
};

struct st_pool;

// A callback the pool calls while it waits (e.g. to serve client sockets);
// may be NULL.  Returns nothing; must not start another step.
typedef void (*st_pool_idle_fn)(void *ctx);

int st_pool_start(const struct st_pool_config *cfg, void *zctx, struct st_pool **out, struct st_error *e);
// Tells every worker to stop, waits briefly, kills what remains.
void st_pool_stop(struct st_pool **p);

// Runs a step on every rank and waits for it, replacing dead or hung workers
// and replaying.  cmd->step_id is assigned here.  On failure e says why.
int st_pool_step(struct st_pool *p, Subternary__StepCommand *cmd, struct st_step_result *res, struct st_error *e);

// The same, without waiting: st_pool_submit sends the step; st_pool_progress
// handles the set's events for up to timeout_ms and returns 1 when the step
// is done (res filled), 0 while it runs (or its replacement workers start,
// or it is being replayed), -1 when it failed (e says why).  cmd, what it
// points at, and res must stay valid until then: a replay sends cmd again.  One step at a time per set, so sets on
// different nodes run steps side by side.
int st_pool_submit(struct st_pool *p, Subternary__StepCommand *cmd, struct st_step_result *res, struct st_error *e);
int st_pool_progress(struct st_pool *p, int timeout_ms, struct st_error *e);
// The zmq_poll items that wake a set's step (its router, its workers'
// pidfds) into items[ST_POOL_POLLITEMS]; returns how many.
#define ST_POOL_POLLITEMS (ST_SET_MAX_RANKS + 2)
int st_pool_pollitems(const struct st_pool *p, zmq_pollitem_t *items);

// Processes worker events (heartbeats, deaths) for up to timeout_ms; starts
// replacements for workers that died while idle and, on later calls, sees
// them through without waiting for them (a step submitted meanwhile waits
// for the set in st_pool_progress).  Does nothing while a step is in flight.
void st_pool_service(struct st_pool *p, int timeout_ms);

// zmq_poll items the pool wants watched (router + pidfds) and the idle hook.
void st_pool_set_idle(struct st_pool *p, st_pool_idle_fn fn, void *ctx, void *extra_socket);

// Test hooks (see st_engine_test_crash, st_engine_test_poison).
void st_pool_test_crash(struct st_pool *p, uint64_t step, uint32_t rank, uint32_t barrier);
void st_pool_test_poison(struct st_pool *p, bool on, uint32_t slot, uint32_t rank, uint32_t barrier, bool killed);
// Steps started so far (replays not counted).
uint64_t st_pool_steps(const struct st_pool *p);

uint32_t st_pool_ranks(const struct st_pool *p);
uint32_t st_pool_ready(const struct st_pool *p);
uint64_t st_pool_restarts(const struct st_pool *p);
pid_t st_pool_pid(const struct st_pool *p, uint32_t rank);
// Death seen -> set ready again, of the last replacement (seconds).
double st_pool_last_replace_seconds(const struct st_pool *p);

#endif
