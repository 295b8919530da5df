// Execution of one step command by one rank (all ranks run it together).
#ifndef ST_WORKER_STEP_H
#define ST_WORKER_STEP_H

#include "proto/subternary.pb-c.h"
#include "worker/plan.h"

// Runs the command; returns 0, or -1 with p->err set (aborted, deadline,
// invalid command).  *aborted tells a barrier abort from other errors.
int st_step_run(struct st_plan *p, const Subternary__StepCommand *cmd, bool *aborted);

#endif
