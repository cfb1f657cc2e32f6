#include "records/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/json.h"

void stats_init(stats_t *s) {
    memset(s, 0, sizeof *s);
    mm_init(&s->mm);
    s->ver_min = UINT64_MAX;
}

void stats_free(stats_t *s) {
    for (int i = 0; i < STATS_MAX_FINISH; i++) free(s->finish[i]);
    u32_vec_free(&s->ver);
    f32_vec_free(&s->logp);
    f32_vec_free(&s->logp_learner);
    f32_vec_free(&s->w);
    u8_vec_free(&s->mask);
}

static void count_finish(stats_t *s, const char *reason, size_t n) {
    for (int i = 0; i < STATS_MAX_FINISH; i++) {
        if (!s->finish[i]) {
            s->finish[i] = memcpy(xmalloc(n + 1), reason, n);
            s->finish[i][n] = 0;
        }
        if (strlen(s->finish[i]) == n && !memcmp(s->finish[i], reason, n)) {
            s->finish_n[i]++;
            return;
        }
    }
    s->finish_other++;
}

// Gets an optional field: 1 present, 0 absent, -1 wrong type (err set).
#define OPTIONAL(call, key, what)                                                \
    ({                                                                           \
        rec_status st_ = (call);                                                 \
        st_ == REC_TYPE ? err_set(err, "field \"%s\" is not %s", key, what)      \
                        : st_ == REC_OK;                                         \
    })

int stats_add(stats_t *s, const rec_t *r, rl_err *err) {
    s->records++;
    uint64_t g, vl;
    int has;
    if ((has = OPTIONAL(rec_get_uint(r, "group", &g), "group", "an unsigned integer")) < 0) return -1;
    if (has && (!s->have_group || g != s->last_group)) s->groups++;
    s->have_group = has;
    if (has) s->last_group = g;

    double reward;
    if ((has = OPTIONAL(rec_get_f64(r, "reward", &reward), "reward", "a number")) < 0) return -1;
    if (has) {
        s->rewarded++;
        s->sum_reward += reward;
        s->positive += reward > 0;
    }
    size_t n;
    if ((has = OPTIONAL(rec_get_len(r, "ids", &n), "ids", "an array")) < 0) return -1;
    if (has) {
        s->seqs++;
        s->tokens += n;
        if (n > s->tokens_max) s->tokens_max = n;
    }
    const char *fin;
    size_t fin_len;
    if ((has = OPTIONAL(rec_get_str(r, "finish", &fin, &fin_len), "finish", "a string")) < 0) return -1;
    if (has) count_finish(s, fin, fin_len);

    int has_ver = OPTIONAL(rec_get_u32s(r, "ver", &s->ver), "ver", "an array of unsigned integers");
    if (has_ver < 0) return -1;
    if (has_ver && s->ver.n) {
        s->ver_seqs++;
        uint32_t lo = s->ver.v[0], hi = s->ver.v[0];
        for (size_t t = 1; t < s->ver.n; t++) {
            if (s->ver.v[t] < lo) lo = s->ver.v[t];
            if (s->ver.v[t] > hi) hi = s->ver.v[t];
        }
        s->ver_mixed += lo != hi;
        if (lo < s->ver_min) s->ver_min = lo;
        if (hi > s->ver_max) s->ver_max = hi;
        if ((has = OPTIONAL(rec_get_uint(r, "ver_learner", &vl), "ver_learner", "an unsigned integer")) < 0) return -1;
        if (has) mm_add_lag(&s->mm, s->ver.v, s->ver.n, vl);
    }

    int hl = OPTIONAL(rec_get_f32s(r, "logp", &s->logp), "logp", "an array of numbers");
    int hll = OPTIONAL(rec_get_f32s(r, "logp_learner", &s->logp_learner), "logp_learner", "an array of numbers");
    int hw = OPTIONAL(rec_get_f32s(r, "w", &s->w), "w", "an array of numbers");
    int hm = OPTIONAL(rec_get_u8s(r, "mask", &s->mask), "mask", "an array of 0/1");
    if (hl < 0 || hll < 0 || hw < 0 || hm < 0) return -1;
    size_t len = hl ? s->logp.n : hw ? s->w.n : hm ? s->mask.n : 0;
    if ((hll && (!hl || s->logp_learner.n != len)) || (hw && s->w.n != len) || (hm && s->mask.n != len))
        return err_set(err, "per-token fields logp, logp_learner, w, mask have different lengths");
    if (hl || hw || hm)
        mm_add(&s->mm, hl && hll ? s->logp.v : NULL, hl && hll ? s->logp_learner.v : NULL,
               hw ? s->w.v : NULL, hm ? s->mask.v : NULL, len);
    return 0;
}

// One row of the summary, in both forms: the table prints label and value,
// JSON prints key and value.
typedef struct {
    const char *key, *label;
    double v;
    int is_int;
    const char *note;
} row;

static int rows(const stats_t *s, row *out) {
    int n = 0;
#define ROW(k, l, val, isint, nt) out[n++] = (row){k, l, (double)(val), isint, nt}
    ROW("records", "records", s->records, 1, NULL);
    ROW("members", "members", s->members, 1, NULL);
    ROW("groups", "groups", s->groups, 1, "runs of equal \"group\"");
    ROW("rewarded", "rewarded", s->rewarded, 1, "records with a reward");
    if (s->rewarded) {
        ROW("reward_mean", "reward mean", s->sum_reward / (double)s->rewarded, 0, NULL);
        ROW("accuracy", "accuracy", (double)s->positive / (double)s->rewarded, 0, "reward > 0");
    }
    if (s->seqs) {
        ROW("tokens_mean", "tokens mean", (double)s->tokens / (double)s->seqs, 0, "completion tokens");
        ROW("tokens_max", "tokens max", s->tokens_max, 1, NULL);
    }
    if (s->ver_seqs) {
        ROW("ver_min", "version min", s->ver_min, 1, NULL);
        ROW("ver_max", "version max", s->ver_max, 1, NULL);
        ROW("mixed_version_frac", "mixed versions", (double)s->ver_mixed / (double)s->ver_seqs, 0,
            "sequences spanning a weight update");
    }
    const mm_acc *m = &s->mm;
    if (m->n_lag) {
        ROW("lag_mean", "lag mean", mm_lag_mean(m), 0, "ver_learner - ver, per token");
        ROW("lag_max", "lag max", m->lag_max, 1, NULL);  // negative: scored with older weights than sampled
    }
    if (m->n) {
        ROW("tokens_scored", "tokens scored", m->n, 1, "with logp and logp_learner");
        ROW("k1", "k1", mm_k1(m), 0, "mean(logp - logp_learner)");
        ROW("k3", "k3", mm_k3(m), 0, "mean(rho - 1 - log rho)");
        ROW("ratio_mean", "ratio mean", mm_ratio_mean(m), 0, "rho = exp(logp_learner - logp)");
        ROW("ratio_min", "ratio min", m->rho_min, 0, NULL);
        ROW("ratio_max", "ratio max", m->rho_max, 0, NULL);
        ROW("max_abs_p_diff", "max |p_l - p_s|", m->max_dp, 0, NULL);
    }
    if (m->n_w) {
        if (m->n) ROW("capped_frac", "capped", mm_capped_frac(m), 0, "tokens with w < rho");
        ROW("ess", "ess", mm_ess(m), 0, "(sum w)^2 / (N sum w^2)");
    }
    if (m->n_mask) ROW("masked_frac", "masked", mm_masked_frac(m), 0, "tokens with mask 0");
#undef ROW
    return n;
}

void stats_table(const stats_t *s, sbuf *out) {
    row r[40];
    int n = rows(s, r);
    for (int i = 0; i < n; i++) {
        char val[64];
        if (r[i].is_int) snprintf(val, sizeof val, "%.0f", r[i].v);
        else snprintf(val, sizeof val, "%.6g", r[i].v);
        sbuf_printf(out, "%-16s %14s", r[i].label, val);
        if (r[i].note) sbuf_printf(out, "   %s", r[i].note);
        sbuf_putc(out, '\n');
        if (!strcmp(r[i].key, "tokens_max") || (!s->seqs && !strcmp(r[i].key, "rewarded"))) {
            for (int k = 0; k < STATS_MAX_FINISH && s->finish[k]; k++) {
                char label[64];
                snprintf(label, sizeof label, "finish %s", s->finish[k]);
                sbuf_printf(out, "%-16s %14llu\n", label, (unsigned long long)s->finish_n[k]);
            }
            if (s->finish_other) sbuf_printf(out, "%-16s %14llu\n", "finish (other)", (unsigned long long)s->finish_other);
        }
    }
}

void stats_json(const stats_t *s, sbuf *out) {
    row r[40];
    int n = rows(s, r);
    sbuf *b = out;
    sbuf_putc(b, '{');
    for (int i = 0; i < n; i++) {
        if (i) sbuf_putc(b, ',');
        json_put_str(b, r[i].key, strlen(r[i].key));
        sbuf_putc(b, ':');
        if (r[i].is_int) sbuf_printf(b, "%.0f", r[i].v);
        else json_put_f64(b, r[i].v);
    }
    if (s->finish[0]) {
        sbuf_put(b, ",\"finish\":{", 11);
        for (int k = 0; k < STATS_MAX_FINISH && s->finish[k]; k++) {
            if (k) sbuf_putc(b, ',');
            json_put_str(b, s->finish[k], strlen(s->finish[k]));
            sbuf_printf(b, ":%llu", (unsigned long long)s->finish_n[k]);
        }
        if (s->finish_other) sbuf_printf(b, ",\"(other)\":%llu", (unsigned long long)s->finish_other);
        sbuf_putc(b, '}');
    }
    sbuf_put(b, "}\n", 2);
}
