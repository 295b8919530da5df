#include "tests/support/server_support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/rundir.h"
#include "tests/support/engine_support.h"
#include "tests/support/test_support.h"

#define TARGET "models/pico-target.q8_0.gguf"
#define DRAFT "models/pico-draft.q4_0.gguf"

int64_t st_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void st_test_server_print_log(const struct st_test_server *s)
{
    FILE *f = fopen(s->log, "r");
    if (!f) return;
    char line[1024];
    fprintf(stderr, "---- server log %s\n", s->log);
    while (fgets(line, sizeof line, f)) fputs(line, stderr);
    fprintf(stderr, "----\n");
    fclose(f);
}

// Servers still running: a test that fails between start and stop (cmocka
// leaves the test function) must not leave one behind when the test binary
// exits (and if it dies, the servers get SIGTERM from PR_SET_PDEATHSIG).
#define MAX_SERVERS 16
static struct {
    pid_t pid;
    char tmp[512];
} running[MAX_SERVERS];

static void stop_leftovers(void)
{
    for (int i = 0; i < MAX_SERVERS; i++)
        if (running[i].pid > 0) {
            kill(running[i].pid, SIGTERM);
            int64_t deadline = st_test_now_ms() + 5000;
            while (waitpid(running[i].pid, NULL, WNOHANG) == 0 && st_test_now_ms() < deadline) usleep(5000);
            kill(running[i].pid, SIGKILL);
            waitpid(running[i].pid, NULL, WNOHANG);
            st_rundir_remove(running[i].tmp);
            running[i].pid = 0;
        }
}

static void track(pid_t pid, const char *tmp)
{
    static bool registered;
    if (!registered) atexit(stop_leftovers);
    registered = true;
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (pid > 0 && running[i].pid == 0) {
            running[i].pid = pid;
            snprintf(running[i].tmp, sizeof running[i].tmp, "%s", tmp);
            return;
        }
        if (pid < 0 && running[i].pid == -pid) {
            running[i].pid = 0;
            return;
        }
    }
}

int st_test_server_start(struct st_test_server *s, const char *const *extra)
{
    memset(s, 0, sizeof *s);
    char exe[1024], target[1024], draft[1024];
    struct st_error e;
    if (!st_test_exe(exe, sizeof exe) || st_rundir_new(s->tmp, sizeof s->tmp, &e)) return -1;
    st_test_shared(TARGET, target, sizeof target);
    st_test_shared(DRAFT, draft, sizeof draft);
    snprintf(s->log, sizeof s->log, "%s/server.log", s->tmp);
    const char *argv[64] = {exe, "serve", "--target", target, "--draft", draft, "--workers", "2",
                            "--listen", "tcp://127.0.0.1:*"};
    int n = 10;
    for (int i = 0; extra && extra[i] && n < 62; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    int out[2];
    if (pipe(out)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); // the test process dies: so does its server
        int log = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(out[1], 1);
        if (log >= 0) dup2(log, 2);
        close(out[0]);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    s->pid = pid;
    track(pid, s->tmp);
    // Ready when it says where it listens (within 30 s: loading is ~0.1 s).
    char buf[1024];
    size_t len = 0;
    int64_t deadline = st_test_now_ms() + 30000;
    while (st_test_now_ms() < deadline) {
        struct pollfd p = {out[0], POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) {
            if (waitpid(pid, NULL, WNOHANG) == pid) {
                track(-pid, NULL);
                s->pid = 0;
                break;
            }
            continue;
        }
        ssize_t r = read(out[0], buf + len, sizeof buf - 1 - len);
        if (r <= 0) break;
        len += (size_t)r;
        buf[len] = 0;
        char *at = strstr(buf, "listening on "), *nl = at ? strchr(at, '\n') : NULL;
        if (nl) {
            *nl = 0;
            snprintf(s->endpoint, sizeof s->endpoint, "%s", at + strlen("listening on "));
            close(out[0]); // nothing more comes on stdout
            return 0;
        }
    }
    close(out[0]);
    fprintf(stderr, "server did not start\n");
    st_test_server_print_log(s);
    if (s->pid) st_test_server_stop(s);
    return -1;
}

int st_test_server_alive(const struct st_test_server *s)
{
    return s->pid > 0 && waitpid(s->pid, NULL, WNOHANG) == 0;
}

int st_test_server_stop(struct st_test_server *s)
{
    int status = -1;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int64_t deadline = st_test_now_ms() + 10000;
        while (waitpid(s->pid, &status, WNOHANG) == 0) {
            if (st_test_now_ms() > deadline) {
                fprintf(stderr, "server %d did not stop on SIGTERM: killed\n", (int)s->pid);
                kill(s->pid, SIGKILL);
                waitpid(s->pid, &status, 0);
                status = -1;
                break;
            }
            usleep(5000);
        }
        track(-s->pid, NULL);
        s->pid = 0;
    }
    if (s->tmp[0]) st_rundir_remove(s->tmp);
    s->tmp[0] = 0;
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int st_test_run(const char *const *args, char *out, size_t cap)
{
    char exe[1024];
    if (!st_test_exe(exe, sizeof exe)) return -1;
    const char *argv[64] = {exe};
    int n = 1;
    for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    int p[2];
    if (pipe(p)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);
        close(p[0]);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    char sink[4096];
    for (;;) {
        ssize_t r = cap > len + 1 ? read(p[0], out + len, cap - 1 - len) : read(p[0], sink, sizeof sink);
        if (r <= 0) break;
        if (cap > len + 1) len += (size_t)r;
    }
    if (cap) out[len] = 0;
    close(p[0]);
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int st_test_reference(const char *const *args, uint32_t **ids)
{
    char target[1024], draft[1024];
    const char *argv[64] = {"generate", "-m", st_test_shared(TARGET, target, sizeof target), "-d",
                            st_test_shared(DRAFT, draft, sizeof draft), "--workers", "2"};
    int n = 7;
    for (int i = 0; args[i] && n < 62; i++) argv[n++] = args[i];
    argv[n] = NULL;
    static char out[1 << 16];
    if (st_test_run(argv, out, sizeof out)) return -1;
    // The ids are the last non-empty line.
    char *end = out + strlen(out);
    while (end > out && end[-1] == '\n') *--end = 0;
    char *line = strrchr(out, '\n');
    line = line ? line + 1 : out;
    uint32_t cap = 16, k = 0;
    uint32_t *v = malloc(cap * sizeof *v);
    for (char *p = line; *p;) {
        char *e2;
        unsigned long x = strtoul(p, &e2, 10);
        if (e2 == p) break;
        if (k == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[k++] = (uint32_t)x;
        p = *e2 == ',' ? e2 + 1 : e2;
    }
    *ids = v;
    return (int)k;
}

int st_test_prompts(char prompts[ST_TEST_N_PROMPTS][128], uint32_t **ref, int *n_ref, int tokens)
{
    int last[ST_TEST_N_PROMPTS] = {27, 28, 100, 200};
    for (int i = 0; i < ST_TEST_N_PROMPTS; i++) {
        snprintf(prompts[i], 128, "1,300,436,102,468,497,279,476,186,242,%d", last[i]);
        char n[16];
        snprintf(n, sizeof n, "%d", tokens);
        const char *args[] = {"--tokens", prompts[i], "-n", n, "--ids", NULL};
        n_ref[i] = st_test_reference(args, &ref[i]);
        if (n_ref[i] < 8) {
            fprintf(stderr, "reference %d: %d ids\n", i, n_ref[i]);
            return -1;
        }
    }
    return 0;
}

int st_test_children(pid_t pid, const char *match, pid_t *out, int cap)
{
    DIR *d = opendir("/proc");
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < cap) {
        char *end;
        long p = strtol(de->d_name, &end, 10);
        if (*end || p <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", p);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
        char *rp = strrchr(buf, ')');
        int ppid;
        char state;
        if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 || ppid != pid || state == 'Z') continue;
        if (match) {
            snprintf(path, sizeof path, "/proc/%ld/cmdline", p);
            f = fopen(path, "r");
            if (!f) continue;
            len = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            for (size_t i = 0; i < len; i++)
                if (!buf[i]) buf[i] = ' ';
            buf[len] = 0;
            if (!strstr(buf, match)) continue;
        }
        out[n++] = (pid_t)p;
    }
    closedir(d);
    return n;
}

int st_test_pump_any(struct st_client *c, const char *const *ids, struct st_test_result *rs, int n, int timeout_ms)
{
    struct st_client_event ev;
    int got = st_client_next(c, &ev, timeout_ms);
    if (got <= 0) return got;
    struct st_test_result *r = NULL;
    for (int i = 0; i < n && !r; i++)
        if (!strcmp(ev.request_id, ids[i])) r = &rs[i];
    if (!r) {
        st_client_event_clear(&ev);
        return 1;
    }
    r->server = ev.server;
    if (ev.type == ST_CLIENT_EV_CHUNK) {
        r->chunks++;
        if (ev.offset != r->n) r->gaps++;
        for (size_t i = 0; i < ev.n_ids && r->n < ST_TEST_MAX_IDS; i++) r->ids[r->n++] = ev.ids[i];
    } else if (ev.type == ST_CLIENT_EV_DONE || ev.type == ST_CLIENT_EV_ERROR) {
        r->finals++;
        r->finished = true;
        r->code = ev.type == ST_CLIENT_EV_DONE ? 0 : ev.code;
        r->done = ev.done;
        snprintf(r->message, sizeof r->message, "%s", ev.message);
    }
    st_client_event_clear(&ev);
    return 1;
}

int st_test_pump(struct st_client *c, const char *id, struct st_test_result *r, int timeout_ms)
{
    return st_test_pump_any(c, &id, r, 1, timeout_ms);
}

int st_test_wait(struct st_client *c, const char *id, struct st_test_result *r, int timeout_ms)
{
    int64_t deadline = st_test_now_ms() + timeout_ms;
    while (!r->finished) {
        int64_t left = deadline - st_test_now_ms();
        if (left <= 0 || st_test_pump(c, id, r, (int)left) < 0) return -1;
    }
    return 0;
}

struct st_client *st_test_client(const struct st_test_server *s, const char *identity)
{
    struct st_client_options o = {.endpoint = s->endpoint, .identity = identity};
    struct st_client *c;
    if (st_client_connect(&o, &c)) {
        fprintf(stderr, "connect: %s\n", st_client_error(c));
        st_client_close(&c);
        return NULL;
    }
    struct st_client_health h;
    if (st_client_health(c, &h, 10000) != 1) {
        fprintf(stderr, "no health reply from %s\n", s->endpoint);
        st_client_close(&c);
        return NULL;
    }
    return c;
}

size_t st_test_parse_ids(const char *s, uint32_t *ids, size_t cap)
{
    size_t n = 0;
    for (const char *p = s; *p && n < cap;) {
        char *end;
        ids[n++] = (uint32_t)strtoul(p, &end, 10);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

int st_test_submit(struct st_client *c, const char *id, const char *prompt, uint32_t max_tokens, bool ignore_eos)
{
    uint32_t ids[256];
    size_t n = st_test_parse_ids(prompt, ids, 256);
    struct st_client_request r = {.request_id = id, .prompt_ids = ids, .n_prompt_ids = n, .max_tokens = max_tokens,
                                  .seed = 42, .ignore_eos = ignore_eos};
    return st_client_submit(c, &r);
}

bool st_test_prefix_of(const struct st_test_result *r, const uint32_t *ref, int n_ref, uint32_t max_tokens)
{
    size_t want = max_tokens < (uint32_t)n_ref ? max_tokens : (size_t)n_ref;
    if (r->n == want && !memcmp(r->ids, ref, want * sizeof *ref)) return true;
    fprintf(stderr, "got %zu ids, want %zu (code %d: %s)\n  got ", r->n, want, r->code, r->message);
    for (size_t i = 0; i < r->n && i < 40; i++) fprintf(stderr, "%u,", r->ids[i]);
    fprintf(stderr, "\n  ref ");
    for (size_t i = 0; i < want && i < 40; i++) fprintf(stderr, "%u,", ref[i]);
    fprintf(stderr, "\n");
    return false;
}
