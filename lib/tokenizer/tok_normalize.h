// tok_normalize.h — tokenizer.json normalizers (NFC, NFKC, NFD, NFKD,
// Lowercase, Strip, Prepend, Replace and Sequences of them), as Hugging Face
// tokenizers 0.20.3 applies them.
#ifndef RLPIPE_TOK_NORMALIZE_H
#define RLPIPE_TOK_NORMALIZE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_regex.h"
#include "util.h"

typedef struct tok_normalizer tok_normalizer;

// Loads the "normalizer" member x of file path. Absent, null or an empty
// Sequence: *out = NULL (nothing to do). -1 with err naming the file and the
// component when it is malformed or not supported.
int tok_norm_load(const cJSON *x, const char *path, tok_normalizer **out, rl_err *err);
void tok_norm_free(tok_normalizer *n);

// Working memory of tok_norm_apply (zero it before first use).
typedef struct {
    sbuf tmp;
    int32_t *cp;  // code points of the Unicode normalisations
    size_t cp_cap;
    tok_matches m;
} tok_norm_work;
void tok_norm_work_free(tok_norm_work *w);

// Appends the normalisation of s[0..n) (valid UTF-8) to out. *start_moved is
// set to 1 when the normalized text no longer begins at the original's first
// character (a leading character was deleted: Strip, or a Replace by ""),
// which decides Metaspace's prepend_scheme "first" as tokenizers' offsets do.
int tok_norm_apply(const tok_normalizer *nz, tok_norm_work *w, tok_re_scratch *sc, const uint8_t *s, size_t n,
                   sbuf *out, int *start_moved, rl_err *err);

#endif
