// CURVE on a real server: `subternary keygen` key files, a server with an
// allow-list (checked by its ZAP handler).  An allowed client key works (the
// library and the command-line client); an unknown key, a client without
// CURVE and a client that trusts the wrong server key get nothing at all.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/server_support.h"

static char dir[] = "/tmp/st-curve-XXXXXX";
static char prompt[] = ST_TEST_PROMPT;
static uint32_t *ref;
static int n_ref;

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

// The value of "key = value" in a key file.
static void key_of(const char *file, const char *key, char out[41])
{
    char path[256], line[256];
    path_of(path, sizeof path, file);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    out[0] = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)) && strlen(line) >= strlen(key) + 3 + 40)
            snprintf(out, 41, "%s", line + strlen(key) + 3);
    fclose(f);
    assert_int_equal(strlen(out), 40);
}

static void keygen(const char *name)
{
    char path[256], out[256];
    path_of(path, sizeof path, name);
    const char *args[] = {"keygen", path, NULL};
    assert_int_equal(st_test_run(args, out, sizeof out), 0);
    assert_int_equal(strlen(out), 41); // the public key and a newline
}

static struct st_client *curve_client(const struct st_test_server *s, const char *server_pub, const char *keys)
{
    char pub[41], sec[41];
    struct st_client_options o = {.endpoint = s->endpoint, .server_key = server_pub};
    if (keys) {
        key_of(keys, "public-key", pub);
        key_of(keys, "secret-key", sec);
        o.public_key = pub;
        o.secret_key = sec;
    }
    struct st_client *c;
    if (st_client_connect(&o, &c)) {
        fprintf(stderr, "%s\n", st_client_error(c));
        st_client_close(&c);
        return NULL;
    }
    return c;
}

static void test_keygen_files(void **state)
{
    (void)state;
    char path[256], out[256];
    struct stat sb;
    path_of(path, sizeof path, "server.key");
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    // No silent overwrite of a key.
    path_of(path, sizeof path, "server");
    const char *again[] = {"keygen", path, NULL};
    assert_int_equal(st_test_run(again, out, sizeof out), 1);
    char a[41], b[41];
    key_of("server.key", "public-key", a);
    key_of("server.pub", "public-key", b);
    assert_string_equal(a, b);
}

static void test_allowed_and_refused(void **state)
{
    (void)state;
    char secret[256], allow[256], server_pub[41];
    path_of(secret, sizeof secret, "server.key");
    path_of(allow, sizeof allow, "allow");
    key_of("server.pub", "public-key", server_pub);
    // Half a configuration is refused at start.
    struct st_test_server s;
    const char *half[] = {"--curve-secret", secret, NULL};
    assert_int_equal(st_test_server_start(&s, half), -1);
    char out[1024];
    const char *halfrun[] = {"serve", "-m", "unused.gguf", "--curve-secret", secret, NULL};
    assert_int_equal(st_test_run(halfrun, out, sizeof out), 2); // configuration: do not restart
    const char *badkey[] = {"serve", "-m", "unused.gguf", "--curve-secret", allow, "--curve-allow", allow, NULL};
    assert_int_equal(st_test_run(badkey, out, sizeof out), 2); // an allow-list is not a key pair
    const char *args[] = {"--curve-secret", secret, "--curve-allow", allow, NULL};
    assert_int_equal(st_test_server_start(&s, args), 0);

    // Allowed: health and a streamed request.
    struct st_client *a = curve_client(&s, server_pub, "alice.key");
    assert_non_null(a);
    struct st_client_health h;
    assert_int_equal(st_client_health(a, &h, 10000), 1);
    assert_true(h.ok);
    static struct st_test_result r;
    memset(&r, 0, sizeof r);
    assert_int_equal(st_test_submit(a, "curve", prompt, 32, false), 0);
    assert_int_equal(st_test_wait(a, "curve", &r, 30000), 0);
    assert_int_equal(r.code, 0);
    assert_true(st_test_prefix_of(&r, ref, n_ref, 32));

    // Unknown key, no CURVE, wrong server key: nothing comes back.
    struct st_client *b = curve_client(&s, server_pub, "mallory.key");
    struct st_client *anon = curve_client(&s, server_pub, NULL); // a fresh key pair
    struct st_client_options plain_o = {.endpoint = s.endpoint};
    struct st_client *plain;
    assert_int_equal(st_client_connect(&plain_o, &plain), 0);
    char mallory_pub[41];
    key_of("mallory.pub", "public-key", mallory_pub);
    struct st_client *wrong = curve_client(&s, mallory_pub, "alice.key");
    struct st_client *nobody[] = {b, anon, plain, wrong};
    for (int i = 0; i < 4; i++) {
        assert_non_null(nobody[i]);
        // Queued, or refused by the client when the refused handshake left
        // no connection to queue on (a bounded wait, never a hang).
        int rc = st_test_submit(nobody[i], "sneaky", prompt, 8, false);
        assert_true(rc == 0 || rc == -1);
        rc = st_client_request_stats(nobody[i]);
        assert_true(rc == 0 || rc == -1);
    }
    for (int i = 0; i < 4; i++) {
        struct st_client_event ev;
        assert_int_equal(st_client_next(nobody[i], &ev, i ? 300 : 1500), 0);
    }
    // The command-line client: allowed keys work, unknown ones time out.
    char alice[256], mallory[256], spub[256];
    path_of(alice, sizeof alice, "alice.key");
    path_of(mallory, sizeof mallory, "mallory.key");
    path_of(spub, sizeof spub, "server.pub");
    const char *ok[] = {"client", "--connect", s.endpoint, "--curve-server-key", spub, "--curve-keys", alice, "--health",
                        NULL};
    assert_int_equal(st_test_run(ok, out, sizeof out), 0);
    assert_true(!strncmp(out, "ok:", 3));
    const char *no[] = {"client", "--connect", s.endpoint, "--curve-server-key", spub, "--curve-keys", mallory,
                        "--health", "--timeout", "0.5", NULL};
    assert_int_equal(st_test_run(no, out, sizeof out), 1);
    // Nothing of theirs ran; the allowed client still works.
    struct st_client_stats st;
    assert_int_equal(st_client_stats(a, &st, 5000), 1);
    assert_int_equal(st.requests_done, 1);
    assert_int_equal(st.errors, 0);
    for (int i = 0; i < 4; i++) st_client_close(&nobody[i]);
    st_client_close(&a);
    // The server said why.
    FILE *f = fopen(s.log, "r");
    assert_non_null(f);
    char line[512];
    int refused = 0;
    while (fgets(line, sizeof line, f)) refused += strstr(line, "refused CURVE client key") != NULL;
    fclose(f);
    printf("  %d handshakes refused by the allow-list\n", refused);
    assert_true(refused >= 3);
    assert_int_equal(st_test_server_stop(&s), 0);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir)) return -1;
    keygen("server");
    keygen("alice");
    keygen("mallory");
    // The allow-list: alice's .pub file as it is.
    char src[256], dst[256], line[256];
    path_of(src, sizeof src, "alice.pub");
    path_of(dst, sizeof dst, "allow");
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    if (!in || !out) return -1;
    fprintf(out, "# clients let in\n");
    while (fgets(line, sizeof line, in)) fputs(line, out);
    fclose(in);
    fclose(out);
    const char *args[] = {"--tokens", prompt, "-n", "32", "--ids", NULL};
    n_ref = st_test_reference(args, &ref);
    return n_ref > 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {"server.key", "server.pub", "alice.key", "alice.pub", "mallory.key", "mallory.pub", "allow"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[256];
        path_of(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(dir);
    free(ref);
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keygen_files),
        cmocka_unit_test(test_allowed_and_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
