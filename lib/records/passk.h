// passk.h — pass@k and maj@k over the problems of a rollout stream
// (rl-cat --stats --pass-at), a problem being a run of records of equal
// "group" (one prompt's samples) and a sample correct when its reward > 0
// (the accuracy of rl-cat --stats and rl-learn's metrics).
//
// pass@k, the unbiased estimator of Chen et al. 2021 ("Evaluating Large
// Language Models Trained on Code", eq. 1): for a problem of n samples of
// which c are correct,
//   pass@k = 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1..n} (1 - k/i)
// (1 when n - c < k), averaged over the problems with n >= k.
//
// maj@k: among the problem's first k samples, each "pred" (a verifier's
// extracted answer) that is present and not empty casts one vote; the
// majority pred wins, a tie going to the pred that reached the winning count
// first (in stream order). The problem counts as solved when the first of
// the samples that cast the winning pred's votes is correct (a verifier
// that grades the pred gives all of them the same reward); a problem with
// no vote among its first k samples is not solved. Averaged over the
// problems with n >= k.
//
// A problem with fewer than k samples is left out of both averages for that
// k and counted as skipped.
#ifndef RLPIPE_PASSK_H
#define RLPIPE_PASSK_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define PK_MAX_K 16                 // values of k in one --pass-at
#define PK_K_LIMIT 1000000u         // the largest k

// One sample of the problem being read: correct, and its pred's bytes in
// pk_acc.preds at off (len 0: no vote).
typedef struct {
    size_t off, len;
    uint8_t correct;
} pk_sample;

typedef struct {
    uint32_t k[PK_MAX_K];
    int nk;
    uint32_t kmax;
    int any_pred;                   // some record carried a non-empty pred
    // the problem being read
    int open;
    uint64_t group, n, c;           // its "group"; samples; correct ones
    pk_sample *first;               // its first kmax samples
    size_t first_cap;
    sbuf preds;                     // their preds' bytes
    // per k, over the finished problems
    double pass_sum[PK_MAX_K];
    uint64_t maj_solved[PK_MAX_K], problems[PK_MAX_K], skipped[PK_MAX_K];
} pk_acc;

// Per k: the averages (NaN when no problem has k samples) and the counts,
// the problem being read included.
typedef struct {
    uint32_t k;
    double pass, maj;
    uint64_t problems, skipped;
} pk_result;

// ks: nk values in 1..PK_K_LIMIT (nk <= PK_MAX_K), distinct.
void pk_init(pk_acc *a, const uint32_t *ks, int nk);
void pk_free(pk_acc *a);
// One record: its group, whether it is correct, its pred (NULL or len 0: none).
void pk_add(pk_acc *a, uint64_t group, int correct, const char *pred, size_t len);
void pk_result_at(const pk_acc *a, int i, pk_result *out);

// The estimator alone: pass@k of one problem with n samples, c correct (k <= n).
double pk_pass_at(uint64_t n, uint64_t c, uint64_t k);
// Parses a --pass-at list ("1,8,16") into ks and *nk: 0, or -1 with err.
int pk_parse(const char *s, uint32_t *ks, int *nk, rl_err *err);

#endif
