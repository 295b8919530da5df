// Small argument helpers shared by the subcommands.
#ifndef ST_CLI_ARGS_H
#define ST_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

// Parses "1,2,3" into a malloc'd array of non-negative ids.
int st_args_parse_ids(const char *s, int32_t **ids, size_t *n, struct st_error *e);

// Option values.  Each returns 0, or -1 after printing "subternary CMD:
// OPT: 'V' is not ..." on stderr (cmd NULL: options several commands
// share).  Integers are read exactly, in decimal (a 64-bit seed keeps every
// bit; "2.5", "1e3", "-1", "3x" are refused), reals as strtod reads them but
// finite.
int st_args_uint(const char *cmd, const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out);
int st_args_u32(const char *cmd, const char *opt, const char *v, uint32_t lo, uint32_t hi, uint32_t *out);
int st_args_int(const char *cmd, const char *opt, const char *v, int lo, int hi, int *out); // lo >= 0
int st_args_real(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out);
int st_args_f32(const char *cmd, const char *opt, const char *v, double lo, double hi, float *out);

#endif
