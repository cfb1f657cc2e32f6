// vreply.c — a verifier's reply line: a number, a boolean or an object (vreply.h).
#include "sample/vreply.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "records/json.h"
#include "sample/coproc.h"

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

void vr_free(vr_reply *r) {
    for (size_t i = 0; i < r->n; i++) free(r->names[i]);
    free(r->names);
    free(r->values);
    free(r->pred);
    memset(r, 0, sizeof *r);
}

// A bare reply s[0..n), trimmed: a number, true or false.
static int parse_scalar(const char *s, size_t n, vr_reply *r, const char *quoted, rl_err *err) {
    char text[64];
    if (n == 4 && !memcmp(s, "true", 4)) return r->reward = 1, 0;
    if (n == 5 && !memcmp(s, "false", 5)) return r->reward = 0, 0;
    if (n == 0 || n >= sizeof text)   // no float is written in 64 characters
        return err_set(err, "reply '%s' is not a number, true, false or a JSON object", quoted);
    memcpy(text, s, n);
    text[n] = 0;
    char *end;
    r->reward = strtod(text, &end);
    int whole = end == text + n && !memchr(text, 0, n);   // strtod read every byte
    if (!whole) return err_set(err, "reply '%s' is not a number, true, false or a JSON object", quoted);
    if (!isfinite(r->reward)) return err_set(err, "reply '%s' is not a finite number", quoted);
    return 0;
}

// "rewards": a map of names to finite numbers, its msgpack encoding v[0..vn)
// (json_to_rec typed its values: rlpipe-records(5)'s "rewards").
static int parse_parts(const uint8_t *v, size_t vn, vr_reply *r, const char *quoted, rl_err *err) {
    rec_t *m = rec_new();
    rl_err pe;
    int rc = 0;
    if (rec_parse(m, v, vn, &rec_default_limits, &pe)) {   // json_to_rec made it a map of float64 (fields.h)
        rc = err_set(err, "reply '%s': \"rewards\": %s", quoted, pe.msg);
        goto out;
    }
    r->n = rec_nfields(m);
    r->names = xmalloc((r->n ? r->n : 1) * sizeof *r->names);
    memset(r->names, 0, (r->n ? r->n : 1) * sizeof *r->names);
    r->values = xmalloc((r->n ? r->n : 1) * sizeof *r->values);
    for (size_t i = 0; i < r->n && !rc; i++) {
        size_t kl;
        const char *key = rec_key(m, i, &kl);
        r->names[i] = xmalloc(kl + 1);
        memcpy(r->names[i], key, kl);
        r->names[i][kl] = 0;
        if (!kl) rc = err_set(err, "reply '%s': \"rewards\" has an empty name", quoted);
        else if (rec_get_f64(m, r->names[i], &r->values[i]) != REC_OK)
            rc = err_set(err, "reply '%s': \"rewards\".\"%s\" is not a number", quoted, r->names[i]);
        else if (!isfinite(r->values[i]))
            rc = err_set(err, "reply '%s': \"rewards\".\"%s\" is not a finite number", quoted, r->names[i]);
    }
out:
    rec_free(m);
    return rc;
}

// An object reply s[0..n).
static int parse_object(const char *s, size_t n, vr_reply *r, const char *quoted, rl_err *err) {
    rec_t *o = rec_new();
    rl_err pe;
    int rc = 0, has_reward = 0;
    if (json_to_rec(s, n, o, &pe)) {
        rc = err_set(err, "reply '%s': %s", quoted, pe.msg);
        goto out;
    }
    for (size_t i = 0; i < rec_nfields(o) && !rc; i++) {
        size_t kl, vl;
        const char *key = rec_key(o, i, &kl);
        const uint8_t *v = rec_value(o, i, &vl);
        if (kl == 6 && !memcmp(key, "reward", 6)) {
            has_reward = 1;
            if (rec_get_f64(o, "reward", &r->reward) != REC_OK || !isfinite(r->reward))   // json.h typed it
                rc = err_set(err, "reply '%s': \"reward\" is not a finite number", quoted);
        } else if (kl == 7 && !memcmp(key, "rewards", 7)) {
            rc = parse_parts(v, vl, r, quoted, err);
        } else if (kl == 4 && !memcmp(key, "pred", 4)) {
            const char *p;
            size_t pl;
            if (vl == 1 && v[0] == 0xc0) continue;   // null: no prediction
            if (rec_get_str(o, "pred", &p, &pl) != REC_OK || memchr(p, 0, pl))
                rc = err_set(err, "reply '%s': \"pred\" is not a string (nor null)", quoted);
            else {
                r->pred = xmalloc(pl + 1);
                memcpy(r->pred, p, pl);
                r->pred[pl] = 0;
                r->pred_len = pl;
            }
        } else {
            char k[96];
            rc = err_set(err, "reply '%s' has the key \"%s\": a reply object holds \"reward\", \"rewards\" and "
                              "\"pred\" only", quoted, cp_quote(key, kl, k, sizeof k));
        }
    }
    if (!rc && !has_reward) rc = err_set(err, "reply '%s' has no \"reward\" (a reply object must give it)", quoted);
out:
    rec_free(o);
    if (rc) vr_free(r);
    return rc;
}

int vr_parse(const char *line, size_t n, vr_reply *r, rl_err *err) {
    size_t a = 0, b = n;
    while (a < b && is_space(line[a])) a++;
    while (b > a && is_space(line[b - 1])) b--;
    char quoted[96];
    cp_quote(line, n, quoted, sizeof quoted);
    memset(r, 0, sizeof *r);
    if (b > a && line[a] == '{') return parse_object(line + a, b - a, r, quoted, err);
    return parse_scalar(line + a, b - a, r, quoted, err);
}
