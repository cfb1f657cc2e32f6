// outstream.h — bytes out to a file descriptor, as zstd frames with content
// checksums or as raw bytes. A frame ends only when the caller says so
// (outs_end_frame), which the record writer does on record boundaries.
#ifndef RLPIPE_OUTSTREAM_H
#define RLPIPE_OUTSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct outs outs_t;

// level: zstd compression level; 0 = raw, uncompressed output.
outs_t *outs_fdopen(int fd, const char *name, int compress, int level);
int outs_write(outs_t *o, const void *p, size_t n, rl_err *err);
// Ends the current zstd frame (if any bytes went into it) and writes
// everything buffered to the descriptor.
int outs_end_frame(outs_t *o, rl_err *err);
void outs_free(outs_t *o);                 // does not close the descriptor
uint64_t outs_bytes_written(const outs_t *o);

#endif
