// jsonl.h — reads JSON lines into records, one object per line (json.h).
//
// A line with an "rlpipe" key is a member header and a line with
// "rlpipe_end" a trailer, whose count must equal the records since the
// previous header line (so `rl-cat --json --header` output reads back as
// the same stream). Blank lines are skipped; they hold no data.
#ifndef RLPIPE_JSONL_H
#define RLPIPE_JSONL_H

#include "records/reader.h"

typedef struct jsonl jsonl_t;

jsonl_t *jsonl_open(const char *path, rl_err *err);   // "-" is standard input
void jsonl_close(jsonl_t *j);
// RECR_RECORD, RECR_HEADER, RECR_TRAILER, RECR_END or RECR_ERROR; errors
// read "<what>: <file> line <L>".
recr_event jsonl_next(jsonl_t *j, rec_t *out);
const char *jsonl_error(const jsonl_t *j);
const char *jsonl_name(const jsonl_t *j);
uint64_t jsonl_line(const jsonl_t *j);      // of the last line read, from 1
uint64_t jsonl_bytes_in(const jsonl_t *j);
int jsonl_would_block(const jsonl_t *j);   // the next line needs a read from a pipe

#endif
