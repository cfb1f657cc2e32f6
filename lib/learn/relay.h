// relay.h — the input on every rank (data-parallel): rank 0 reads it, and
// what it gives its learner goes, as events, to the other ranks before each
// step and at the end; they give their learners the same, and so take the
// same steps. An event: its kind (a byte), the length (u32) and text of where
// the record is, the length (u64) and msgpack of the header or record.
#ifndef RLPIPE_RELAY_H
#define RLPIPE_RELAY_H

#include <stddef.h>

#include "parallel/dist.h"
#include "records/record.h"
#include "util.h"

typedef enum { RELAY_HEADER = 'H', RELAY_RECORD = 'R', RELAY_END = 'E' } relay_kind;

typedef struct {
    dist_t *d;
    sbuf buf;     // rank 0: the events not yet sent; the others: those received
    size_t at;    // the others: where the next event in buf begins
} relay_t;

void relay_init(relay_t *r, dist_t *d);
// Rank 0: queues an event (rec: the header or record, NULL for the end;
// where: the record's place, or NULL). Nothing when there is one rank.
void relay_put(relay_t *r, relay_kind kind, const rec_t *rec, const char *where);
// Rank 0: the queued events to the other ranks. 0, or -1 with err.
int relay_send(relay_t *r, rl_err *err);
// The other ranks: the next event's kind, its header or record into rec and
// its place into where (size bytes); RELAY_END carries neither. -1 with err.
int relay_next(relay_t *r, rec_t *rec, char *where, size_t size, rl_err *err);
void relay_free(relay_t *r);

#endif
