// ZeroMQ framing of the protocol: [identity] version payload.  A ROUTER socket
// adds the peer's identity frame in front; DEALER and REQ-less peers do not.
#ifndef ST_PROTO_WIRE_H
#define ST_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "proto/subternary.pb-c.h"

#define ST_WIRE_VERSION "ST01"
#define ST_WIRE_VERSION_LEN 4
#define ST_WIRE_MAX_IDENTITY 256
#define ST_WIRE_MAX_FRAMES 8

struct st_wire_msg {
    uint8_t identity[ST_WIRE_MAX_IDENTITY];
    size_t identity_len;       // 0 when the socket adds none
    bool version_ok;           // the version frame said ST_WIRE_VERSION
    bool shape_ok;             // the frame count was what the protocol says
    uint8_t *payload;          // malloc'd copy of the last frame
    size_t payload_len;
};

// Sends [identity] version payload.  identity may be NULL.  Returns 0 or -1
// (errno from ZeroMQ; EAGAIN / EHOSTUNREACH for a gone peer with
// ZMQ_DONTWAIT).
int st_wire_send(void *sock, const void *identity, size_t identity_len, const ProtobufCMessage *m, int flags);
// The same with a payload packed already (a client keeps one to resend it).
int st_wire_send_packed(void *sock, const void *identity, size_t identity_len, const void *payload, size_t len,
                        int flags);

// Receives one whole multipart message.  router: expect an identity frame.
// Returns 0, or -1 when nothing could be read (errno set, e.g. EAGAIN).  A
// message of the wrong shape still returns 0 with shape_ok false.
int st_wire_recv(void *sock, bool router, struct st_wire_msg *out, int flags);
void st_wire_msg_clear(struct st_wire_msg *m);

#endif
