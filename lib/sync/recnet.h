// recnet.h — record streams over sockets: rl-cat --to sends its output to an
// address, and rl-cat --merge takes each authenticated connection to its
// tcp: or unix: address as one more source (records/merge.h). One stream per
// connection, on the records channel of push.h:
//
//  1. listener -> sender: the greeting, "RLPR", protocol 1, flags, nonce;
//  2. only when authentication is required, sender -> listener:
//     HMAC-SHA256(token, "rlpipe records 1" || nonce), compared in constant
//     time; a wrong one gets {ok: false, error} and the connection is closed;
//  3. listener -> sender, message {ok: true, receiver: "rl-cat 0.1.0"};
//  4. sender -> listener: a record stream (rlpipe-records(5)), as long as it
//     lasts; then the sender shuts down its sending side;
//  5. listener -> sender, message {ok: true, records: N} once it has read the
//     stream to its clean end, or {ok: false, error} when the stream broke
//     (truncated, corrupt, refused by the merge); then it closes.
#ifndef RLPIPE_RECNET_H
#define RLPIPE_RECNET_H

#include <stdint.h>

#include "sync/net.h"
#include "util.h"

// Seconds between two tries of an address nobody listens at (yet).
#define RNET_POLL 0.2

// ---- The sender ----------------------------------------------------------------

// Connects to `to`, trying again every RNET_POLL seconds for `retry` seconds
// while nobody listens there (0: one try), and takes steps 1-3 (token NULL:
// none offered). The descriptor, ready for the stream, or -1 with err.
int rnet_connect(const net_addr *to, const sbuf *token, double retry, rl_err *err);
// Steps 4-5 once the stream is written: shuts down the sending side and waits
// (without a limit: a merge in rounds may read a fast sender late) for the
// listener's answer. 0 with *records, what it read; -1 with err.
int rnet_finish(int fd, uint64_t *records, rl_err *err);
// After a failed write: the listener's error if it sent one within `timeout`
// seconds, into buf (size bytes): 1; 0 if none came.
int rnet_refusal(int fd, double timeout, char *buf, size_t size);

// ---- The listener --------------------------------------------------------------

typedef struct {
    const sbuf *token;          // NULL: no authentication (unix sockets only)
    int expect;                 // authenticated connections to take; then the socket closes
    // Seconds from rnet_listen for all of them to come (0: no limit): then
    // the socket closes and fails (failed below) with those still missing.
    double start_timeout;
    const char *tool;           // who answers, for the hello ("rl-cat")
    // Called on the listener's thread. An authenticated connection, named
    // "ADDR from PEER": one more source, its descriptor now the callee's.
    void (*source)(void *ctx, int fd, const char *name);
    // A peer refused (the message names the address and the peer; the
    // listener goes on).
    void (*refused)(void *ctx, const char *msg);
    // The socket failed: `missing` expected connections will not come.
    void (*failed)(void *ctx, int missing, const char *msg);
    void *ctx;
} rnet_opts;

typedef struct rnet rnet_t;

// Listens at a (a->port set when it was 0) and accepts on a thread of its own.
// NULL with err when it cannot listen.
rnet_t *rnet_listen(net_addr *a, const rnet_opts *o, rl_err *err);
const char *rnet_address(const rnet_t *l);
// Waits for the thread, which ends after the last connection expected (or a
// failure), and frees.
void rnet_join(rnet_t *l);

// Step 5: the listener's last word on a connection whose stream the merge is
// done with (error NULL: read to its clean end, `records` records), then
// closes it. An mrg_end_fn (records/merge.h).
void rnet_source_end(void *ctx, int fd, const char *error, uint64_t records);

#endif
