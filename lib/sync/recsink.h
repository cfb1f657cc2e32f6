// recsink.h — where rl-cat's records go, and what has gone there: a record
// stream (one member, on a descriptor: a file, standard output, or with --to
// the connection to rl-cat --merge, recnet.h), JSON lines, a summary
// (records/stats.h), or nothing but the checks (records/fields.h). The
// output's header is the first input's; a later member must be of its kind.
#ifndef RLPIPE_RECSINK_H
#define RLPIPE_RECSINK_H

#include <stdint.h>

#include "records/record.h"
#include "records/stats.h"
#include "records/writer.h"
#include "util.h"

typedef enum { RECSINK_RECORDS, RECSINK_JSON, RECSINK_STATS, RECSINK_CHECK } recsink_kind;

typedef struct {
    recsink_kind kind;
    int json;                  // RECSINK_STATS: one JSON object rather than a table
    int header;                // RECSINK_JSON: the header and trailer lines too
    int raw, level;            // RECSINK_RECORDS: raw msgpack; the zstd level ...
    uint64_t frame;            // ... and the records of a zstd frame
    int no_provenance;         // the output's header without argv and time
    const char *member_kind;   // of the header made for JSON lines that bring none (NULL: "rollouts")
    const char *to;            // the address fd is connected to (--to), or NULL
} recsink_opts;

typedef struct {
    const recsink_opts *o;
    int fd;
    const char *name;       // of the output, for messages
    rec_t *header;          // the output member's header, from the first input
    int have_header;
    recw_t *w;              // RECSINK_RECORDS, once the header is known
    sbuf line;              // RECSINK_JSON output waiting for write()
    stats_t st;             // RECSINK_STATS (st.members: the caller counts them)
    uint64_t count, bytes_out;
    char partial[1024];     // why the output is partial ("": it is whole)
} recsink_t;

void recsink_init(recsink_t *k, const recsink_opts *o, int fd, const char *name);
// The first header becomes the output's; a later one must be of the same
// kind (where: the input, for messages). 0, or -1 with err.
int recsink_header(recsink_t *k, const rec_t *h, const char *where, rl_err *err);
// The header of JSON lines that bring none: rl-cat is their producer.
int recsink_generated_header(recsink_t *k, int argc, char **argv, const char *where, rl_err *err);
// 0; -1 with err when the record cannot go to this sink (the caller says
// where it is, then recsink_fail); -2 with err when the output failed.
int recsink_record(recsink_t *k, const rec_t *r, rl_err *err);
// Passes on what is buffered (before waiting for more input). 0, or -1 with err.
int recsink_flush(recsink_t *k, rl_err *err);
// Records were lost on the way (why: which, and how): the output's trailer
// says "partial" (records and JSON lines with --header); the first reason is kept.
void recsink_set_partial(recsink_t *k, const char *why);
// Ends the output: the trailer, the summary; with --to, the merge has read
// every record or says why not. 0, or -1 with err.
int recsink_close(recsink_t *k, rl_err *err);
// A write that failed: with --to, the merge may have said why it stopped
// reading, which err then adds in parentheses. -1.
int recsink_fail(const recsink_t *k, rl_err *err);
void recsink_free(recsink_t *k);

#endif
