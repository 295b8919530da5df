#include "tests/support/engine_support.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "coordinator/rundir.h"
#include "tests/support/test_support.h"

const char *st_test_exe(char *buf, size_t cap)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) return NULL;
    self[n] = 0;
    // build/tests/test_x -> build/subternary
    snprintf(buf, cap, "%s/../subternary", dirname(self));
    return buf;
}

int st_test_engine_open(struct st_test_engine *t, const char *target, const char *draft, uint32_t workers,
                        uint32_t nodes, uint32_t slots)
{
    return st_test_engine_open_ctx(t, target, draft, workers, nodes, slots, 1100);
}

int st_test_engine_open_ctx(struct st_test_engine *t, const char *target, const char *draft, uint32_t workers,
                            uint32_t nodes, uint32_t slots, uint32_t n_ctx)
{
    memset(t, 0, sizeof *t);
    struct st_error e;
    if (!st_test_exe(t->exe, sizeof t->exe) || st_rundir_new(t->dir, sizeof t->dir, &e)) return -1;
    struct st_engine_config ec = {
        .target_path = target[0] == '/' || target[0] == '.' ? target : st_test_shared(target, t->target, sizeof t->target),
        .draft_path = draft ? (draft[0] == '/' || draft[0] == '.' ? draft : st_test_shared(draft, t->draft, sizeof t->draft))
                            : NULL,
        .n_slots = slots ? slots : 2, .n_ctx = n_ctx, .k_max = 8, .n_nodes = nodes, .workers_per_node = workers,
        .exe = t->exe, .run_dir = t->dir, .quiet = true, .hang_ms = 2000};
    t->zctx = zmq_ctx_new();
    if (st_engine_open(&ec, t->zctx, &t->eng, &e)) {
        fprintf(stderr, "engine open: %s\n", e.msg);
        st_test_engine_close(t);
        return -1;
    }
    return 0;
}

void st_test_engine_close(struct st_test_engine *t)
{
    st_engine_close(&t->eng);
    if (t->zctx) zmq_ctx_term(t->zctx);
    t->zctx = NULL;
    if (t->dir[0]) st_rundir_remove(t->dir);
    t->dir[0] = 0;
}

int st_test_generate(struct st_engine *eng, const struct st_gen_params *gp, const int32_t *prompt, uint32_t n_prompt,
                     int32_t **ids, uint32_t *n, struct st_session_stats *stats)
{
    struct st_session *s;
    struct st_error e;
    if (st_session_start(eng, gp, prompt, n_prompt, ++eng->next_session, &s, &e)) {
        fprintf(stderr, "session: %s\n", e.msg);
        return -1;
    }
    int32_t buf[64];
    enum st_finish fin = ST_FINISH_NONE;
    while (fin == ST_FINISH_NONE)
        if (st_session_round(s, buf, 64, &fin, &e) < 0) {
            fprintf(stderr, "round: %s\n", e.msg);
            st_session_end(&s);
            return -1;
        }
    const int32_t *o = st_session_output(s, n);
    *ids = malloc(*n * sizeof **ids + 1);
    memcpy(*ids, o, *n * sizeof **ids);
    if (stats) *stats = *st_session_stats(s);
    st_session_end(&s);
    return 0;
}
