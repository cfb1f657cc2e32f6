// tok_unicode.h — UTF-8 and the Unicode predicates that the tokenizer's
// stages (normalizers, pre-tokenizers, models, decoders, added tokens) share.
#ifndef RLPIPE_TOK_UNICODE_H
#define RLPIPE_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

// Decodes the UTF-8 character at s[0..n) (n > 0): its length, and the code
// point in *cp. Meant for valid UTF-8; other bytes give some code point and
// a length within n.
size_t tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);
// Writes cp as UTF-8 into out[4]; returns its length.
size_t tok_utf8_put(uint32_t cp, uint8_t out[4]);
// 1 if cp is in one of the sorted, disjoint ranges r[0..n) ({first, last}).
int tok_in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n);
// Rust's char::is_whitespace (the White_Space property), which tokenizers'
// Strip, WhitespaceSplit and added-token stripping use.
int tok_is_white_space(uint32_t cp);

#endif
