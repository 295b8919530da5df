#include "coordinator/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int st_rundir_new(char *path, size_t cap, struct st_error *e)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, cap, "%s/subternary-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(path)) return st_error_set(e, "mkdtemp(%s): %s", path, strerror(errno));
    return 0;
}

void st_rundir_remove(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            char f[1024];
            snprintf(f, sizeof f, "%s/%s", path, de->d_name);
            unlink(f);
        }
        closedir(d);
    }
    rmdir(path);
}

int st_self_exe(char *path, size_t cap, struct st_error *e)
{
    ssize_t n = readlink("/proc/self/exe", path, cap - 1);
    if (n < 0) return st_error_set(e, "readlink(/proc/self/exe): %s", strerror(errno));
    path[n] = 0;
    return 0;
}
