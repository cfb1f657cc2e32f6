// mpscan.h — finds where one msgpack object ends, without allocating, and
// checks it against limits before anything trusts its declared sizes.
//
// msgpack-c's unpacker allocates what an array header declares (2^32 - 1
// elements is 100 GB of msgpack_object); this scanner is the guard in front
// of it. It reads only lengths and type bytes, validates UTF-8 of every str,
// and indexes the fields of a top-level map so records can be read lazily.
#ifndef RLPIPE_MPSCAN_H
#define RLPIPE_MPSCAN_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct {
    size_t max_record;   // bytes in one object (header, record or trailer)
    size_t max_array;    // elements of one array, entries of one map
    size_t max_string;   // bytes of one str, bin or ext payload
    int max_depth;       // nesting of arrays and maps, at most MPS_MAX_DEPTH
} rec_limits;

#define MPS_MAX_DEPTH 64
extern const rec_limits rec_default_limits;  // 256 MiB, 2^24 elements, 64 MiB, depth 32

// One entry of a top-level map, as offsets into the scanned object:
// key text (str payload, without its header) and the encoded value.
typedef struct {
    uint32_t key_off, key_len;
    uint32_t val_off, val_len;
} mp_field;

typedef struct {
    mp_field *f;
    size_t n, cap;
    int is_map;          // the top-level object is a map with str keys
} mp_index;

enum { MPS_OK = 0, MPS_NEED = 1, MPS_BAD = -1 };

// Scans the object starting at p[0] with n bytes available.
//   MPS_OK:   *len = object size; idx (if given) lists the fields of a top-level map.
//   MPS_NEED: the object continues past n; *len = a lower bound on the bytes it needs.
//   MPS_BAD:  malformed, over a limit, invalid UTF-8, non-str or duplicate top-level key
//             (err says which and at what offset inside the object).
int mps_scan(const uint8_t *p, size_t n, const rec_limits *lim, mp_index *idx,
             size_t *len, rl_err *err);

void mps_index_free(mp_index *idx);

// Name of the msgpack type whose first byte is c ("map", "array", "str", ...).
const char *mps_type_name(uint8_t c);
// The same with its article, for messages: "an integer", "a map".
const char *mps_a_type_name(uint8_t c);

#endif
