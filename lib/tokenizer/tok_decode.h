// tok_decode.h — tokenizer.json decoders (ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip and Sequences of them), turning token strings
// into text as Hugging Face tokenizers 0.20.3 does.
#ifndef RLPIPE_TOK_DECODE_H
#define RLPIPE_TOK_DECODE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_regex.h"
#include "util.h"

typedef struct tok_decoder tok_decoder;

// Loads the "decoder" member x of file path. Absent or null: *out = NULL
// (tokenizers then joins the token strings with spaces). -1 with err naming
// the file and the component when malformed or not supported.
int tok_dec_load(const cJSON *x, const char *path, tok_decoder **out, rl_err *err);
void tok_dec_free(tok_decoder *d);

typedef struct {
    size_t off, len;  // in the work's text
    int fused;        // made by joining tokens (Fuse, ByteLevel): it starts where the text starts
} tok_dec_item;

// Working memory (zero it before first use).
typedef struct {
    sbuf text[2];
    tok_dec_item *item[2];
    size_t n[2], cap[2];
    int cur;  // text[cur], item[cur][0..n[cur]) is the current list
    tok_matches m;
    sbuf run;  // ByteFallback: the bytes of a run of byte tokens
} tok_dec_work;
void tok_dec_work_free(tok_dec_work *w);

// Appends a token string to the list the next tok_dec_run decodes.
void tok_dec_push(tok_dec_work *w, const char *s, size_t n);

// Decodes the pushed tokens (then forgets them), appending the text to out.
// cont: the tokens continue a text decoded before (TOK_CONTINUE): the rules
// for the start of a text (Metaspace dropping its replacement in the first
// token, Strip on joined tokens) and for its end (Strip's stop on joined
// tokens) are not applied. raw: ByteFallback gives each byte token's byte;
// otherwise a run of byte tokens that is not UTF-8 gives one U+FFFD per
// token, as tokenizers does. ByteLevel gives its bytes as they are (where
// tokenizers replaces ill-formed UTF-8 by U+FFFD).
int tok_dec_run(const tok_decoder *d, tok_dec_work *w, tok_re_scratch *sc, int cont, int raw, sbuf *out,
                rl_err *err);

#endif
