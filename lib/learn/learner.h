// learner.h — rl-learn's optimizer steps (doc/design.md §4). Records are held in
// whole groups (consecutive records with the same "group"; a record without
// one is a group of its own) until a step's batch is full; each step computes
// the advantages of its groups, runs forward and backward over micro-batches
// with the pg, ppo, cispo, gspo or sft loss, and takes one AdamW step. With
// the ratio losses (ppo, cispo, gspo) and --epochs K, a batch gives K steps
// against the same π_old.
#ifndef RLPIPE_LEARNER_H
#define RLPIPE_LEARNER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "parallel/dist.h"
#include "learn/adamw.h"
#include "learn/objective.h"
#include "model/model.h"
#include "records/record.h"
#include "template/chat.h"
#include "tokenizer/tokenizer.h"

typedef enum { LOSS_PG, LOSS_PPO, LOSS_CISPO, LOSS_GSPO, LOSS_SFT } loss_kind;
typedef enum { NORM_SEQS, NORM_TOKENS, NORM_CONST } norm_kind;

// Tokens (prompt + completion) of one forward: a micro-batch that would hold
// more is split further, so that the saved activations stay bounded.
#define LRN_MICRO_TOKENS 16384

typedef struct {
    loss_kind loss;
    adv_kind adv;
    norm_kind norm;
    double norm_const;          // NORM_CONST: the divisor N
    // The ratio losses' clip range [1 − eps_low, 1 + eps_high] (lrn_clip_range)
    double eps_low, eps_high;
    // > 0: truncated importance sampling in the learner (--tis C): each
    // token's weight is rl-ratio's token mode, w = min(π_old / μ, C) (objective.h),
    // with π_old the learner's own forward at the batch's first epoch (for pg,
    // the forward being differentiated, held constant) and μ the record's
    // "logp"; records carrying rl-ratio's "w" or "logp_learner" are refused.
    // Not with gspo, whose ratio is the sequence's (rl-learn refuses it).
    // 0: w and logp_learner as the records give them.
    double tis;
    // > 0: a penalty B on the KL to a frozen reference model, whose
    // log-probabilities every record carries (logp_ref, rl-ratio --as
    // logp_ref). kl_in_reward 0: B·(1/Z)·Σ mask·kl_t added to the loss, kl_t
    // the estimator kl of d = log π_θ − logp_ref (obj_kl), the gradient
    // through log π_θ; 1: B·Σ_t mask·(logp_s − logp_ref) taken off the
    // sequence's reward before the advantages, logp_s its logp_learner
    // (π_old, the policy scored as the current one) or else its logp, and no
    // loss term. Not with sft (rl-learn refuses it).
    double kl_coef;
    kl_est kl;
    int kl_in_reward;
    // ≠ 0: an entropy bonus C (negative: a penalty), −C·(1/Z)·Σ mask·H_t
    // added to the loss, H_t the entropy (nats) of softmax(logits / T) at the
    // token (T the record's temperature), the gradient through H_t; like the
    // KL's term, not weighed by w. Every sequence with tokens is trained.
    double entropy_coef;
    // Sequences whose "finish" is "length" (cut at the length limit) get
    // mask 0 on every token: no gradient, and none counted by --norm tokens.
    int mask_truncated;
    // overlong_cache > 0: DAPO's soft overlong punishment obj_overlong(L,
    // overlong_max, overlong_cache) added to the reward before the
    // advantages, L the sequence's model tokens (those of mask 1 in a
    // record's own mask, else all its completion tokens).
    double overlong_max, overlong_cache;
    int epochs;                 // ratio losses: steps per batch (>= 1)
    int micro;                  // micro-batches per step, at least (gradient accumulation)
    size_t micro_tokens;        // 0: LRN_MICRO_TOKENS
    size_t batch;               // sequences per step, at least (whole groups)
    adamw_opts opt;
    const tokenizer *tok;       // for records that carry text and no ids (may be NULL)
    const chat_t *chat;         // for examples that carry "messages" (NULL: the model has no template)
    const volatile sig_atomic_t *stop;   // set (by a signal): abandon the step between micro-batches
    // Data-parallel (dist_active): each rank computes the gradient of its
    // share of every batch's whole groups, and the step is zero.h's over
    // `parts` (zero_parts); every rank is given every record, and takes every
    // step. NULL: this process alone.
    dist_t *dist;
    const size_t *parts;
} lrn_opts;

// Parsers of the option values ("pg", "grpo", "seqs" | "tokens" | "const:N").
int lrn_parse_loss(const char *s, loss_kind *out, rl_err *err);
// Whether loss k is a ratio π_θ/π_old's (ppo, cispo, gspo): π_old from
// logp_learner or the batch's first forward, and --epochs K allowed.
int lrn_ratio_loss(loss_kind k);
// The clip range of loss k from the options given (NAN: not given): each
// side from eps_low or eps_high, else from eps (both), else the loss's
// default: ppo 0.2 and 0.2 (and so pg and sft, which have none); cispo 1
// and 4 (no lower clip: 1 − 1 = 0; the ratio capped at 5, ScaleRL's
// ε_max = 5 as TRL documents it); gspo 3e-4 and 4e-4 (the GSPO paper's).
void lrn_clip_range(loss_kind k, double eps, double eps_low, double eps_high, double *lo, double *hi);
int lrn_parse_adv(const char *s, adv_kind *out, rl_err *err);
int lrn_parse_kl_est(const char *s, kl_est *out, rl_err *err);   // k1 | k2 | k3
int lrn_parse_kl_in(const char *s, int *in_reward, rl_err *err);  // loss | reward
// "L_MAX,L_CACHE" of --overlong: 0 < L_CACHE <= L_MAX.
int lrn_parse_overlong(const char *s, double *l_max, double *l_cache, rl_err *err);
int lrn_parse_norm(const char *s, norm_kind *out, double *n, rl_err *err);
const char *lrn_loss_name(loss_kind k);
const char *lrn_adv_name(adv_kind k);
const char *lrn_kl_name(kl_est k);

// What one step did (doc/design.md §4 and rl-learn(1) METRICS). "has_" flags say
// whether the records carried what a statistic needs. The per-token
// statistics (entropy, lag, k3, capped, clipped) are over the tokens of
// mask 1: one of mask 0 (rejected, or an environment's) counts in none.
typedef struct {
    uint64_t step, version;           // the step taken (1 for the first); the version it produced
    uint64_t samples, groups, tokens; // sequences, groups, completion tokens in the step
    int has_groups_drawn;             // a group of the batch carries "drawn" (rl-sample --drop-uniform)
    uint64_t groups_drawn;            // groups the sampler drew for the batch's: Σ of each group's "drawn"
                                      // (1 for a group without), the uniform ones it dropped included
    uint64_t trained;                 // sequences with a gradient (others have advantage 0)
    uint64_t fwd_tokens;              // prompt + completion tokens through the model
    int epoch;                        // ratio losses: 1 .. epochs (1 for the others)
    int has_reward, has_lag, has_k3, has_capped;
    double reward_mean, reward_std, accuracy;   // accuracy: fraction with reward > 0
    double adv_mean, adv_std, adv_zero;         // adv_zero: fraction of sequences with advantage 0
    double loss, grad_norm, lr, entropy;        // entropy: mean over trained tokens (nats)
    double lag_mean, lag_max;         // learner version before the step − ver, over tokens
    double k3, capped;                // mean(ρ − 1 − log ρ), ρ = exp(logp_learner − logp); fraction w < ρ
                                      // (with tis: over the trained tokens, ρ from the learner's forward)
    int ppo, has_clipped;             // the loss is ppo; a ratio loss (ppo, cispo, gspo)
    double clipped;                   // fraction of trained tokens clipped: ppo's clipped term taken,
                                      // cispo's ratio clipped, gspo's sequence's clipped term taken
                                      // (written as "clipped", and for ppo as "ppo_clipped" too)
    int has_kl_ref;                   // --kl-coef > 0
    double kl_ref;                    // mean over trained tokens of the KL estimator to the reference at
                                      // the learner's log π_θ (k1 with --kl-in reward)
    double seconds, tokens_per_s;     // of the step; fwd_tokens per second
    double save_s;                    // writing the step's checkpoint (set by the caller)
    double elapsed;                   // seconds since the learner started, checkpoint written (set by the caller)
} lrn_metrics;

typedef struct learner learner_t;

learner_t *lrn_new(model_t *m, const lrn_opts *o);
void lrn_free(learner_t *l);

// Checks a record and holds what training needs from it. where: the record's
// file and index for messages. 0, or -1 with err (what is wrong, then where).
int lrn_add(learner_t *l, const rec_t *r, const char *where, rl_err *err);
// Texts (prompt or completion) whose tokenizing dropped characters that have
// no token, as transformers' tokenizers drops them; *first (when not NULL)
// says what the first of them dropped, and where.
size_t lrn_dropped(const learner_t *l, const char **first);
// The input has ended: the last group is complete.
void lrn_end(learner_t *l);
// A new member of the input begins with this header: the groups held are
// complete, and when its "sampling" says "group" (rl-sample writes it,
// rl-ratio passes it on), each of its groups is complete once that many
// records have arrived, without waiting for the next group's first record,
// which a sampler pausing for the weights trained on this batch
// (rl-sample --sync) will not send before.
void lrn_member(learner_t *l, const rec_t *header);
// 1 when a step can be taken: a full batch of complete groups is held (after
// lrn_end with keep_last: any complete group).
int lrn_ready(const learner_t *l, int keep_last);

// Takes one optimizer step on the batch: `steps` steps were taken before it
// (the schedule and the bias corrections count them), and the model's version
// before it is `version` (for lag; it produces version + 1). 0 done (*m
// filled); 1 abandoned because *o->stop was set (the model is unchanged); -1
// with err (a gradient that is not finite).
int lrn_step(learner_t *l, uint64_t version, uint64_t steps, lrn_metrics *m, rl_err *err);
// Its two halves. lrn_grad: the model's gradient := the step's loss gradient
// (forward and backward over the micro-batches; 1 when abandoned);
// lrn_apply: clipping and AdamW, and the batch is let go after its last epoch.
int lrn_grad(learner_t *l, uint64_t version, uint64_t steps, lrn_metrics *m, rl_err *err);
int lrn_apply(learner_t *l, lrn_metrics *m, rl_err *err);

// A warning to print once: with --tis, a mismatch k3 that keeps growing over
// the steps (records/drift.h; steps numbered as the metrics' "step"), the
// sign of a sampler that does not follow the learner's updates. The first
// call after the step that makes it due returns the message, every other NULL.
const char *lrn_take_warning(learner_t *l);

// Records consumed by finished batches (those steps are done), and held.
uint64_t lrn_consumed(const learner_t *l);
size_t lrn_held(const learner_t *l);

// One JSON line (no newline) of the metrics.
void lrn_metrics_json(const lrn_metrics *m, sbuf *out);

#endif
