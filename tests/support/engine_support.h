// Starting a real engine (coordinator side in the test process, real worker
// processes exec'd from the subternary binary of the same build tree).
#ifndef ST_TESTS_ENGINE_SUPPORT_H
#define ST_TESTS_ENGINE_SUPPORT_H

#include "coordinator/engine.h"
#include "coordinator/session.h"

struct st_test_engine {
    struct st_engine *eng;
    void *zctx;
    char dir[512];
    char exe[1024];
    char target[1024], draft[1024]; // the engine keeps pointers to these
};

// Opens target (+ draft, may be NULL) with `workers` workers on one node
// (nodes > 1 splits them into virtual nodes).  Paths relative to shared/.
int st_test_engine_open(struct st_test_engine *t, const char *target, const char *draft, uint32_t workers,
                        uint32_t nodes, uint32_t slots);
// The same with a context of n_ctx positions (st_test_engine_open: 1100).
int st_test_engine_open_ctx(struct st_test_engine *t, const char *target, const char *draft, uint32_t workers,
                            uint32_t nodes, uint32_t slots, uint32_t n_ctx);
void st_test_engine_close(struct st_test_engine *t);

// Path of the subternary binary next to this test binary's tree.
const char *st_test_exe(char *buf, size_t cap);

// Generates greedily (or with gp) and returns the ids (malloc'd), -1 on error.
int st_test_generate(struct st_engine *eng, const struct st_gen_params *gp, const int32_t *prompt, uint32_t n_prompt,
                     int32_t **ids, uint32_t *n, struct st_session_stats *stats);

#endif
