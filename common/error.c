#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int st_error_set(struct st_error *e, const char *fmt, ...)
{
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int st_error_wrap(struct st_error *e, const char *fmt, ...)
{
    if (!e) return -1;
    char prefix[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t n = strnlen(prefix, sizeof prefix - 1);
    memcpy(e->msg, prefix, n);
    if (n + 2 < sizeof e->msg) {
        e->msg[n] = ':';
        e->msg[n + 1] = ' ';
        size_t room = sizeof e->msg - n - 3, m = strnlen(old, room);
        memcpy(e->msg + n + 2, old, m);
        e->msg[n + 2 + m] = 0;
    } else {
        e->msg[sizeof e->msg - 1] = 0;
    }
    return -1;
}

void st_assert_fail(const char *cond, const char *file, int line)
{
    fprintf(stderr, "assertion failed: %s (%s:%d)\n", cond, file, line);
    abort();
}
