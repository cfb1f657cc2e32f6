// rollout.h — a rollout record (rlpipe-records(5)), read and checked once
// into a typed view: the stages and rl-cat --stats read fields from it.
//
// rollout_read decodes every known field that is present, and checks
//   - types: each field has the type rlpipe-records(5) gives it ("rewards":
//     a map of string keys to numbers);
//   - lengths: the per-token arrays (ids, logp, ver, logp_learner, logp_ref, w, mask)
//     have one element per completion token (per element of ids, or of the
//     first of them present when there is no ids);
//   - ranges: mask is 0/1; logp and logp_ref finite; logp_learner neither
//     NaN nor +inf (-inf is a learner probability of 0); w finite and >= 0;
//     drawn at least 1.
// What only one reader needs (a field it requires, a vocabulary, a finite
// reward) it asks with rollout_require, rollout_finite and rollout_vocab,
// whose messages have the same form. Messages name the field and what is
// wrong; the caller adds the file and record (": FILE record N").
#ifndef RLPIPE_ROLLOUT_H
#define RLPIPE_ROLLOUT_H

#include <stddef.h>
#include <stdint.h>

#include "records/record.h"

// The fields of the view, as bits of rollout_view.has.
enum {
    RO_ID = 1u << 0,
    RO_GROUP = 1u << 1,
    RO_PROMPT = 1u << 2,
    RO_ANSWER = 1u << 3,
    RO_COMPLETION = 1u << 4,
    RO_FINISH = 1u << 5,
    RO_MESSAGES = 1u << 6,
    RO_PROMPT_IDS = 1u << 7,
    RO_IDS = 1u << 8,
    RO_LOGP = 1u << 9,
    RO_VER = 1u << 10,
    RO_LOGP_LEARNER = 1u << 11,
    RO_VER_LEARNER = 1u << 12,
    RO_W = 1u << 13,
    RO_MASK = 1u << 14,
    RO_REWARD = 1u << 15,
    RO_ADV = 1u << 16,
    RO_TEMPERATURE = 1u << 17,
    RO_TOP_P = 1u << 18,
    RO_TOP_K = 1u << 19,
    RO_TEXT = 1u << 20,
    RO_STOP_REASON = 1u << 21,
    RO_DTYPE = 1u << 22,
    RO_LOGP_REF = 1u << 23,
    RO_DRAWN = 1u << 24,
    RO_REWARDS = 1u << 25,
    RO_PRED = 1u << 26,
};

typedef struct {
    unsigned has;                        // RO_* of the fields present
    uint64_t id, group, ver_learner;
    uint64_t drawn;                      // groups drawn for this one's (rl-sample --drop-uniform); 0 when absent
    // Strings point into the record (valid while it is); "" when absent.
    const char *prompt, *answer, *completion, *finish, *text, *stop_reason, *dtype, *pred;
    size_t prompt_len, answer_len, completion_len, finish_len, text_len, stop_reason_len, dtype_len, pred_len;
    const uint8_t *messages;             // msgpack encoding of "messages" (any value), or NULL
    size_t messages_len;
    u32_vec prompt_ids, ids, ver;        // ids, ver: n each
    f32_vec logp, logp_learner, w;       // n each: the sampler's, the learner's (π_old) log-probabilities; weights
    f32_vec logp_ref;                    // n: a frozen reference model's log-probabilities (rl-ratio --as logp_ref)
    u8_vec mask;                         // n
    size_t n;                            // completion tokens: the length of every per-token array present
    double reward, adv;
    rec_t *rewards;                      // "rewards", the reward's named parts: rec_get_f64(rewards, NAME)
                                         // (has RO_REWARDS); owned by the view, reused from record to record
    double temperature, top_p;           // 1 when absent
    int64_t top_k;                       // 0 when absent (<= 0: no top-k)
} rollout_view;

// Fills v from r (its arrays are reused from record to record). 0, or -1
// with err naming the field.
int rollout_read(rollout_view *v, const rec_t *r, rl_err *err);
// The same without the checks of ranges (types and lengths only): for
// rl-cat --check, --pack and --stats, which pass on and describe any float a
// writer wrote (NaN and infinities as Python's JSON writes them).
int rollout_decode(rollout_view *v, const rec_t *r, rl_err *err);
void rollout_view_free(rollout_view *v);

// The name of one RO_* bit ("logp_learner").
const char *rollout_field_name(unsigned field);

// 0 if v has every field of `fields`, else -1 with err:
// field "KEY" is missing (WHY).
int rollout_require(const rollout_view *v, unsigned fields, const char *why, rl_err *err);
// 0 if x, the value of field, is finite, else -1 with err:
// field "KEY" is X: it must be a finite number (X as %g prints it).
int rollout_finite(unsigned field, double x, rl_err *err);
// 0 if every one of the n token ids of key is below vocab, else -1 with err:
// field "KEY" holds token id X at position T, not below the model's vocabulary size V.
int rollout_vocab(const char *key, const uint32_t *ids, size_t n, uint64_t vocab, rl_err *err);

#endif
