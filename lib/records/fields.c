#include "records/fields.h"

#include <string.h>

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
    {"stop_reason", FLD_STR}, {"messages", FLD_ANY},
};

// Arrays with one entry per completion token.
static const char *PER_TOKEN[] = {"ids", "logp", "ver", "logp_learner", "w", "mask"};

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
    default: return "any value";
    }
}

static rec_status check_one(const rec_t *r, const char *key, fld_type t) {
    uint64_t u;
    double d;
    const char *s;
    size_t n;
    static __thread u32_vec u32;
    static __thread f32_vec f32;
    static __thread u8_vec u8;
    switch (t) {
    case FLD_UINT: return rec_get_uint(r, key, &u);
    case FLD_F64: return rec_get_f64(r, key, &d);
    case FLD_STR: return rec_get_str(r, key, &s, &n);
    case FLD_U32S: return rec_get_u32s(r, key, &u32);
    case FLD_F32S: return rec_get_f32s(r, key, &f32);
    case FLD_MASK: {
        rec_status st = rec_get_u8s(r, key, &u8);
        for (size_t i = 0; st == REC_OK && i < u8.n; i++)
            if (u8.v[i] > 1) st = REC_TYPE;
        return st;
    }
    default: return REC_OK;
    }
}

int fld_check(const rec_t *r, rl_err *err) {
    for (size_t i = 0; i < sizeof FIELDS / sizeof *FIELDS; i++)
        if (check_one(r, FIELDS[i].key, FIELDS[i].type) == REC_TYPE)
            return err_set(err, "field \"%s\" is not %s", FIELDS[i].key, fld_type_name(FIELDS[i].type));
    const char *first = NULL;
    size_t first_n = 0;
    for (size_t i = 0; i < sizeof PER_TOKEN / sizeof *PER_TOKEN; i++) {
        size_t n;
        if (rec_get_len(r, PER_TOKEN[i], &n) != REC_OK) continue;
        if (!first) { first = PER_TOKEN[i]; first_n = n; }
        else if (n != first_n)
            return err_set(err, "field \"%s\" has %zu elements but \"%s\" has %zu (one per completion token)",
                           PER_TOKEN[i], n, first, first_n);
    }
    return 0;
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
