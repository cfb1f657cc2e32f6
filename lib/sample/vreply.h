// vreply.h — one reply line of an external verifier (rl-sample
// --verifier-cmd; the protocol is in vproc.h), parsed and checked.
//
// A reply is, white space around it ignored:
//   a JSON number     the reward: a finite float ("1", "0.25", "-3e-2");
//   true, false       the reward 1 or 0;
//   a JSON object     {"reward": R, "rewards": {"NAME": X, ...}, "pred": "P"}:
//                     "reward" (required) a finite number; "rewards"
//                     (optional) named parts of the reward, each a finite
//                     number under a non-empty name, for the record's
//                     "rewards"; "pred" (optional; a string, or null for
//                     none) the prediction the verifier read from the
//                     completion, for majority votes (maj@k). Any other key
//                     is an error (a misspelt key is not silently lost).
#ifndef RLPIPE_VREPLY_H
#define RLPIPE_VREPLY_H

#include <stddef.h>

#include "util.h"

typedef struct {
    double reward;
    size_t n;             // named parts ("rewards"), in the reply's order
    char **names;         // (n) NUL-terminated, UTF-8, none empty, no two equal
    double *values;       // (n) finite
    char *pred;           // NUL-terminated UTF-8 (pred_len bytes, no NUL inside), or NULL: none
    size_t pred_len;
} vr_reply;

// Parses line[0..n) (without its '\n') into r, which holds nothing on entry
// (zeroed, or vr_free'd). 0, or -1 with err saying what was wrong with the
// reply and quoting it ("reply '{\"rewards\": 1}' has no \"reward\""); r
// then holds nothing.
int vr_parse(const char *line, size_t n, vr_reply *r, rl_err *err);
void vr_free(vr_reply *r);

#endif
