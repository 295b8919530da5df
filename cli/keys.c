#include "cli/keys.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) *--end = 0;
    return s;
}

static int valid_z85(const char *v)
{
    uint8_t bin[32];
    return strlen(v) == ST_KEY_Z85_LEN && zmq_z85_decode(bin, v) != NULL;
}

// Calls fn(key, value) for every "key = value" or bare "value" line (key "").
static int each_line(const char *path, int (*fn)(void *ctx, const char *key, const char *value, int line,
                                               struct st_error *e),
                     void *ctx, struct st_error *e)
{
    FILE *f = fopen(path, "r");
    if (!f) return st_error_set(e, "open(%s): %s", path, strerror(errno));
    char buf[1024];
    int line = 0, rc = 0;
    while (!rc && fgets(buf, sizeof buf, f)) {
        line++;
        // Comments are whole lines: Z85 keys may contain '#'.
        char *s = trim(buf), *eq = strchr(s, '=');
        if (!*s || *s == '#') continue;
        if (eq) {
            *eq = 0;
            rc = fn(ctx, trim(s), trim(eq + 1), line, e);
        } else {
            rc = fn(ctx, "", s, line, e);
        }
    }
    fclose(f);
    if (rc) st_error_wrap(e, "%s", path);
    return rc;
}

struct pair {
    char *pub, *sec;
};

static int pair_line(void *ctx, const char *key, const char *value, int line, struct st_error *e)
{
    struct pair *p = ctx;
    char *dst = !strcmp(key, "public-key") || !*key ? p->pub : !strcmp(key, "secret-key") ? p->sec : NULL;
    if (!dst) return 0; // other keys: ignored
    if (!valid_z85(value)) return st_error_set(e, "line %d: '%s' is not a 40-character Z85 key", line, key);
    memcpy(dst, value, ST_KEY_Z85_LEN + 1);
    return 0;
}

int st_keys_read_pair(const char *path, char pub[ST_KEY_Z85_LEN + 1], char sec[ST_KEY_Z85_LEN + 1],
                      struct st_error *e)
{
    pub[0] = sec[0] = 0;
    struct pair p = {pub, sec};
    if (each_line(path, pair_line, &p, e)) return -1;
    if (!pub[0] || !sec[0]) return st_error_set(e, "%s: needs public-key and secret-key lines (subternary keygen)", path);
    // The pair must belong together: the public key follows from the secret one.
    char derived[ST_KEY_Z85_LEN + 1];
    if (zmq_curve_public(derived, sec) || strcmp(derived, pub))
        return st_error_set(e, "%s: public-key does not belong to secret-key", path);
    return 0;
}

int st_keys_read_public(const char *arg, char pub[ST_KEY_Z85_LEN + 1], struct st_error *e)
{
    if (valid_z85(arg)) {
        memcpy(pub, arg, ST_KEY_Z85_LEN + 1);
        return 0;
    }
    char sec[ST_KEY_Z85_LEN + 1];
    pub[0] = sec[0] = 0;
    struct pair p = {pub, sec};
    if (each_line(arg, pair_line, &p, e)) return -1;
    if (!pub[0]) return st_error_set(e, "%s: no public key", arg);
    return 0;
}

struct allow {
    uint8_t (*keys)[32];
    size_t n, cap;
};

static int allow_line(void *ctx, const char *key, const char *value, int line, struct st_error *e)
{
    struct allow *a = ctx;
    if (*key && strcmp(key, "public-key")) return st_error_set(e, "line %d: unexpected key '%s'", line, key);
    if (!valid_z85(value)) return st_error_set(e, "line %d: not a 40-character Z85 public key", line);
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        uint8_t(*k)[32] = realloc(a->keys, cap * sizeof *k);
        if (!k) return st_error_set(e, "out of memory");
        a->keys = k;
        a->cap = cap;
    }
    zmq_z85_decode(a->keys[a->n++], value);
    return 0;
}

int st_keys_read_allow(const char *path, uint8_t (**keys)[32], size_t *n, struct st_error *e)
{
    struct allow a = {0};
    if (each_line(path, allow_line, &a, e)) {
        free(a.keys);
        return -1;
    }
    *keys = a.keys;
    *n = a.n;
    return 0;
}

static int write_file(const char *path, int mode, int force, const char *text, struct st_error *e)
{
    int fd = open(path, O_WRONLY | O_CREAT | (force ? O_TRUNC : O_EXCL), mode);
    if (fd < 0) return st_error_set(e, "create(%s): %s%s", path, strerror(errno), errno == EEXIST ? " (--force to replace)" : "");
    size_t len = strlen(text);
    ssize_t w = write(fd, text, len);
    if (fchmod(fd, mode) || w != (ssize_t)len || close(fd)) return st_error_set(e, "write(%s): %s", path, strerror(errno));
    return 0;
}

int st_keys_write_pair(const char *name, const char *pub, const char *sec, int force, struct st_error *e)
{
    char path[1024], text[512];
    snprintf(path, sizeof path, "%s.key", name);
    snprintf(text, sizeof text,
             "# SubTernary CURVE key pair (subternary keygen).  Keep this file secret.\n"
             "public-key = %s\nsecret-key = %s\n", pub, sec);
    if (write_file(path, 0600, force, text, e)) return -1;
    snprintf(path, sizeof path, "%s.pub", name);
    snprintf(text, sizeof text, "# SubTernary CURVE public key (subternary keygen)\npublic-key = %s\n", pub);
    return write_file(path, 0644, force, text, e);
}
