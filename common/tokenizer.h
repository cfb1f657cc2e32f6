// tokenizer.h — Hugging Face tokenizer.json, byte-level BPE: bytes are mapped
// to the GPT-2 byte alphabet, merges are applied by rank (lowest first), added
// and special tokens are matched as whole strings before BPE and never merged
// across. Decoding maps tokens back to bytes (special tokens to their content).
// Not yet supported, and refused with a message naming it: regex
// pre-tokenisation (ByteLevel use_regex: true, Split), normalizers, and model
// types other than BPE.
// Encoding never adds bos/eos (the post_processor is ignored): callers add them.
// Ids agree with Hugging Face's tokenizers encode(text, add_special_tokens=False)
// and decoded bytes with its decode (which also turns invalid UTF-8 into U+FFFD);
// tokenizer.c lists the few cases where this refuses what HF would accept.
#ifndef RLPIPE_TOKENIZER_H
#define RLPIPE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct tokenizer tokenizer;

tokenizer *tok_load(const char *path, rl_err *err);
void tok_free(tokenizer *t);

size_t tok_vocab_size(const tokenizer *t);          // 1 + the largest id, added tokens included
// Id of a token's string (vocabulary or added token), or -1.
int64_t tok_id(const tokenizer *t, const char *token);

// Encodes text[0..n) (UTF-8) into ids, appending to *ids (grown with xrealloc),
// as Hugging Face's encode(text, add_special_tokens=False): no bos or eos.
// Returns 0, or -1 when a byte has no token (err says which byte, at which offset).
int tok_encode(const tokenizer *t, const char *text, size_t n, uint32_t **ids, size_t *n_ids,
               size_t *cap, rl_err *err);
// The same with the special tokens the file's post_processor puts around a
// single sequence, as encode(text, add_special_tokens=True): Llama 3's
// <|begin_of_text|> before the text, nothing for Qwen2.5 or SmolLM2. Whether a
// prompt starts with bos is the tokenizer's decision, not the config's.
int tok_encode_special(const tokenizer *t, const char *text, size_t n, uint32_t **ids, size_t *n_ids,
                       size_t *cap, rl_err *err);

enum {
    TOK_SKIP_SPECIAL = 1,   // drop special added tokens (HF skip_special_tokens=True)
    TOK_CONTINUE = 2,       // the ids continue a text already decoded: the bytes that decoding
                            // (that text's ids + ids) adds, without the decoder's start-of-text
                            // rules (Metaspace's dropped leading space); decoding token by token
                            // with TOK_CONTINUE then concatenates to the whole text's bytes
};
// Decodes ids into bytes appended to out, as Hugging Face's decode (flags above);
// an id outside the vocabulary is an error.
int tok_decode(const tokenizer *t, const uint32_t *ids, size_t n, unsigned flags, sbuf *out,
               rl_err *err);

// The string of token id (its vocabulary string, or an added token's content),
// not NUL-terminated; NULL if the id has no token.
const char *tok_token(const tokenizer *t, uint32_t id, size_t *len);
// 1 if id is a special added token (tok_decode's skip_special drops those).
int tok_is_special(const tokenizer *t, uint32_t id);

#endif
