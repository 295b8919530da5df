// What the embedded and server commands share: signal flags and option
// parsing of engine and sampling settings.
#ifndef ST_CLI_RUNTIME_H
#define ST_CLI_RUNTIME_H

#include <signal.h>
#include <stdbool.h>

#include "coordinator/engine.h"
#include "coordinator/rundir.h"
#include "coordinator/session.h"

// Set by SIGINT/SIGTERM handlers (the only process-wide flag besides the CPU table).
extern volatile sig_atomic_t st_stop_requested;
void st_runtime_signals(void);


// Parses one engine or sampling option at argv[*i] (advancing *i past its
// value).  Returns 1 if it was one, 0 if not, -1 on a bad value (message on
// stderr).
int st_runtime_engine_opt(int argc, char **argv, int *i, struct st_engine_config *ec);
int st_runtime_gen_opt(int argc, char **argv, int *i, struct st_gen_params *gp);

// Makes the engine's longest draft hold --k: raised for a private engine with
// no --k-max; an error (printed) when --k is over a given --k-max.
int st_runtime_fit_k_max(struct st_engine_config *ec, const struct st_gen_params *gp);
void st_runtime_gen_defaults(struct st_gen_params *gp);

#endif
