// The private run directory (ipc endpoints, mode 0700) and the path of the
// running binary, from which workers are exec'd.
#ifndef ST_COORDINATOR_RUNDIR_H
#define ST_COORDINATOR_RUNDIR_H

#include <stddef.h>

#include "common/error.h"

// Creates a 0700 directory under $TMPDIR (or /tmp).
int st_rundir_new(char *path, size_t cap, struct st_error *e);
// Removes the directory and the socket files in it.
void st_rundir_remove(const char *path);
// Absolute path of the running binary.
int st_self_exe(char *path, size_t cap, struct st_error *e);

#endif
