// stats.h — the summary of a stream of rollouts that rl-cat --stats prints:
// counts, reward and accuracy, completion lengths, finish reasons, weight
// versions and lag, sampler/learner mismatch (mismatch.h), and with
// stats_pass_at pass@k and maj@k over the groups (passk.h).
#ifndef RLPIPE_STATS_H
#define RLPIPE_STATS_H

#include <stdint.h>

#include "records/mismatch.h"
#include "records/passk.h"
#include "records/record.h"
#include "records/rollout.h"

#define STATS_MAX_FINISH 16

typedef struct {
    uint64_t records, members, groups;
    int have_group;
    uint64_t last_group;
    uint64_t rewarded, positive;
    double sum_reward;
    uint64_t seqs, tokens, tokens_max;            // records with ids
    char *finish[STATS_MAX_FINISH];               // reasons seen, first come first listed
    uint64_t finish_n[STATS_MAX_FINISH];
    uint64_t finish_other;                        // reasons past STATS_MAX_FINISH
    uint64_t ver_seqs, ver_mixed;
    uint64_t ver_min, ver_max;
    mm_acc mm;
    int pass_at;                                  // stats_pass_at was called: pk holds its ks
    pk_acc pk;
    char pk_keys[PK_MAX_K][3][32];                // "pass@K", "maj@K", "pass@K_skipped"
    rollout_view view;                            // the record being added
} stats_t;

void stats_init(stats_t *s);
void stats_free(stats_t *s);
// Also pass@k and maj@k for the nk values of ks (pk_init's): every record
// must then have "group" and "reward", and "pred", when present, be a string.
void stats_pass_at(stats_t *s, const uint32_t *ks, int nk);
// Adds one record; a record rollout_decode refuses is an error (-1, err).
int stats_add(stats_t *s, const rec_t *r, rl_err *err);
// Appends the summary as an aligned table, or as one JSON object; each ends with a newline.
void stats_table(const stats_t *s, sbuf *out);
void stats_json(const stats_t *s, sbuf *out);

#endif
