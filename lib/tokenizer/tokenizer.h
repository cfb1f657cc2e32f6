// tokenizer.h — Hugging Face tokenizer.json with a BPE model, encoding and
// decoding as the `tokenizers` library 0.20.3 does: added tokens (special or
// not, with their single_word, lstrip, rstrip and normalized flags), the
// normalizers NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend and Replace,
// the pre-tokenizers Split, ByteLevel (with or without its GPT-2 regex),
// Digits, Metaspace, Punctuation, Whitespace, WhitespaceSplit and
// CharDelimiterSplit, the BPE model with ignore_merges, byte_fallback,
// unk_token and fuse_unk, the post-processors TemplateProcessing, Roberta,
// Bert and ByteLevel, and the decoders ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse and Strip (Sequences of each). This covers the files of
// GPT-2, Llama 3, Qwen2/2.5/3, SmolLM2 and the SentencePiece-style BPE of
// Llama 2, Mistral and TinyLlama. Anything else (WordPiece or Unigram
// models, BPE dropout, continuing_subword_prefix, other components, regex
// constructs whose meaning PCRE2 would change) is refused by tok_load with a
// message naming the feature and the file. tokenizer.c lists the few cases
// where this refuses what tokenizers would accept.
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
// Returns 0, or -1 (nothing appended) when the text is not UTF-8 where the
// file's pipeline reads characters (ByteLevel alone also takes any bytes),
// or the unk_token a character needs is not in the vocabulary. As in
// tokenizers, a character with no token, byte-fallback tokens or unk_token
// gives no id.
int tok_encode(const tokenizer *t, const char *text, size_t n, uint32_t **ids, size_t *n_ids,
               size_t *cap, rl_err *err);
// What tok_encode_ex reports besides the ids.
typedef struct {
    size_t dropped;           // characters with no token, no byte-fallback tokens and no unk_token:
                              // they give no id, as in tokenizers (SmolLM2's vocabulary lacks 21 bytes)
    uint32_t first_dropped;   // the first of them: its code point, or its byte (byte_level)
    int byte_level;           // the model reads bytes (ByteLevel): first_dropped is a byte
} tok_report;
// tok_encode (add_special 0) or tok_encode_special (1), and *rep (when not NULL)
// filled: callers that must not lose input silently warn with it.
int tok_encode_ex(const tokenizer *t, const char *text, size_t n, int add_special, uint32_t **ids, size_t *n_ids,
                  size_t *cap, tok_report *rep, rl_err *err);
// "2 characters with no token (the first U+00F1) were dropped, as Hugging
// Face's tokenizers drops them" into buf; "" when none were.
void tok_report_text(const tok_report *rep, char *buf, size_t size);
// The same with the special tokens the file's post_processor puts around a
// single sequence, as encode(text, add_special_tokens=True): Llama 3.x's
// <|begin_of_text|> before the text (the TemplateProcessing of its released
// files), nothing for Qwen2.5 or SmolLM2. Whether a
// prompt starts with bos is the tokenizer's decision, not the config's.
int tok_encode_special(const tokenizer *t, const char *text, size_t n, uint32_t **ids, size_t *n_ids,
                       size_t *cap, rl_err *err);

enum {
    TOK_SKIP_SPECIAL = 1,   // drop special added tokens (HF skip_special_tokens=True)
    TOK_CONTINUE = 2,       // the ids continue a text already decoded: the bytes that decoding
                            // (that text's ids + ids) adds, without the decoder's start-of-text
                            // rules (Metaspace's dropped leading space, Strip after Fuse);
                            // decoding token by token with TOK_CONTINUE then concatenates to the
                            // bytes of the whole text decoded with TOK_RAW_BYTES (the first
                            // token decoded alone with TOK_RAW_BYTES starts the stream)
    TOK_RAW_BYTES = 4,      // byte-fallback tokens give their bytes even where they are not UTF-8
                            // (implied by TOK_CONTINUE)
};
// Decodes ids into bytes appended to out, as Hugging Face's decode (flags
// above); an id outside the vocabulary is an error. The bytes equal
// tokenizers' string wherever that is not a replacement for ill-formed
// UTF-8: tokenizers turns ill-formed sequences from ByteLevel into U+FFFD,
// here they are returned as they are; a run of byte-fallback tokens (<0xNN>)
// that is not UTF-8 gives one U+FFFD per token as in tokenizers, except
// with TOK_RAW_BYTES or TOK_CONTINUE, which give the raw bytes (a character
// split over tokens decoded one at a time then comes out whole).
int tok_decode(const tokenizer *t, const uint32_t *ids, size_t n, unsigned flags, sbuf *out,
               rl_err *err);

// The pieces the model receives for text, for tests and debugging: after the
// added tokens, the normalizer and the pre-tokenizer, as tokenizers'
// normalize_str and pre_tokenize_str give them (ByteLevel pieces in its
// alphabet). Appended to out as "P <byte count>\n<bytes>\n" per piece and
// "A <id>\n" per added token. 0, or -1 with err as tok_encode.
int tok_pieces(const tokenizer *t, const char *text, size_t n, sbuf *out, rl_err *err);

// The string of token id (its vocabulary string, or an added token's content),
// not NUL-terminated; NULL if the id has no token.
const char *tok_token(const tokenizer *t, uint32_t id, size_t *len);
// Bytes of the longest token string (vocabulary or added token; at least 1).
// A token covers at most that many bytes of normalized text: ByteLevel and
// byte-fallback strings are longer than their bytes, Metaspace's "▁" than
// its space.
size_t tok_longest_token(const tokenizer *t);
// 1 if id is a special added token (tok_decode's skip_special drops those).
int tok_is_special(const tokenizer *t, uint32_t id);

#endif
