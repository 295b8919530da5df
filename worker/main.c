// Worker process: attach the node's region, pin to a CPU, build the plans of
// both models once, then serve step commands until told to stop or until the
// coordinator dies.
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <numa.h>
#include <zmq.h>

#include "proto/wire.h"
#include "shm/region.h"
#include "shm/workset.h"
#include "worker/step.h"
#include "worker/worker.h"

struct args {
    int fd;
    uint32_t rank, node;
    bool spare;        // a hot spare: attach and wait for an Assign
    uint32_t spare_id;
    int cpu;
    pid_t parent;
    const char *endpoint;
};

static int parse(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof *a);
    a->fd = -1;
    a->cpu = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--region-fd")) a->fd = atoi(v);
        else if (!strcmp(k, "--rank")) a->rank = (uint32_t)atoi(v);
        else if (!strcmp(k, "--node")) a->node = (uint32_t)atoi(v);
        else if (!strcmp(k, "--cpu")) a->cpu = atoi(v);
        else if (!strcmp(k, "--parent")) a->parent = (pid_t)atoi(v);
        else if (!strcmp(k, "--endpoint")) a->endpoint = v;
        else if (!strcmp(k, "--spare")) a->spare = true, a->spare_id = (uint32_t)atoi(v);
        else return -1;
    }
    return a->fd >= 0 && a->endpoint && a->rank < ST_SET_MAX_RANKS ? 0 : -1;
}

static void send_done(void *sock, uint64_t step_id, uint32_t rank, bool aborted, double secs, const struct st_plan *p,
                      const char *err)
{
    Subternary__WorkerMsg msg = SUBTERNARY__WORKER_MSG__INIT;
    Subternary__StepDone done = SUBTERNARY__STEP_DONE__INIT;
    Subternary__OpTiming tim[ST_LAYOUT_MAX_MODELS * ST_OP_COUNT], *timp[ST_LAYOUT_MAX_MODELS * ST_OP_COUNT];
    done.step_id = step_id;
    done.rank = rank;
    done.aborted = aborted;
    done.seconds = secs;
    done.barriers = p->barriers;
    done.error = (char *)(err ? err : "");
    if (p->timing) {
        size_t n = 0;
        for (uint32_t m = 0; m < p->n_models; m++)
            for (int i = 0; i < ST_OP_COUNT; i++) {
                if (p->op_seconds[m][i] <= 0) continue;
                subternary__op_timing__init(&tim[n]);
                tim[n].op = (char *)st_op_name(i);
                tim[n].model = m;
                tim[n].seconds = p->op_seconds[m][i];
                tim[n].bytes = p->op_bytes[m][i];
                timp[n] = &tim[n];
                n++;
            }
        done.n_timings = n;
        done.timings = timp;
    }
    msg.msg_case = SUBTERNARY__WORKER_MSG__MSG_DONE;
    msg.done = &done;
    st_wire_send(sock, NULL, 0, &msg.base, 0);
}

static void send_hello(void *sock, const struct args *a, uint64_t check, const char *err)
{
    Subternary__WorkerMsg msg = SUBTERNARY__WORKER_MSG__INIT;
    Subternary__Hello h = SUBTERNARY__HELLO__INIT;
    h.node = a->node;
    h.rank = a->spare ? a->spare_id : a->rank;
    h.spare = a->spare;
    h.pid = getpid();
    h.region_check = check;
    h.error = (char *)(err ? err : "");
    msg.msg_case = SUBTERNARY__WORKER_MSG__MSG_HELLO;
    msg.hello = &h;
    st_wire_send(sock, NULL, 0, &msg.base, 0);
}

static void send_heartbeat(void *sock, uint32_t rank)
{
    Subternary__WorkerMsg msg = SUBTERNARY__WORKER_MSG__INIT;
    Subternary__Heartbeat hb = SUBTERNARY__HEARTBEAT__INIT;
    hb.rank = rank;
    hb.at_ns = st_shm_now_ns();
    msg.msg_case = SUBTERNARY__WORKER_MSG__MSG_HEARTBEAT;
    msg.heartbeat = &hb;
    st_wire_send(sock, NULL, 0, &msg.base, ZMQ_DONTWAIT);
}

// Attaches the region and builds the plan; on failure e says why.
static int build_plan(const struct args *a, struct st_region *r, struct st_set_control *ctl, struct st_kv *kv,
                      struct st_plan *p, struct st_error *e)
{
    uint64_t cbytes, sbytes, wbytes;
    uint8_t *c = st_region_section(r, ST_REGION_CONTROL, &cbytes);
    void *s = st_region_section(r, ST_REGION_SCRATCH, &sbytes);
    const void *w = st_region_section(r, ST_REGION_WEIGHTS, &wbytes);
    const struct st_scratch_layout *sl = (const void *)(c + sizeof *ctl);
    if (a->rank >= ctl->n_ranks) return st_error_set(e, "rank %u: the set has %u ranks", a->rank, ctl->n_ranks);
    st_plan_free(p);
    if (st_plan_build(p, w, wbytes, s, sbytes, sl, kv, &ctl->barrier, a->rank, e)) return -1;
    p->slot = &ctl->ranks[a->rank];
    return 0;
}

static void pin(int cpu)
{
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set); // best effort: cgroups may forbid it
}

static void *open_socket(void *zctx, const struct args *a)
{
    void *sock = zmq_socket(zctx, ZMQ_DEALER);
    char id[32];
    int n = a->spare ? snprintf(id, sizeof id, "s%u", a->spare_id) : snprintf(id, sizeof id, "w%u", a->rank), zero = 0;
    zmq_setsockopt(sock, ZMQ_ROUTING_ID, id, (size_t)n);
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(sock, a->endpoint)) {
        fprintf(stderr, "worker %s: zmq_connect(%s): %s\n", id, a->endpoint, zmq_strerror(errno));
        zmq_close(sock);
        return NULL;
    }
    return sock;
}

static int setup(const struct args *a, struct st_region **r, struct st_set_control **ctl, struct st_kv *kv,
                 struct st_plan *p, struct st_error *e)
{
    if (st_region_attach(a->fd, NULL, r, e)) return -1;
    uint64_t cbytes, kbytes;
    uint8_t *c = st_region_section(*r, ST_REGION_CONTROL, &cbytes);
    void *k = st_region_section(*r, ST_REGION_KV, &kbytes);
    *ctl = (struct st_set_control *)c;
    if (cbytes < sizeof **ctl + sizeof(struct st_scratch_layout) || (*ctl)->magic != ST_SET_MAGIC)
        return st_error_set(e, "region control section has no worker set for rank %u", a->rank);
    if (st_kv_open(kv, k, kbytes, e)) return -1;
    return build_plan(a, *r, *ctl, kv, p, e);
}

int st_worker_main(int argc, char **argv)
{
    struct args a;
    if (parse(argc, argv, &a)) {
        fprintf(stderr, "usage: subternary worker --region-fd FD (--rank R --cpu C | --spare ID) --node N --parent PID "
                        "--endpoint ENDPOINT (started by the coordinator)\n");
        return ST_WORKER_EXIT_USAGE;
    }
    // Die with the coordinator; if it is already gone, leave now.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (a.parent && getppid() != a.parent) return ST_WORKER_EXIT_OK;
    if (!a.spare) pin(a.cpu);
    if (numa_available() >= 0) numa_set_localalloc();
    st_kern_init();

    struct st_error e = {{0}};
    struct st_region *r = NULL;
    struct st_set_control *ctl = NULL;
    struct st_kv kv;
    struct st_plan plan;
    memset(&plan, 0, sizeof plan);
    int setup_rc = setup(&a, &r, &ctl, &kv, &plan, &e);

    void *zctx = zmq_ctx_new();
    void *sock = open_socket(zctx, &a);
    if (!sock) return ST_WORKER_EXIT_NO_RESPAWN;
    if (setup_rc) {
        send_hello(sock, &a, 0, e.msg);
        fprintf(stderr, "worker %u: %s\n", a.rank, e.msg);
        zmq_close(sock);
        zmq_ctx_term(zctx);
        return ST_WORKER_EXIT_NO_RESPAWN;
    }
    struct st_rank_slot *slot = NULL;
    if (!a.spare) {
        slot = plan.slot;
        atomic_store(&slot->pid, (int32_t)getpid());
        atomic_store(&slot->state, ST_RANK_ACTIVE);
    }
    send_hello(sock, &a, st_region_header(r)->checksum, NULL);

    int rc = ST_WORKER_EXIT_OK;
    uint64_t last_sent = st_shm_now_ns();
    for (;;) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        int pr = zmq_poll(&it, 1, ST_WORKER_HEARTBEAT_MS);
        if (pr < 0 && errno != EINTR) break;
        if (a.parent && getppid() != a.parent) break; // coordinator gone
        if (pr > 0) {
            struct st_wire_msg m;
            if (st_wire_recv(sock, false, &m, ZMQ_DONTWAIT)) continue;
            Subternary__WorkerMsg *wm = m.shape_ok && m.version_ok
                                            ? subternary__worker_msg__unpack(NULL, m.payload_len, m.payload)
                                            : NULL;
            st_wire_msg_clear(&m);
            if (!wm) continue;
            if (wm->msg_case == SUBTERNARY__WORKER_MSG__MSG_ASSIGN && a.spare) {
                // Become a rank: pin, re-point the plan, reconnect under the
                // rank's identity and say hello as it.
                a.spare = false;
                a.rank = wm->assign->rank;
                a.cpu = wm->assign->cpu;
                subternary__worker_msg__free_unpacked(wm, NULL);
                pin(a.cpu);
                zmq_close(sock);
                if (build_plan(&a, r, ctl, &kv, &plan, &e) || !(sock = open_socket(zctx, &a))) {
                    fprintf(stderr, "worker %u: %s\n", a.rank, e.msg);
                    rc = ST_WORKER_EXIT_NO_RESPAWN;
                    break;
                }
                slot = plan.slot;
                atomic_store(&slot->pid, (int32_t)getpid());
                atomic_store(&slot->state, ST_RANK_ACTIVE);
                send_hello(sock, &a, st_region_header(r)->checksum, NULL);
                last_sent = st_shm_now_ns();
                continue;
            }
            if (wm->msg_case == SUBTERNARY__WORKER_MSG__MSG_STEP && !a.spare) {
                const Subternary__StepCommand *c = wm->step;
                if (c->kind == SUBTERNARY__STEP_KIND__STEP_SHUTDOWN) {
                    subternary__worker_msg__free_unpacked(wm, NULL);
                    break;
                }
                uint64_t t0 = st_shm_now_ns();
                plan.deadline_ns = t0 + UINT64_C(600) * 1000000000u;
                plan.crash_at_barrier = c->crash_rank == a.rank ? c->crash_at_barrier : 0;
                plan.crash_killed = c->crash_killed;
                atomic_store(&slot->step_barriers, 0);
                atomic_store(&slot->step_id, c->step_id);
                bool aborted;
                int src = st_step_run(&plan, c, &aborted);
                atomic_fetch_add(&slot->steps_done, 1);
                send_done(sock, c->step_id, a.rank, aborted, (st_shm_now_ns() - t0) * 1e-9, &plan,
                          src ? plan.err.msg : NULL);
                last_sent = st_shm_now_ns();
            }
            subternary__worker_msg__free_unpacked(wm, NULL);
        }
        if (st_shm_now_ns() - last_sent >= ST_WORKER_HEARTBEAT_MS * 1000000ull) {
            send_heartbeat(sock, a.spare ? a.spare_id : a.rank);
            last_sent = st_shm_now_ns();
        }
    }
    if (slot) atomic_store(&slot->state, ST_RANK_EXITED);
    st_plan_free(&plan);
    zmq_close(sock);
    zmq_ctx_term(zctx);
    st_region_close(&r);
    return rc;
}
