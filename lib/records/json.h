// json.h — JSON lines <-> records, exact on values.
//
// A hand-written parser rather than cJSON because cJSON keeps every number
// as a double: it cannot tell 1 from 1.0 and loses integers above 2^53.
// Here an integer literal stays an integer (int64/uint64 range), and known
// fields get their types of rlpipe-records(5) (fields.h): float32 fields are parsed with
// strtof so the shortest float32 text reads back to the same float32.
#ifndef RLPIPE_JSON_H
#define RLPIPE_JSON_H

#include <stddef.h>

#include "records/record.h"

// Parses one JSON object (the whole of s[0..n) but whitespace) into out.
// Errors say "column C: what" and name the field when inside one.
int json_to_rec(const char *s, size_t n, rec_t *out, rl_err *err);

// Appends r as one JSON object (no newline). Floats always show "." or an
// exponent; float32 values of float32 fields print in their shortest form,
// other floats in the shortest form of the double. NaN and infinities are
// written as Python's json writes them. bin and ext values are an error.
int json_from_rec(const rec_t *r, sbuf *out, rl_err *err);

// Pieces for other JSON writers (metrics, stats).
void json_put_str(sbuf *out, const char *s, size_t n);
void json_put_f64(sbuf *out, double v);

#endif
