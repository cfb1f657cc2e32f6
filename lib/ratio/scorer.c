// scorer.c — the stage of rl-ratio between reading and writing (scorer.h).
#include "ratio/scorer.h"

#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "records/drift.h"
#include "records/fields.h"
#include "sync/receiver.h"

// A record waiting to be scored and written, with what was decoded from it.
typedef struct {
    rec_t *rec;
    ratio_input in;
    char where[512];
    int skip;           // passed on unscored (skip_uniform)
} held_rec;

struct scorer {
    scr_opts o;
    ratio_need need;
    held_rec *held;
    size_t cap, n;            // records held: at most cap
    model_seq *seqs;          // one forward's sequences (cap)
    ratio_acc batch, total;   // the current batch of `o.batch` records, and the run
    uint64_t group_size;      // records a group holds (the header's sampling.group); 0: unknown
    long batches;             // metrics lines written
    int warn_state;           // top-p/top-k: 0 nothing to say, 1 warning pending, 2 given
    char warning[768];
    drift_t drift;            // each batch's k3, for the warning of a growing mismatch
    int drift_due;            // its warning pending
    char drift_warning[1024];
    sbuf line;
};

scorer_t *scr_new(const scr_opts *o) {
    scorer_t *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->o = *o;
    if (!s->o.batch) s->o.batch = 1;
    if (!s->o.forward_tokens) s->o.forward_tokens = SCR_FORWARD_TOKENS;
    if (o->model) {
        const model_config *c = model_cfg(o->model);
        const char *key;
        size_t max_len = (size_t)cfg_max_seq(c, &key);
        s->need = (ratio_need){.score = 1, .ref = o->as_ref, .vocab = (uint32_t)c->vocab, .max_len = max_len, .max_len_key = key};
    }
    s->cap = o->model ? s->o.batch : 1;
    s->held = xmalloc(s->cap * sizeof *s->held);
    memset(s->held, 0, s->cap * sizeof *s->held);
    s->seqs = xmalloc(s->cap * sizeof *s->seqs);
    ratio_acc_init(&s->batch);
    ratio_acc_init(&s->total);
    drift_init(&s->drift);
    return s;
}

void scr_free(scorer_t *s) {
    if (!s) return;
    for (size_t i = 0; i < s->cap; i++) {
        rec_free(s->held[i].rec);
        ratio_input_free(&s->held[i].in);
    }
    free(s->held);
    free(s->seqs);
    sbuf_free(&s->line);
    free(s);
}

const ratio_acc *scr_total(const scorer_t *s) { return &s->total; }

const char *scr_take_warning(scorer_t *s) {
    if (s->warn_state == 1) {
        s->warn_state = 2;
        return s->warning;
    }
    if (!s->drift_due) return NULL;
    s->drift_due = 0;
    return s->drift_warning;
}

// ---- headers --------------------------------------------------------------

int scr_check_header(const rec_t *h, rl_err *err) {
    const char *kind;
    size_t n;
    if (rec_get_str(h, "kind", &kind, &n) != REC_OK) return err_set(err, "member header has no \"kind\"");
    if (n != 8 || memcmp(kind, "rollouts", 8))
        return err_set(err, "member of kind \"%.*s\": rl-ratio weights rollouts", (int)n, kind);
    return 0;
}

static int put_cb(void *data, const char *buf, size_t len) {
    sbuf_put(data, buf, len);
    return 0;
}

static void pack_cstr(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

// "adapter": DIR, when one was merged into the model.
static void pack_adapter(msgpack_packer *pk, const char *dir) {
    if (!dir) return;
    pack_cstr(pk, "adapter");
    pack_cstr(pk, dir);
}

void scr_make_header(const scorer_t *s, const rec_t *in, rec_t *out, int argc, char **argv, int no_provenance) {
    const scr_opts *o = &s->o;
    // a reference's scores leave the input's weighting ("ratio") as it was
    const char *const OURS[] = {"rlpipe", "kind", "producer", "argv", "time", o->as_ref ? "ref" : "ratio"};
    rec_make_header(out, "rollouts", "rl-ratio", argc, argv, no_provenance);
    for (size_t i = 0; i < rec_nfields(in); i++) {
        size_t kl, vl;
        const char *k = rec_key(in, i, &kl);
        const uint8_t *v = rec_value(in, i, &vl);
        int ours = 0;
        for (size_t j = 0; j < sizeof OURS / sizeof *OURS; j++)
            ours |= strlen(OURS[j]) == kl && !memcmp(OURS[j], k, kl);
        if (!ours) rec_set_raw(out, k, kl, v, vl);
    }
    sbuf b = {0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, put_cb);
    if (o->as_ref) {   // {"model": DIR, ["adapter": DIR,] "device": D}
        msgpack_pack_map(&pk, 2 + (o->adapter_dir != NULL));
        pack_cstr(&pk, "model");
        pack_cstr(&pk, o->model_dir ? o->model_dir : "");
        pack_adapter(&pk, o->adapter_dir);
        pack_cstr(&pk, "device");
        pack_cstr(&pk, model_device(o->model));
        rec_set_raw(out, "ref", 3, b.data, b.len);
        sbuf_free(&b);
        return;
    }
    int capping = ratio_capping(&o->ratio);
    int skip = o->model && o->skip_uniform;
    msgpack_pack_map(&pk, 2 + (size_t)capping + (size_t)o->ratio.mask + (o->model ? 3 + (o->adapter_dir != NULL) : 0) + (size_t)skip);
    pack_cstr(&pk, "mode");
    pack_cstr(&pk, ratio_mode_name(o->ratio.mode));
    if (capping) {
        pack_cstr(&pk, "clip");
        msgpack_pack_double(&pk, o->ratio.clip);
    }
    if (o->ratio.mask) {
        pack_cstr(&pk, "mask");
        msgpack_pack_array(&pk, 2);
        msgpack_pack_double(&pk, o->ratio.lo);
        msgpack_pack_double(&pk, o->ratio.hi);
    }
    pack_cstr(&pk, "batch");
    msgpack_pack_uint64(&pk, o->batch);
    if (o->model) {
        pack_cstr(&pk, "model");
        pack_cstr(&pk, o->model_dir ? o->model_dir : "");
        pack_adapter(&pk, o->adapter_dir);
        pack_cstr(&pk, "ver_learner");
        msgpack_pack_uint64(&pk, o->ver_learner);
        pack_cstr(&pk, "device");
        pack_cstr(&pk, model_device(o->model));
    }
    if (skip) {
        pack_cstr(&pk, "skip_uniform");
        msgpack_pack_true(&pk);
    }
    rec_set_raw(out, "ratio", 5, b.data, b.len);
    sbuf_free(&b);
}

uint64_t scr_take_group_size(scorer_t *s, const rec_t *in) {
    fld_group_size(in, &s->group_size);
    return s->group_size;
}

// ---- records --------------------------------------------------------------

// The reward of held record h for skip_uniform: 0 and *r, or -1 where it
// cannot be skipped (no group, no finite reward, or an advantage of its own).
static int uniform_key(const held_rec *h, uint64_t *group, double *r) {
    const rollout_view *v = &h->in.v;
    *group = v->group;
    *r = v->reward;
    return (v->has & RO_GROUP) && (v->has & RO_REWARD) && isfinite(v->reward) && !(v->has & RO_ADV) ? 0 : -1;
}

// Marks skip on the held records [0, n) that form whole groups of
// group_size with equal rewards (runs of one "group" value; a run at either
// end may be part of a group whose other records are not held: it is whole
// only if it has group_size records).
static void mark_uniform(scorer_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) s->held[i].skip = 0;
    if (!s->o.skip_uniform || !s->group_size) return;
    for (size_t i = 0; i < n;) {
        uint64_t g, gj;
        double r, rj;
        if (uniform_key(&s->held[i], &g, &r)) {
            i++;
            continue;
        }
        size_t j = i + 1;
        int same = 1;
        for (; j < n && !uniform_key(&s->held[j], &gj, &rj) && gj == g; j++) same &= rj == r;
        if (same && j - i == s->group_size)
            for (size_t k = i; k < j; k++) s->held[k].skip = 1;
        i = j;
    }
}

// Learner log-probabilities of the n held records, in forwards of at most
// forward_tokens tokens (a longer record goes alone).
static int score(scorer_t *s, size_t n, rl_err *err) {
    size_t i = 0;
    while (i < n) {
        size_t j = i, k = 0, tokens = 0;
        for (; j < n; j++) {
            ratio_input *in = &s->held[j].in;
            const rollout_view *v = &in->v;
            if (!v->n || s->held[j].skip) continue;   // nothing to score
            size_t t = v->prompt_ids.n + v->n;
            if (k && tokens + t > s->o.forward_tokens) break;
            tokens += t;
            s->seqs[k++] = (model_seq){.prompt = v->prompt_ids.v, .n_prompt = v->prompt_ids.n,
                                       .ids = v->ids.v, .n_ids = v->n,
                                       .temperature = (float)v->temperature, .logp = in->v.logp_learner.v};
        }
        rl_err e;
        if (k && model_score_groups(s->o.model, s->seqs, k, &e))
            return err_set(err, "scoring with the learner model: %s: %s to %s", e.msg, s->held[i].where,
                           s->held[j - 1].where);
        i = j;
    }
    return 0;
}

// The batch is complete: its metrics line, and its k3 to the drift tracker.
static int metrics_line(scorer_t *s, rl_err *err) {
    drift_report r;
    if (!s->o.as_ref && drift_add(&s->drift, s->batches, mm_k3(&s->batch.mm), &r)) {
        drift_message(&r, "batches", s->drift_warning, sizeof s->drift_warning);
        s->drift_due = 1;
    }
    if (s->o.metrics) {
        s->line.len = 0;
        ratio_acc_json(&s->batch, s->batches, &s->line);
        if (fwrite(s->line.data, 1, s->line.len, s->o.metrics) != s->line.len || fflush(s->o.metrics))
            return err_set(err, "write error: %s: %s", s->o.metrics_name, strerror(errno));
    }
    s->batches++;
    ratio_acc_init(&s->batch);
    return 0;
}

int scr_flush(scorer_t *s, recw_t *w, rl_err *err) {
    size_t n = s->n;
    s->n = 0;   // whatever happens, nothing stays held
    uint64_t ver = s->o.ver_learner;
    if (s->o.receiver) ver = rcv_hold(s->o.receiver);   // a verified push is installed here
    if (s->o.model) mark_uniform(s, n);
    int rc = s->o.model ? score(s, n, err) : 0;
    if (s->o.receiver) rcv_release(s->o.receiver);
    if (rc) return -1;
    for (size_t i = 0; i < n; i++) {
        held_rec *h = &s->held[i];
        if (h->skip) {   // unscored: what an earlier scoring left of ours goes; a mask stays,
                         // as its zeros may mark the environment's tokens
            static const char *const OWN[] = {"logp_learner", "ver_learner", "w"};
            for (size_t k = 0; k < sizeof OWN / sizeof *OWN; k++) rec_del(h->rec, OWN[k]);
            if (recw_write(w, h->rec, err)) return -1;
            ratio_acc_skip(&s->batch, &h->in);
            ratio_acc_skip(&s->total, &h->in);
            if (s->batch.records == s->o.batch && metrics_line(s, err)) return -1;
            continue;
        }
        if (s->o.as_ref) {   // the reference's log-probabilities, scored into the view's logp_learner
            rec_set_f32s(h->rec, "logp_ref", h->in.v.logp_learner.v, h->in.v.logp_learner.n);
            if (recw_write(w, h->rec, err)) return -1;
            ratio_acc_count(&s->batch, &h->in);
            ratio_acc_count(&s->total, &h->in);
            if (s->batch.records == s->o.batch && metrics_line(s, err)) return -1;
            continue;
        }
        if (s->o.model) {
            h->in.v.ver_learner = ver;
            h->in.v.has |= RO_VER_LEARNER;
        }
        size_t capped = ratio_compute(&s->o.ratio, &h->in);
        ratio_store(&h->in, s->o.model != NULL, h->rec);
        if (recw_write(w, h->rec, err)) return -1;
        ratio_acc_add(&s->batch, &h->in, capped);
        ratio_acc_add(&s->total, &h->in, capped);
        if (s->batch.records == s->o.batch && metrics_line(s, err)) return -1;
    }
    return 0;
}

int scr_add(scorer_t *s, const rec_t *r, const char *where, recw_t *w, rl_err *err) {
    held_rec *h = &s->held[s->n];
    rl_err e;
    if (ratio_read(r, &s->need, &h->in, &e)) {
        if (scr_flush(s, w, err)) return -1;   // every record before the bad one goes out
        return err_set(err, "%s: %s", e.msg, where);
    }
    if (!s->warn_state && ratio_filtered(&h->in)) {
        snprintf(s->warning, sizeof s->warning,
                 "%.400s was sampled with top_p %g, top_k %lld; learner log-probabilities do not apply "
                 "top-p/top-k, so its ratios are biased (sample with top_p 1, top_k 0; said once)",
                 where, h->in.v.top_p, (long long)h->in.v.top_k);
        s->warn_state = 1;
    }
    if (!h->rec) h->rec = rec_new();   // slots fill as records come: a large --batch costs only what is used
    rec_copy(h->rec, r);
    snprintf(h->where, sizeof h->where, "%s", where);
    if (++s->n == s->cap) return scr_flush(s, w, err);
    return 0;
}

int scr_finish(scorer_t *s, rl_err *err) {
    if (s->batch.records) return metrics_line(s, err);
    return 0;
}
