// receiver.h — the receiving end of weight pushes (push.h, doc/design.md §5), for a
// tool that keeps using its model while new weights arrive (rl-sample,
// rl-ratio with --listen). A thread accepts one push at a time, receives it
// into a standby copy of the weights (converted to the model's dtype) while
// the tool goes on, verifies its checksum, and has it swapped in at the next
// boundary between two uses of the model: the tool brackets each use with
// rcv_hold / rcv_release, and a verified push waits for rcv_hold, or is
// installed at once by the receiving thread while the model is released.
// A push that breaks off, fails its checksum, does not fit the model or is not
// newer than the weights held is refused with a warning; nothing changes.
// An adapter push (push_lora.h) is received into host memory and merged into
// the standby weights from the base's files (model_weights_fill) before it
// waits for the boundary: the swap costs what a full push's does.
#ifndef RLPIPE_RECEIVER_H
#define RLPIPE_RECEIVER_H

#include <signal.h>
#include <stdio.h>
#include <stdint.h>

#include "model/model.h"
#include "sync/net.h"

typedef struct {
    const char *listen;       // unix:PATH or tcp:HOST:PORT (net.h)
    const char *token_file;   // shared secret (push.h); NULL: none, which tcp refuses
    const char *tool;         // "rl-sample": names the receiver in its hello and messages
    // The model directory the model was loaded from (model_load, or the base
    // of model_load_merged), or NULL: adapter pushes are merged into its
    // weights, which stay open (mapped: page cache, not resident memory)
    // while the receiver runs. NULL: the receiver takes no adapter pushes.
    const char *base;
    int quiet;                // no line on stderr per version installed
    double timeout;           // seconds a push may make no progress (<= 0: PUSH_TIMEOUT)
    // NULL, or a JSON line per version installed: t (seconds since rcv_start),
    // version, from (the version it replaced), bytes, recv_s, wait_s, stall_s,
    // for an adapter push adapter: true and merge_s, and the sender's figures of the update when it measured them (push.h):
    // sampled, moved, changed, kept, along (survival.h).
    FILE *metrics;
    const char *metrics_name; // for messages
} rcv_opts;

typedef struct rcv rcv_t;

// The checks rcv_start makes before it listens, for a tool's usage errors:
// the address parses, and tcp has a token file. 0, or -1 with err.
int rcv_check_listen(const char *listen, const char *token_file, rl_err *err);

// Listens and starts the receiving thread; `version` is the model's. The
// model is held (by the caller's thread) until the first rcv_release.
rcv_t *rcv_start(model_t *m, uint64_t version, const rcv_opts *o, rl_err *err);
// The address listened on (a tcp port 0 resolved), as net_format writes it.
const char *rcv_address(const rcv_t *r);

// The caller is about to use the model: a verified push waiting is installed
// first. Returns the version of the weights now in the model.
uint64_t rcv_hold(rcv_t *r);
// The caller stops using the model (before it may block: on input, on output,
// while waiting): pushes verified meanwhile are installed at once.
void rcv_release(rcv_t *r);
// Released until weights of version >= v are installed; returns the version,
// -1 when *stop became non-zero or the receiver failed, or -2 when out_fd (a
// pipe or socket the caller writes; -1: none) lost its reader, so that nothing
// it would make could be delivered. The caller holds the model afterwards.
int64_t rcv_wait(rcv_t *r, uint64_t v, const volatile sig_atomic_t *stop, int out_fd);

typedef struct {
    uint64_t installed, refused;     // pushes
    uint64_t bytes;                  // data bytes of the pushes installed
    uint64_t version;                // of the weights in the model
    double stall_s, stall_max_s;     // the holder blocked by swaps (total, the longest)
    double wait_s;                   // in rcv_wait: generation paused for weights
    int metrics_errno;               // writing rcv_opts.metrics failed (a warning said so)
} rcv_stats;
rcv_stats rcv_get_stats(rcv_t *r);

// A process whose receiver ends it by exit() (an error), or by SIGINT,
// SIGTERM or SIGPIPE (its reader gone) at their default action, leaves no
// socket file behind: the unix socket's file is then removed (and the signal,
// handled for that, kills the process as before). One receiver per process.
void rcv_remove_at_exit(const rcv_t *r);

// Stops the thread (a push in progress is dropped), closes the socket and
// removes its file, frees the standby weights. NULL is a no-op.
void rcv_stop(rcv_t *r);

#endif
