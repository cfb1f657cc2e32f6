// rollout.h — finished groups become rollout records (doc/design.md §2): decoded
// text, a reward from the built-in verifier or from the external ones (with
// their named parts and prediction, vset.h), the sampling parameters, and
// every other key of the prompt. Groups wait here until every external
// verifier has answered for each of their samples, and are written whole, in
// the order they finished, with a flush after each.
// With drop_uniform (rl-sample --drop-uniform, DAPO's dynamic sampling) a
// group whose rewards are all equal is not written but counted, and each
// group written says in "drawn" how many groups were decided since the
// group written before it, itself included (1 + those dropped between).
#ifndef RLPIPE_ROLLOUT_H
#define RLPIPE_ROLLOUT_H

#include <stdint.h>

#include "records/writer.h"
#include "sample/generate.h"
#include "sample/prompts.h"
#include "sample/verifier.h"
#include "sample/vset.h"

typedef struct {
    const prompt_set *prompts;
    int builtin;              // score prompts that have an answer with `kind`
    vf_kind kind;
    vset *cmd;                // or ask these external verifiers (NULL: none), started
    smp_params sp;
    const char *dtype;        // the sampler's precision, as records name it
    int drop_uniform;         // drop the groups whose rewards are all equal
} ro_opts;

typedef struct {
    uint64_t groups, samples, tokens;   // written
    uint64_t stopped;                   // samples that ended with "stop"
    uint64_t rewarded, positive;        // samples with a reward; with reward > 0
    double reward_sum;
    uint64_t dropped;                   // groups not written (drop_uniform)
    uint64_t dropped_last;              // of them, those after the last group written (no "drawn" counts them)
} ro_totals;

typedef struct ro ro_t;

ro_t *ro_new(const ro_opts *o);
void ro_free(ro_t *r);

// Makes the records of a finished group and holds them (queues the external
// verifier's requests; they are sent by ro_write). extra (NULL: none): for
// each sample, fields set last in its record (a multi-turn rollout's
// messages, reward, info); a sample given a "reward" there is not verified.
void ro_add(ro_t *r, const gen_group *g, rec_t *const *extra);
// Writes every held group whose rewards are all known, oldest first, and
// flushes after each. block: first waits until the external verifier has
// answered for every held group. 0, or -1 with err (a verifier's failure
// names the rollout and its prompt).
int ro_write(ro_t *r, recw_t *w, int block, rl_err *err);
uint64_t ro_held(const ro_t *r);      // records held, waiting for rewards
const ro_totals *ro_total(const ro_t *r);

// The header of rl-sample's output (kind "rollouts"): provenance, the seed,
// the model (its directory, version, dtype, head_dtype "f32" when the output
// layer is f32 (model_opts.head_f32), device, parameters, and
// generation_config.json's sampling defaults, shown and never applied) and
// the sampling options (g, the verifier's name, and drop_uniform true when set).
void ro_make_header(rec_t *h, int argc, char **argv, int no_provenance, const char *dir, uint64_t version,
                    const model_t *m, const char *precision, const gen_opts *g, const char *verifier,
                    int drop_uniform);

#endif
