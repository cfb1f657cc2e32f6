// sampling.c — temperature, top-k and top-p sampling (sampling.h).
#include "model/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct {
    float p;
    uint32_t id;
} cand;

// Probabilities are summed in blocks, so a draw walks block sums first and
// then one block, instead of up to V single values.
#define BLOCK 256

struct smp_work {
    int V;
    float *prob;      // (V) exp(z - max z), unnormalised
    double *bsum;     // (V / BLOCK rounded up) sums of prob over each block
    cand *order;      // (V) candidates, most probable first once sorted
};

smp_work *smp_work_new(int V) {
    smp_work *w = xmalloc(sizeof *w);
    w->V = V;
    w->prob = xmalloc((size_t)V * sizeof(float));
    w->bsum = xmalloc(((size_t)V + BLOCK - 1) / BLOCK * sizeof(double));
    w->order = xmalloc((size_t)V * sizeof(cand));
    return w;
}

void smp_work_free(smp_work *w) {
    if (!w) return;
    free(w->prob);
    free(w->bsum);
    free(w->order);
    free(w);
}

// exp(x) for x <= 0, four at a time, in plain float arithmetic (GCC vector
// extensions: SSE2 on any x86-64, so the same bits on every machine):
// x = n ln2 + r, |r| <= ln2 / 2, exp(r) by its degree-6 Taylor polynomial
// (relative error below 3e-7), 2^n through the exponent bits. x below -87
// counts as -87 (exp(-87) is about the smallest normal float).
typedef float v4sf __attribute__((vector_size(16)));
typedef int32_t v4si __attribute__((vector_size(16)));

static v4sf exp_neg4(v4sf x) {
    const v4sf lo = {-87, -87, -87, -87};
    v4si below = x < lo;
    x = (v4sf)(((v4si)x & ~below) | ((v4si)lo & below));
    v4sf n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;   // round(x / ln2)
    v4sf r = x - n * 0.693145752f - n * 1.42860677e-6f;       // ln2 in two parts
    v4sf p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-1f + r * (4.16666679e-2f +
             r * (8.33333377e-3f + r * 1.38888892e-3f)))));
    v4si e = (__builtin_convertvector(n, v4si) + 127) << 23;
    return p * (v4sf)e;
}

// prob[i] = exp((x[i] - max) * inv_t) for i in [0, n), and their sum: four
// partial float sums (a block is short enough for float), added in double.
static double block_exp(const float *x, float *prob, int n, float max, float inv_t) {
    v4sf acc = {0}, p;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v4sf v;
        memcpy(&v, x + i, sizeof v);
        p = exp_neg4((v - max) * inv_t);
        memcpy(prob + i, &p, sizeof p);
        acc += p;
    }
    double sum = (double)acc[0] + (double)acc[1] + (double)acc[2] + (double)acc[3];
    if (i < n) {   // the last 1..3 values
        v4sf v = {0};
        memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
        p = exp_neg4((v - max) * inv_t);
        memcpy(prob + i, &p, (size_t)(n - i) * sizeof(float));
        for (int j = 0; j < n - i; j++) sum += p[j];
    }
    return sum;
}

// The largest of x[0..n), four lanes at a time.
static float max_of(const float *x, int n) {
    v4sf m = {x[0], x[0], x[0], x[0]};
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v4sf v;
        memcpy(&v, x + i, sizeof v);
        v4si more = v > m;
        m = (v4sf)(((v4si)v & more) | ((v4si)m & ~more));
    }
    float best = m[0];
    for (int j = 1; j < 4; j++) best = m[j] > best ? m[j] : best;
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    return best;
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
    return smp_draw_u(logits, p, p->temperature > 0 ? rng_uniform(rng) : 0, w, logp);
}

uint32_t smp_draw_u(const float *logits, const smp_params *p, double u, smp_work *w, double *logp) {
    int V = w->V;
    if (p->temperature <= 0) {
        *logp = 0;
        return argmax(logits, V);
    }
    // prob[i] = exp(z_i - max z), z = logits / T, in float; sums in double.
    float inv_t = (float)(1.0 / (double)p->temperature);
    float zmax = max_of(logits, V);
    int nb = (V + BLOCK - 1) / BLOCK;
    double total = 0;
    for (int b = 0; b < nb; b++) {
        int n = V - b * BLOCK < BLOCK ? V - b * BLOCK : BLOCK;
        w->bsum[b] = block_exp(logits + b * BLOCK, w->prob + b * BLOCK, n, zmax, inv_t);
        total += w->bsum[b];
    }

    int filtered = (p->top_k > 0 && p->top_k < (uint32_t)V) || p->top_p < 1.0f;
    if (!filtered) {   // the first token whose cumulative probability exceeds u
        double target = u * total, cum = 0;
        int b = 0;
        while (b < nb - 1 && cum + w->bsum[b] <= target) cum += w->bsum[b++];
        uint32_t tok = 0;
        int found = 0;
        for (int i = b * BLOCK; i < V; i++) {   // rounding may carry the walk past block b
            if (w->prob[i] <= 0) continue;
            cum += w->prob[i];
            tok = (uint32_t)i;
            found = 1;
            if (cum > target) break;
        }
        for (int i = b * BLOCK - 1; !found && i >= 0; i--)   // only zeros from block b on
            if (w->prob[i] > 0) {
                tok = (uint32_t)i;
                found = 1;
            }
        *logp = log((double)w->prob[tok]) - log(total);
        return tok;
    }

    cand *c = w->order;
    for (int i = 0; i < V; i++) c[i] = (cand){w->prob[i], (uint32_t)i};
    int n = p->top_k > 0 && p->top_k < (uint32_t)V ? (int)p->top_k : V;
    top_k_front(c, V, n);
    total = 0;
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
