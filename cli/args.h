// Small argument helpers shared by the subcommands.
#ifndef ST_CLI_ARGS_H
#define ST_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

// Parses "1,2,3" into a malloc'd array of non-negative ids.
int st_args_parse_ids(const char *s, int32_t **ids, size_t *n, struct st_error *e);

#endif
