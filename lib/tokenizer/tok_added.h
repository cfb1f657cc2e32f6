// tok_added.h — the added tokens of tokenizer.json (special or not, with
// their single_word, lstrip, rstrip and normalized flags): their ids as
// Hugging Face tokenizers assigns them, and finding them in a text as
// tokenizers 0.20.3 does before the normalizer and the model run.
#ifndef RLPIPE_TOK_ADDED_H
#define RLPIPE_TOK_ADDED_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_map.h"
#include "tokenizer/tok_normalize.h"
#include "tokenizer/tok_regex.h"
#include "util.h"

typedef struct tok_added tok_added;

// Loads the "added_tokens" member (absent or null: none). model_vocab and
// model_size give the ids tokenizers assigns (a content in the vocabulary
// keeps its id; a new one gets the next id past the vocabulary and the added
// tokens so far): a different id in the file is an error. Contents of
// normalized tokens are normalized by nz to find them in normalized text.
tok_added *tok_added_load(const cJSON *list, const char *path, const tok_map *model_vocab, size_t model_size,
                          const tok_normalizer *nz, rl_err *err);
void tok_added_free(tok_added *ad);

const tok_map *tok_added_contents(const tok_added *ad);  // content -> id
int tok_added_is_special(const tok_added *ad, uint32_t id);
size_t tok_added_n_ids(const tok_added *ad);             // 1 + the largest added id (0 if none)
// The content of added token id, or NULL if id is not one.
const char *tok_added_content(const tok_added *ad, uint32_t id, size_t *len);

// A text cut into added tokens (id) and text between them (id TOK_NO_ID).
typedef struct {
    size_t a, b;
    uint32_t id;
} tok_cut;
typedef struct {
    tok_cut *cut;
    size_t n, cap;
} tok_cuts;

// Cuts s[0..n) by the added tokens of one pass: pass 0, those with
// normalized false, in the raw text; pass 1, the normalized ones, in
// normalized text. Matches are leftmost-longest and non-overlapping; a
// single_word token next to a word character is not one (and the text it
// covered stays text); lstrip and rstrip take the white space on that side
// into the token. The cuts cover s in order; text cuts are never empty.
void tok_added_cut(const tok_added *ad, int pass, tok_re_scratch *sc, const uint8_t *s, size_t n, tok_cuts *out);

#endif
