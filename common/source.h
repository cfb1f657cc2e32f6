// source.h — records from a file, whether it holds a record stream or JSON
// lines, behind one interface: header, record and trailer events.
#ifndef RLPIPE_SOURCE_H
#define RLPIPE_SOURCE_H

#include "reader.h"

typedef struct src src_t;

// jsonl: the file holds JSON lines (jsonl.h), else a record stream (reader.h).
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
