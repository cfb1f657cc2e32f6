#include "records/fields.h"

#include <string.h>

#include "records/rollout.h"

static const struct {
    const char *key;
    fld_type type;
} FIELDS[] = {
    {"id", FLD_UINT},         {"group", FLD_UINT},        {"prompt", FLD_STR},
    {"answer", FLD_STR},      {"prompt_ids", FLD_U32S},   {"ids", FLD_U32S},
    {"text", FLD_STR},        {"logp", FLD_F32S},         {"ver", FLD_U32S},
    {"finish", FLD_STR},      {"reward", FLD_F64},        {"temperature", FLD_F64},
    {"top_p", FLD_F64},       {"top_k", FLD_UINT},        {"dtype", FLD_STR},
    {"logp_learner", FLD_F32S}, {"ver_learner", FLD_UINT}, {"w", FLD_F32S},
    {"mask", FLD_MASK},       {"adv", FLD_F64},           {"completion", FLD_STR},
    {"stop_reason", FLD_STR}, {"messages", FLD_ANY},      {"logp_ref", FLD_F32S},
    {"drawn", FLD_UINT},        {"rewards", FLD_F64MAP},
};

fld_type fld_type_of(const char *key, size_t len) {
    for (size_t i = 0; i < sizeof FIELDS / sizeof *FIELDS; i++)
        if (strlen(FIELDS[i].key) == len && !memcmp(FIELDS[i].key, key, len)) return FIELDS[i].type;
    return FLD_ANY;
}

const char *fld_type_name(fld_type t) {
    switch (t) {
    case FLD_UINT: return "an unsigned integer";
    case FLD_F64: return "a number";
    case FLD_STR: return "a string";
    case FLD_U32S: return "an array of unsigned 32-bit integers";
    case FLD_F32S: return "an array of numbers (float32)";
    case FLD_MASK: return "an array of 0/1";
    case FLD_F64MAP: return "a map of names to numbers";
    default: return "any value";
    }
}

int fld_check(const rec_t *r, rl_err *err) {
    static __thread rollout_view v;   // its arrays reused from record to record
    return rollout_decode(&v, r, err);
}

int fld_group_size(const rec_t *h, uint64_t *group) {
    long i = rec_find(h, "sampling");
    *group = 0;
    if (i < 0) return 0;
    size_t n;
    const uint8_t *v = rec_value(h, (size_t)i, &n);
    rec_t *sampling = rec_new();
    rl_err e;
    int ok = !rec_parse(sampling, v, n, &rec_default_limits, &e) && rec_get_uint(sampling, "group", group) == REC_OK;
    rec_free(sampling);
    if (!ok) *group = 0;
    return ok;
}
