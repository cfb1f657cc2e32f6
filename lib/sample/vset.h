// vset.h — rl-sample's external verifiers as one: a co-process (vproc.h) per
// --verifier-cmd, their names and weights (--reward-weights), and what a
// sample's record gets from their replies (vreply.h).
//
// An argument NAME=CMD names its verifier when it begins with a name,
// [A-Za-z_][A-Za-z0-9_]*, and '=' right after it; any other argument is a
// bare command, run as given ("python3 v.py --x=1" is bare). A bare command
// that begins with an environment assignment ("K=1 python3 v.py") would be
// read as a name: write "env K=1 python3 v.py", or name it ("acc=K=1 ...").
// One bare command may be given alone; several verifiers are each named, and
// their names differ.
//
// The record of a sample gets, once every verifier has answered for it:
//   reward   sum over the verifiers of W_NAME * reward_NAME, in the order
//            they were given (W: --reward-weights, default 1; a bare
//            command's reward is the reward);
//   rewards  a map: NAME -> reward_NAME for each named verifier, and for each
//            part SUB of a verifier's own "rewards", NAME.SUB -> its value
//            (a bare command's parts under SUB alone); absent when empty;
//   pred     the "pred" of the verifier that gave one; two verifiers giving
//            one for the same sample is an error.
#ifndef RLPIPE_VSET_H
#define RLPIPE_VSET_H

#include <stddef.h>
#include <stdint.h>

#include "records/record.h"
#include "sample/vproc.h"

typedef struct vset vset;

vset *vs_new(void);
// Kills the verifiers still running (vp_free) and frees s.
void vs_free(vset *s);

// Adds a verifier, NAME=CMD or CMD (see above). 0, or -1 with err: an empty
// command, a name given twice, a bare command with others.
int vs_add(vset *s, const char *arg, rl_err *err);
// --reward-weights "NAME=W,NAME=W,...", after every vs_add: W a finite
// number. 0, or -1 with err: a name no verifier has, a name given twice, a
// bare command (it has no name), a W that is no number.
int vs_weights(vset *s, const char *list, rl_err *err);
size_t vs_count(const vset *s);

// Starts every verifier (timeout: vp_start). 0, or -1 with err.
int vs_start(vset *s, double timeout, rl_err *err);
// Queues one request line (vp_request) for every verifier.
void vs_send(vset *s, const void *line, size_t n);
uint64_t vs_sent(const vset *s);
uint64_t vs_answered(const vset *s);   // requests every verifier has answered
// Writes and reads without waiting (block 0), or until vs_answered grows or
// nothing is outstanding (block 1). 0, or -1 with err (vp_pump's).
int vs_pump(vset *s, int block, rl_err *err);
// Sets "reward", "rewards" and "pred" of rec from the replies to request i
// (i < vs_answered). 0, or -1 with err.
int vs_apply(vset *s, uint64_t i, rec_t *rec, rl_err *err);
// Drops the replies to requests < i.
void vs_forget(vset *s, uint64_t i);
// The request the last error of vs_pump, vs_apply or vs_finish is about.
uint64_t vs_error_request(const vset *s);
// vp_finish of every verifier. 0, or -1 with the first error.
int vs_finish(vset *s, rl_err *err);

#endif
