#include "cli/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

// The whole of a capture file as a NUL-terminated string (the child wrote it
// through its own descriptor, so read by offset, not through the FILE).
static char *slurp(FILE *f, size_t *len)
{
    struct stat st;
    int fd = fileno(f);
    size_t n = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
    char *b = malloc(n + 1);
    if (!b) return NULL;
    ssize_t got = n ? pread(fd, b, n, 0) : 0;
    n = got > 0 ? (size_t)got : 0;
    b[n] = 0;
    *len = n;
    return b;
}

// Waits for pid, killing it at the deadline; a pidfd lets poll() sleep until
// the exit or the deadline, whichever comes first.  Returns the wait status.
static int reap(pid_t pid, double timeout_s, bool *killed)
{
    int status = 0, pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    *killed = false;
    if (pfd >= 0) {
        double end = now_s() + timeout_s;
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        int r;
        do {
            double left = end - now_s();
            r = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
        } while (r < 0 && errno == EINTR);
        if (r == 0) {
            kill(pid, SIGKILL);
            *killed = true;
        }
        close(pfd);
    } // no pidfd (old kernel): wait without a deadline
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    return status;
}

static void log_run(FILE *log, char *const argv[], const struct st_child_out *o, double seconds)
{
    fprintf(log, "==== $");
    for (int i = 0; argv[i]; i++) fprintf(log, strpbrk(argv[i], " \t'\"") ? " '%s'" : " %s", argv[i]);
    fprintf(log, "\n==== exit %d after %.2f s\n---- stdout\n%s\n---- stderr\n%s\n", o->code, seconds,
            o->out ? o->out : "", o->err ? o->err : "");
    fflush(log);
}

int st_child_run(char *const argv[], double timeout_s, FILE *log, struct st_child_out *out, struct st_error *e)
{
    memset(out, 0, sizeof *out);
    out->code = -1;
    if (access(argv[0], X_OK)) return st_error_set(e, "%s: %s", argv[0], strerror(errno));
    FILE *fo = tmpfile(), *fe = tmpfile();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int rc = -1;
    if (!fo || !fe) {
        st_error_set(e, "tmpfile() for the output of %s: %s", argv[0], strerror(errno));
        goto done;
    }
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fileno(fo), 1);
    posix_spawn_file_actions_adddup2(&fa, fileno(fe), 2);
    pid_t pid;
    double t0 = now_s();
    int err = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    if (err) {
        st_error_set(e, "posix_spawn(%s): %s", argv[0], strerror(err));
        goto done;
    }
    bool killed;
    int status = reap(pid, timeout_s, &killed);
    out->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    out->out = slurp(fo, &out->out_len);
    out->err = slurp(fe, &out->err_len);
    if (log) log_run(log, argv, out, now_s() - t0);
    if (killed) st_error_set(e, "%s: killed after %.0f s", argv[0], timeout_s);
    else if (out->code) st_error_set(e, "%s exited with code %d", argv[0], out->code);
    else rc = 0;
done:
    posix_spawn_file_actions_destroy(&fa);
    if (fo) fclose(fo);
    if (fe) fclose(fe);
    return rc;
}

void st_child_out_free(struct st_child_out *o)
{
    free(o->out);
    free(o->err);
    o->out = o->err = NULL;
}
