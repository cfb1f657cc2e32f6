// tok_json.h — reading the members of tokenizer.json components, with
// errors that name the file, the component and the key.
#ifndef RLPIPE_TOK_JSON_H
#define RLPIPE_TOK_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_regex.h"
#include "util.h"

// A member that is absent or JSON null.
int tok_json_absent(const cJSON *x);
// The string "type" of a component object, or NULL.
const char *tok_json_type(const cJSON *x);
// Member key of obj as a boolean: absent/null -> dflt, or -1 when required;
// another type is an error ("PATH: WHERE.KEY must be true or false").
int tok_json_bool(const char *path, const cJSON *obj, const char *where, const char *key, int dflt, int *out,
                  rl_err *err);
// Member key of obj as a string (its bytes up to the first NUL): required.
int tok_json_string(const char *path, const cJSON *obj, const char *where, const char *key, const char **out,
                    rl_err *err);
// Member key of obj as one character (a string of one code point), as a UTF-8 string.
int tok_json_char(const char *path, const cJSON *obj, const char *where, const char *key, const char **out,
                  rl_err *err);
// Member key of obj as an integer in [0, max].
int tok_json_uint(const char *path, const cJSON *obj, const char *where, const char *key, uint32_t max,
                  uint32_t *out, rl_err *err);
// Member "pattern" of obj, {"String": s} or {"Regex": r}, compiled (a
// String matches itself, a Regex as Oniguruma would); the error names the
// pattern and what in it is not supported.
int tok_json_regex(const char *path, const cJSON *obj, const char *where, tok_re **out, rl_err *err);
// A Replace component (normalizer or decoder): its compiled pattern and
// its content (a copy, *len bytes).
int tok_json_replace(const char *path, const cJSON *obj, const char *where, tok_re **re, char **content,
                     size_t *len, rl_err *err);
// x as an id: a JSON number that is an integer in [0, max). 0, or -1.
int tok_json_id(const cJSON *x, uint32_t max, uint32_t *id);

// Loads one component of a stage (a normalizer, pre-tokenizer, ...) into ctx.
typedef int (*tok_json_load_fn)(void *ctx, const cJSON *x, const char *type, const char *path, const char *where,
                                rl_err *err);
// Checks that x is an object with a string "type"; a "Sequence" has fn load
// each member of its array list_key (where "WHERE.LIST_KEY[i]", Sequences
// inside flattened), anything else is passed to fn with its type.
int tok_json_component(const char *path, const cJSON *x, const char *where, const char *list_key,
                       tok_json_load_fn fn, void *ctx, rl_err *err);

#endif
