// source.h — records from a file, whether it holds a record stream or JSON
// lines, behind one interface: header, record and trailer events.
#ifndef RLPIPE_SOURCE_H
#define RLPIPE_SOURCE_H

#include "records/reader.h"

typedef struct src src_t;

// jsonl: 1 the file holds JSON lines (jsonl.h), 0 a record stream
// (reader.h), SRC_DETECT: JSON lines if its first byte that is not white
// space is '{' (or it is empty, or a terminal), else a record stream. The
// bytes are looked at without consuming them: pread on a file, tee(2) on a
// pipe, MSG_PEEK on a socket.
#define SRC_DETECT (-1)
src_t *src_open(const char *path, int jsonl, const rec_limits *lim, rl_err *err);
void src_close(src_t *s);
recr_event src_next(src_t *s, rec_t *out);
const char *src_error(const src_t *s);
uint64_t src_bytes_in(const src_t *s);
int src_would_block(const src_t *s);
// Where the last record came from, for messages: "FILE record N" (N from 0)
// or "FILE line L" (L from 1).
const char *src_where(const src_t *s, char *buf, size_t size);

#endif
