// merge.h — several record streams read at once into one, whole groups at a
// time (rl-cat --merge; doc/design.md §5, several samplers and one learner).
//
// Each source is read on a thread of its own, so that a slow one holds up no
// other. A source's records are held until their group is complete: a group
// is a run of consecutive records with the same "group" (a record without one
// is a group of its own), complete when a record of another group follows,
// when its member ends, when the source ends cleanly, or once as many records
// as its member header's "sampling"."group" says have arrived (as rl-learn
// completes groups, learner.h lrn_member). Complete groups go out whole:
//
//   - round 0: in the order they complete;
//   - round N: in rounds of N groups of every live source, and within a
//     round in the order they complete. A source is live from the start (a
//     connection expected with mrg_expect from round 0) until it has ended
//     and its groups have gone out. With K sources each sampling for
//     rl-learn --batch B with --batch B/K, and N groups of B/K records, the
//     learner's batch b is round b: a sampler's group j is trained at version
//     v0 + j / N, as its admission (sample/admission.h) assumes.
//
// Out, a record's "group" is its group's index in the merged stream (0, 1,
// ...: groups of different sources that had the same "group" stay apart),
// and two keys are added: "merge_source", the source's index (in the order
// the sources were added), and "source_group", the "group" it had there. A
// record without "group" only gets "merge_source".
//
// The merged stream's header is the first member header to arrive. Every
// member header of every source must agree with it on "kind" and on
// "sampling"."group" (both absent, or equal).
//
// A source that cannot be opened, breaks (truncated, corrupt, a record whose
// "group" is not an unsigned integer, a connection lost) or whose header
// disagrees is a fault: the merge reports it (mrg_next: MRG_FAULT, naming the
// source and the record), drops its incomplete group, still writes its
// complete groups, and goes on with the others.
#ifndef RLPIPE_MERGE_H
#define RLPIPE_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "records/record.h"

typedef struct {
    uint64_t round;          // 0: arrival order; N: rounds of N groups of each live source
    rec_limits lim;
    // Seconds from mrg_new that a named pipe has to start (0: no limit): one
    // that no writer has written to by then is a fault, and the merge goes on
    // without it. (Without a limit, opening a named pipe waits for its writer;
    // sync/merger.h bounds the connections awaited by the same limit.)
    double start_timeout;
} mrg_opts;

typedef struct mrg mrg_t;

// Called on the source's thread when the merge is done reading it: error is
// NULL after a clean end, else the fault's message; records: read from it.
typedef void (*mrg_end_fn)(void *ctx, int fd, const char *error, uint64_t records);

mrg_t *mrg_new(const mrg_opts *o);
// A path: a file, a named pipe (opened on the source's thread: opening waits
// for a writer) or "-", standard input.
void mrg_add_path(mrg_t *m, const char *path);
// A descriptor (a connection), named `name` in messages. The merge does not
// close it: it calls end (when not NULL) once it is done with it.
void mrg_add_fd(mrg_t *m, int fd, const char *name, mrg_end_fn end, void *ctx);
// n more sources will come with mrg_add_fd (connections awaited): the merge
// does not end, nor does a round, before they have come. A negative n: that
// many will not come after all.
void mrg_expect(mrg_t *m, int n);

typedef enum {
    MRG_NONE,      // nothing is ready (only when not waiting)
    MRG_HEADER,    // out: the merged stream's header; once, before the first record
    MRG_RECORD,    // out: the next record
    MRG_FAULT,     // a source failed: mrg_fault says how
    MRG_PARTIAL,   // a member a source sent is partial (its writer lost records):
                   // mrg_fault says which; its records are merged as any others
    MRG_END,       // every source has ended and every complete group has gone out
} mrg_event;

// The next event. wait: seconds to wait for one at most, then MRG_NONE (0:
// MRG_NONE at once when nothing is ready, and a writer flushes then, before
// waiting); < 0: until there is one.
mrg_event mrg_next(mrg_t *m, rec_t *out, double wait);
// After MRG_FAULT: "<what>: <source> record <N> (...dropped)"; after
// MRG_PARTIAL: "<source> member <N>: a partial member, ... (<why>)".
const char *mrg_fault(const mrg_t *m);

// What the merge did with each source (for the summary line).
typedef struct {
    char name[512];
    uint64_t records;          // read from it
    uint64_t members;          // member headers read from it
    uint64_t records_out, groups_out;
    uint64_t records_dropped, groups_dropped;   // its incomplete group when it failed
    uint64_t bytes_in;
    int opened;                // its stream is open: a named pipe has a writer (with a start
                               // limit: has been written to); a connection, from the start
    int ended, failed;
} mrg_source_stats;

size_t mrg_nsources(mrg_t *m);
// Connections awaited (mrg_expect) that have not come.
int mrg_expected(mrg_t *m);
void mrg_source(mrg_t *m, size_t i, mrg_source_stats *st);
// Appends what the merge did, accounting for every record read (in = out +
// dropped): "merge of 3 sources: 27 records in, 24 out in 6 groups, 3
// dropped in 1 incomplete group[, R rounds of N]; a.rlr 12 in, b.rlr 8 in,
// c.rlr 7 in (3 dropped, failed); 1.2 kB in".
void mrg_summary(mrg_t *m, sbuf *out);

// Waits for the sources' threads (all have ended after MRG_END) and frees.
void mrg_free(mrg_t *m);

#endif
