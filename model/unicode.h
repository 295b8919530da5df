// UTF-8 helpers for the tokenizers.  Decoding is lenient the way llama.cpp's
// is, so that malformed text tokenizes the same: a byte that does not start a
// complete sequence decodes to U+FFFD and consumes only itself.
#ifndef ST_MODEL_UNICODE_H
#define ST_MODEL_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#define ST_UTF8_REPLACEMENT 0xFFFDu

// Length of the sequence a lead byte announces, from its high nibble only (a
// stray continuation byte counts 1).  SentencePiece splits text with this.
size_t st_utf8_seq_len(uint8_t lead);

// Decodes the code point at s[*i] (s holds n bytes) and advances *i.
// Overlong forms are accepted (as llama.cpp does); a malformed or truncated
// sequence gives U+FFFD and advances one byte.
uint32_t st_utf8_decode(const char *s, size_t n, size_t *i);

// Writes cp as UTF-8 into out (room for 4) and returns the byte count.
// Surrogates and values past U+10FFFF are written as U+FFFD, so the output is
// always valid UTF-8.
size_t st_utf8_encode(uint32_t cp, char *out);

#endif
