// Error reporting: a message buffer passed down by the caller.  Functions
// return 0 on success and -1 on failure after filling the buffer with a
// message that names the call, its arguments and the problem.
#ifndef ST_COMMON_ERROR_H
#define ST_COMMON_ERROR_H

#include <stddef.h>

struct st_error {
    char msg[512];
};

// Formats into e->msg (if e is not NULL); always returns -1 so callers can
// write `return st_error_set(e, ...)`.
int st_error_set(struct st_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Prefixes the existing message with more context ("loading X: <old msg>").
int st_error_wrap(struct st_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Invariant checks that stay on in release builds.  Bad input is never an
// assertion: it is an error reply.
#define ST_ASSERT(cond)                                                     \
    do {                                                                    \
        if (!(cond)) st_assert_fail(#cond, __FILE__, __LINE__);             \
    } while (0)
void st_assert_fail(const char *cond, const char *file, int line)
    __attribute__((noreturn));

#endif
