// instream.h — the bytes of a record stream, decompressed and verified.
//
// Reads a file descriptor and auto-detects, at every zstd frame and member
// boundary, whether what follows is a zstd frame (magic 28 B5 2F FD, or a
// skippable frame) or raw msgpack. Bytes of a zstd frame are released only
// once the frame's end (and content checksum, when present) has been
// verified, so corrupt data never reaches a parser; frames larger than
// INS_STREAM_THROUGH are released as they decode. When the input ends inside
// a frame, what was decoded is released (truncation does not alter earlier
// bytes) and the next call reports the truncation.
#ifndef RLPIPE_INSTREAM_H
#define RLPIPE_INSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define INS_STREAM_THROUGH ((size_t)64 << 20)

typedef struct ins ins_t;

ins_t *ins_open(const char *path, rl_err *err);   // "-" is standard input
ins_t *ins_fdopen(int fd, const char *name);      // does not take ownership of fd
void ins_close(ins_t *s);
const char *ins_name(const ins_t *s);

// The verified bytes not yet consumed.
const uint8_t *ins_data(const ins_t *s, size_t *n);
void ins_consume(ins_t *s, size_t n);

// Reads until at least `want` verified bytes are available, or less if the
// input ends first. Returns 1 if bytes were added, 0 at a clean end of input
// (nothing more will come), -1 on error: read failure, zstd frame cut
// mid-way, corrupt frame (err says which, with the byte offset).
int ins_more(ins_t *s, size_t want, rl_err *err);

// Called at a member boundary: raw msgpack may be followed by a zstd frame.
void ins_member_end(ins_t *s);

uint64_t ins_offset(const ins_t *s);     // input bytes consumed so far
uint64_t ins_decoded(const ins_t *s);    // decoded bytes released so far
// No verified byte is buffered and the input is a pipe or socket: the next
// read may wait for the writer (a filter flushes its output first).
int ins_would_block(const ins_t *s);

#endif
