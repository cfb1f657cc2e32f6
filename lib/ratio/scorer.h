// scorer.h — the stage of rl-ratio between reading and writing: it checks
// each rollout record, holds records until a batch is full (or the caller
// flushes, e.g. because the input would block), computes their learner
// log-probabilities with the model in batched forwards, weights them
// (ratio.h), writes them in input order, and reports the mismatch: one JSON
// line per `batch` records and totals over the run.
//
// Memory is bounded: at most `batch` records are held (one without a model,
// since nothing is gained by waiting).
#ifndef RLPIPE_SCORER_H
#define RLPIPE_SCORER_H

#include <stdint.h>
#include <stdio.h>

#include "model/model.h"
#include "ratio/ratio.h"
#include "records/writer.h"

// The most prompt + completion tokens in one forward: larger batches of
// records are scored in several forwards, so activations stay bounded.
#define SCR_FORWARD_TOKENS 16384

typedef struct {
    ratio_opts ratio;
    model_t *model;            // NULL: records carry logp_learner (an external scorer)
    uint64_t ver_learner;      // with model: stored in every record's ver_learner
    struct rcv *receiver;      // with model, or NULL: pushed weights (receiver.h); each
                               // scoring holds the model and stamps the version held
    const char *model_dir;     // with model: the directory loaded, for the header
    const char *adapter_dir;   // with model, or NULL: the LoRA adapter merged into it, for the header
    size_t batch;              // records per metrics line; most records held (>= 1)
    size_t forward_tokens;     // 0: SCR_FORWARD_TOKENS
    FILE *metrics;             // one JSON line per batch (flushed), or NULL
    const char *metrics_name;  // for messages
    // With model: records of a whole group (the first header's sampling.group
    // records of one "group", all held at once) whose rewards are all equal,
    // none with an "adv", are passed on unscored, without logp_learner,
    // ver_learner and w (a mask they came with stays as it is): an
    // advantage from the group's rewards less their mean (rl-learn's grpo,
    // drgrpo, rloo) is 0 for each, so none has a gradient to weight.
    int skip_uniform;
    // With model: the model is a frozen reference, not the learner: its
    // log-probabilities are written as "logp_ref" and nothing else (no w,
    // mask, logp_learner or ver_learner; those a record has stay as they
    // are), the records need no "logp", and the header gets "ref" (the
    // model) beside the input's "ratio". Not with receiver or skip_uniform.
    int as_ref;
} scr_opts;

typedef struct scorer scorer_t;

scorer_t *scr_new(const scr_opts *o);
void scr_free(scorer_t *s);

// A member header: rl-ratio reads members of kind "rollouts". 0, or -1 with err.
int scr_check_header(const rec_t *h, rl_err *err);
// The output header: rl-ratio's provenance (rec_make_header), every other
// key of the first input header (model, seed, ...), and "ratio": the mode,
// cap, mask, batch and learner model used.
void scr_make_header(const scorer_t *s, const rec_t *in, rec_t *out, int argc, char **argv, int no_provenance);
// The first input header's sampling.group: the records a group holds, for
// skip_uniform. Returns it, or 0 (none given: no group is known whole, and
// nothing is skipped).
uint64_t scr_take_group_size(scorer_t *s, const rec_t *in);

// Checks r and holds a copy of it; once `batch` records are held, scores and
// writes them to w (with skip_uniform, the uniform groups among them
// unscored). On a bad record, the records held before it are scored and
// written first, and err says what is wrong with it, then `where`.
// 0, or -1 with err.
int scr_add(scorer_t *s, const rec_t *r, const char *where, recw_t *w, rl_err *err);
// Scores and writes every record held (the caller then flushes w).
int scr_flush(scorer_t *s, recw_t *w, rl_err *err);
// After the last record: the metrics line of the last, partial batch.
int scr_finish(scorer_t *s, rl_err *err);

// Totals over the run.
const ratio_acc *scr_total(const scorer_t *s);
// Warnings to print, each once: the first record sampled with top-p or top-k
// (whose truncation learner log-probabilities do not reproduce), and a
// mismatch that keeps growing over the batches (records/drift.h; batches
// numbered as the metrics lines' "batch"). Each call returns one pending
// message, or NULL when none is.
const char *scr_take_warning(scorer_t *s);

#endif
