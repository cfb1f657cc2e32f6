// model_decode.c — incremental decoding: the KV cache and its slots, one
// step of a batch of sequences (model_step), with sampling on the backend
// (model_step_sample).
#include "model/model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mdl_free_cache(model_t *m) {
    if (m->kc) m->ops->free(m->kc);
    if (m->vc) m->ops->free(m->vc);
    free(m->slot_len);
    free(m->slot_used);
    m->kc = m->vc = NULL;
    m->slot_len = NULL;
    m->slot_used = NULL;
    m->slots = m->max_len = 0;
}

int model_cache_init(model_t *m, int slots, int max_len, rl_err *err) {
    if (slots < 1 || max_len < 1) return err_set(err, "KV cache of %d slots of %d tokens: both must be positive", slots, max_len);
    if (max_len > m->c.max_pos)
        return err_set(err, "KV cache of %d tokens per slot exceeds max_position_embeddings %d", max_len,
                       m->c.max_pos);
    size_t KVD = (size_t)m->c.kv_heads * m->c.head_dim;
    size_t n = (size_t)m->c.layers * slots * (size_t)max_len * KVD;
    if (n / (size_t)slots / (size_t)max_len != (size_t)m->c.layers * KVD || n > ((size_t)1 << 38))
        return err_set(err, "KV cache of %d slots of %d tokens needs over 1 TiB", slots, max_len);
    mdl_free_cache(m);
    const char *f32 = getenv("RLPIPE_KV_F32");
    m->kc_dt = m->o.act == DT_BF16 && m->ops->kv_dtypes >> DT_BF16 & 1 && !(f32 && *f32 && strcmp(f32, "0"))
                   ? DT_BF16 : DT_F32;
    m->kc = m->ops->alloc(n * dt_size(m->kc_dt));
    m->vc = m->ops->alloc(n * dt_size(m->kc_dt));
    m->slot_len = xmalloc((size_t)slots * sizeof(int));
    m->slot_used = xmalloc((size_t)slots);
    memset(m->slot_len, 0, (size_t)slots * sizeof(int));
    memset(m->slot_used, 0, (size_t)slots);
    m->slots = slots;
    m->max_len = max_len;
    return 0;
}

rl_dtype model_cache_dtype(const model_t *m) { return m->kc_dt; }

int model_slot_acquire(model_t *m) {
    for (int s = 0; s < m->slots; s++)
        if (!m->slot_used[s]) {
            m->slot_used[s] = 1;
            m->slot_len[s] = 0;
            return s;
        }
    return -1;
}

void model_slot_release(model_t *m, int slot) {
    if (slot >= 0 && slot < m->slots) m->slot_used[slot] = 0;
}

int model_slot_len(const model_t *m, int slot) {
    return slot >= 0 && slot < m->slots ? m->slot_len[slot] : -1;
}

// The entry of s (n) appending to slot sl, or -1.
static long step_entry(const model_step_seq *s, size_t n, int sl) {
    for (size_t j = 0; j < n; j++)
        if (s[j].slot == sl) return (long)j;
    return -1;
}

// Checks a shared prefix of sequence i (model_step_seq.shared): the slot is
// empty, `from` another acquired slot that takes no prefix itself in this step
// and holds at least `shared` tokens once its own are in; with no tokens of its
// own, i needs `from`'s last token at position shared − 1.
static int check_shared(const model_t *m, const model_step_seq *s, size_t n, size_t i, rl_err *err) {
    int sl = s[i].slot, from = s[i].from;
    if (m->slot_len[sl] != 0)
        return err_set(err, "sequence %zu: slot %d holds %d tokens; a shared prefix needs an empty slot", i, sl,
                       m->slot_len[sl]);
    if (from < 0 || from >= m->slots || !m->slot_used[from] || from == sl)
        return err_set(err, "sequence %zu: slot %d to share a prefix from is not another acquired slot", i, from);
    long j = step_entry(s, n, from);
    if (j >= 0 && s[j].shared)
        return err_set(err, "sequence %zu: slot %d takes a shared prefix in the same step", i, from);
    size_t holds = (size_t)m->slot_len[from] + (j >= 0 ? s[j].n : 0);
    if (s[i].shared > holds)
        return err_set(err, "sequence %zu: a prefix of %zu tokens shared from slot %d, which holds %zu", i,
                       s[i].shared, from, holds);
    if (s[i].replay && s[i].n != 1)
        return err_set(err, "sequence %zu: a replay of the prefix's last token has %zu tokens, not 1", i, s[i].n);
    if (s[i].n == 0 && (j < 0 || holds != s[i].shared))
        return err_set(err, "sequence %zu: no tokens of its own, and slot %d's last token in this step is not at "
                       "position %zu", i, from, s[i].shared - 1);
    return 0;
}

// The forward of model_step: checks the sequences, appends their tokens to
// the cache (shared prefixes first), and leaves the residual stream in m->x,
// the rows after each sequence's last token in m->sel (n).
static int step_forward(model_t *m, const model_step_seq *s, size_t n, rl_err *err) {
    size_t N = 0, F = 0;
    for (size_t i = 0; i < n; i++) {
        int sl = s[i].slot;
        if (sl < 0 || sl >= m->slots || !m->slot_used[sl])
            return err_set(err, "sequence %zu: slot %d is not an acquired slot of the KV cache", i, sl);
        for (size_t j = 0; j < i; j++)
            if (s[j].slot == sl) return err_set(err, "sequences %zu and %zu share slot %d", j, i, sl);
        if (s[i].shared && check_shared(m, s, n, i, err) < 0) return -1;
        if (s[i].replay && !s[i].shared) return err_set(err, "sequence %zu: a replay with no shared prefix", i);
        if (s[i].n == 0 && !s[i].shared) return err_set(err, "sequence %zu: no tokens to append", i);
        if (mdl_check_tokens(m, s[i].ids, s[i].n, "input", i, err) < 0) return -1;
        size_t len0 = s[i].shared ? s[i].shared - (size_t)(s[i].replay != 0) : (size_t)m->slot_len[sl];
        if (len0 + s[i].n > (size_t)m->max_len)
            return err_set(err, "sequence %zu: slot %d holds %zu tokens; %zu more exceed its %d", i, sl, len0,
                           s[i].n, m->max_len);
        if (mdl_check_len(m, i, len0 + s[i].n, err) < 0) return -1;
        N += s[i].n;
        F += s[i].shared;
        if (N > mdl_max_batch_tokens(m))
            return err_set(err, "step of over %zu tokens: prefill in parts", mdl_max_batch_tokens(m));
    }
    if (n == 0) return 0;
    size_t most = N > n ? N : n;   // n rows of logits, more than N when some share their source's
    mdl_reserve(m, (int)(most > F ? most : F));
    int32_t *ids = xmalloc(N * 4), *pos = xmalloc(N * 4), *rows = xmalloc(N * 4), *last = xmalloc(n * 4);
    int32_t *frows = xmalloc((F ? F : 1) * 4);
    rl_attn_seq *as = xmalloc(n * sizeof *as);
    size_t q0 = 0, f0 = 0;
    int nseq = 0;
    m->nforks = 0;
    for (size_t i = 0; i < n; i++) {
        int sl = s[i].slot, len = s[i].shared ? (int)s[i].shared - (s[i].replay != 0) : m->slot_len[sl];
        if (s[i].shared) {
            for (size_t t = 0; t < s[i].shared; t++) frows[f0 + t] = s[i].from * m->max_len + (int32_t)t;
            mdl_add_fork(m, sl * m->max_len, f0, s[i].shared);
            f0 += s[i].shared;
        }
        if (s[i].n == 0) continue;   // its logits row is its source's (below)
        for (size_t j = 0; j < s[i].n; j++) {
            ids[q0 + j] = (int32_t)s[i].ids[j];
            pos[q0 + j] = len + (int32_t)j;
            rows[q0 + j] = sl * m->max_len + len + (int32_t)j;
        }
        as[nseq++] = (rl_attn_seq){.q0 = (int32_t)q0, .n = (int32_t)s[i].n, .pos0 = len, .kv0 = sl * m->max_len};
        last[i] = (int32_t)(q0 + s[i].n - 1);
        q0 += s[i].n;
    }
    for (size_t i = 0; i < n; i++)
        if (s[i].n == 0) last[i] = last[step_entry(s, n, s[i].from)];
    const rl_ops *o = m->ops;
    o->upload(m->ids, ids, N * 4);
    o->upload(m->pos, pos, N * 4);
    o->upload(m->rows, rows, N * 4);
    o->upload(m->sel, last, n * 4);
    o->upload(m->seqs, as, (size_t)nseq * sizeof *as);
    if (F) o->upload(m->frows, frows, F * 4);
    m->kvk = m->kc;
    m->kvv = m->vc;
    m->kv_dt = m->kc_dt;
    m->kv_stride = (size_t)m->slots * m->max_len;
    mdl_forward(m, (int)N, nseq, 1);
    m->nforks = 0;
    for (size_t i = 0; i < n; i++)   // a replayed token's row is the prefix's
        m->slot_len[s[i].slot] = s[i].shared ? (int)(s[i].shared + s[i].n) - (s[i].replay != 0)
                                             : m->slot_len[s[i].slot] + (int)s[i].n;
    free(ids);
    free(pos);
    free(rows);
    free(last);
    free(frows);
    free(as);
    return 0;
}

int model_step(model_t *m, const model_step_seq *s, size_t n, float *logits, rl_err *err) {
    if (step_forward(m, s, n, err) < 0) return -1;
    size_t V = (size_t)m->c.vocab, chunk = (size_t)m->lrows;
    for (size_t r0 = 0; r0 < n; r0 += chunk) {
        int k = (int)(n - r0 < chunk ? n - r0 : chunk);
        mdl_logits_rows(m, m->x, m->hrows, m->sel + r0, k);
        m->ops->download(logits + r0 * V, m->logits, (size_t)k * V * sizeof(float));
    }
    return 0;
}

int model_step_sample(model_t *m, const model_step_seq *s, size_t n, const smp_params *p, const double *u,
                      uint32_t *tok, double *logp, rl_err *err) {
    if (step_forward(m, s, n, err) < 0) return -1;
    if (n == 0) return 0;
    const rl_ops *o = m->ops;
    size_t chunk = (size_t)m->lrows;
    o->upload(m->su, u, n * sizeof(double));
    for (size_t r0 = 0; r0 < n; r0 += chunk) {
        int k = (int)(n - r0 < chunk ? n - r0 : chunk);
        mdl_logits_rows(m, m->x, m->hrows, m->sel + r0, k);
        o->sample(m->stok + r0, m->slogp + r0, m->logits, p, m->su + r0, k, m->c.vocab);
    }
    int32_t *t = xmalloc(n * sizeof *t);   // ids are below the vocabulary size, so int32 holds them
    o->download(t, m->stok, n * sizeof *t);
    o->download(logp, m->slogp, n * sizeof(double));
    for (size_t i = 0; i < n; i++) tok[i] = (uint32_t)t[i];
    free(t);
    return 0;
}

double model_logprob_of(const float *logits, int V, float temperature, uint32_t token) {
    double mx = -INFINITY, sum = 0, it = 1.0 / temperature;
    for (int j = 0; j < V; j++) mx = logits[j] > mx ? logits[j] : mx;
    for (int j = 0; j < V; j++) sum += exp((logits[j] - mx) * it);
    return (logits[token] - mx) * it - log(sum);
}
