// sampling.c — temperature, top-k and top-p sampling (sampling.h).
#include "sampling.h"

#include <math.h>
#include <stdlib.h>

#include "util.h"

typedef struct {
    float p;
    uint32_t id;
} cand;

struct smp_work {
    int V;
    float *prob;      // (V) exp(z - max z), unnormalised
    cand *order;      // (V) candidates, most probable first once sorted
};

smp_work *smp_work_new(int V) {
    smp_work *w = xmalloc(sizeof *w);
    w->V = V;
    w->prob = xmalloc((size_t)V * sizeof(float));
    w->order = xmalloc((size_t)V * sizeof(cand));
    return w;
}

void smp_work_free(smp_work *w) {
    if (!w) return;
    free(w->prob);
    free(w->order);
    free(w);
}

static uint32_t argmax(const float *x, int V) {
    uint32_t best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = (uint32_t)i;
    return best;
}

// Descending probability, then ascending id: a total order, so the kept set
// and the walk below do not depend on the sort's algorithm.
static int before(const cand *a, const cand *b) {
    return a->p != b->p ? a->p > b->p : a->id < b->id;
}
static int by_prob_desc(const void *a, const void *b) {
    return before(a, b) ? -1 : before(b, a);
}

// Moves the k first candidates of c[0..n) in that order to its front, sorted:
// a full sort when k is a large part of n, else insertion into a sorted top list.
static void top_k_front(cand *c, int n, int k) {
    if ((int64_t)k * 16 >= n) {
        qsort(c, (size_t)n, sizeof *c, by_prob_desc);
        return;
    }
    int kept = 0;   // c[0..kept) sorted: the best seen so far
    for (int i = 0; i < n; i++) {
        cand x = c[i];
        if (kept == k && !before(&x, &c[k - 1])) continue;
        int j = kept < k ? kept++ : k - 1;
        while (j > 0 && before(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

uint32_t smp_draw(const float *logits, const smp_params *p, rl_rng *rng, smp_work *w, double *logp) {
    int V = w->V;
    if (p->temperature <= 0) {
        *logp = 0;
        return argmax(logits, V);
    }
    // prob[i] = exp(z_i - max z), z = logits / T, in float; sums in double.
    double inv_t = 1.0 / (double)p->temperature;
    float zmax = logits[argmax(logits, V)];
    for (int i = 0; i < V; i++) w->prob[i] = expf((float)(((double)logits[i] - zmax) * inv_t));

    int filtered = (p->top_k > 0 && p->top_k < (uint32_t)V) || p->top_p < 1.0f;
    double u = rng_uniform(rng);
    if (!filtered) {
        double total = 0;
        for (int i = 0; i < V; i++) total += w->prob[i];
        double target = u * total, cum = 0;
        uint32_t tok = 0;
        for (int i = 0; i < V; i++) {
            if (w->prob[i] <= 0) continue;
            cum += w->prob[i];
            tok = (uint32_t)i;
            if (cum > target) break;
        }
        *logp = log((double)w->prob[tok]) - log(total);
        return tok;
    }

    cand *c = w->order;
    for (int i = 0; i < V; i++) c[i] = (cand){w->prob[i], (uint32_t)i};
    int n = p->top_k > 0 && p->top_k < (uint32_t)V ? (int)p->top_k : V;
    top_k_front(c, V, n);
    double total = 0;
    for (int i = 0; i < n; i++) total += c[i].p;
    if (p->top_p < 1.0f) {   // keep while the mass before a token is below top_p
        double mass = 0, need = (double)p->top_p * total;
        int keep = 0;
        while (keep < n && (keep == 0 || mass < need)) mass += c[keep++].p;
        n = keep;
        total = mass;
    }
    double target = u * total, cum = 0;
    uint32_t tok = c[0].id;
    float ptok = c[0].p;
    for (int i = 0; i < n; i++) {
        if (c[i].p <= 0) continue;
        cum += c[i].p;
        tok = c[i].id;
        ptok = c[i].p;
        if (cum > target) break;
    }
    *logp = log((double)ptok) - log(total);
    return tok;
}
