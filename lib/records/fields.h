// fields.h — the record fields doc/design.md §2 defines, and their types.
//
// Used where a type must be chosen or checked: JSON lines carry no float32
// or unsigned types, so --pack encodes known fields as rlpipe-records(5) says; --check
// verifies that known fields have their types and per-token arrays agree.
#ifndef RLPIPE_FIELDS_H
#define RLPIPE_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "records/record.h"

typedef enum {
    FLD_ANY,     // not a known field: any msgpack value
    FLD_UINT,    // unsigned integer
    FLD_F64,     // float64 (integers accepted)
    FLD_STR,     // UTF-8 string
    FLD_U32S,    // array of uint32
    FLD_F32S,    // array of float32
    FLD_MASK,    // array of 0/1
    FLD_F64MAP,  // map of string keys to float64 (integers accepted)
} fld_type;

fld_type fld_type_of(const char *key, size_t len);
const char *fld_type_name(fld_type t);   // "an array of float32", ...

// Known fields of r have their types and the per-token arrays (ids, logp,
// ver, logp_learner, logp_ref, w, mask) equal lengths: the rollout view's checks
// but those of ranges (rollout.h rollout_decode). 0, or -1 with err.
int fld_check(const rec_t *r, rl_err *err);

// A member header's "sampling"."group", the records of each of its groups
// (rl-sample writes it): 1, or 0 with *group 0 when it has none (or not an
// unsigned integer).
int fld_group_size(const rec_t *h, uint64_t *group);

#endif
