#include "ratio/ratio.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learn/objective.h"
#include "records/json.h"

const ratio_opts ratio_default_opts = {.mode = RATIO_TOKEN, .clip = 2.0, .lo = 0, .hi = INFINITY};

static const char *const MODE_NAMES[] = {"token", "seq", "geo", "none"};

const char *ratio_mode_name(ratio_mode m) { return MODE_NAMES[m]; }

int ratio_parse_mode(const char *s, ratio_mode *out, rl_err *err) {
    for (int m = 0; m < (int)(sizeof MODE_NAMES / sizeof *MODE_NAMES); m++)
        if (!strcmp(s, MODE_NAMES[m])) {
            *out = (ratio_mode)m;
            return 0;
        }
    return err_set(err, "--mode: expected token, seq, geo or none, got '%s'", s);
}

// A whole string that is a number (strtod: "2", "0.5", "1e3", "inf"), not NaN.
static int parse_number(const char *s, const char *end_at, double *out) {
    if (!*s || s == end_at) return -1;
    char *end;
    double v = strtod(s, &end);
    if (end != end_at || isnan(v)) return -1;
    *out = v;
    return 0;
}

int ratio_parse_clip(const char *s, double *out, rl_err *err) {
    double v;
    if (parse_number(s, s + strlen(s), &v) || !(v > 0))
        return err_set(err, "--clip: expected a number > 0 (or inf for no cap), got '%s'", s);
    *out = v;
    return 0;
}

int ratio_parse_mask(const char *s, double *lo, double *hi, rl_err *err) {
    const char *comma = strchr(s, ',');
    double a, b;
    if (!comma || parse_number(s, comma, &a) || parse_number(comma + 1, comma + 1 + strlen(comma + 1), &b))
        return err_set(err, "--mask: expected LO,HI (two numbers, e.g. 0.5,2), got '%s'", s);
    if (!(a >= 0 && a < b))
        return err_set(err, "--mask: expected 0 <= LO < HI, got '%s'", s);
    *lo = a;
    *hi = b;
    return 0;
}

int ratio_capping(const ratio_opts *o) { return !o->mask || o->clip_set; }

static int inside(const ratio_opts *o, double rho) { return !o->mask || (rho >= o->lo && rho <= o->hi); }

size_t ratio_weights(const ratio_opts *o, const float *logp, const float *logp_learner, const uint8_t *model,
                     size_t n, float *w, uint8_t *mask) {
    int cap = ratio_capping(o);
    size_t capped = 0, kept = 0;   // kept: the model's tokens
    double sum = 0;                // seq, geo: the log of the product of their ratios
    for (size_t t = 0; t < n; t++) {
        if (model && !model[t]) {   // the environment's: no ratio, no weight
            w[t] = 0;
            mask[t] = 0;
            continue;
        }
        kept++;
        if (o->mode == RATIO_NONE) {
            w[t] = 1;
            mask[t] = 1;
        } else if (o->mode == RATIO_TOKEN) {
            double rho = exp((double)logp_learner[t] - (double)logp[t]);
            int cut;
            mask[t] = (uint8_t)inside(o, rho);
            w[t] = obj_tis_weight(rho, cap ? o->clip : INFINITY, &cut);
            capped += (size_t)cut;
        } else sum += (double)logp_learner[t] - (double)logp[t];
    }
    if (o->mode == RATIO_NONE || o->mode == RATIO_TOKEN || !kept) return capped;
    double log_r = o->mode == RATIO_SEQ ? sum : sum / (double)kept;
    int cut;
    float wv = obj_seq_weight(log_r, cap ? o->clip : INFINITY, &cut);
    uint8_t m = (uint8_t)inside(o, exp(log_r));
    for (size_t t = 0; t < n; t++)
        if (!model || model[t]) {
            w[t] = wv;
            mask[t] = m;
        }
    return cut ? kept : 0;
}

void ratio_input_free(ratio_input *in) {
    rollout_view_free(&in->v);
    f32_vec_free(&in->w);
    u8_vec_free(&in->mask);
}

int ratio_read(const rec_t *r, const ratio_need *need, ratio_input *in, rl_err *err) {
    rollout_view *v = &in->v;
    if (rollout_read(v, r, err) || rollout_require(v, RO_IDS, "the completion's token ids", err) ||
        (!need->ref && rollout_require(v, RO_LOGP, "the sampler's log-probabilities", err)))
        return -1;
    size_t n = v->n;
    if (!need->score) return rollout_require(v, RO_LOGP_LEARNER, "give --model DIR to compute it", err);
    if (rollout_require(v, RO_PROMPT_IDS, "the prompt's token ids, needed to score the completion", err)) return -1;
    if (!v->prompt_ids.n)
        return err_set(err, "field \"prompt_ids\" is empty (the learner needs at least one token of context)");
    if (rollout_vocab("prompt_ids", v->prompt_ids.v, v->prompt_ids.n, need->vocab, err) ||
        rollout_vocab("ids", v->ids.v, n, need->vocab, err))
        return -1;
    // the last token is predicted, never read: n_prompt + n - 1 positions
    if (need->max_len && n && v->prompt_ids.n + n - 1 > need->max_len)
        return err_set(err, "prompt and completion are %zu tokens; scoring reads %zu of them, more than "
                       "the model's %s %zu", v->prompt_ids.n + n, v->prompt_ids.n + n - 1,
                       need->max_len_key ? need->max_len_key : "max_position_embeddings", need->max_len);
    if (rollout_require(v, RO_TEMPERATURE, "the learner scores at the sampling temperature", err)) return -1;
    if (!(v->temperature > 0) || isinf(v->temperature))
        return err_set(err, "field \"temperature\" is %g; scoring needs a positive temperature", v->temperature);
    if (v->logp_learner.cap < n) {
        v->logp_learner.cap = n;
        v->logp_learner.v = xrealloc(v->logp_learner.v, n * sizeof *v->logp_learner.v);
    }
    v->logp_learner.n = n;
    v->has &= ~RO_VER_LEARNER;
    return 0;
}

// The record's own mask: 0 on the tokens an environment added, or NULL
// when it has none (every token the model's).
static const uint8_t *model_tokens(const ratio_input *in) {
    return in->v.has & RO_MASK ? in->v.mask.v : NULL;
}

static size_t count_model_tokens(const ratio_input *in) {
    const uint8_t *model = model_tokens(in);
    size_t k = 0;
    for (size_t t = 0; t < in->v.n; t++) k += !model || model[t];
    return k;
}

int ratio_filtered(const ratio_input *in) { return in->v.top_p != 1 || in->v.top_k > 0; }

size_t ratio_compute(const ratio_opts *o, ratio_input *in) {
    size_t n = in->v.n;
    if (in->w.cap < n) {
        in->w.cap = n;
        in->w.v = xrealloc(in->w.v, n * sizeof *in->w.v);
    }
    if (in->mask.cap < n) {
        in->mask.cap = n;
        in->mask.v = xrealloc(in->mask.v, n);
    }
    in->w.n = in->mask.n = n;
    return ratio_weights(o, in->v.logp.v, in->v.logp_learner.v, model_tokens(in), n, in->w.v, in->mask.v);
}

void ratio_store(const ratio_input *in, int scored, rec_t *r) {
    if (scored) {
        rec_set_f32s(r, "logp_learner", in->v.logp_learner.v, in->v.logp_learner.n);
        rec_set_uint(r, "ver_learner", in->v.ver_learner);
    }
    rec_set_f32s(r, "w", in->w.v, in->w.n);
    rec_set_u8s(r, "mask", in->mask.v, in->mask.n);
}

void ratio_acc_init(ratio_acc *a) {
    a->records = a->tokens = a->skipped = 0;
    mm_init(&a->mm);
}

void ratio_acc_count(ratio_acc *a, const ratio_input *in) {
    a->records++;
    a->tokens += count_model_tokens(in);
}

void ratio_acc_skip(ratio_acc *a, const ratio_input *in) {
    ratio_acc_count(a, in);
    a->skipped++;
}

void ratio_acc_add(ratio_acc *a, const ratio_input *in, size_t capped) {
    const rollout_view *v = &in->v;
    const uint8_t *model = model_tokens(in);
    size_t n = v->n;
    a->records++;
    a->tokens += count_model_tokens(in);
    mm_add_capped(&a->mm, v->logp.v, v->logp_learner.v, in->w.v, in->mask.v, model, n, capped);
    if ((v->has & RO_VER) && (v->has & RO_VER_LEARNER)) mm_add_lag(&a->mm, v->ver.v, model, n, v->ver_learner);
}

// The quantities of one metrics line, in order; NaN where undefined.
typedef struct {
    const char *key;
    double v;
    int is_int;
} metric;

static int metrics(const ratio_acc *a, metric *out) {
    const mm_acc *m = &a->mm;
    int n = 0, tok = m->n > 0, lag = m->n_lag > 0;
    out[n++] = (metric){"records", (double)a->records, 1};
    out[n++] = (metric){"tokens", (double)a->tokens, 1};
    out[n++] = (metric){"skipped", (double)a->skipped, 1};
    out[n++] = (metric){"k1", mm_k1(m), 0};
    out[n++] = (metric){"k3", mm_k3(m), 0};
    out[n++] = (metric){"ratio_mean", mm_ratio_mean(m), 0};
    out[n++] = (metric){"ratio_min", tok ? m->rho_min : NAN, 0};
    out[n++] = (metric){"ratio_max", tok ? m->rho_max : NAN, 0};
    out[n++] = (metric){"capped_frac", mm_capped_frac(m), 0};
    out[n++] = (metric){"masked_frac", mm_masked_frac(m), 0};
    out[n++] = (metric){"ess", mm_ess(m), 0};
    out[n++] = (metric){"max_abs_p_diff", tok ? m->max_dp : NAN, 0};
    out[n++] = (metric){"lag_mean", mm_lag_mean(m), 0};
    out[n++] = (metric){"lag_max", lag ? (double)m->lag_max : NAN, 1};
    return n;
}

void ratio_acc_json(const ratio_acc *a, long batch, sbuf *out) {
    metric m[16];
    int n = metrics(a, m);
    sbuf_putc(out, '{');
    if (batch >= 0) sbuf_printf(out, "\"batch\":%ld,", batch);
    for (int i = 0; i < n; i++) {
        if (i) sbuf_putc(out, ',');
        json_put_str(out, m[i].key, strlen(m[i].key));
        sbuf_putc(out, ':');
        if (isnan(m[i].v)) sbuf_put(out, "null", 4);
        else if (m[i].is_int) sbuf_printf(out, "%.0f", m[i].v);
        else json_put_f64(out, m[i].v);
    }
    sbuf_put(out, "}\n", 2);
}

void ratio_acc_text(const ratio_acc *a, sbuf *out) {
    metric m[16];
    int n = metrics(a, m);
    for (int i = 0; i < n; i++) {
        if (i) sbuf_put(out, ", ", 2);
        if (isnan(m[i].v)) sbuf_printf(out, "%s -", m[i].key);
        else if (m[i].is_int) sbuf_printf(out, "%s %.0f", m[i].key, m[i].v);
        else sbuf_printf(out, "%s %.4g", m[i].key, m[i].v);
    }
}
