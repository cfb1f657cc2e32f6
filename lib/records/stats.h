// stats.h — the summary of a stream of rollouts that rl-cat --stats prints:
// counts, reward and accuracy, completion lengths, finish reasons, weight
// versions and lag, sampler/learner mismatch (mismatch.h).
#ifndef RLPIPE_STATS_H
#define RLPIPE_STATS_H

#include <stdint.h>

#include "records/mismatch.h"
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
    rollout_view view;                            // the record being added
} stats_t;

void stats_init(stats_t *s);
void stats_free(stats_t *s);
// Adds one record; a record rollout_decode refuses is an error (-1, err).
int stats_add(stats_t *s, const rec_t *r, rl_err *err);
// Appends the summary as an aligned table, or as one JSON object; each ends with a newline.
void stats_table(const stats_t *s, sbuf *out);
void stats_json(const stats_t *s, sbuf *out);

#endif
