// syncer.h — rl-sync's fan-out of weight pushes (pusher.h) to several
// receivers: each receiver has a thread of its own, so that a slow one delays
// no other, and never has two pushes in flight. The caller offers versions as
// they appear; a thread pushes the newest version offered that its receiver
// does not hold; the versions offered while it was busy are passed over
// (not pushed; counted: the versions between two that a receiver got). A receiver nobody listens at is tried again every
// poll interval. In watch mode, a receiver that has been reached is probed
// every poll interval (connect, close: a receiver ignores a connection closed
// before it answers its greeting), to tell when it has gone away or is back.
#ifndef RLPIPE_SYNCER_H
#define RLPIPE_SYNCER_H

#include <stddef.h>
#include <stdint.h>

#include "sync/net.h"
#include "sync/pusher.h"

typedef enum {
    SYNC_PUSHED,    // rep: a version pushed, verified and installed by the receiver
    SYNC_HELD,      // rep: the receiver held the version, or a newer one, already (rep->had)
    SYNC_FAILED,    // error: a push failed; one-shot: also nobody listened within the retry time
    SYNC_WAITING,   // error: nobody listens (yet); tried again every poll interval (said once)
    SYNC_GONE,      // a receiver reached before listens no more
} sync_kind;

typedef struct {
    sync_kind kind;
    const char *to;              // the receiver, as net_format writes it
    uint64_t version;            // the version pushed or offered
    const push_report *rep;      // PUSHED, HELD
    const char *error;           // FAILED, WAITING
} sync_event;

typedef struct {
    const net_addr *to;          // the receivers
    size_t nto;
    const sbuf *token;           // shared secret, or NULL
    double timeout;              // seconds a push may make no progress (<= 0: PUSH_TIMEOUT)
    double poll;                 // seconds between tries of an unreachable receiver, and between probes
    int watch;                   // 1: until sync_stop; 0: the first version offered, then each thread ends
    double retry;                // one-shot: seconds during which an unreachable receiver is tried again
    // Called from the receivers' threads, one call at a time.
    void (*event)(void *ctx, const sync_event *e);
    void *ctx;
} sync_opts;

typedef struct {
    uint64_t pushes, held, passed_over, failures;   // pushes done, versions found held, passed over, failed
    uint64_t bytes;                                 // tensor data pushed
    double seconds;                                 // of the pushes done (connect to result), summed
    size_t pushing, waiting, gone, ended;           // receivers now: in a push, never reached, gone, finished (one-shot)
} sync_stats;

typedef struct syncer sync_t;

sync_t *sync_start(const sync_opts *o);
// Makes dir (a model directory holding `version`) the newest version; an offer
// no newer than the previous one is ignored.
void sync_offer(sync_t *s, const char *dir, uint64_t version);
// Readable once something in sync_get_stats, sync_all_hold or sync_all_gone
// may have changed since the last sync_get_stats.
int sync_fd(const sync_t *s);
sync_stats sync_get_stats(sync_t *s);
// 1 when every receiver holds version v or a newer one.
int sync_all_hold(sync_t *s, uint64_t v);
// 1 when at least one receiver has been reached and every receiver that has
// been reached listens no more.
int sync_all_gone(sync_t *s);
// Stops the threads (pushes in flight are dropped; the receivers keep their
// weights), waits for them and frees everything. The stats at the end.
sync_stats sync_stop(sync_t *s);

#endif
