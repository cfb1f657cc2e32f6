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

void stats_pass_at(stats_t *s, const uint32_t *ks, int nk) {
    s->pass_at = 1;
    pk_init(&s->pk, ks, nk);
    for (int i = 0; i < nk; i++) {
        snprintf(s->pk_keys[i][0], sizeof s->pk_keys[i][0], "pass@%u", ks[i]);
        snprintf(s->pk_keys[i][1], sizeof s->pk_keys[i][1], "maj@%u", ks[i]);
        snprintf(s->pk_keys[i][2], sizeof s->pk_keys[i][2], "pass@%u_skipped", ks[i]);
    }
}

void stats_free(stats_t *s) {
    if (s->pass_at) pk_free(&s->pk);
    for (int i = 0; i < STATS_MAX_FINISH; i++) free(s->finish[i]);
    rollout_view_free(&s->view);
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

int stats_add(stats_t *s, const rec_t *r, rl_err *err) {
    s->records++;
    rollout_view *v = &s->view;
    if (rollout_decode(v, r, err)) return -1;   // describes any float a writer wrote: no ranges
    int has = !!(v->has & RO_GROUP);
    if (has && (!s->have_group || v->group != s->last_group)) s->groups++;
    s->have_group = has;
    if (has) s->last_group = v->group;

    if (v->has & RO_REWARD) {
        s->rewarded++;
        s->sum_reward += v->reward;
        s->positive += v->reward > 0;
    }
    if (v->has & RO_IDS) {
        s->seqs++;
        s->tokens += v->n;
        if (v->n > s->tokens_max) s->tokens_max = v->n;
    }
    if (s->pass_at) {
        // "pred", a verifier's extracted answer, is read here alone: the
        // rollout view leaves keys it does not know to whoever reads them.
        const char *pred = NULL;
        size_t pred_len = 0;
        if (rollout_require(v, RO_GROUP | RO_REWARD, "--pass-at counts the correct samples of each group", err))
            return -1;
        if (rec_get_str(r, "pred", &pred, &pred_len) == REC_TYPE)
            return err_set(err, "field \"pred\" is not a string (--pass-at's majority vote reads it)");
        pk_add(&s->pk, v->group, v->reward > 0, pred, pred_len);
    }
    if (v->has & RO_FINISH) count_finish(s, v->finish, v->finish_len);

    const u32_vec *ver = &v->ver;
    if ((v->has & RO_VER) && ver->n) {
        s->ver_seqs++;
        uint32_t lo = ver->v[0], hi = ver->v[0];
        for (size_t t = 1; t < ver->n; t++) {
            if (ver->v[t] < lo) lo = ver->v[t];
            if (ver->v[t] > hi) hi = ver->v[t];
        }
        s->ver_mixed += lo != hi;
        if (lo < s->ver_min) s->ver_min = lo;
        if (hi > s->ver_max) s->ver_max = hi;
        if (v->has & RO_VER_LEARNER) mm_add_lag(&s->mm, ver->v, NULL, ver->n, v->ver_learner);
    }

    int hl = !!(v->has & RO_LOGP), hll = !!(v->has & RO_LOGP_LEARNER), hw = !!(v->has & RO_W),
        hm = !!(v->has & RO_MASK);
    if (hl || hw || hm)
        mm_add(&s->mm, hl && hll ? v->logp.v : NULL, hl && hll ? v->logp_learner.v : NULL, hw ? v->w.v : NULL,
               hm ? v->mask.v : NULL, v->n);
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

#define STATS_ROWS (40 + 3 * PK_MAX_K)

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
    for (int i = 0; s->pass_at && i < s->pk.nk; i++) {
        pk_result p;
        pk_result_at(&s->pk, i, &p);
        const char(*key)[32] = s->pk_keys[i];
        if (p.problems) {
            ROW(key[0], key[0], p.pass, 0, i ? NULL : "unbiased, over groups (Chen et al. 2021)");
            if (s->pk.any_pred) ROW(key[1], key[1], p.maj, 0, i ? NULL : "majority \"pred\" of the first k");
        }
        if (p.skipped) ROW(key[2], key[2], p.skipped, 1, "groups of fewer than k samples, left out");
    }
#undef ROW
    return n;
}

void stats_table(const stats_t *s, sbuf *out) {
    row r[STATS_ROWS];
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
    row r[STATS_ROWS];
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
