// generate.h — continuous batching: up to `slots` sequences decode together
// through the model's KV cache; a sequence that finishes frees its slot at
// once, and the next waiting sample is prefilled in the same batched step as
// the others' decode tokens. Groups (the samples of one prompt) are handed
// out complete, in the order their last member finished.
//
// A group's prompt is prefilled once: its other samples share the cache rows
// of the first (model_step_seq.shared), and the logits after the prompt when
// they start in the same step. One that starts later, once slots free up,
// shares the rows of a group-mate still decoding and runs the prompt's last
// token again for its logits, if those rows were computed with the weights
// in use: after an in-flight update, a sample that starts computes with the
// new weights throughout, as it did when each sample prefilled its own.
//
// Each sample draws from its own generator, seeded from (seed, sample
// number), so what a sample draws does not depend on which others share its
// steps; the logits do (batched sums differ in their last bits), which is why
// byte-identical output needs the same slots as well as the same seed.
//
// Multi-turn (gen_opts.multi_turn): a sample whose turn ends (a stop token,
// a stop string, max_new tokens in the turn, or a full slot) does not
// finish: it waits in its slot, its KV cache kept, until the caller hands it
// the environment's tokens (gen_continue: they are prefilled in the same
// slot, and the next turn is decoded after them) or ends it (gen_end). While
// it waits, others decode: the cache holds cache_slots sequences, of which
// at most `slots` take part in a step.
#ifndef RLPIPE_GENERATE_H
#define RLPIPE_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "model/sampling.h"
#include "records/record.h"
#include "template/chat.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    int slots;                    // sequences decoded together (>= 1)
    int group;                    // samples per prompt (>= 1)
    size_t max_new;               // completion tokens at most (>= 1)
    int max_len;                  // prompt + completion tokens a slot holds (<= the model's context)
    smp_params sp;
    uint64_t seed;
    const char *const *stop;      // stop strings: the completion ends once its text contains one
    size_t n_stop;
    const uint32_t *stop_ids;     // tokens that end the completion once sampled (kept in it):
    size_t n_stop_ids;            //   the model's eos ids, special tokens named by --stop
    int in_order;                 // finished groups are taken in the order they were added
    int multi_turn;               // a sample's turn ends without finishing it (above)
    int cache_slots;              // sequences the KV cache holds (>= slots; 0: slots)
} gen_opts;

typedef struct {
    u32_vec ids;                  // completion tokens, as sampled (eos included)
    f32_vec logp;                 // log-probability of each under the distribution drawn from
    u32_vec ver;                  // weight version that produced each
    int stopped;                  // 1: eos or a stop string ("stop"), 0: length
    const char *stop_reason;      // what stopped it: a stop token's string (<|im_end|>) or the stop
    size_t stop_reason_len;       //   string (points into the tokenizer or gen_opts); NULL for length
    sbuf text;                    // the completion's bytes (special tokens skipped), maybe not UTF-8
    size_t answer_len;            // text bytes before the stop string that ended it (all if none)
    // Multi-turn only: text, answer_len, stopped and stop_reason are the
    // current turn's; ids, logp and ver hold every turn and the environment's
    // tokens between them, with mask 1 on the model's tokens and 0 on the
    // environment's (logp 0, ver the version their prefill computed with);
    // turns holds [start, end) in ids of each model turn, flat.
    u8_vec mask;
    u32_vec turns;
} gen_sample;

typedef struct {
    uint64_t group;               // number of the group, from 0, in the order gen_add was called
    size_t prompt;                // the caller's prompt index given to gen_add
    int n;                        // samples (gen_opts.group)
    gen_sample *samples;          // sample j has number group * n + j
} gen_group;

typedef struct gen gen_t;

// The tokens that end a completion (gen_opts.stop_ids; malloc'd, *n of
// them): every eos id of the config (Llama 3.x Instruct lists three) and of
// tokenizer_config.json, the chat template's end of a turn (chat may be
// NULL), and each of the n_stop strings that is a special token, which the
// text (decoded without special tokens) could never contain. With
// ignore_eos only the last: every completion runs to its most tokens unless
// a stop string ends it, as llama.cpp's benchmarks generate.
uint32_t *gen_stop_ids(const model_config *cfg, const tokenizer *tok, const chat_t *chat, const char *const *stop,
                       size_t n_stop, int ignore_eos, size_t *n);

// Sets up the model's KV cache for o->slots sequences of o->max_len tokens.
gen_t *gen_new(model_t *m, const tokenizer *tok, const gen_opts *o, rl_err *err);
void gen_free(gen_t *g);

// Queues a group of samples of one prompt (ids[0..n) are copied; 1 <= n <
// max_len). Returns its group number.
uint64_t gen_add(gen_t *g, size_t prompt, const uint32_t *ids, size_t n);

int gen_free_slots(const gen_t *g);   // slots not decoding a sample
size_t gen_waiting(const gen_t *g);   // samples queued, not yet in a slot

// The weight version stamped on the tokens sampled from now on.
void gen_set_version(gen_t *g, uint32_t ver);

// One batched model step: admits waiting samples into free slots (their
// prompts prefilled) and samples one token for every sample in a slot.
// Returns the tokens sampled (0 when there was nothing to do), or -1 with err.
long gen_step(gen_t *g, rl_err *err);

// The oldest finished group not yet taken (with in_order: the next group in
// gen_add's order, once it has finished), or NULL. It stays valid until
// gen_pop, which frees it.
const gen_group *gen_peek(gen_t *g);
void gen_pop(gen_t *g);

// ---- Multi-turn.
// A sample whose turn has ended, waiting in its slot for gen_continue or gen_end.
typedef struct gen_seq gen_seq;
typedef struct {
    gen_seq *seq;                 // the handle for gen_continue, gen_end, gen_room
    uint64_t number;              // the sample's number: group * G + member
    size_t prompt;                // its group's prompt index (gen_add)
    gen_sample *s;                // its sample (the turn's text, ...)
    int turn;                     // turns ended so far, this one included (from 1)
} gen_turn;

// The oldest sample whose turn ended and was not yet taken. 1, or 0 when none.
int gen_next_turn(gen_t *g, gen_turn *t);
// The tokens the slot of q can still take after its turn: the environment's
// and the next turn's (the turn's last token, not yet in the cache, counted).
size_t gen_room(const gen_t *g, const gen_seq *q);
// Appends the environment's tokens ids[0..n) (n <= gen_room) to q's sample
// and queues them, after the turn's last token, for prefill in its slot; the
// next turn is decoded after them.
void gen_continue(gen_t *g, gen_seq *q, const uint32_t *ids, size_t n);
// Ends q's sample: its slot is freed, and its group finishes with its last sample.
void gen_end(gen_t *g, gen_seq *q);
size_t gen_turns_waiting(const gen_t *g);   // samples waiting for gen_continue or gen_end
int gen_busy(const gen_t *g);               // samples queued or in a slot

#endif
