// reader.h — reads a record stream: members of header, records, trailer.
//
// Checks what doc/design.md §2 requires of a stream: every member starts with a
// header {"rlpipe": 1, ...} and ends with a trailer {"rlpipe_end": 1,
// "count": N} whose count matches; records are maps with string keys, within
// the limits. Every complete record before a truncation or corruption is
// delivered first; the error comes after it.
#ifndef RLPIPE_READER_H
#define RLPIPE_READER_H

#include <stdint.h>

#include "records/record.h"

typedef struct recr recr_t;

typedef enum {
    RECR_ERROR = -1,
    RECR_END = 0,        // the input ended cleanly after a trailer
    RECR_RECORD = 1,
    RECR_HEADER = 2,     // a member begins: out is its header
    RECR_TRAILER = 3,    // a member ended and its count matched
} recr_event;

// Opens a file ("-" is standard input). NULL if it cannot be opened (err says why).
recr_t *recr_open(const char *path, const rec_limits *lim, rl_err *err);
// Reads a descriptor already open (a connection), named `name` in messages;
// recr_close does not close it.
recr_t *recr_fdopen(int fd, const char *name, const rec_limits *lim);
void recr_close(recr_t *r);

// The next header, record or trailer, into out.
recr_event recr_next(recr_t *r, rec_t *out);
// The next data record, checking headers and trailers on the way:
// 1 record, 0 clean end, -1 error.
int recr_read(recr_t *r, rec_t *out);

// After RECR_ERROR: "<what>: <file> record <N>", N = index (from 0, counted
// across the file's members) of the first record not delivered.
const char *recr_error(const recr_t *r);

// The reason a trailer gives when its member lost records on the way (its
// "partial" string: rl-cat --merge ends its member so after a source failed),
// or NULL when the member is whole. recr_next has checked that it is a string.
const char *rec_partial(const rec_t *trailer, size_t *len);

const char *recr_name(const recr_t *r);
uint64_t recr_records(const recr_t *r);      // data records delivered
uint64_t recr_bytes_in(const recr_t *r);     // input bytes consumed
int recr_would_block(const recr_t *r);       // see ins_would_block

#endif
