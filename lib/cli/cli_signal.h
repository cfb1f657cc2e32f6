// cli_signal.h — SIGINT and SIGTERM ask a tool to stop: cli_stop_requested
// becomes 1, and the tool's loop ends. With CLI_STOP_WAKE a pipe
// (cli_stop_fd) becomes readable too, for a loop that waits in poll. With
// CLI_STOP_WHEN_IDLE the tool's work comes in parts that must not be cut
// short (rl-learn: a step, a version being written): a signal while no part
// is busy exits at once, one while a part is busy exits when the last busy
// part ends (cli_idle); either way with the message of cli_set_stop_message
// and status 0.
#ifndef RLPIPE_CLI_SIGNAL_H
#define RLPIPE_CLI_SIGNAL_H

#include <signal.h>

enum { CLI_STOP_WAKE = 1, CLI_STOP_WHEN_IDLE = 2 };
enum { CLI_BUSY_PARTS = 2 };   // parts numbered 0 and 1

extern volatile sig_atomic_t cli_stop_requested;

// Catches SIGINT and SIGTERM (flags: CLI_STOP_*). A part marked busy before
// this call is busy from the start.
void cli_catch_signals(int flags);
// CLI_STOP_WAKE: the pipe's reading end, readable once a signal came.
int cli_stop_fd(void);

// CLI_STOP_WHEN_IDLE: part begins, or ends (and the tool exits if a signal
// came and no other part is busy). Either thread may call them.
void cli_busy(int part);
void cli_idle(int part);
// What an exit by a signal writes on standard error (a whole line).
void cli_set_stop_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Writes that message and exits with status 0.
_Noreturn void cli_stop_now(void);

#endif
