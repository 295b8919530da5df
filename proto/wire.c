#include "proto/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

int st_wire_send_packed(void *sock, const void *identity, size_t identity_len, const void *payload, size_t len,
                        int flags)
{
    if (identity && zmq_send(sock, identity, identity_len, ZMQ_SNDMORE | flags) < 0) return -1;
    if (zmq_send(sock, ST_WIRE_VERSION, ST_WIRE_VERSION_LEN, ZMQ_SNDMORE | flags) < 0) return -1;
    return zmq_send(sock, payload, len, flags) < 0 ? -1 : 0;
}

int st_wire_send(void *sock, const void *identity, size_t identity_len, const ProtobufCMessage *m, int flags)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t stackbuf[4096];
    uint8_t *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    protobuf_c_message_pack(m, buf);
    int rc = st_wire_send_packed(sock, identity, identity_len, buf, n, flags);
    int saved = errno;
    if (buf != stackbuf) free(buf);
    errno = saved;
    return rc;
}

int st_wire_recv(void *sock, bool router, struct st_wire_msg *out, int flags)
{
    memset(out, 0, sizeof *out);
    int frames = 0, more = 1;
    while (more) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, sock, frames ? 0 : flags) < 0) {
            zmq_msg_close(&f);
            if (frames == 0) return -1;
            break;
        }
        size_t len = zmq_msg_size(&f);
        const uint8_t *d = zmq_msg_data(&f);
        int idx = router ? frames : frames + 1; // 0 identity, 1 version, 2 payload
        if (idx == 0) {
            out->identity_len = len < ST_WIRE_MAX_IDENTITY ? len : ST_WIRE_MAX_IDENTITY;
            memcpy(out->identity, d, out->identity_len);
        } else if (idx == 1) {
            out->version_ok = len == ST_WIRE_VERSION_LEN && !memcmp(d, ST_WIRE_VERSION, len);
        } else if (idx == 2) {
            out->payload = malloc(len ? len : 1);
            if (out->payload) {
                memcpy(out->payload, d, len);
                out->payload_len = len;
            }
        }
        more = zmq_msg_more(&f);
        zmq_msg_close(&f);
        frames++;
    }
    out->shape_ok = frames == (router ? 3 : 2) && out->payload;
    return 0;
}

void st_wire_msg_clear(struct st_wire_msg *m)
{
    free(m->payload);
    m->payload = NULL;
    m->payload_len = 0;
}
