// coproc.h — a long-running helper command (sh -c CMD) on one end of a
// socketpair: its standard input and output are our socket, its standard
// error is ours. Bytes queued are written without blocking and the lines it
// writes are read as they come, so the caller (a verifier, an environment)
// never waits for the command unless it asks. Writing to a command that died
// is an error of the protocol above (EPIPE, MSG_NOSIGNAL), never a SIGPIPE.
#ifndef RLPIPE_COPROC_H
#define RLPIPE_COPROC_H

#include <stddef.h>

#include "util.h"

typedef struct coproc coproc;

// Starts the command; `what` names it in every message ("verifier command",
// "environment"). NULL with err if it cannot be started (socketpair, fork).
// A command that is not found shows as a command that exits (status 127).
coproc *cp_start(const char *cmd, const char *what, rl_err *err);

// Queues bytes to write; nothing is written until cp_exchange.
void cp_queue(coproc *c, const void *data, size_t n);
int cp_pending(const coproc *c);   // 1 while queued bytes are not all written

// Called with each whole line the command writes (without its '\n'); a line
// longer than cp_start's caller allows is delivered once it passes line_max
// bytes, for the callback to refuse. 0 to go on, -1 with err to stop.
typedef int cp_line_fn(void *ctx, const char *line, size_t n, rl_err *err);

// Writes what it can of the queued bytes and reads what has arrived, calling
// `line` for each whole line; at the end of the command's output, for the
// rest too when not empty (a last line without its '\n'). Never waits. 0, or
// -1 with err (the callback's, or a read or write that failed).
int cp_exchange(coproc *c, cp_line_fn *line, void *ctx, size_t line_max, rl_err *err);
int cp_eof(const coproc *c);       // the command closed its output (or reset the connection)

// Waits until the command's output can be read, or its input written while
// bytes are queued, for at most ms milliseconds (-1: without end). 0, or -1.
int cp_wait(coproc *c, int ms, rl_err *err);

// Ends the command's input (it reads end of file). 0, or -1 with err.
int cp_close_input(coproc *c, rl_err *err);

// Reaps the command if it has exited, waiting up to wait_ms for it (< 0: as
// long as it takes). 1 reaped, 0 still running.
int cp_reap(coproc *c, long wait_ms);
// Once reaped: 1 if it exited with status 0; and what happened, for messages:
// "exited (status 3)", "was killed by signal 9 (Killed)", with a hint for
// the statuses of sh that mean the command could not be run.
int cp_succeeded(const coproc *c);
const char *cp_status(const coproc *c, char *buf, size_t size);

// s[0..n) quoted for an error: at most 80 bytes, a whole UTF-8 character
// last, control bytes as '?', "..." when cut. buf: at least 88 bytes.
const char *cp_quote(const char *s, size_t n, char *buf, size_t size);

// Milliseconds left before `since + timeout` (clock_now seconds): at least 1
// while time is left, 0 once it has passed; -1 without a timeout (0).
int cp_ms_left(double since, double timeout);

// Closes our end, stops the command if it still runs (SIGTERM, then SIGKILL
// after a second), reaps it, frees c.
void cp_free(coproc *c);

#endif
