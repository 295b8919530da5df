// CURVE key files.  `subternary keygen NAME` writes NAME.key (the pair, mode
// 0600) and NAME.pub (the public key alone), as lines "public-key = Z85" and
// "secret-key = Z85" (lines starting with '#' are comments; Z85 itself may
// contain '#').  An allow-list file holds public
// keys, one per line, bare or as "public-key = Z85" (so .pub files can simply
// be concatenated).
#ifndef ST_CLI_KEYS_H
#define ST_CLI_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define ST_KEY_Z85_LEN 40

// Reads a .key file: both keys, NUL-terminated Z85.
int st_keys_read_pair(const char *path, char pub[ST_KEY_Z85_LEN + 1], char sec[ST_KEY_Z85_LEN + 1],
                      struct st_error *e);
// A public key given as itself (40 Z85 characters) or as a .pub/.key file.
int st_keys_read_public(const char *arg, char pub[ST_KEY_Z85_LEN + 1], struct st_error *e);
// Reads an allow-list: *keys is malloc'd, [*n][32] binary keys.
int st_keys_read_allow(const char *path, uint8_t (**keys)[32], size_t *n, struct st_error *e);
// Writes NAME.key (0600, refusing to overwrite unless force) and NAME.pub.
int st_keys_write_pair(const char *name, const char *pub, const char *sec, int force, struct st_error *e);

#endif
