// Config files of the subcommands: "key = value" lines whose keys are the
// long command-line options without "--" ('#' at the start of a line or
// after a blank starts a comment).  A flag is
// given as "key = true" (or false).  The file becomes an argument list parsed
// by the command's own option parser, before the command line, which thus
// overrides it.
#ifndef ST_CLI_CONF_H
#define ST_CLI_CONF_H

#include "common/error.h"

// Reads path into a malloc'd argv (*argc entries, strings malloc'd; free with
// st_conf_free).  flags[] (NULL-terminated) names the options that take no value.
int st_conf_read(const char *path, const char *const *flags, char ***argv, int *argc, struct st_error *e);
void st_conf_free(char **argv, int argc);

#endif
