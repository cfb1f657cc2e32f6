// tok_pretok.h — tokenizer.json pre-tokenizers (Split, ByteLevel, Digits,
// Metaspace, Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit
// and Sequences of them), splitting and rewriting the pieces the model then
// encodes, as Hugging Face tokenizers 0.20.3 does.
#ifndef RLPIPE_TOK_PRETOK_H
#define RLPIPE_TOK_PRETOK_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_regex.h"
#include "util.h"

typedef struct tok_pretok tok_pretok;

// Loads the "pre_tokenizer" member x of file path (absent or null: no
// pre-tokenizer, *out = NULL). -1 with err naming the file and the component.
int tok_pretok_load(const cJSON *x, const char *path, tok_pretok **out, rl_err *err);
void tok_pretok_free(tok_pretok *pt);

// 1 when the last step maps bytes to the ByteLevel alphabet: the pieces left
// are raw bytes, which the model maps (tok_bpe_encode's bytes).
int tok_pretok_bytes_out(const tok_pretok *pt);
// 1 when every step works on bytes (ByteLevel without its regex): the text
// need not be UTF-8.
int tok_pretok_byte_safe(const tok_pretok *pt);

// A piece: w->text[off..off+len). first: it begins at offset 0 of the
// original text (Metaspace's prepend_scheme "first").
typedef struct {
    size_t off, len;
    int first;
} tok_piece;

// Working memory: the pieces, in and out of tok_pretok_apply (zero it before
// first use).
typedef struct {
    sbuf text;
    tok_piece *p, *q;  // the pieces; q: the next list
    size_t n, cap, nq, capq;
    tok_matches m;
    struct tok_split *split;  // (offsets, is_match) of the piece being split
    size_t split_cap;
} tok_pretok_work;
void tok_pretok_work_free(tok_pretok_work *w);
// Sets the pieces to the one piece s[0..n) (first as given).
void tok_pretok_start(tok_pretok_work *w, const uint8_t *s, size_t n, int first);

// Runs the pre-tokenizer on w's pieces. 0, or -1 with err (a regex failure).
int tok_pretok_apply(const tok_pretok *pt, tok_pretok_work *w, tok_re_scratch *sc, rl_err *err);

#endif
