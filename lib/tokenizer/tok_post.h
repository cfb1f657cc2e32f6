// tok_post.h — tokenizer.json post-processors for a single sequence
// (TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel and
// Sequences of them): the special tokens put around a text's ids when
// encoding with add_special_tokens=True.
#ifndef RLPIPE_TOK_POST_H
#define RLPIPE_TOK_POST_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct tok_post tok_post;

// Loads the "post_processor" member x of file path (absent or null: *out =
// NULL, nothing added). -1 with err naming the file and the key.
int tok_post_load(const cJSON *x, const char *path, tok_post **out, rl_err *err);
void tok_post_free(tok_post *pp);

// Replaces ids[start..*n_ids) (a text's ids) by the processor's single
// template around them (growing *ids with xrealloc).
void tok_post_apply(const tok_post *pp, uint32_t **ids, size_t start, size_t *n_ids, size_t *cap);

#endif
