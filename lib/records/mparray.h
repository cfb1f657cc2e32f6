// mparray.h — msgpack arrays handled as bytes: the header written and read,
// and an array split into its elements' encodings.
//
// For code that assembles or takes apart arrays of values that are already
// encoded (a conversation's messages, a record's "turns") without decoding
// and encoding them again.
#ifndef RLPIPE_MPARRAY_H
#define RLPIPE_MPARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

// Appends the header of an array of n elements, the shortest form:
// fixarray (1 byte, n < 16), array16 (3 bytes) or array32 (5 bytes).
void mpa_put_header(sbuf *out, uint32_t n);

// The header of the array at p[0..n): *count elements, *hdr bytes of header.
// 0, or -1 when p[0] is not an array's or the header runs past n.
int mpa_header(const uint8_t *p, size_t n, uint32_t *count, size_t *hdr);

// Where the elements of an array are: element i is p[off[i], off[i + 1]).
typedef struct {
    size_t *off;   // (n + 1) offsets into the array's bytes, the first after its header
    size_t n, cap;
} mpa_elems;

// Splits the array that is p[0..n), exactly, into its elements (e->off grown
// as needed). 0, or -1 when p[0..n) is not one complete, valid msgpack array:
// not an array, an element malformed or cut short, or bytes after the array.
int mpa_split(const uint8_t *p, size_t n, mpa_elems *e);

void mpa_elems_free(mpa_elems *e);

#endif
