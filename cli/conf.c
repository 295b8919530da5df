#include "cli/conf.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) *--end = 0;
    return s;
}

static int push(char ***argv, int *argc, int *cap, const char *s)
{
    if (*argc + 1 >= *cap) {
        int nc = *cap ? *cap * 2 : 32;
        char **n = realloc(*argv, (size_t)nc * sizeof *n);
        if (!n) return -1;
        *argv = n;
        *cap = nc;
    }
    if (!((*argv)[*argc] = strdup(s))) return -1;
    (*argc)++;
    (*argv)[*argc] = NULL;
    return 0;
}

int st_conf_read(const char *path, const char *const *flags, char ***argv, int *argc, struct st_error *e)
{
    *argv = NULL;
    *argc = 0;
    int cap = 0, line = 0;
    FILE *f = fopen(path, "r");
    if (!f) return st_error_set(e, "open(%s): %s", path, strerror(errno));
    // argv[0] stands for the command name, as the parsers expect.
    if (push(argv, argc, &cap, "config")) goto oom;
    char buf[4096];
    while (fgets(buf, sizeof buf, f)) {
        line++;
        // '#' starts a comment at the start of a line or after a blank.
        for (char *h = buf; *h; h++)
            if (*h == '#' && (h == buf || isspace((unsigned char)h[-1]))) {
                *h = 0;
                break;
            }
        char *s = trim(buf);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            st_error_set(e, "%s:%d: expected 'key = value'", path, line);
            goto fail;
        }
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1), opt[256];
        if (!*key || strlen(key) > 200 || key[0] == '-') {
            st_error_set(e, "%s:%d: bad key '%s'", path, line, key);
            goto fail;
        }
        snprintf(opt, sizeof opt, "--%s", key);
        bool is_flag = false;
        for (int i = 0; flags && flags[i]; i++) is_flag |= !strcmp(flags[i], key);
        if (is_flag) {
            bool on = !strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "1");
            if (!on && strcmp(value, "false") && strcmp(value, "no") && strcmp(value, "0")) {
                st_error_set(e, "%s:%d: %s takes true or false", path, line, key);
                goto fail;
            }
            if (on && push(argv, argc, &cap, opt)) goto oom;
            continue;
        }
        if (push(argv, argc, &cap, opt) || push(argv, argc, &cap, value)) goto oom;
    }
    fclose(f);
    return 0;
oom:
    st_error_set(e, "%s: out of memory", path);
fail:
    fclose(f);
    st_conf_free(*argv, *argc);
    *argv = NULL;
    *argc = 0;
    return -1;
}

void st_conf_free(char **argv, int argc)
{
    for (int i = 0; i < argc; i++) free(argv[i]);
    free(argv);
}
