// tok_bpe.h — the BPE model of tokenizer.json: vocabulary, merges by rank,
// ignore_merges, byte_fallback (<0xNN> tokens), unk_token and fuse_unk, as
// Hugging Face tokenizers 0.20.3 applies them to one pre-tokenized piece.
#ifndef RLPIPE_TOK_BPE_H
#define RLPIPE_TOK_BPE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_map.h"
#include "util.h"

// Ids must be below this: the per-id tables would be absurdly large, and no
// real vocabulary comes near.
#define TOK_MAX_ID (1u << 24)

typedef struct tok_bpe tok_bpe;

// Loads the "model" member of file path (a BPE model). NULL with err naming
// the file and the key when malformed, or naming the feature when it is not
// supported (other model types, dropout, continuing_subword_prefix,
// end_of_word_suffix).
tok_bpe *tok_bpe_load(const cJSON *model, const char *path, rl_err *err);
void tok_bpe_free(tok_bpe *m);

const tok_map *tok_bpe_vocab(const tok_bpe *m);
// 1 + the largest id of the vocabulary (0 when empty).
size_t tok_bpe_n_ids(const tok_bpe *m);
// The vocabulary string of id, or NULL.
const char *tok_bpe_token(const tok_bpe *m, uint32_t id, size_t *len);

// Per-call working memory (zero it before first use).
typedef struct {
    struct tok_bpe_symbol *sym;
    size_t sym_cap;
    struct tok_bpe_cand *heap;
    size_t heap_n, heap_cap;
    sbuf word;
    size_t dropped;        // characters (bytes under ByteLevel) that gave no id, over the calls
    uint32_t first_dropped;   // the first of them: its code point, or its byte under ByteLevel
} tok_bpe_work;
void tok_bpe_work_free(tok_bpe_work *w);

// The ids of one piece s[0..n) (n > 0), appended to *ids (grown with
// xrealloc). bytes: s is raw bytes that the ByteLevel alphabet maps to the
// model's characters (each byte one character); else s is UTF-8 characters.
// A character with no token, no byte_fallback tokens and no unk_token gives
// no id, as in tokenizers. -1 with err when unk_token is needed and not in
// the vocabulary (tokenizers fails there too).
int tok_bpe_encode(const tok_bpe *m, tok_bpe_work *w, const uint8_t *s, size_t n, int bytes, uint32_t **ids,
                   size_t *n_ids, size_t *cap, rl_err *err);

// Appends id to *ids (n_ids used, cap allocated; grown with xrealloc).
void tok_ids_push(uint32_t **ids, size_t *n_ids, size_t *cap, uint32_t id);

// The GPT-2 byte alphabet: printable bytes ('!'..'~', 0xA1..0xAC,
// 0xAE..0xFF) stand for themselves, the other 68 bytes, in increasing order,
// become U+0100..U+0143.
uint32_t tok_byte_char(uint8_t b);
// The byte of an alphabet character, or -1.
int tok_char_byte(uint32_t cp);

#endif
