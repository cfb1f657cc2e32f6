// record.h — one record (a msgpack map with string keys) held in memory.
//
// A record read from a stream keeps its original bytes and an index of its
// fields; getters decode one field on demand with msgpack-c, setters encode
// with msgpack-c's packer. Fields nobody touched are written back byte for
// byte, so a tool passes on every key it does not own unchanged.
#ifndef RLPIPE_RECORD_H
#define RLPIPE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "records/mpscan.h"

typedef struct rec rec_t;

// Growable typed arrays that getters fill (caller owns, reuse across records).
typedef struct { uint32_t *v; size_t n, cap; } u32_vec;
typedef struct { float *v; size_t n, cap; } f32_vec;
typedef struct { uint8_t *v; size_t n, cap; } u8_vec;
void u32_vec_free(u32_vec *a);
void f32_vec_free(f32_vec *a);
void u8_vec_free(u8_vec *a);

// What a getter found.
typedef enum {
    REC_OK = 0,
    REC_MISSING = 1,   // no such key
    REC_TYPE = 2,      // present, but not of the requested type (or out of its range)
} rec_status;

rec_t *rec_new(void);
void rec_free(rec_t *r);
void rec_clear(rec_t *r);                 // no fields; keeps allocations
void rec_copy(rec_t *dst, const rec_t *src);

// Replaces r by the map whose complete encoding is p[0..n), as indexed by
// mps_scan (idx->is_map must be set). The bytes are copied.
void rec_load(rec_t *r, const uint8_t *p, size_t n, const mp_index *idx);
// Parses a complete msgpack map (scans it with the limits first). 0 or -1.
int rec_parse(rec_t *r, const uint8_t *p, size_t n, const rec_limits *lim, rl_err *err);

// Fields in order.
size_t rec_nfields(const rec_t *r);
const char *rec_key(const rec_t *r, size_t i, size_t *len);           // not NUL-terminated
const uint8_t *rec_value(const rec_t *r, size_t i, size_t *len);      // msgpack encoding
long rec_find(const rec_t *r, const char *key);                       // index or -1
int rec_has(const rec_t *r, const char *key);

// Typed getters. Integers accept any msgpack integer in range; floats accept
// float32, float64 and integers; arrays must be arrays of such elements.
rec_status rec_get_uint(const rec_t *r, const char *key, uint64_t *out);
rec_status rec_get_int(const rec_t *r, const char *key, int64_t *out);
rec_status rec_get_f64(const rec_t *r, const char *key, double *out);
rec_status rec_get_str(const rec_t *r, const char *key, const char **s, size_t *len);  // points into r (never NULL)
rec_status rec_get_u32s(const rec_t *r, const char *key, u32_vec *out);
rec_status rec_get_f32s(const rec_t *r, const char *key, f32_vec *out);
rec_status rec_get_u8s(const rec_t *r, const char *key, u8_vec *out);
// Length of an array field without decoding it.
rec_status rec_get_len(const rec_t *r, const char *key, size_t *n);

// Setters add the key at the end or replace its value in place (order kept).
void rec_set_nil(rec_t *r, const char *key);
void rec_set_bool(rec_t *r, const char *key, int v);
void rec_set_uint(rec_t *r, const char *key, uint64_t v);
void rec_set_int(rec_t *r, const char *key, int64_t v);
void rec_set_f64(rec_t *r, const char *key, double v);
void rec_set_str(rec_t *r, const char *key, const char *s, size_t len);
void rec_set_cstr(rec_t *r, const char *key, const char *s);
void rec_set_u32s(rec_t *r, const char *key, const uint32_t *v, size_t n);
void rec_set_f32s(rec_t *r, const char *key, const float *v, size_t n);
void rec_set_u8s(rec_t *r, const char *key, const uint8_t *v, size_t n);
void rec_set_strs(rec_t *r, const char *key, char *const *v, size_t n);
// Sets a value from its msgpack encoding (one complete object; not checked here).
void rec_set_raw(rec_t *r, const char *key, size_t keylen, const uint8_t *val, size_t n);
int rec_del(rec_t *r, const char *key);   // 1 if it was there

// Appends the msgpack encoding of r (a map) to out. Untouched records are
// written as the exact bytes they were read from.
void rec_encode(const rec_t *r, sbuf *out);

#endif
