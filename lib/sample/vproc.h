// vproc.h — an external verifier: a long-running command (sh -c CMD) that
// reads one JSON object per line on its standard input,
//     {"prompt": "...", "completion": "...", "answer": "..."}
// ("answer" only when the prompt has one) and writes one reward per line on
// its standard output, in the same order: a JSON number (a finite float;
// also true = 1, false = 0), white space around it ignored.
//
// Requests are queued and written without blocking, and replies read as they
// come, by vp_pump between two decode steps: generation never waits for the
// verifier unless the caller asks (vp_pump with block). The command's stdin
// and stdout are one end of a socketpair, so writing to a verifier that died
// is an error (EPIPE, MSG_NOSIGNAL), never a SIGPIPE. Its stderr is ours.
//
// The command must flush each reply line (python3 -u, fflush, stdbuf -oL):
// a reply held in its buffer is a reply rl-sample waits for.
//
// A verifier that hangs is an error, not a stall: while requests are
// outstanding, it must answer one within timeout seconds of the previous
// answer (or of the first request sent while none was outstanding), and at
// the end exit within timeout seconds of its input closing.
#ifndef RLPIPE_VPROC_H
#define RLPIPE_VPROC_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct vproc vproc;

// Starts the command. NULL with err if it cannot be started (fork, socketpair).
// A command that is not found shows as a verifier that exits (status 127).
// timeout: seconds (see above); 0 = wait as long as it takes.
vproc *vp_start(const char *cmd, double timeout, rl_err *err);

// Queues a request; nothing is written until vp_pump. answer may be NULL.
// Strings are UTF-8 and are JSON-escaped here.
void vp_send(vproc *v, const char *prompt, size_t np, const char *completion, size_t nc,
             const char *answer, size_t na);

// Writes what it can of the queued requests and reads the replies that have
// arrived. block = 0: never waits. block = 1: waits until at least one more
// reply has arrived (returns at once if none is outstanding). 0, or -1 with
// err when the verifier died or closed its output with requests outstanding,
// wrote a line that is not a finite number, or wrote more lines than it was
// sent; err names the request by its 0-based index in sending order
// ("verifier command: request 12: reply 'abc' is not a number"). A reply line
// is at most 4096 bytes; a last line without its '\n' counts when the command
// ends. A verifier past its timeout is an error too ("verifier command:
// request 12: no reply in 60 s"). After an error, every later vp_pump and
// vp_finish repeats it.
int vp_pump(vproc *v, int block, rl_err *err);

uint64_t vp_sent(const vproc *v);      // requests queued so far
uint64_t vp_answered(const vproc *v);  // replies received so far
// The reward of request i, i < vp_answered (rewards are kept until vp_free
// or vp_forget); any other i aborts, as a caller's bug.
double vp_reward(const vproc *v, uint64_t i);
// Drops the rewards of requests < i (the caller has used them); vp_reward(j) stays valid for j >= i.
// An i beyond vp_answered counts as vp_answered.
void vp_forget(vproc *v, uint64_t i);

// Waits for every outstanding reply, closes the command's input, and waits
// for it to exit. 0, or -1 with err if a reply is missing or bad, or the
// command exits with a non-zero status or on a signal (after answering), or
// does not exit within the timeout once its input is closed.
int vp_finish(vproc *v, rl_err *err);
// Kills the command if it still runs (SIGTERM), reaps it, frees v.
void vp_free(vproc *v);

#endif
