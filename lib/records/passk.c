// passk.c — pass@k and maj@k over a stream's problems (passk.h).
#include "records/passk.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double pk_pass_at(uint64_t n, uint64_t c, uint64_t k) {
    if (n - c < k) return 1.0;   // every choice of k samples holds a correct one
    double miss = 1.0;           // C(n-c, k) / C(n, k), as a product of ratios in [0, 1)
    for (uint64_t i = n - c + 1; i <= n; i++) miss *= 1.0 - (double)k / (double)i;
    return 1.0 - miss;
}

void pk_init(pk_acc *a, const uint32_t *ks, int nk) {
    memset(a, 0, sizeof *a);
    a->nk = nk;
    for (int i = 0; i < nk; i++) {
        a->k[i] = ks[i];
        if (ks[i] > a->kmax) a->kmax = ks[i];
    }
}

void pk_free(pk_acc *a) {
    free(a->first);
    sbuf_free(&a->preds);
}

// A vote of the first k samples: its pred and where it came.
typedef struct {
    const uint8_t *p;
    size_t len;
    uint32_t at;
} vote;

static int same_pred(const vote *a, const vote *b) { return a->len == b->len && !memcmp(a->p, b->p, a->len); }

static int by_pred_then_place(const void *x, const void *y) {
    const vote *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int d = memcmp(a->p, b->p, n);
    if (d) return d;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

// Whether the majority pred of the first k samples of the open problem is
// correct (passk.h: ties to the pred that reached the count first).
static int majority_correct(const pk_acc *a, uint32_t k, vote *v) {
    size_t nv = 0;
    for (uint32_t i = 0; i < k; i++)
        if (a->first[i].len) v[nv++] = (vote){a->preds.data + a->first[i].off, a->first[i].len, i};
    if (!nv) return 0;
    qsort(v, nv, sizeof *v, by_pred_then_place);
    // per run of equal preds (in order of place): its count, and the place
    // of its count-th vote, where it reached that count
    size_t best_count = 0, best_reached = 0, best_first = 0;
    for (size_t s = 0, e; s < nv; s = e) {
        for (e = s + 1; e < nv && same_pred(&v[s], &v[e]); e++) {}
        size_t count = e - s, reached = v[e - 1].at;
        if (count > best_count || (count == best_count && reached < best_reached)) {
            best_count = count;
            best_reached = reached;
            best_first = v[s].at;
        }
    }
    return a->first[best_first].correct;
}

// The open problem's part for k index i: 0 when it has fewer than k samples,
// else 1 with its pass@k and whether maj@k solved it.
static int problem_part(const pk_acc *a, int i, double *pass, int *solved) {
    uint32_t k = a->k[i];
    if (!a->open || a->n < k) return 0;
    *pass = pk_pass_at(a->n, a->c, k);
    vote *v = xmalloc(k * sizeof *v);
    *solved = majority_correct(a, k, v);
    free(v);
    return 1;
}

static void close_problem(pk_acc *a) {
    for (int i = 0; i < a->nk; i++) {
        double pass;
        int solved;
        if (problem_part(a, i, &pass, &solved)) {
            a->pass_sum[i] += pass;
            a->maj_solved[i] += solved;
            a->problems[i]++;
        } else if (a->open) {
            a->skipped[i]++;
        }
    }
    a->open = 0;
}

void pk_add(pk_acc *a, uint64_t group, int correct, const char *pred, size_t len) {
    if (a->open && group != a->group) close_problem(a);
    if (!a->open) {
        a->open = 1;
        a->group = group;
        a->n = a->c = 0;
        a->preds.len = 0;
    }
    if (a->n < a->kmax) {
        GROW(a->first, a->first_cap, a->n + 1, 16);
        a->first[a->n] = (pk_sample){a->preds.len, pred ? len : 0, (uint8_t)!!correct};
        if (pred && len) sbuf_put(&a->preds, pred, len);
    }
    a->any_pred |= pred && len;
    a->n++;
    a->c += !!correct;
}

void pk_result_at(const pk_acc *a, int i, pk_result *out) {
    double pass_sum = a->pass_sum[i], pass;
    uint64_t solved = a->maj_solved[i], problems = a->problems[i], skipped = a->skipped[i];
    int s;
    if (problem_part(a, i, &pass, &s)) {
        pass_sum += pass;
        solved += s;
        problems++;
    } else if (a->open) {
        skipped++;
    }
    *out = (pk_result){.k = a->k[i], .problems = problems, .skipped = skipped, .pass = NAN, .maj = NAN};
    if (problems) {
        out->pass = pass_sum / (double)problems;
        out->maj = (double)solved / (double)problems;
    }
}

int pk_parse(const char *s, uint32_t *ks, int *nk, rl_err *err) {
    *nk = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        unsigned long long v = *p >= '0' && *p <= '9' ? strtoull(p, &end, 10) : (end = (char *)p, 0);
        if (end == p || (*end && *end != ',') || errno || v < 1 || v > PK_K_LIMIT)
            return err_set(err, "'%s': expected k values in 1..%u separated by commas (1,8,16)", s, PK_K_LIMIT);
        for (int i = 0; i < *nk; i++)
            if (ks[i] == v) return err_set(err, "'%s': k = %llu is given twice", s, v);
        if (*nk == PK_MAX_K) return err_set(err, "'%s': at most %d values of k", s, PK_MAX_K);
        ks[(*nk)++] = (uint32_t)v;
        if (!*end) return 0;
        p = end + 1;
    }
}
