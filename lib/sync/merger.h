// merger.h — the sources of rl-cat --merge in one merge (records/merge.h):
// record-stream files, and addresses listened at (recnet.h) whose
// authenticated connections join the merge as they come.
#ifndef RLPIPE_MERGER_H
#define RLPIPE_MERGER_H

#include "records/merge.h"
#include "sync/net.h"
#include "util.h"

typedef struct {
    mrg_opts merge;
    const sbuf *token;     // of the connections (NULL: none, unix: only)
    int senders;           // connections each address takes
    // merge.start_timeout also bounds the wait for them: those that have not
    // come by then are failed (below) as missing.
    const char *tool;      // who answers, for the hello
    // On a listener's thread: refused(ctx, msg), a peer refused (the
    // listener goes on); failed(ctx, missing, msg), the socket failed and
    // `missing` connections expected will not come (the merge stops
    // awaiting them).
    void (*refused)(void *ctx, const char *msg);
    void (*failed)(void *ctx, int missing, const char *msg);
    void *ctx;
} merger_opts;

typedef struct merger merger;

merger *merger_new(const merger_opts *o);
// Listens at a for o->senders connections: the address listened at, or NULL
// with err. Called before any other thread runs, so that the socket file is
// in the at-exit list first.
const char *merger_listen(merger *g, net_addr *a, rl_err *err);
void merger_add_path(merger *g, const char *path);
// The merge, for mrg_next, mrg_fault and mrg_summary.
mrg_t *merger_merge(merger *g);
// The source a merged record came from, into st (its name "?" when the
// record does not say).
void merger_origin(merger *g, const rec_t *rec, mrg_source_stats *st);
// Member headers read from all the sources.
uint64_t merger_members(merger *g);
// Peers refused so far; 1 once a listener has failed.
int merger_refused(merger *g);
int merger_failed(merger *g);
// Frees the merge, then waits for the listeners.
void merger_free(merger *g);

#endif
