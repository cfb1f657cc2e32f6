// vproc.h — an external verifier: a long-running command (sh -c CMD) that
// reads one JSON object per line on its standard input,
//     {"prompt": "...", "completion": "...", "answer": "...", ...}
// and writes one reply per line on its standard output, in the same order:
// a reward (a JSON number, true or false) or an object with the reward, its
// named parts and the prediction read from the completion (vreply.h).
// A request holds "prompt" (the prompt's text; for a conversation, the text
// its chat template rendered), "completion" (the text the verifier judges),
// and every other key of the prompt as the prompt file gave it ("answer",
// "messages", a code task's tests, ...), in the prompt's order.
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

#include "records/record.h"
#include "sample/vreply.h"
#include "util.h"

typedef struct vproc vproc;

// Starts the command. NULL with err if it cannot be started (fork, socketpair).
// A command that is not found shows as a verifier that exits (status 127).
// what names it in every message ("verifier command", "verifier 'acc'").
// timeout: seconds (see above); 0 = wait as long as it takes.
vproc *vp_start(const char *cmd, const char *what, double timeout, rl_err *err);

// The keys of a request that come from the prompt: every key of the prompt
// record but "prompt" and "completion", as JSON members each after a comma
// (',"answer":"12","tests":[...]'), appended to out; the same for each
// sample of the prompt. 0, or -1 with err naming the key whose value JSON
// cannot hold (msgpack bin or ext, from a record stream).
int vp_prompt_keys(const rec_t *prompt, sbuf *out, rl_err *err);
// The request line (with its '\n') of one sample into line (replaced):
// prompt and completion UTF-8, JSON-escaped here, then keys (vp_prompt_keys).
void vp_request(sbuf *line, const char *prompt, size_t np, const char *completion, size_t nc, const char *keys,
                size_t nk);
// Queues a request line; nothing is written until vp_pump.
void vp_send(vproc *v, const void *line, size_t n);

// Writes what it can of the queued requests and reads the replies that have
// arrived. block = 0: never waits. block = 1: waits until at least one more
// reply has arrived (returns at once if none is outstanding). 0, or -1 with
// err when the verifier died or closed its output with requests outstanding,
// wrote a line that is no reply (vr_parse), or wrote more lines than it was
// sent; err names the request by its 0-based index in sending order
// ("verifier command: request 12: reply 'abc' is not a number, ..."). A reply line
// is at most 4096 bytes; a last line without its '\n' counts when the command
// ends. A verifier past its timeout is an error too ("verifier command:
// request 12: no reply in 60 s"). After an error, every later vp_pump and
// vp_finish repeats it.
int vp_pump(vproc *v, int block, rl_err *err);

uint64_t vp_sent(const vproc *v);      // requests queued so far
uint64_t vp_answered(const vproc *v);  // replies received so far
// The reply to request i, i < vp_answered (replies are kept until vp_free
// or vp_forget); any other i aborts, as a caller's bug.
const vr_reply *vp_reply(const vproc *v, uint64_t i);
// Drops the replies to requests < i (the caller has used them); vp_reply(j) stays valid for j >= i.
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
