// vset.c — several external verifiers, their names and weights (vset.h).
#include "sample/vset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;       // NULL: a bare command
    char *cmd;
    char *what;       // its name in messages
    double weight;
    vproc *vp;
} verifier;

struct vset {
    verifier *v;
    size_t n, cap;
    uint64_t sent;
    uint64_t err_req;
    rec_t *parts;     // scratch: the "rewards" map of a record
    sbuf enc;
};

vset *vs_new(void) {
    vset *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->parts = rec_new();
    return s;
}

void vs_free(vset *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        vp_free(s->v[i].vp);
        free(s->v[i].name);
        free(s->v[i].cmd);
        free(s->v[i].what);
    }
    free(s->v);
    rec_free(s->parts);
    sbuf_free(&s->enc);
    free(s);
}

size_t vs_count(const vset *s) { return s->n; }

static int name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

// The length of the name a[0..) begins with, when '=' follows it; else 0.
static size_t name_len(const char *a) {
    size_t k = 0;
    if (!name_start(a[0])) return 0;
    while (name_char(a[k])) k++;
    return a[k] == '=' ? k : 0;
}

static verifier *find(vset *s, const char *name, size_t len) {
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].name && strlen(s->v[i].name) == len && !memcmp(s->v[i].name, name, len)) return &s->v[i];
    return NULL;
}

int vs_add(vset *s, const char *arg, rl_err *err) {
    size_t k = name_len(arg);
    const char *cmd = k ? arg + k + 1 : arg;
    if (!cmd[strspn(cmd, " \t\n")]) return err_set(err, "'%s': the command is empty", arg);
    if (k && find(s, arg, k)) return err_set(err, "'%s': the name '%.*s' is given twice", arg, (int)k, arg);
    if (s->n && (!k || !s->v[0].name))
        return err_set(err, "'%s': several verifiers must each be named, NAME=CMD (a bare command may be given "
                            "alone)", arg);
    GROW(s->v, s->cap, s->n + 1, 4);
    verifier *v = &s->v[s->n++];
    memset(v, 0, sizeof *v);
    v->cmd = xstrdup(cmd);
    v->weight = 1;
    if (k) {
        v->name = xmalloc(k + 1);
        memcpy(v->name, arg, k);
        v->name[k] = 0;
        size_t w = k + 16;
        v->what = xmalloc(w);
        snprintf(v->what, w, "verifier '%s'", v->name);
    } else {
        v->what = xstrdup("verifier command");
    }
    return 0;
}

int vs_weights(vset *s, const char *list, rl_err *err) {
    if (s->n == 1 && !s->v[0].name)
        return err_set(err, "'%s': weights are for named verifiers (--verifier-cmd NAME=CMD)", list);
    int *seen = xmalloc((s->n ? s->n : 1) * sizeof *seen);
    memset(seen, 0, (s->n ? s->n : 1) * sizeof *seen);
    int rc = 0;
    for (const char *p = list; !rc;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        char num[64];
        size_t nl = eq ? len - (size_t)(eq - p) - 1 : 0;
        verifier *v = eq ? find(s, p, (size_t)(eq - p)) : NULL;
        char *e = NULL;
        double w = 0;
        if (eq && nl && nl < sizeof num) {
            memcpy(num, eq + 1, nl);
            num[nl] = 0;
            w = strtod(num, &e);
        }
        if (!eq || eq == p)
            rc = err_set(err, "'%.*s' is not NAME=WEIGHT", (int)len, p);
        else if (!v)
            rc = err_set(err, "'%.*s': no verifier is named '%.*s'", (int)len, p, (int)(eq - p), p);
        else if (seen[v - s->v]++)
            rc = err_set(err, "'%.*s': the weight of '%s' is given twice", (int)len, p, v->name);
        else if (!e || *e || e == num || !isfinite(w))
            rc = err_set(err, "'%.*s': the weight is not a finite number", (int)len, p);
        else
            v->weight = w;
        if (!end) break;
        p = end + 1;
    }
    free(seen);
    return rc;
}

int vs_start(vset *s, double timeout, rl_err *err) {
    for (size_t i = 0; i < s->n; i++)
        if (!(s->v[i].vp = vp_start(s->v[i].cmd, s->v[i].what, timeout, err))) return -1;
    return 0;
}

void vs_send(vset *s, const void *line, size_t n) {
    for (size_t i = 0; i < s->n; i++) vp_send(s->v[i].vp, line, n);
    s->sent++;
}

uint64_t vs_sent(const vset *s) { return s->sent; }

uint64_t vs_answered(const vset *s) {
    uint64_t a = s->sent;
    for (size_t i = 0; i < s->n; i++)
        if (vp_answered(s->v[i].vp) < a) a = vp_answered(s->v[i].vp);
    return a;
}

// vp_pump of verifier v; on an error, the request it names.
static int pump_one(vset *s, verifier *v, int block, rl_err *err) {
    if (!vp_pump(v->vp, block, err)) return 0;
    s->err_req = vp_answered(v->vp);
    return -1;
}

int vs_pump(vset *s, int block, rl_err *err) {
    for (size_t i = 0; i < s->n; i++)
        if (pump_one(s, &s->v[i], 0, err)) return -1;
    uint64_t want = vs_answered(s) + 1;
    if (!block || want > s->sent) return 0;
    for (size_t i = 0; i < s->n; i++)
        while (vp_answered(s->v[i].vp) < want)
            if (pump_one(s, &s->v[i], 1, err)) return -1;
    return 0;
}

int vs_apply(vset *s, uint64_t i, rec_t *rec, rl_err *err) {
    double reward = 0;
    const verifier *pred_by = NULL;
    const vr_reply *pred = NULL;
    rec_clear(s->parts);
    for (size_t k = 0; k < s->n; k++) {
        const verifier *v = &s->v[k];
        const vr_reply *r = vp_reply(v->vp, i);
        reward += v->weight * r->reward;
        if (v->name) rec_set_f64(s->parts, v->name, r->reward);
        for (size_t j = 0; j < r->n; j++) {
            if (!v->name) {
                rec_set_f64(s->parts, r->names[j], r->values[j]);
                continue;
            }
            size_t kl = strlen(v->name) + 1 + strlen(r->names[j]) + 1;
            char *key = xmalloc(kl);
            snprintf(key, kl, "%s.%s", v->name, r->names[j]);
            rec_set_f64(s->parts, key, r->values[j]);
            free(key);
        }
        if (r->pred && pred) {
            s->err_req = i;
            return err_set(err, "request %llu: %s and %s both reply with a \"pred\" (one verifier may give it)",
                           (unsigned long long)i, pred_by->what, v->what);
        }
        if (r->pred) pred = r, pred_by = v;
    }
    rec_set_f64(rec, "reward", reward);
    if (rec_nfields(s->parts)) {
        s->enc.len = 0;
        rec_encode(s->parts, &s->enc);
        rec_set_raw(rec, "rewards", 7, s->enc.data, s->enc.len);
    }
    if (pred) rec_set_str(rec, "pred", pred->pred, pred->pred_len);
    return 0;
}

void vs_forget(vset *s, uint64_t i) {
    for (size_t k = 0; k < s->n; k++) vp_forget(s->v[k].vp, i);
}

uint64_t vs_error_request(const vset *s) { return s->err_req; }

int vs_finish(vset *s, rl_err *err) {
    for (size_t k = 0; k < s->n; k++)
        if (vp_finish(s->v[k].vp, err)) {
            s->err_req = vp_answered(s->v[k].vp);
            return -1;
        }
    return 0;
}
