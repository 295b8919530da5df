#include "coordinator/pool.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "proto/wire.h"
#include "worker/worker.h"

enum rank_status { RANK_DOWN = 0, RANK_STARTING, RANK_READY };

struct rank {
    pid_t pid;
    int pidfd;
    enum rank_status status;
    uint64_t last_seen_ns;
    bool done;      // replied to the step in flight
    bool aborted;   // its reply said aborted
    bool dead;      // died during the step in flight
    int exit_code;  // of the last process in this slot (-1: killed by a signal)
    bool hung;      // killed by the liveness check
    bool crashed;   // its death was its own (see lost_from_outside)
    uint64_t died_ns;
};

// r[SPARE] is the hot spare, outside the set's ranks.
#define SPARE ST_SET_MAX_RANKS

struct st_pool {
    struct st_pool_config cfg;
    void *router;
    struct rank r[ST_SET_MAX_RANKS + 1];
    uint32_t spare_id;           // identity "s<id>" of the current spare
    uint64_t step_seq;
    uint64_t restarts;
    double last_replace_s;
    st_pool_idle_fn idle;
    void *idle_ctx;
    void *extra;
    uint64_t steps;              // steps started (not counting replays)
    uint64_t crash_step;         // test hook
    uint32_t crash_rank, crash_barrier;
    bool poison;                 // test hook: the rounds of slot poison_slot crash
    uint32_t poison_slot, poison_rank, poison_barrier;
    bool poison_killed;          // ... by a SIGKILL, as from outside
    // The step in flight (st_pool_submit .. st_pool_progress).
    Subternary__StepCommand *cmd;
    struct st_step_result *res;
    uint32_t attempt;
    uint32_t crashes;            // attempts of it that a worker crashed in
    bool any_dead;
    char err[512];
    // Replacements starting under the step in flight (the loop goes on meanwhile).
    bool starting;
    uint64_t died_ns;            // the first death that needed them (UINT64_MAX: none known)
    // The start of a set: its deadline, and workers that died while starting.
    uint64_t start_deadline_ns;
    uint32_t start_retries;
    // Liveness watch of the step in flight.
    uint64_t watch_ns;
    uint64_t watch_sum;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// Slot before fork: reserved now, active once the worker has attached.
static void reserve_slot(struct st_pool *p, uint32_t i)
{
    struct st_rank_slot *slot = &p->cfg.ctl->ranks[i];
    atomic_store(&slot->state, ST_RANK_RESERVED);
    atomic_store(&slot->pid, 0);
    atomic_store(&slot->cpu, (uint32_t)p->cfg.cpus[i]);
    atomic_fetch_add(&slot->generation, 1);
}

static int spawn(struct st_pool *p, uint32_t i, struct st_error *e)
{
    char fd[16], rank[16], node[16], cpu[16], parent[16];
    if (i == SPARE) {
        p->spare_id++;
        snprintf(rank, sizeof rank, "%u", p->spare_id);
        snprintf(cpu, sizeof cpu, "-1");
    } else {
        reserve_slot(p, i);
        snprintf(rank, sizeof rank, "%u", i);
        snprintf(cpu, sizeof cpu, "%d", p->cfg.cpus[i]);
    }
    snprintf(fd, sizeof fd, "%d", p->cfg.region_fd);
    snprintf(node, sizeof node, "%u", p->cfg.node);
    snprintf(parent, sizeof parent, "%d", (int)getpid());
    pid_t pid = fork();
    if (pid < 0) return st_error_set(e, "fork(worker %u): %s", i, strerror(errno));
    if (pid == 0) {
        char *argv[] = {"subternary", "worker", "--region-fd", fd, i == SPARE ? "--spare" : "--rank", rank, "--node", node,
                        "--cpu", cpu, "--parent", parent, "--endpoint", (char *)p->cfg.endpoint, NULL};
        execv(p->cfg.exe, argv);
        _exit(127);
    }
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd < 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
        return st_error_set(e, "pidfd_open(worker %u, pid %d): %s", i, (int)pid, strerror(errno));
    }
    p->r[i] = (struct rank){.pid = pid, .pidfd = pfd, .status = RANK_STARTING, .last_seen_ns = now_ns()};
    return 0;
}

// Signals that end a worker from outside (an operator, a test, the OOM
// killer) rather than a fault of its own: such a death is no evidence that
// the step it ran is poison.
static bool lost_from_outside(int sig)
{
    return sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
}

static void reap(struct st_pool *p, uint32_t i)
{
    struct rank *r = &p->r[i];
    if (r->pid > 0) {
        int status = 0;
        pid_t w;
        kill(r->pid, SIGKILL);
        // A signal (a second SIGTERM while stopping) must not leave it unreaped.
        while ((w = waitpid(r->pid, &status, 0)) < 0 && errno == EINTR) {}
        if (w == r->pid && WIFEXITED(status)) r->exit_code = WEXITSTATUS(status);
        else r->exit_code = -1;
        r->crashed = r->hung || w != r->pid || !WIFSIGNALED(status) || !lost_from_outside(WTERMSIG(status));
    }
    if (r->pidfd >= 0) close(r->pidfd);
    r->pid = 0;
    r->pidfd = -1;
    r->status = RANK_DOWN;
}

// "w<rank>" -> rank; "s<id>" of the current spare -> SPARE; else -1.
static int rank_of(const struct st_pool *p, const struct st_wire_msg *m)
{
    if (m->identity_len < 2 || m->identity_len > 10 || (m->identity[0] != 'w' && m->identity[0] != 's')) return -1;
    uint32_t v = 0;
    for (size_t i = 1; i < m->identity_len; i++) {
        if (m->identity[i] < '0' || m->identity[i] > '9') return -1;
        v = v * 10 + (uint32_t)(m->identity[i] - '0');
    }
    if (m->identity[0] == 's') return v == p->spare_id ? SPARE : -1;
    return v < p->cfg.n_ranks ? (int)v : -1;
}

// Handles one message from a worker; step results go to the ranks' flags.
static void on_message(struct st_pool *p, uint64_t step_id, struct st_step_result *res, char *err, size_t errcap)
{
    struct st_wire_msg m;
    if (st_wire_recv(p->router, true, &m, ZMQ_DONTWAIT)) return;
    int i = rank_of(p, &m);
    Subternary__WorkerMsg *wm = m.shape_ok && m.version_ok && i >= 0
                                    ? subternary__worker_msg__unpack(NULL, m.payload_len, m.payload)
                                    : NULL;
    st_wire_msg_clear(&m);
    if (!wm) return;
    struct rank *r = &p->r[i];
    r->last_seen_ns = now_ns();
    if (wm->msg_case == SUBTERNARY__WORKER_MSG__MSG_HELLO) {
        if (wm->hello->error && wm->hello->error[0]) {
            if (err) snprintf(err, errcap, "worker %d: %s", i, wm->hello->error);
        } else if (wm->hello->pid == r->pid && wm->hello->spare == (i == SPARE)) {
            r->status = RANK_READY;
        }
    } else if (wm->msg_case == SUBTERNARY__WORKER_MSG__MSG_DONE && wm->done->step_id == step_id && step_id) {
        r->done = true;
        r->aborted = wm->done->aborted;
        if (!r->aborted && wm->done->error && wm->done->error[0] && err && !err[0])
            snprintf(err, errcap, "worker %d: %s", i, wm->done->error);
        if (res) {
            if (wm->done->seconds > res->seconds) res->seconds = wm->done->seconds;
            if (i == 0) {
                res->barriers = wm->done->barriers;
                res->n_ops = wm->done->n_timings < ST_POOL_MAX_OPS ? (uint32_t)wm->done->n_timings : ST_POOL_MAX_OPS;
                for (uint32_t k = 0; k < res->n_ops; k++) {
                    res->op_seconds[k] = wm->done->timings[k]->seconds;
                    res->op_bytes[k] = wm->done->timings[k]->bytes;
                    res->op_model[k] = wm->done->timings[k]->model;
                    snprintf(res->op_names[k], sizeof res->op_names[k], "%s", wm->done->timings[k]->op);
                }
            }
        }
    }
    subternary__worker_msg__free_unpacked(wm, NULL);
}

// The set's router, then the pidfds of its ranks and spare (map: the rank of
// each item, -1 for the router).  Fills at most ST_POOL_POLLITEMS.
static int watch_items(const struct st_pool *p, zmq_pollitem_t *items, int *map)
{
    int n = 0;
    items[n] = (zmq_pollitem_t){p->router, 0, ZMQ_POLLIN, 0};
    map[n++] = -1;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++)
        if (p->r[i].pidfd >= 0) {
            items[n] = (zmq_pollitem_t){NULL, p->r[i].pidfd, ZMQ_POLLIN, 0};
            map[n++] = (int)i;
        }
    if (p->r[SPARE].pidfd >= 0) {
        items[n] = (zmq_pollitem_t){NULL, p->r[SPARE].pidfd, ZMQ_POLLIN, 0};
        map[n++] = SPARE;
    }
    return n;
}

// One poll round over the router, the pidfds and the extra socket.
static void poll_once(struct st_pool *p, int timeout_ms, uint64_t step_id, struct st_step_result *res, char *err,
                      size_t errcap)
{
    zmq_pollitem_t items[ST_POOL_POLLITEMS + 1];
    int map[ST_POOL_POLLITEMS + 1], n = watch_items(p, items, map);
    int extra_at = -1;
    if (p->extra && p->idle) {
        extra_at = n;
        items[n] = (zmq_pollitem_t){p->extra, 0, ZMQ_POLLIN, 0};
        map[n++] = -2;
    }
    if (zmq_poll(items, n, timeout_ms) <= 0) return;
    if (items[0].revents & ZMQ_POLLIN)
        for (int k = 0; k < 64; k++) {
            int ev = 0;
            size_t sz = sizeof ev;
            zmq_getsockopt(p->router, ZMQ_EVENTS, &ev, &sz);
            if (!(ev & ZMQ_POLLIN)) break;
            on_message(p, step_id, res, err, errcap);
        }
    for (int k = 1; k < n; k++) {
        if (k == extra_at || !(items[k].revents & ZMQ_POLLIN)) continue;
        struct rank *r = &p->r[map[k]];
        r->dead = true;
        r->died_ns = now_ns();
        reap(p, (uint32_t)map[k]);
    }
    if (extra_at >= 0 && (items[extra_at].revents & ZMQ_POLLIN)) p->idle(p->idle_ctx);
}

static bool all_ready(const struct st_pool *p)
{
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++)
        if (p->r[i].status != RANK_READY) return false;
    return true;
}

static int send_assign(struct st_pool *p, uint32_t i)
{
    Subternary__WorkerMsg msg = SUBTERNARY__WORKER_MSG__INIT;
    Subternary__Assign as = SUBTERNARY__ASSIGN__INIT;
    as.rank = i;
    as.cpu = p->cfg.cpus[i];
    msg.msg_case = SUBTERNARY__WORKER_MSG__MSG_ASSIGN;
    msg.assign = &as;
    char id[16];
    int n = snprintf(id, sizeof id, "s%u", p->spare_id);
    return st_wire_send(p->router, id, (size_t)n, &msg.base, ZMQ_DONTWAIT);
}

// Rank i is down: hand its place to the ready spare, or start a process.
static int replace(struct st_pool *p, uint32_t i, struct st_error *e)
{
    struct rank *s = &p->r[SPARE];
    if (s->status == RANK_READY) {
        reserve_slot(p, i);
        if (send_assign(p, i) == 0) {
            p->r[i] = (struct rank){.pid = s->pid, .pidfd = s->pidfd, .status = RANK_STARTING, .last_seen_ns = now_ns()};
            *s = (struct rank){.pidfd = -1, .status = RANK_DOWN};
            return 0;
        }
        reap(p, SPARE);
    }
    return spawn(p, i, e);
}

// Starts every rank that is down (the ready spare takes the first place).
static int start_down(struct st_pool *p, struct st_error *e)
{
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++)
        if (p->r[i].status == RANK_DOWN && replace(p, i, e)) return -1;
    p->start_deadline_ns = now_ns() + (uint64_t)p->cfg.start_timeout_ms * 1000000u;
    p->start_retries = 0;
    return 0;
}

// One poll round of a starting set: 1 once the whole set said hello (then a
// new spare starts if the set has none, not waited for), 0 while not yet,
// -1 on failure.
static int poll_start(struct st_pool *p, int timeout_ms, struct st_error *e)
{
    if (!all_ready(p)) {
        char err[512] = "";
        poll_once(p, timeout_ms, 0, NULL, err, sizeof err);
        if (err[0]) return st_error_set(e, "%s", err);
        // A worker that dies while starting (killed from outside) is started
        // again; one that says its region is unusable is not.
        for (uint32_t i = 0; i < p->cfg.n_ranks; i++)
            if (p->r[i].dead) {
                p->r[i].dead = false;
                if (p->r[i].exit_code == ST_WORKER_EXIT_NO_RESPAWN || p->r[i].exit_code == ST_WORKER_EXIT_USAGE ||
                    ++p->start_retries > 8)
                    return st_error_set(e, "worker %u exited during start (exit code %d)", i, p->r[i].exit_code);
                p->restarts++;
                if (spawn(p, i, e)) return -1;
            }
        if (!all_ready(p)) {
            if (now_ns() > p->start_deadline_ns)
                return st_error_set(e, "worker set %u: not ready within %u ms", p->cfg.node, p->cfg.start_timeout_ms);
            return 0;
        }
    }
    if (!p->cfg.no_spare && p->r[SPARE].status == RANK_DOWN) {
        if (p->r[SPARE].pid > 0 || p->r[SPARE].pidfd >= 0) reap(p, SPARE);
        p->r[SPARE].dead = false;
        if (spawn(p, SPARE, e)) return -1;
    }
    return 1;
}

// Starts every rank that is down and waits until the whole set said hello.
static int bring_up(struct st_pool *p, struct st_error *e)
{
    if (start_down(p, e)) return -1;
    int rc;
    while ((rc = poll_start(p, 20, e)) == 0) {}
    return rc < 0 ? -1 : 0;
}

int st_pool_start(const struct st_pool_config *cfg, void *zctx, struct st_pool **out, struct st_error *e)
{
    *out = NULL;
    if (cfg->n_ranks < 1 || cfg->n_ranks > ST_SET_MAX_RANKS)
        return st_error_set(e, "worker set %u: %u ranks (1..%d)", cfg->node, cfg->n_ranks, ST_SET_MAX_RANKS);
    struct st_pool *p = calloc(1, sizeof *p);
    if (!p) return st_error_set(e, "out of memory");
    p->cfg = *cfg;
    if (!p->cfg.hang_ms) p->cfg.hang_ms = 5000;
    if (!p->cfg.start_timeout_ms) p->cfg.start_timeout_ms = 60000;
    for (uint32_t i = 0; i <= SPARE; i++) p->r[i].pidfd = -1;
    p->router = zmq_socket(zctx, ZMQ_ROUTER);
    int one = 1, zero = 0;
    zmq_setsockopt(p->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(p->router, cfg->endpoint)) {
        st_error_set(e, "zmq_bind(%s): %s", cfg->endpoint, zmq_strerror(errno));
        zmq_close(p->router);
        free(p);
        return -1;
    }
    if (bring_up(p, e)) {
        st_pool_stop(&p);
        return -1;
    }
    *out = p;
    return 0;
}

static int send_step(struct st_pool *p, uint32_t i, Subternary__StepCommand *cmd)
{
    Subternary__WorkerMsg msg = SUBTERNARY__WORKER_MSG__INIT;
    msg.msg_case = SUBTERNARY__WORKER_MSG__MSG_STEP;
    msg.step = cmd;
    char id[16];
    int n = snprintf(id, sizeof id, "w%u", i);
    return st_wire_send(p->router, id, (size_t)n, &msg.base, ZMQ_DONTWAIT);
}

void st_pool_stop(struct st_pool **pp)
{
    struct st_pool *p = *pp;
    if (!p) return;
    Subternary__StepCommand cmd = SUBTERNARY__STEP_COMMAND__INIT;
    cmd.kind = SUBTERNARY__STEP_KIND__STEP_SHUTDOWN;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++)
        if (p->r[i].status == RANK_READY) send_step(p, i, &cmd);
    uint64_t deadline = now_ns() + 500000000u;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++) {
        struct rank *r = &p->r[i];
        while (r->pid > 0 && now_ns() < deadline) {
            if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
                r->pid = 0;
                break;
            }
            usleep(2000);
        }
        reap(p, i);
    }
    reap(p, SPARE);
    zmq_close(p->router);
    free(p);
    *pp = NULL;
}

// Ranks whose liveness pair (step, barriers) is the smallest while nothing
// moved for hang_ms are hung (SIGSTOP, an infinite loop): kill them, so the
// death path replaces them.
static void check_hang(struct st_pool *p, uint64_t step_id)
{
    uint64_t sum = 0, mn = UINT64_MAX;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++) {
        const struct st_rank_slot *s = &p->cfg.ctl->ranks[i];
        uint64_t v = (atomic_load(&s->step_id) == step_id ? (1ull << 32) : 0) + atomic_load(&s->step_barriers);
        if (p->r[i].done) v = UINT64_MAX - 1;
        sum = sum * 31 + v + (p->r[i].done ? 7 : 0);
        if (v < mn) mn = v;
    }
    uint64_t t = now_ns();
    if (sum != p->watch_sum) {
        p->watch_sum = sum;
        p->watch_ns = t;
        return;
    }
    if (t - p->watch_ns < (uint64_t)p->cfg.hang_ms * 1000000u) return;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++) {
        const struct st_rank_slot *s = &p->cfg.ctl->ranks[i];
        uint64_t v = (atomic_load(&s->step_id) == step_id ? (1ull << 32) : 0) + atomic_load(&s->step_barriers);
        if (!p->r[i].done && v == mn && p->r[i].pid > 0) {
            fprintf(stderr, "coordinator: worker %u (pid %d) made no progress for %u ms: replacing it\n", i,
                    (int)p->r[i].pid, p->cfg.hang_ms);
            p->r[i].hung = true; // a hang is its own fault, although ended by our SIGKILL
            kill(p->r[i].pid, SIGKILL);
        }
    }
    p->watch_ns = t;
}

// Whether the step carries a round of KV slot `slot`.
static bool has_round_of(const Subternary__StepCommand *cmd, uint32_t slot)
{
    if (cmd->kind == SUBTERNARY__STEP_KIND__STEP_BATCH) {
        for (size_t i = 0; i < cmd->n_lanes; i++)
            if (has_round_of(cmd->lanes[i], slot)) return true;
        return false;
    }
    return cmd->slot == slot &&
           (cmd->kind == SUBTERNARY__STEP_KIND__STEP_ROUND || cmd->kind == SUBTERNARY__STEP_KIND__STEP_VERIFY);
}

// The test hooks' crash for this attempt, if any: the first attempt of step
// crash_step, or every attempt of a step with a poisoned slot's round.
static void crash_now(struct st_pool *p, Subternary__StepCommand *cmd)
{
    cmd->crash_at_barrier = cmd->crash_rank = 0;
    cmd->crash_killed = false;
    if (p->poison && has_round_of(cmd, p->poison_slot)) {
        cmd->crash_at_barrier = p->poison_barrier;
        cmd->crash_rank = p->poison_rank;
        cmd->crash_killed = p->poison_killed;
    } else if (p->attempt == 1 && p->crash_step == p->steps) {
        cmd->crash_at_barrier = p->crash_barrier;
        cmd->crash_rank = p->crash_rank;
    }
}

// Sends the step in flight to every rank (a new attempt, a new step id).
static void launch(struct st_pool *p)
{
    Subternary__StepCommand *cmd = p->cmd;
    p->res->attempts = p->attempt;
    cmd->step_id = ++p->step_seq;
    crash_now(p, cmd);
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++) {
        p->r[i].done = p->r[i].aborted = p->r[i].dead = false;
        if (p->r[i].status == RANK_READY && send_step(p, i, cmd)) p->r[i].dead = true;
        if (p->r[i].status != RANK_READY) p->r[i].dead = true;
        if (p->r[i].dead) p->r[i].crashed = false; // lost before it ran the step
    }
    p->err[0] = 0;
    p->any_dead = false;
    p->watch_sum = 0;
    p->watch_ns = now_ns();
}

int st_pool_submit(struct st_pool *p, Subternary__StepCommand *cmd, struct st_step_result *res, struct st_error *e)
{
    if (p->cmd) return st_error_set(e, "worker set %u already runs a step", p->cfg.node);
    memset(res, 0, sizeof *res);
    p->steps++;
    // Deaths since the last look were before this step: they do not count
    // among its attempts (crashes or attempts in a row fail a step).  The
    // idle hook stays out: the caller is in the middle of its own loop.
    if (!p->starting) {
        st_pool_idle_fn idle = p->idle;
        p->idle = NULL;
        st_pool_service(p, 0);
        p->idle = idle;
    }
    p->cmd = cmd;
    p->res = res;
    p->crashes = 0;
    if (p->starting) { // replaced between steps: st_pool_progress launches once the set is whole
        p->attempt = 0;
        return 0;
    }
    p->attempt = 1;
    launch(p);
    return 0;
}

// Whether a rank still owes the step in flight its reply.
static bool waiting(struct st_pool *p)
{
    bool w = false;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++) {
        p->any_dead |= p->r[i].dead;
        w |= !p->r[i].done && !p->r[i].dead;
    }
    return w;
}

// Every rank replied or died: the step is done, failed, or replayed.
static int settle(struct st_pool *p, struct st_error *e)
{
    struct st_step_result *res = p->res;
    bool aborted = false;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++) aborted |= p->r[i].aborted;
    if (!p->any_dead && !aborted) {
        p->cmd = NULL;
        if (p->err[0]) return st_error_set(e, "%s", p->err);
        return 1;
    }
    // Replace the dead on their CPUs, make the barrier usable, replay.
    uint64_t died = UINT64_MAX;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++)
        if (p->r[i].dead || p->r[i].aborted)
            fprintf(stderr, "coordinator: set %u step %llu attempt %u: worker %u %s%s%s\n", p->cfg.node,
                    (unsigned long long)p->cmd->step_id, p->attempt, i, p->r[i].dead ? "died" : "aborted",
                    p->err[0] ? ": " : "", p->err);
    // Survivors abort after any death; an abort alone counts as a crash.
    bool crashed = !p->any_dead && aborted;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++)
        if (p->r[i].dead) {
            if (p->r[i].died_ns && p->r[i].died_ns < died) died = p->r[i].died_ns;
            reap(p, i); // its wait status says whether it crashed
            crashed |= p->r[i].crashed;
            p->r[i].dead = false;
            p->restarts++;
            res->restarts++;
        }
    p->crashes += crashed;
    // The replacements start while the caller's loop goes on (other sets'
    // steps, clients); st_pool_progress relaunches once they said hello.
    if (start_down(p, e)) {
        p->cmd = NULL;
        return -1;
    }
    p->died_ns = died;
    p->starting = true;
    return st_pool_progress(p, 0, e);
}

// Replacements are through (or given up on): a usable barrier, and the time
// since the first death that needed them.
static void replaced(struct st_pool *p)
{
    st_barrier_reset(&p->cfg.ctl->barrier, p->cfg.n_ranks);
    if (p->died_ns != UINT64_MAX) p->last_replace_s = (now_ns() - p->died_ns) * 1e-9;
}

// The step's set is whole again: replay the step, or fail it after its
// last attempt.
static int relaunch(struct st_pool *p, struct st_error *e)
{
    replaced(p);
    if (p->crashes >= ST_POOL_MAX_CRASHES || p->attempt >= ST_POOL_MAX_ATTEMPTS) {
        // A poisoned request fails once a step of it alone has: the hook is spent.
        if (p->poison && p->cmd->kind != SUBTERNARY__STEP_KIND__STEP_BATCH && has_round_of(p->cmd, p->poison_slot))
            p->poison = false;
        p->cmd = NULL;
        if (p->crashes >= ST_POOL_MAX_CRASHES)
            return st_error_set(e, "step failed: workers crashed %u times in a row (poison request?)", p->crashes);
        return st_error_set(e, "step failed: workers were killed from outside %u times in a row (%u crashes)",
                            p->attempt, p->crashes);
    }
    p->attempt++;
    launch(p);
    return 0;
}

int st_pool_progress(struct st_pool *p, int timeout_ms, struct st_error *e)
{
    if (!p->cmd) return st_error_set(e, "worker set %u runs no step", p->cfg.node);
    if (p->starting) {
        int rc = poll_start(p, timeout_ms, e);
        if (rc == 0) return 0;
        p->starting = false;
        if (rc > 0) return relaunch(p, e);
        p->cmd = NULL;
        return -1;
    }
    if (waiting(p)) {
        // A death: abort the barrier so the survivors leave the step.
        if (p->any_dead && !st_barrier_aborted(&p->cfg.ctl->barrier)) st_barrier_abort(&p->cfg.ctl->barrier);
        poll_once(p, timeout_ms, p->cmd->step_id, p->res, p->err, sizeof p->err);
        check_hang(p, p->cmd->step_id);
        if (waiting(p)) return 0;
    }
    return settle(p, e);
}

int st_pool_step(struct st_pool *p, Subternary__StepCommand *cmd, struct st_step_result *res, struct st_error *e)
{
    if (st_pool_submit(p, cmd, res, e)) return -1;
    int rc;
    while ((rc = st_pool_progress(p, 20, e)) == 0) {}
    return rc < 0 ? -1 : 0;
}

int st_pool_pollitems(const struct st_pool *p, zmq_pollitem_t *items)
{
    int map[ST_POOL_POLLITEMS];
    return watch_items(p, items, map);
}

// A set replaced between steps, one poll round of its start.
static void service_start(struct st_pool *p, int timeout_ms)
{
    struct st_error e;
    int rc = poll_start(p, timeout_ms, &e);
    if (rc == 0) return;
    p->starting = false;
    if (rc < 0) fprintf(stderr, "coordinator: %s\n", e.msg);
    replaced(p);
}

void st_pool_service(struct st_pool *p, int timeout_ms)
{
    if (p->cmd) return; // its events belong to the step's progress
    if (p->starting) {
        service_start(p, timeout_ms);
        return;
    }
    poll_once(p, timeout_ms, 0, NULL, NULL, 0);
    bool any = false;
    uint64_t hb_limit = (uint64_t)p->cfg.hang_ms * 1000000u, t = now_ns(), died = t;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++) {
        struct rank *r = &p->r[i];
        if (r->status == RANK_READY && t - r->last_seen_ns > hb_limit && r->pid > 0) {
            fprintf(stderr, "coordinator: worker %u (pid %d) missed its heartbeats: replacing it\n", i, (int)r->pid);
            kill(r->pid, SIGKILL);
            r->dead = true;
            r->died_ns = t;
            reap(p, i);
        }
        if (r->dead || r->status == RANK_DOWN) {
            if (r->dead && r->died_ns && r->died_ns < died) died = r->died_ns;
            r->dead = false;
            if (r->status != RANK_DOWN) reap(p, i);
            p->restarts++;
            any = true;
        }
    }
    if (!any && !p->cfg.no_spare && p->r[SPARE].status == RANK_DOWN) { // the spare died: start another
        struct st_error e;
        if (p->r[SPARE].pid > 0 || p->r[SPARE].pidfd >= 0) reap(p, SPARE);
        p->r[SPARE].dead = false;
        if (spawn(p, SPARE, &e)) fprintf(stderr, "coordinator: %s\n", e.msg);
    }
    if (any) {
        // The replacements start while the caller's loop goes on (other
        // sets' steps, clients); later calls, or a step submitted meanwhile,
        // see them through.
        struct st_error e;
        if (start_down(p, &e)) {
            fprintf(stderr, "coordinator: %s\n", e.msg);
            return;
        }
        p->died_ns = died;
        p->starting = true;
        service_start(p, 0);
    }
}

void st_pool_set_idle(struct st_pool *p, st_pool_idle_fn fn, void *ctx, void *extra_socket)
{
    p->idle = fn;
    p->idle_ctx = ctx;
    p->extra = extra_socket;
}

uint32_t st_pool_ranks(const struct st_pool *p) { return p->cfg.n_ranks; }
uint64_t st_pool_steps(const struct st_pool *p) { return p->steps; }

void st_pool_test_crash(struct st_pool *p, uint64_t step, uint32_t rank, uint32_t barrier)
{
    p->crash_step = step;
    p->crash_rank = rank;
    p->crash_barrier = barrier;
}
void st_pool_test_poison(struct st_pool *p, bool on, uint32_t slot, uint32_t rank, uint32_t barrier, bool killed)
{
    p->poison = on;
    p->poison_killed = killed;
    p->poison_slot = slot;
    p->poison_rank = rank;
    p->poison_barrier = barrier;
}

uint64_t st_pool_restarts(const struct st_pool *p) { return p->restarts; }
pid_t st_pool_pid(const struct st_pool *p, uint32_t rank) { return p->r[rank].pid; }
double st_pool_last_replace_seconds(const struct st_pool *p) { return p->last_replace_s; }

uint32_t st_pool_ready(const struct st_pool *p)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->cfg.n_ranks; i++) n += p->r[i].status == RANK_READY;
    return n;
}
