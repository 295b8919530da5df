// Tokenizers read from GGUF metadata (tokenizer.ggml.*), token-for-token
// compatible with llama.cpp's:
//   - "llama": SentencePiece-style.  Spaces become U+2581, a space is put in
//     front of the text (add_space_prefix), then adjacent pieces are merged by
//     the score of the token they form, highest first; what forms no token
//     falls back to <0xNN> byte tokens.
//   - "gpt2": byte-level BPE.  A regex pre-tokenizer named by
//     tokenizer.ggml.pre splits the text into words, bytes are mapped to the
//     GPT-2 printable alphabet, and pairs are merged by rank
//     (tokenizer.ggml.merges), lowest first.
// Control, unknown and user-defined tokens written in the text are matched as
// whole tokens first, the way llama.cpp does: user-defined ones always,
// control and unknown ones only with ST_TOK_PARSE_SPECIAL.
//
// The tokenizer copies what it needs, so the GGUF may be closed after
// st_tok_load.  A loaded tokenizer is never modified: any number of threads
// may encode and decode with it at once.
#ifndef ST_MODEL_TOKENIZER_H
#define ST_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct st_gguf;
struct st_tokenizer;

enum st_tok_kind {
    ST_TOK_KIND_SPM = 1, // tokenizer.ggml.model = "llama"
    ST_TOK_KIND_BPE = 2, // tokenizer.ggml.model = "gpt2"
};

enum st_tok_flags {
    // Prepend BOS if the vocabulary asks for it (tokenizer.ggml.add_bos_token;
    // default yes for SPM and for llama3-style BPE) and append EOS if
    // tokenizer.ggml.add_eos_token says so: llama.cpp's add_special.
    ST_TOK_ADD_SPECIAL = 1u << 0,
    // Control and unknown tokens spelled in the text ("<s>", "<|eot_id|>")
    // become those tokens instead of being tokenized as plain text.
    ST_TOK_PARSE_SPECIAL = 1u << 1,
};

// Builds a tokenizer from the metadata of an open GGUF.  Missing or
// inconsistent metadata (no token list, arrays of mismatched lengths, merges
// that name unknown tokens, an unknown pre-tokenizer, special ids out of
// range) gives an error naming the file, the key and the problem; *out is
// then NULL.
int st_tok_load(const struct st_gguf *g, struct st_tokenizer **out, struct st_error *e);
void st_tok_free(struct st_tokenizer **t);

// Encodes len bytes of text (need not be NUL-terminated, may be any bytes).
// *ids is malloc'd (free() it), *n its length.  add_bos selects
// ST_TOK_ADD_SPECIAL; special tokens in the text are not parsed.
int st_tok_encode(const struct st_tokenizer *t, const char *text, size_t len, bool add_bos,
                  int32_t **ids, size_t *n, struct st_error *e);
// The same with explicit flags (enum st_tok_flags).
int st_tok_encode_ex(const struct st_tokenizer *t, const char *text, size_t len, unsigned flags,
                     int32_t **ids, size_t *n, struct st_error *e);

// The bytes one token stands for, for streaming output: byte tokens <0xNN>
// give the byte, SPM's U+2581 gives a space, byte-level BPE maps its alphabet
// back to bytes; control and unknown tokens give nothing, user-defined tokens
// their text.  Writes min(length, cap) bytes (no terminator) and returns the
// full length, or -1 if id is out of range.
int st_tok_decode_piece(const struct st_tokenizer *t, int32_t id, char *buf, size_t cap);
// The text of a whole sequence: the pieces concatenated, without the space
// that add_space_prefix put in front of the first one.  Writes min(length,
// cap) bytes (no terminator); returns the full length, or -1 if an id is out
// of range (or memory ran out).  Control tokens in front (BOS) are skipped
// before the space is looked for.  For text t, decode(encode(t)) == t whenever t has no special
// token spelled in it (and, for BPE, is valid UTF-8).
int64_t st_tok_decode(const struct st_tokenizer *t, const int32_t *ids, size_t n, char *buf, size_t cap);

enum st_tok_kind st_tok_kind(const struct st_tokenizer *t);
uint32_t st_tok_n_vocab(const struct st_tokenizer *t);
int32_t st_tok_bos(const struct st_tokenizer *t); // -1 if none
int32_t st_tok_eos(const struct st_tokenizer *t); // -1 if none
// Whether ST_TOK_ADD_SPECIAL puts a BOS in front.
bool st_tok_adds_bos(const struct st_tokenizer *t);
// End of generation: EOS, EOT, EOM and the tokens llama.cpp recognises by
// their text (<|eot_id|>, <|im_end|>, <|end|>, <|endoftext|>, ...).
bool st_tok_is_eog(const struct st_tokenizer *t, int32_t id);
// Control tokens (BOS, EOS, chat markers): never text.
bool st_tok_is_control(const struct st_tokenizer *t, int32_t id);
// The raw vocabulary string of a token (not NUL-terminated), NULL if out of range.
const char *st_tok_text(const struct st_tokenizer *t, int32_t id, size_t *len);
// The pre-tokenizer name in use ("default", "llama-bpe", ...; "" for SPM).
const char *st_tok_pre_name(const struct st_tokenizer *t);

#endif
