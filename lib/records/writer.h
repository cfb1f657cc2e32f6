// writer.h — writes one member of a record stream: header, records, trailer.
//
// A zstd frame ends on a record boundary every `frame_records` records or
// `frame_bytes` uncompressed bytes, and at every recw_flush: a producer on a
// pipe flushes once per finished group so its consumer sees the group at once.
#ifndef RLPIPE_WRITER_H
#define RLPIPE_WRITER_H

#include <stdint.h>

#include "records/record.h"

typedef struct {
    int raw;                 // plain msgpack, no zstd (-u)
    int level;               // zstd level, default 3
    size_t frame_records;    // default 1024
    size_t frame_bytes;      // default 1 MiB
} recw_opts;

extern const recw_opts recw_default_opts;

typedef struct recw recw_t;

// Starts a member on fd (not closed by the writer) and writes the header,
// which must carry "rlpipe": 1. NULL on failure.
recw_t *recw_fdopen(int fd, const char *name, const recw_opts *o, const rec_t *header, rl_err *err);
// Refuses records that carry the reserved keys "rlpipe" or "rlpipe_end".
int recw_write(recw_t *w, const rec_t *rec, rl_err *err);
int recw_flush(recw_t *w, rl_err *err);
// The member lost records on the way (why: which, and how): its trailer says
// so, "partial": why (the first reason given), and its readers report it
// (rlpipe-records(5)).
void recw_set_partial(recw_t *w, const char *why);
// why as a trailer's "partial" keeps it, into dst (size bytes, NUL ended): cut
// to whole UTF-8 characters that fit; "records lost" when none is left.
void recw_partial_text(char *dst, size_t size, const char *why);
// Writes the trailer and flushes. Free the writer with recw_free after.
int recw_close(recw_t *w, rl_err *err);
// Frees the writer; without recw_close first the member has no trailer and
// readers will report it truncated, as it is.
void recw_free(recw_t *w);

uint64_t recw_bytes_written(const recw_t *w);

// Fills h with {"rlpipe": 1, "kind": kind, "producer": "<tool> <version>"},
// plus "argv" and "time" unless no_provenance.
void rec_make_header(rec_t *h, const char *kind, const char *tool, int argc, char **argv, int no_provenance);

#endif
