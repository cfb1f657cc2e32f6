// model_work.c — the workspaces: the tables of buffers (and their shapes)
// that a batch's activations, and training's saved activations and
// activation gradients, are allocated from, one block of the backend a group.
#include "model/model_internal.h"

#include <string.h>

// Under AddressSanitizer the buffers that share a block keep guards between
// them (WBUF_GUARD below), so that an overrun of one is still reported.
#if defined(__SANITIZE_ADDRESS__)
#define MODEL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MODEL_ASAN 1
#endif
#endif
#ifdef MODEL_ASAN
#include <sanitizer/asan_interface.h>
#endif

// The activations of a batch, and for training the saved activations and the
// activation gradients, are two groups of buffers. Each group is a table of
// buffers and their shapes, from which one block of the backend is allocated
// and every pointer set (as llm.c does); a block grows with the batch and is
// reused by smaller ones.

#define WBUF(f, n) ((wbuf){offsetof(struct model, f), sizeof *((model_t *)0)->f, 1, (n), -1})
#define WBUF_SAVED(f, sets, n, member) \
    ((wbuf){offsetof(struct model, f), sizeof *((model_t *)0)->f, (sets), (n), offsetof(saved, member)})

// Each buffer's offset in its block is a multiple of WBUF_ALIGN bytes, the
// alignment of cudaMalloc (the CPU backend's is 64): every buffer is aligned
// as its block, as when each was an allocation of its own.
enum { WBUF_ALIGN = 256 };
#ifdef MODEL_ASAN
enum { WBUF_GUARD = WBUF_ALIGN };   // poisoned bytes after each buffer (host memory only)
#else
enum { WBUF_GUARD = 0 };
#endif

// Bytes of buffer b and its padding up to the next buffer.
static size_t wbuf_bytes(const wbuf *b) {
    size_t bytes = b->sets * b->n * b->size;
    return (bytes + WBUF_ALIGN - 1) / WBUF_ALIGN * WBUF_ALIGN + WBUF_GUARD;
}

// The workspace for N tokens: one layer's activations, which forward reuses
// for every layer, and the batch's inputs and outputs.
size_t mdl_work_table(const model_t *m, size_t N, wbuf t[WT_MAX]) {
    const model_config *c = &m->c;
    size_t C = (size_t)c->hidden, QD = (size_t)c->heads * c->head_dim, KVD = (size_t)c->kv_heads * c->head_dim,
           F = (size_t)c->inter, R = (size_t)m->lrows;
    // LoRA's (model_lora.c), none without adapters: their rank, and the widest product's outputs
    size_t LR = m->lora ? (size_t)m->lora->c.rank : 0, LW = LR ? C : 0;
    LW = LR && QD > LW ? QD : LW;
    LW = LR && F > LW ? F : LW;
    const wbuf b[] = {
        WBUF(x, N * C),                      // (N, C) the residual stream
        WBUF(xb, N * C),                     // (N, C) the normed input of attention, then of the MLP
        WBUF(xm, N * C),                     // (N, C) the residual stream after attention
        WBUF(q, N * QD),                     // (N, NH, HS)
        WBUF(att, N * QD),                   // (N, NH, HS) attention's output
        WBUF(k, N * KVD),                    // (N, NKV, HS)
        WBUF(v, N * KVD),                    // (N, NKV, HS)
        WBUF(hb, N * F),                     // (N, F) gate, then the MLP's hidden product
        WBUF(hb2, N * F),                    // (N, F) up
        WBUF(ids, N),                        // (N) int32 tokens
        WBUF(pos, N),                        // (N) int32 their positions
        WBUF(rows, N),                       // (N) int32 their rows in the KV cache (model_step)
        WBUF(sel, N),                        // (N) int32 the rows that need logits
        WBUF(tgt, N),                        // (N) int32 and their targets (scoring)
        WBUF(itemp, N),                      // (N) 1 / temperature of each scored token
        WBUF(lp, N),                         // (N) log-probabilities of the scored tokens
        WBUF(ent, N),                        // (N) their entropies (nats)
        WBUF(dlogp, N),                      // (N) dloss/dlogp (training)
        WBUF(su, N),                         // (N) double: model_step_sample's uniforms
        WBUF(slogp, N),                      // (N) double: its log-probabilities
        WBUF(stok, N),                       // (N) int32: and its tokens
        WBUF(hrows, R * C),                  // (lrows, C) rows of the final norm, for the output layer
        WBUF(logits, R * (size_t)c->vocab),  // (lrows, V)
        WBUF(seqs, N),                       // (nseq) sequences; nseq <= N, as each has a token
        WBUF(frows, N),                      // (N) int32 the source rows of shared prefixes
        WBUF(kvs_k, N * KVD),                // (N, NKV, HS) one layer's keys when scoring or training shares prompts
        WBUF(kvs_v, N * KVD),                // (N, NKV, HS) and values
        WBUF(d_kvs_k, N * KVD),              // (N, NKV, HS) their gradients (model_backward)
        WBUF(d_kvs_v, N * KVD),              // (N, NKV, HS)
        WBUF(lt, N * LR),                    // (N, rank) LoRA: A x of a target (not kept)
        WBUF(lu, N * LW),                    // (N, out) LoRA: B A x of a target
        WBUF(ldt, N * LR),                   // (N, rank) LoRA: dloss/d(A x) (model_backward)
    };
    _Static_assert(sizeof b / sizeof *b <= WT_MAX, "mdl_work_table: raise WT_MAX");
    memcpy(t, b, sizeof b);
    return sizeof b / sizeof *b;
}

// What training adds for N tokens: the activations of every layer saved by
// forward_train for the backward, (L, N, width), or with recompute the
// residual stream into every layer (L + 1, N, C) and one layer's others,
// which the backward computes again layer by layer; the gradients of the
// activations of one layer at a time, (N, width); the output layer's rows.
size_t mdl_train_table(const model_t *m, size_t N, wbuf t[WT_MAX]) {
    const model_config *c = &m->c;
    size_t L = (size_t)c->layers, LX = L + 1, C = (size_t)c->hidden, QD = (size_t)c->heads * c->head_dim,
           KVD = (size_t)c->kv_heads * c->head_dim, F = (size_t)c->inter, NH = (size_t)c->heads,
           R = (size_t)m->lrows;
    size_t qk = c->qk_norm ? 1 : 0;   // q and k before qwen3's per-head norm; other models have none
    if (m->recompute) L = 1;          // one layer's set of the others
    size_t LT = m->lora ? (size_t)m->lora->ntargets * m->lora->c.rank : 0;   // LoRA: targets · rank
    const wbuf b[] = {
        WBUF_SAVED(s_x, LX, N * C, x),          // (L+1, N, C) the residual stream into each layer, and out of the last
        WBUF_SAVED(s_n1, L, N * C, n1),         // (L, N, C) its rmsnorm
        WBUF_SAVED(s_q, L, N * QD, q),          // (L, N, NH, HS) after RoPE
        WBUF_SAVED(s_k, L, N * KVD, k),         // (L, N, NKV, HS) after RoPE
        WBUF_SAVED(s_v, L, N * KVD, v),         // (L, N, NKV, HS)
        WBUF_SAVED(s_att, L, N * QD, att),      // (L, N, NH, HS) attention's output
        WBUF_SAVED(s_lse, L, N * NH, lse),      // (L, N, NH) log Σ exp(scores) of each query row
        WBUF_SAVED(s_xm, L, N * C, xm),         // (L, N, C) the residual stream after attention
        WBUF_SAVED(s_n2, L, N * C, n2),         // (L, N, C) its rmsnorm
        WBUF_SAVED(s_gate, L, N * F, gate),     // (L, N, F)
        WBUF_SAVED(s_up, L, N * F, up),         // (L, N, F)
        WBUF(d_x, N * C),                       // (N, C) dloss/d(residual stream)
        WBUF(d_n, N * C),                       // (N, C) dloss/d(a normed input)
        WBUF(d_q, N * QD),                      // (N, NH, HS)
        WBUF(d_k, N * KVD),                     // (N, NKV, HS)
        WBUF(d_v, N * KVD),                     // (N, NKV, HS)
        WBUF(d_att, N * QD),                    // (N, NH, HS)
        WBUF(d_h, N * F),                       // (N, F) forward_train's hidden product, then dh and dgate
        WBUF(d_up, N * F),                      // (N, F) the hidden product again, then dup
        WBUF(hraw, R * C),                      // (lrows, C) output layer rows before the final norm
        WBUF(dh, R * C),                        // (lrows, C) dloss/d(rows after the final norm)
        WBUF(dent, N),                          // (N) dloss/d(entropy) of the scored tokens
        WBUF_SAVED(s_qr, L, qk * N * QD, qr),   // (L, N, NH, HS) qwen3
        WBUF_SAVED(s_kr, L, qk * N * KVD, kr),  // (L, N, NKV, HS) qwen3
        WBUF(d_qr, qk * N * QD),                // (N, NH, HS) qwen3
        WBUF(d_kr, qk * N * KVD),               // (N, NKV, HS) qwen3
        WBUF_SAVED(s_lora, L, LT * N, lora),    // (L, targets, N, rank) LoRA: scale · A x of each target
    };
    _Static_assert(sizeof b / sizeof *b <= WT_MAX, "mdl_train_table: raise WT_MAX");
    memcpy(t, b, sizeof b);
    return sizeof b / sizeof *b;
}

// Sets the pointers of table t (nt buffers) into block, in table order;
// block NULL: every pointer NULL.
static void group_point(model_t *m, const wbuf *t, size_t nt, char *block) {
    size_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        void *p = block && t[i].n ? block + off : NULL;
        memcpy((char *)m + t[i].field, &p, sizeof p);   // a float *, int32_t *, ... field
#ifdef MODEL_ASAN
        size_t used = t[i].sets * t[i].n * t[i].size;
        if (block && m->ops == ops_cpu()) ASAN_POISON_MEMORY_REGION(block + off + used, wbuf_bytes(&t[i]) - used);
#endif
        off += wbuf_bytes(&t[i]);
    }
}

// Frees group g and clears the pointers of its table.
void mdl_group_free(model_t *m, wgroup *g, wbuf_table_fn *table) {
    wbuf t[WT_MAX];
    if (g->block) m->ops->free(g->block);
    *g = (wgroup){0};
    group_point(m, t, table(m, 0, t), NULL);
}

// Group g for N tokens: one zero-filled block of the backend for its table,
// kept while later batches fit. Regrown by a quarter at least: batches of
// varying sizes would otherwise map and clear a new block (hundreds of MB for
// a learner) each time one is a little larger than all before it.
void mdl_group_reserve(model_t *m, wgroup *g, wbuf_table_fn *table, int N) {
    if (N <= g->cap) return;
    if (g->cap && N < g->cap + g->cap / 4) N = g->cap + g->cap / 4;
    mdl_group_free(m, g, table);
    wbuf t[WT_MAX];
    size_t nt = table(m, (size_t)N, t), bytes = 0;
    for (size_t i = 0; i < nt; i++) bytes += wbuf_bytes(&t[i]);
    g->block = m->ops->alloc(bytes);
    g->cap = N;
    group_point(m, t, nt, g->block);
}

// The workspace for N tokens in at most N sequences, for no fewer than 64.
void mdl_reserve(model_t *m, int N) { mdl_group_reserve(m, &m->work, mdl_work_table, N < 64 ? 64 : N); }
