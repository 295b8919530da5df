// Runs an outside program as a child process (posix_spawn, no shell) and
// captures what it prints, for benchmarks that compare with other programs.
#ifndef ST_CLI_CHILD_H
#define ST_CLI_CHILD_H

#include <stddef.h>
#include <stdio.h>

#include "common/error.h"

struct st_child_out {
    char *out, *err;        // captured stdout and stderr, NUL-terminated (malloc'd)
    size_t out_len, err_len;
    int code;               // exit code, or 128 + signal number
};

// Runs argv[0] (a path) with argv, stdin from /dev/null, stdout and stderr
// captured; kills it after timeout_s.  When log is not NULL, the command line
// and both streams are appended to it.  Returns 0 if it ran and exited with
// 0; otherwise -1 and e says why (out keeps whatever was captured).
int st_child_run(char *const argv[], double timeout_s, FILE *log, struct st_child_out *out, struct st_error *e);
void st_child_out_free(struct st_child_out *o);

#endif
