// ZAP handler (ZeroMQ RFC 27): libzmq asks inproc://zeromq.zap.01 whether a
// peer that completed the CURVE handshake may connect; the answer "200" lets
// it in, "400" closes the connection before any message is read.  The handler
// runs on its own thread (libzmq waits on it during handshakes, which happen
// on the I/O thread, not on the server loop).
#include "coordinator/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 8

struct st_zap {
    void *zctx;
    void *rep;                   // bound to ZAP_ENDPOINT (used by the thread only)
    void *ctl;                   // our end of the stop pipe
    char ctl_ep[64];
    pthread_t thread;
    uint8_t (*keys)[ST_SERVER_KEY_BYTES];
    size_t n_keys;
    atomic_uint_fast64_t denied;
};

static bool allowed(const struct st_zap *z, const uint8_t *key, size_t len)
{
    if (len != ST_SERVER_KEY_BYTES) return false;
    for (size_t i = 0; i < z->n_keys; i++)
        if (!memcmp(z->keys[i], key, ST_SERVER_KEY_BYTES)) return true;
    return false;
}

// One request: version, request id, domain, address, identity, mechanism,
// credentials...; the reply: version, request id, status code, status text,
// user id, metadata.
static void answer(struct st_zap *z)
{
    zmq_msg_t f[ZAP_FRAMES];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->rep, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < ZAP_FRAMES) {
            zmq_msg_init(&f[n]);
            zmq_msg_move(&f[n++], &m);
        }
        zmq_msg_close(&m);
    }
    if (n < 6) { // not a ZAP request; a REP socket must still answer something
        for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
        zmq_send(z->rep, "", 0, 0);
        return;
    }
    const char *status = "200", *text = "OK";
    size_t mlen = zmq_msg_size(&f[5]);
    const char *mech = zmq_msg_data(&f[5]);
    if (mlen == 5 && !memcmp(mech, "CURVE", 5)) {
        bool ok = n >= 7 && allowed(z, zmq_msg_data(&f[6]), zmq_msg_size(&f[6]));
        if (!ok) {
            status = "400";
            text = "client key not allowed";
            char key[41] = "?", addr[64];
            if (n >= 7 && zmq_msg_size(&f[6]) == ST_SERVER_KEY_BYTES) zmq_z85_encode(key, zmq_msg_data(&f[6]), 32);
            size_t al = zmq_msg_size(&f[3]) < sizeof addr - 1 ? zmq_msg_size(&f[3]) : sizeof addr - 1;
            memcpy(addr, zmq_msg_data(&f[3]), al);
            addr[al] = 0;
            for (size_t i = 0; i < al; i++)
                if (addr[i] < 0x20 || addr[i] > 0x7e) addr[i] = '?';
            fprintf(stderr, "serve: refused CURVE client key %s from %s\n", key, addr);
            atomic_fetch_add(&z->denied, 1);
        }
    }
    // Echo version and request id, then the verdict.
    zmq_msg_send(&f[0], z->rep, ZMQ_SNDMORE);
    zmq_msg_send(&f[1], z->rep, ZMQ_SNDMORE);
    zmq_send(z->rep, status, 3, ZMQ_SNDMORE);
    zmq_send(z->rep, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(z->rep, "", 0, ZMQ_SNDMORE);
    zmq_send(z->rep, "", 0, 0);
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

static void *zap_main(void *arg)
{
    struct st_zap *z = arg;
    void *stop = zmq_socket(z->zctx, ZMQ_PAIR);
    zmq_connect(stop, z->ctl_ep);
    for (;;) {
        zmq_pollitem_t it[2] = {{z->rep, 0, ZMQ_POLLIN, 0}, {stop, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (it[1].revents & ZMQ_POLLIN) break;
        if (it[0].revents & ZMQ_POLLIN) answer(z);
    }
    zmq_close(stop);
    return NULL;
}

int st_zap_start(void *zctx, const uint8_t (*keys)[ST_SERVER_KEY_BYTES], size_t n, struct st_zap **out,
                 struct st_error *e)
{
    *out = NULL;
    struct st_zap *z = calloc(1, sizeof *z);
    if (!z) return st_error_set(e, "out of memory");
    z->zctx = zctx;
    if (n && !(z->keys = malloc(n * sizeof *z->keys))) {
        free(z);
        return st_error_set(e, "out of memory for %zu keys", n);
    }
    if (n) memcpy(z->keys, keys, n * sizeof *keys);
    z->n_keys = n;
    snprintf(z->ctl_ep, sizeof z->ctl_ep, "inproc://st-zap-stop-%p", (void *)z);
    z->rep = zmq_socket(zctx, ZMQ_REP);
    z->ctl = zmq_socket(zctx, ZMQ_PAIR);
    int zero = 0;
    if (z->rep) zmq_setsockopt(z->rep, ZMQ_LINGER, &zero, sizeof zero);
    if (z->ctl) zmq_setsockopt(z->ctl, ZMQ_LINGER, &zero, sizeof zero);
    if (!z->rep || !z->ctl || zmq_bind(z->rep, ZAP_ENDPOINT) || zmq_bind(z->ctl, z->ctl_ep)) {
        st_error_set(e, "ZAP handler: zmq_bind(%s): %s", ZAP_ENDPOINT, zmq_strerror(errno));
        goto fail;
    }
    if (pthread_create(&z->thread, NULL, zap_main, z)) {
        st_error_set(e, "ZAP handler: pthread_create: %s", strerror(errno));
        goto fail;
    }
    *out = z;
    return 0;
fail:
    if (z->rep) zmq_close(z->rep);
    if (z->ctl) zmq_close(z->ctl);
    free(z->keys);
    free(z);
    return -1;
}

void st_zap_stop(struct st_zap **zp)
{
    struct st_zap *z = *zp;
    if (!z) return;
    zmq_send(z->ctl, "", 0, 0);
    pthread_join(z->thread, NULL);
    zmq_close(z->ctl);
    zmq_close(z->rep);
    free(z->keys);
    free(z);
    *zp = NULL;
}

uint64_t st_zap_denied(const struct st_zap *z) { return z ? atomic_load(&z->denied) : 0; }
