// ratio.h — importance weights that correct for the sampler/learner mismatch
// (doc/design.md §4), and what a rollout record must hold to be weighted.
//
// Per completion token t, in double precision:
//   d_t = logp_learner_t - logp_t,   rho_t = exp(d_t) = pi_old(a_t) / mu(a_t)
// and per mode, with C the cap:
//   token (TIS):  w_t = min(rho_t, C)
//   seq:          w_t = min(R, C) for every t,  R = prod rho_t = exp(sum d_t)
//   geo:          w_t = min(G, C) for every t,  G = exp(mean d_t)
//   none:         w_t = 1 (no correction; the mismatch is still measured)
// Products are sums of logs, so long sequences neither overflow nor underflow
// before the cap. With a mask [lo, hi] (MIS / IcePop), a token (token mode) or
// a whole sequence (seq, geo: judged on R or G) whose ratio lies outside gets
// mask 0; the weights are then the ratios uncapped, unless a cap was asked for
// explicitly as well. Without a mask every mask is 1. A weight beyond the
// float32 range is stored as FLT_MAX, so w * mask is never inf * 0.
//
// A record's own mask marks the model's tokens (1) among those an
// environment added to a multi-turn rollout (0, with logp 0): every formula
// above runs over the model's tokens only (the sum and the mean of seq and
// geo, the mismatch metrics, the token counts), and the others get w = 0 and
// mask = 0 in every mode. The mask written is the record's AND the one
// computed, so a record weighted again keeps its rejected tokens at 0.
#ifndef RLPIPE_RATIO_H
#define RLPIPE_RATIO_H

#include <stddef.h>
#include <stdint.h>

#include "records/mismatch.h"
#include "records/record.h"
#include "records/rollout.h"

typedef enum { RATIO_TOKEN = 0, RATIO_SEQ, RATIO_GEO, RATIO_NONE } ratio_mode;

typedef struct {
    ratio_mode mode;
    double clip;        // C > 0 (+inf: no cap); default 2
    int clip_set;       // C was given explicitly: with a mask, cap as well
    int mask;           // mask what lies outside [lo, hi]
    double lo, hi;      // 0 <= lo < hi <= +inf
} ratio_opts;

extern const ratio_opts ratio_default_opts;   // token mode, C = 2, no mask

// Option values: 0, or -1 with err saying what was expected.
int ratio_parse_mode(const char *s, ratio_mode *out, rl_err *err);      // token|seq|geo|none
int ratio_parse_clip(const char *s, double *out, rl_err *err);          // a number > 0, or inf
int ratio_parse_mask(const char *s, double *lo, double *hi, rl_err *err);  // "LO,HI"
const char *ratio_mode_name(ratio_mode m);
// Whether weights are capped at o->clip (always, but with a mask only when clip_set).
int ratio_capping(const ratio_opts *o);

// Weights and mask of one sequence of n tokens: w (n), mask (n). model (n,
// or NULL: every token) is 0 on the tokens that are not the model's, which
// get w 0 and mask 0 and take no part in the sequence's ratio. Returns how
// many tokens were capped (their weight lowered to C).
size_t ratio_weights(const ratio_opts *o, const float *logp, const float *logp_learner, const uint8_t *model,
                     size_t n, float *w, uint8_t *mask);

// What the fields of a record are checked against.
typedef struct {
    int score;          // a model computes logp_learner: prompt_ids and temperature are needed
    int ref;            // with score: the model is a reference (logp_ref): no logp needed
    uint32_t vocab;     // with score: every token id must be below it
    size_t max_len;     // with score: positions read (prompt + completion - 1) at most this (0: no limit)
    const char *max_len_key;   // the config key that sets max_len, for messages (cfg_max_seq)
} ratio_need;

// One rollout record as weighting reads it (records/rollout.h), and its
// results (reused from record to record).
typedef struct {
    rollout_view v;                  // v.logp_learner: from the record, or filled by a model; v's
                                     // strings point into the record read (a held copy does not keep them)
    f32_vec w;
    u8_vec mask;
} ratio_input;

void ratio_input_free(ratio_input *in);

// Reads r into in->v (rollout_read: types, lengths and ranges of every
// field) and checks what weighting needs besides: ids and logp; without
// need->score, logp_learner; with it, non-empty prompt_ids (and no logp with need->ref), token ids below
// the vocabulary, a positive temperature (a logp_learner in r is then not
// used, and ver_learner cleared).
// 0, or -1 with err naming the field (the caller adds where the record is).
int ratio_read(const rec_t *r, const ratio_need *need, ratio_input *in, rl_err *err);

// True when the sampler truncated its distribution (top_p < 1 or top_k > 0),
// which learner log-probabilities do not reproduce.
int ratio_filtered(const ratio_input *in);

// Fills in->w and in->mask from in->logp and in->logp_learner, over the
// tokens the record's own mask (in->v.mask, when it has one) keeps; returns
// the number of tokens capped.
size_t ratio_compute(const ratio_opts *o, ratio_input *in);

// Writes w and mask into r, and logp_learner and ver_learner when `scored`
// (a model computed them); every other field keeps its bytes.
void ratio_store(const ratio_input *in, int scored, rec_t *r);

// Metrics over records: counts and the mismatch (mismatch.h), over the
// model's tokens.
typedef struct {
    uint64_t records, tokens;   // tokens: the model's (those a record's own mask leaves 1)
    uint64_t skipped;   // records passed on unscored (scorer.h skip_uniform): counted, no mismatch
    mm_acc mm;
} ratio_acc;

void ratio_acc_init(ratio_acc *a);
void ratio_acc_add(ratio_acc *a, const ratio_input *in, size_t capped);
// A record passed on without learner log-probabilities.
void ratio_acc_skip(ratio_acc *a, const ratio_input *in);
// A record counted, its tokens too, with no mismatch (scored by a reference model).
void ratio_acc_count(ratio_acc *a, const ratio_input *in);
// One JSON object and a newline: {"batch": index (omitted when < 0), "records",
// "tokens", "skipped", "k1", "k3", "ratio_mean", "ratio_min", "ratio_max", "capped_frac",
// "masked_frac", "ess", "max_abs_p_diff", "lag_mean", "lag_max"}; a value
// without tokens to define it (no token, no ver) is null.
void ratio_acc_json(const ratio_acc *a, long batch, sbuf *out);
// The same quantities on one line of text, for the summary on stderr (no newline).
void ratio_acc_text(const ratio_acc *a, sbuf *out);

#endif
