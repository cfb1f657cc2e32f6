// envproc.h — the environment of multi-turn rollouts (rlpipe-env(5)): a
// long-running command (sh -c CMD, on a coproc.h socketpair) that reads one
// JSON request per line, {"id": N, "turn": T, "messages": [...], ...}, and
// answers each with one JSON object per line, keyed by "id", in any order.
//
// Requests are queued and written without blocking, answers read as they
// come (env_pump between two decode steps): decoding never waits for the
// environment unless the caller asks. The command must flush each answer
// line (python3 -u, flush=True).
//
// Errors of the protocol end it (every later call repeats the error): a
// line that is not a JSON object, an answer with no unsigned integer "id" or
// with the id of no request waiting, the command closing its output or
// exiting while requests wait. A request not answered within the timeout is
// not such an error: it is handed to the caller (env_expired), which fails
// that rollout alone; its answer, should it come later, is handed over
// marked late. What an answer means (messages, done, reward) is the caller's.
#ifndef RLPIPE_ENVPROC_H
#define RLPIPE_ENVPROC_H

#include <stddef.h>
#include <stdint.h>

#include "records/record.h"

typedef struct envproc envproc;

// An answer line longer than this (bytes) is refused.
#define ENV_LINE_MAX ((size_t)64 << 20)

// Parses one answer line (without its '\n') into r and *id: a JSON object
// with an unsigned integer "id". 0; 1 for a blank line (no answer); -1 with
// err (what is wrong, the line quoted).
int env_parse_answer(const char *line, size_t n, rec_t *r, uint64_t *id, rl_err *err);

// Starts the command. timeout: seconds each request may wait for its answer,
// and the command to exit once its input ends (0: no limit). NULL with err.
envproc *env_start(const char *cmd, double timeout, rl_err *err);

// Queues the request of rollout id: json[0..n), one JSON object (a '\n' is added).
void env_send(envproc *e, uint64_t id, const char *json, size_t n);

// Writes what it can and reads the answers that have arrived. wait_ms 0:
// never waits; > 0 or -1 (without end): waits that long for at least one
// answer or expiry while requests wait. 0, or -1 with err.
int env_pump(envproc *e, int wait_ms, rl_err *err);

// The oldest answer not yet taken: its id, the object (valid until the next
// env_next or env_free) and late = 1 when its request had expired. 1, or 0
// when none waits.
int env_next(envproc *e, uint64_t *id, const rec_t **answer, int *late);
// A request whose timeout passed without an answer (oldest first). 1 or 0.
int env_expired(envproc *e, uint64_t *id);

size_t env_waiting(const envproc *e);   // requests sent and not answered
// The rollout an error of env_pump or env_finish concerns (the oldest
// request waiting when the command ended), or UINT64_MAX.
uint64_t env_error_id(const envproc *e);
double env_timeout(const envproc *e);

// Closes the command's input and waits (the timeout) for it to exit with
// status 0. Requests still waiting are not answered: the caller ends first.
int env_finish(envproc *e, rl_err *err);
void env_free(envproc *e);

#endif
