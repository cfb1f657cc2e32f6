// rollout.c — a rollout record read and checked into its view (rollout.h).
#include "records/rollout.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// The fields in the order they are read and checked, with their keys, the
// types rlpipe-records(5) gives them, and where the view holds them (a
// string's length, or the msgpack encoding's for "messages", at len).
typedef enum { T_UINT, T_INT, T_F64, T_STR, T_ANY, T_U32S, T_F32S, T_MASK, T_F64MAP } ftype;

#define AT(member) offsetof(rollout_view, member)
static const struct {
    unsigned bit;
    const char *key;
    ftype type;
    size_t at, len;
} FIELDS[] = {
    {RO_ID, "id", T_UINT, AT(id), 0},
    {RO_GROUP, "group", T_UINT, AT(group), 0},
    {RO_PROMPT, "prompt", T_STR, AT(prompt), AT(prompt_len)},
    {RO_ANSWER, "answer", T_STR, AT(answer), AT(answer_len)},
    {RO_COMPLETION, "completion", T_STR, AT(completion), AT(completion_len)},
    {RO_FINISH, "finish", T_STR, AT(finish), AT(finish_len)},
    {RO_MESSAGES, "messages", T_ANY, AT(messages), AT(messages_len)},
    {RO_PROMPT_IDS, "prompt_ids", T_U32S, AT(prompt_ids), 0},
    {RO_IDS, "ids", T_U32S, AT(ids), 0},
    {RO_LOGP, "logp", T_F32S, AT(logp), 0},
    {RO_VER, "ver", T_U32S, AT(ver), 0},
    {RO_LOGP_LEARNER, "logp_learner", T_F32S, AT(logp_learner), 0},
    {RO_LOGP_REF, "logp_ref", T_F32S, AT(logp_ref), 0},
    {RO_VER_LEARNER, "ver_learner", T_UINT, AT(ver_learner), 0},
    {RO_W, "w", T_F32S, AT(w), 0},
    {RO_MASK, "mask", T_MASK, AT(mask), 0},
    {RO_REWARD, "reward", T_F64, AT(reward), 0},
    {RO_ADV, "adv", T_F64, AT(adv), 0},
    {RO_TEMPERATURE, "temperature", T_F64, AT(temperature), 0},
    {RO_TOP_P, "top_p", T_F64, AT(top_p), 0},
    {RO_TOP_K, "top_k", T_INT, AT(top_k), 0},
    {RO_TEXT, "text", T_STR, AT(text), AT(text_len)},
    {RO_STOP_REASON, "stop_reason", T_STR, AT(stop_reason), AT(stop_reason_len)},
    {RO_DTYPE, "dtype", T_STR, AT(dtype), AT(dtype_len)},
    {RO_DRAWN, "drawn", T_UINT, AT(drawn), 0},
    {RO_REWARDS, "rewards", T_F64MAP, AT(rewards), 0},
    {RO_PRED, "pred", T_STR, AT(pred), AT(pred_len)},
};
#undef AT
#define NFIELDS (sizeof FIELDS / sizeof *FIELDS)

static const char *type_name(ftype t) {
    switch (t) {
    case T_UINT: return "an unsigned integer";
    case T_INT: return "an integer";
    case T_F64: return "a number";
    case T_STR: return "a string";
    case T_U32S: return "an array of unsigned 32-bit integers";
    case T_F32S: return "an array of numbers (float32)";
    case T_MASK: return "an array of 0/1";
    case T_F64MAP: return "a map of names to numbers";
    default: return "any value";
    }
}

const char *rollout_field_name(unsigned field) {
    for (size_t i = 0; i < NFIELDS; i++)
        if (FIELDS[i].bit == field) return FIELDS[i].key;
    return "?";
}

// Whether the msgpack value p[0..n) is a number: an integer, float 32 or float 64.
static int is_number(const uint8_t *p, size_t n) {
    return n && (p[0] <= 0x7f || p[0] >= 0xe0 || p[0] == 0xca || p[0] == 0xcb || (p[0] >= 0xcc && p[0] <= 0xd3));
}

// A map of string keys to numbers, parsed into *m (made on first use).
static rec_status read_f64map(const rec_t *r, const char *key, rec_t **m) {
    long k = rec_find(r, key);
    if (k < 0) return REC_MISSING;
    size_t n;
    const uint8_t *val = rec_value(r, (size_t)k, &n);
    if (!*m) *m = rec_new();
    rl_err e;
    if (rec_parse(*m, val, n, &rec_default_limits, &e)) return REC_TYPE;
    for (size_t i = 0; i < rec_nfields(*m); i++) {
        size_t vl;
        const uint8_t *x = rec_value(*m, i, &vl);
        if (!is_number(x, vl)) return REC_TYPE;
    }
    return REC_OK;
}

// Field i of r into v: the status of its getter.
static rec_status read_one(rollout_view *v, const rec_t *r, size_t i) {
    const char *key = FIELDS[i].key;
    char *at = (char *)v + FIELDS[i].at;
    size_t *len = (size_t *)((char *)v + FIELDS[i].len);
    switch (FIELDS[i].type) {
    case T_UINT: return rec_get_uint(r, key, (uint64_t *)at);
    case T_INT: return rec_get_int(r, key, (int64_t *)at);
    case T_F64: return rec_get_f64(r, key, (double *)at);
    case T_STR: return rec_get_str(r, key, (const char **)at, len);
    case T_ANY: {   // any value, kept as its msgpack encoding
        long k = rec_find(r, key);
        if (k < 0) return REC_MISSING;
        *(const uint8_t **)at = rec_value(r, (size_t)k, len);
        return REC_OK;
    }
    case T_U32S: return rec_get_u32s(r, key, (u32_vec *)at);
    case T_F32S: return rec_get_f32s(r, key, (f32_vec *)at);
    case T_MASK: {
        u8_vec *m = (u8_vec *)at;
        rec_status st = rec_get_u8s(r, key, m);
        for (size_t t = 0; st == REC_OK && t < m->n; t++)
            if (m->v[t] > 1) st = REC_TYPE;
        return st;
    }
    case T_F64MAP: return read_f64map(r, key, (rec_t **)at);
    default: return REC_MISSING;
    }
}

static void clear(rollout_view *v) {
    v->has = 0;
    v->id = v->group = v->ver_learner = v->drawn = 0;
    v->prompt = v->answer = v->completion = v->finish = v->text = v->stop_reason = v->dtype = v->pred = "";
    v->prompt_len = v->answer_len = v->completion_len = v->finish_len = v->text_len = v->stop_reason_len =
        v->dtype_len = v->pred_len = 0;
    if (v->rewards) rec_clear(v->rewards);
    v->messages = NULL;
    v->messages_len = 0;
    v->prompt_ids.n = v->ids.n = v->ver.n = 0;
    v->logp.n = v->logp_learner.n = v->logp_ref.n = v->w.n = v->mask.n = 0;
    v->n = 0;
    v->reward = v->adv = 0;
    v->temperature = v->top_p = 1;
    v->top_k = 0;
}

// A value as messages print it: NaN, +inf, -inf or %g.
static const char *show(double x, char *buf, size_t n) {
    if (isnan(x)) return "NaN";
    if (isinf(x)) return x > 0 ? "+inf" : "-inf";
    snprintf(buf, n, "%g", x);
    return buf;
}

// Every value of a float array in range: finite; with allow_neg_inf also
// -inf; with nonneg not below 0.
static int check_floats(const char *key, const f32_vec *a, int allow_neg_inf, int nonneg, const char *what,
                        rl_err *err) {
    for (size_t t = 0; t < a->n; t++) {
        float x = a->v[t];
        if (isnan(x) || (isinf(x) && (x > 0 || !allow_neg_inf)) || (nonneg && x < 0)) {
            char buf[32];
            return err_set(err, "field \"%s\" holds %s at token %zu (%s)", key, show(x, buf, sizeof buf), t, what);
        }
    }
    return 0;
}

int rollout_decode(rollout_view *v, const rec_t *r, rl_err *err) {
    clear(v);
    for (size_t i = 0; i < NFIELDS; i++) {
        rec_status st = read_one(v, r, i);
        if (st == REC_TYPE) return err_set(err, "field \"%s\" is not %s", FIELDS[i].key, type_name(FIELDS[i].type));
        if (st == REC_OK) v->has |= FIELDS[i].bit;
    }
    // per-token arrays, in the order of the first one present
    const struct {
        unsigned bit;
        size_t n;
    } tok[] = {{RO_IDS, v->ids.n},   {RO_LOGP, v->logp.n},
               {RO_VER, v->ver.n},   {RO_LOGP_LEARNER, v->logp_learner.n},
               {RO_LOGP_REF, v->logp_ref.n},
               {RO_W, v->w.n},       {RO_MASK, v->mask.n}};
    const char *first = NULL;
    for (size_t i = 0; i < sizeof tok / sizeof *tok; i++) {
        if (!(v->has & tok[i].bit)) continue;
        if (!first) {
            first = rollout_field_name(tok[i].bit);
            v->n = tok[i].n;
        } else if (tok[i].n != v->n)
            return err_set(err, "field \"%s\" has %zu elements but \"%s\" has %zu (one per completion token)",
                           rollout_field_name(tok[i].bit), tok[i].n, first, v->n);
    }
    return 0;
}


int rollout_read(rollout_view *v, const rec_t *r, rl_err *err) {
    if (rollout_decode(v, r, err) || check_floats("logp", &v->logp, 0, 0, "a log-probability is finite", err) ||
        check_floats("logp_learner", &v->logp_learner, 1, 0, "a log-probability is finite or -inf", err) ||
        check_floats("logp_ref", &v->logp_ref, 0, 0, "a log-probability is finite", err) ||
        check_floats("w", &v->w, 0, 1, "a weight is finite and not negative", err))
        return -1;
    if ((v->has & RO_DRAWN) && v->drawn == 0)
        return err_set(err, "field \"drawn\" is 0: a written group is one of the groups drawn (at least 1)");
    return 0;
}

void rollout_view_free(rollout_view *v) {
    u32_vec_free(&v->prompt_ids);
    u32_vec_free(&v->ids);
    u32_vec_free(&v->ver);
    f32_vec_free(&v->logp);
    f32_vec_free(&v->logp_learner);
    f32_vec_free(&v->logp_ref);
    f32_vec_free(&v->w);
    u8_vec_free(&v->mask);
    rec_free(v->rewards);
    v->rewards = NULL;
}

int rollout_require(const rollout_view *v, unsigned fields, const char *why, rl_err *err) {
    for (size_t i = 0; i < NFIELDS; i++)
        if ((fields & FIELDS[i].bit) && !(v->has & FIELDS[i].bit))
            return err_set(err, "field \"%s\" is missing (%s)", FIELDS[i].key, why);
    return 0;
}

int rollout_finite(unsigned field, double x, rl_err *err) {
    if (isfinite(x)) return 0;
    return err_set(err, "field \"%s\" is %g: it must be a finite number", rollout_field_name(field), x);
}

int rollout_vocab(const char *key, const uint32_t *ids, size_t n, uint64_t vocab, rl_err *err) {
    for (size_t t = 0; t < n; t++)
        if (ids[t] >= vocab)
            return err_set(err, "field \"%s\" holds token id %u at position %zu, not below the model's vocabulary size %llu",
                           key, ids[t], t, (unsigned long long)vocab);
    return 0;
}
