// `subternary keygen NAME`: a CURVE key pair for a server or a client.
#include <stdio.h>
#include <string.h>

#include <zmq.h>

#include "cli/commands.h"
#include "cli/keys.h"

int st_cmd_keygen(int argc, char **argv)
{
    const char *name = NULL;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--force")) force = 1;
        else if (argv[i][0] != '-' && !name) name = argv[i];
        else name = NULL, i = argc;
    }
    if (!name) {
        fprintf(stderr, "usage: subternary keygen [--force] NAME\n"
                        "Writes NAME.key (the key pair, mode 0600) and NAME.pub (the public key) and prints the\n"
                        "public key.  Servers take --curve-secret NAME.key; clients --curve-keys NAME.key and\n"
                        "--curve-server-key SERVER.pub; a server's --curve-allow file lists client .pub keys.\n");
        return 2;
    }
    if (!zmq_has("curve")) {
        fprintf(stderr, "subternary keygen: this libzmq has no CURVE support\n");
        return 1;
    }
    char pub[41], sec[41];
    struct st_error e;
    if (zmq_curve_keypair(pub, sec)) {
        fprintf(stderr, "subternary keygen: zmq_curve_keypair failed\n");
        return 1;
    }
    if (st_keys_write_pair(name, pub, sec, force, &e)) {
        fprintf(stderr, "subternary keygen: %s\n", e.msg);
        return 1;
    }
    printf("%s\n", pub);
    return 0;
}
