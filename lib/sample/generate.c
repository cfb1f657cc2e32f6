// generate.c — continuous batching over the model's KV cache (generate.h).
#include "sample/generate.h"

#include <stdlib.h>
#include <string.h>

// The most prompt tokens prefilled in one step (at least one prompt is):
// admitting every free slot's prompt at once would make one step as long as
// many decode steps, stalling the sequences already decoding.
#define PREFILL_TOKENS 4096

typedef struct grp grp_t;

// Where a sample is: queued for a slot, decoding, waiting in its slot after
// a turn (multi-turn), or queued to prefill the environment's tokens there.
enum { SEQ_QUEUED, SEQ_DECODE, SEQ_TURN, SEQ_RESUME };

typedef struct gen_seq {
    gen_sample *out;       // in its group's samples
    grp_t *grp;
    uint64_t number;       // group * G + member: the sample's generator stream
    rl_rng rng;
    int slot;              // -1 while waiting
    uint32_t pending;      // the last token sampled, to be fed at the next step
    uint32_t pver;         // the weight version its prompt's cache rows were computed with
    int state;             // SEQ_*
    size_t turn_start;     // multi-turn: where the current turn starts in out->ids
    int turns;             // turns ended
    u32_vec feed;          // SEQ_RESUME: the turn's last token and the environment's, to prefill
} seq_t;

struct grp {
    gen_group pub;
    uint32_t *prompt;      // (n_prompt)
    size_t n_prompt;
    seq_t *seqs;           // (G)
    int left;              // samples not finished
    uint64_t lead_step;    // the step (gen_t.nstep) in which lead_slot prefills the prompt
    int lead_slot;
    grp_t *next;           // in the finished queue
};

// A FIFO of samples: v[head..tail).
typedef struct {
    seq_t **v;
    size_t head, tail, cap;
} seq_fifo;

// Room for n more at the tail (first: the capacity of the first allocation).
// The taken entries' room is reused before the array grows, so that a queue
// which never empties grows with what it holds, not with what passed through.
static void fifo_reserve(seq_fifo *f, size_t n, size_t first) {
    if (f->tail + n > f->cap && f->head) {
        memmove(f->v, f->v + f->head, (f->tail - f->head) * sizeof *f->v);
        f->tail -= f->head;
        f->head = 0;
    }
    GROW(f->v, f->cap, f->tail + n, first);
}

static void fifo_push(seq_fifo *f, seq_t *s) {
    fifo_reserve(f, 1, 16);
    f->v[f->tail++] = s;
}

struct gen {
    model_t *m;
    const tokenizer *tok;
    gen_opts o;
    int cache_slots;
    model_step_seq *steps;         // (slots)
    double *u, *logp;              // (slots) each step entry's uniform, and its token's log-probability
    uint32_t *drawn;               // (slots) the token drawn for it
    seq_t **step_seq;              // (slots) the sample of each step entry
    seq_t **active;                // (cache_slots) the sample in each slot, or NULL
    int n_active;                  // slots held
    int n_turn;                    // of them, samples waiting after a turn (SEQ_TURN)
    seq_fifo turned;               // turns ended, not yet taken
    seq_fifo resume;               // environment tokens to prefill
    seq_fifo waiting;              // samples queued for a slot
    grp_t *done_head, *done_tail;  // finished groups, oldest first (in_order: by group number)
    uint64_t groups;
    uint64_t next_out;             // in_order: the group number gen_peek waits for
    uint32_t ver;
    uint64_t nstep;                // steps begun, from 1
};

gen_t *gen_new(model_t *m, const tokenizer *tok, const gen_opts *o, rl_err *err) {
    int cache_slots = o->cache_slots > o->slots ? o->cache_slots : o->slots;
    if (model_cache_init(m, cache_slots, o->max_len, err)) return NULL;
    gen_t *g = xmalloc(sizeof *g);
    memset(g, 0, sizeof *g);
    g->m = m;
    g->tok = tok;
    g->o = *o;
    g->cache_slots = cache_slots;
    g->steps = xmalloc((size_t)o->slots * sizeof *g->steps);
    g->u = xmalloc((size_t)o->slots * sizeof *g->u);
    g->logp = xmalloc((size_t)o->slots * sizeof *g->logp);
    g->drawn = xmalloc((size_t)o->slots * sizeof *g->drawn);
    g->step_seq = xmalloc((size_t)o->slots * sizeof *g->step_seq);
    g->active = xmalloc((size_t)cache_slots * sizeof *g->active);
    memset(g->active, 0, (size_t)cache_slots * sizeof *g->active);
    return g;
}

static void grp_free(grp_t *q) {
    for (int j = 0; j < q->pub.n; j++) {
        gen_sample *s = &q->pub.samples[j];
        u32_vec_free(&s->ids);
        f32_vec_free(&s->logp);
        u32_vec_free(&s->ver);
        sbuf_free(&s->text);
        u8_vec_free(&s->mask);
        u32_vec_free(&s->turns);
        u32_vec_free(&q->seqs[j].feed);
    }
    free(q->pub.samples);
    free(q->seqs);
    free(q->prompt);
    free(q);
}

void gen_free(gen_t *g) {
    if (!g) return;
    // Groups are owned by their samples' queue or slot until they finish.
    for (size_t i = g->waiting.head; i < g->waiting.tail; i++) {
        grp_t *q = g->waiting.v[i]->grp;
        if (--q->left == 0) grp_free(q);   // left counts the samples still referenced
    }
    for (int s = 0; s < g->cache_slots; s++)
        if (g->active[s] && --g->active[s]->grp->left == 0) grp_free(g->active[s]->grp);
    while (g->done_head) {
        grp_t *q = g->done_head;
        g->done_head = q->next;
        grp_free(q);
    }
    free(g->steps);
    free(g->u);
    free(g->logp);
    free(g->drawn);
    free(g->step_seq);
    free(g->active);
    free(g->turned.v);
    free(g->resume.v);
    free(g->waiting.v);
    free(g);
}

uint64_t gen_add(gen_t *g, size_t prompt, const uint32_t *ids, size_t n) {
    int G = g->o.group;
    grp_t *q = xmalloc(sizeof *q);
    memset(q, 0, sizeof *q);
    q->pub.group = g->groups++;
    q->pub.prompt = prompt;
    q->pub.n = G;
    q->pub.samples = xmalloc((size_t)G * sizeof *q->pub.samples);
    memset(q->pub.samples, 0, (size_t)G * sizeof *q->pub.samples);
    q->prompt = xmalloc(n * sizeof *ids);
    memcpy(q->prompt, ids, n * sizeof *ids);
    q->n_prompt = n;
    q->seqs = xmalloc((size_t)G * sizeof *q->seqs);
    memset(q->seqs, 0, (size_t)G * sizeof *q->seqs);
    q->left = G;
    q->lead_slot = -1;
    fifo_reserve(&g->waiting, (size_t)G, 2 * (size_t)G);
    for (int j = 0; j < G; j++) {
        seq_t *s = &q->seqs[j];
        s->out = &q->pub.samples[j];
        s->grp = q;
        s->number = q->pub.group * (uint64_t)G + (uint64_t)j;
        rng_seed_stream(&s->rng, g->o.seed, s->number);
        s->slot = -1;
        g->waiting.v[g->waiting.tail++] = s;
    }
    return q->pub.group;
}

int gen_free_slots(const gen_t *g) {
    int stepping = g->n_active - g->n_turn, cache_free = g->cache_slots - g->n_active;
    return g->o.slots - stepping < cache_free ? g->o.slots - stepping : cache_free;
}
size_t gen_waiting(const gen_t *g) { return g->waiting.tail - g->waiting.head; }
void gen_set_version(gen_t *g, uint32_t ver) { g->ver = ver; }

static void push_u32(u32_vec *a, uint32_t x) {
    GROW(a->v, a->cap, a->n + 1, 64);
    a->v[a->n++] = x;
}

static void push_f32(f32_vec *a, float x) {
    GROW(a->v, a->cap, a->n + 1, 64);
    a->v[a->n++] = x;
}

static void push_u8(u8_vec *a, uint8_t x) {
    GROW(a->v, a->cap, a->n + 1, 64);
    a->v[a->n++] = x;
}

// Appends the bytes of tok to the sample's text; 1 if the text now contains a
// stop string that it did not before (answer_len then ends before it).
static int append_text(gen_t *g, gen_sample *out, uint32_t tok) {
    size_t before = out->text.len;
    rl_err e;
    if (tok_decode(g->tok, &tok, 1, TOK_SKIP_SPECIAL | TOK_CONTINUE, &out->text, &e)) return 0;   // an id the tokenizer lacks: no text
    for (size_t k = 0; k < g->o.n_stop; k++) {
        size_t L = strlen(g->o.stop[k]);
        size_t from = before + 1 > L ? before + 1 - L : 0;   // a new match ends in the new bytes
        if (out->text.len - from < L) continue;
        const uint8_t *hit = memmem(out->text.data + from, out->text.len - from, g->o.stop[k], L);
        if (hit) {
            out->answer_len = (size_t)(hit - out->text.data);
            out->stop_reason = g->o.stop[k];
            out->stop_reason_len = L;
            return 1;
        }
    }
    out->answer_len = out->text.len;
    return 0;
}

// Appends the token drawn for s (with log-probability lp); 1 if the sample
// (multi-turn: its turn) ended.
static int advance(gen_t *g, seq_t *s, uint32_t tok, double lp) {
    gen_sample *out = s->out;
    push_u32(&out->ids, tok);
    push_f32(&out->logp, (float)lp);
    push_u32(&out->ver, g->ver);
    if (g->o.multi_turn) push_u8(&out->mask, 1);
    s->pending = tok;
    for (size_t k = 0; k < g->o.n_stop_ids; k++)
        if (tok == g->o.stop_ids[k]) {
            out->stop_reason = tok_token(g->tok, tok, &out->stop_reason_len);
            return out->stopped = 1;
        }
    if (append_text(g, out, tok)) return out->stopped = 1;
    return out->ids.n - s->turn_start >= g->o.max_new || model_slot_len(g->m, s->slot) >= g->o.max_len;
}

// The slot of a sample of q that already holds the prompt in its cache,
// computed with the weights now in use, or -1.
static int holder(const gen_t *g, const grp_t *q) {
    for (int j = 0; j < q->pub.n; j++) {
        const seq_t *s = &q->seqs[j];
        if (s->slot >= 0 && (size_t)model_slot_len(g->m, s->slot) >= q->n_prompt && s->pver == g->ver)
            return s->slot;
    }
    return -1;
}

// The step entry that starts sample s (its slot still to be set). A group's prompt is
// prefilled once: a sample whose group-mate prefills it in this step shares
// those cache rows and the logits after them; one that starts later shares
// the rows of a group-mate still decoding and runs the prompt's last token
// again for its logits (model_step_seq.replay). With no group-mate holding
// the prompt, or only rows computed with weights since replaced, it prefills
// it and leads the group: a sample starting after an update computes with
// the new weights throughout.
static model_step_seq start_entry(gen_t *g, const seq_t *s) {
    const grp_t *q = s->grp;
    int src;
    if (q->lead_step == g->nstep)   // steps count from 1, so 0 is no lead yet
        return (model_step_seq){.n = 0, .from = q->lead_slot, .shared = q->n_prompt};
    if ((src = holder(g, q)) >= 0)
        return (model_step_seq){.ids = q->prompt + q->n_prompt - 1, .n = 1, .from = src, .shared = q->n_prompt,
                                .replay = 1};
    return (model_step_seq){.ids = q->prompt, .n = q->n_prompt};
}

// Appends a finished group to the done list; with in_order, inserts it by
// group number (groups finish out of order when their samples differ in length).
static void done_add(gen_t *g, grp_t *q) {
    q->next = NULL;
    if (!g->o.in_order || !g->done_tail || g->done_tail->pub.group < q->pub.group) {
        if (g->done_tail) g->done_tail->next = q;
        else g->done_head = q;
        g->done_tail = q;
        return;
    }
    grp_t **at = &g->done_head;
    while ((*at)->pub.group < q->pub.group) at = &(*at)->next;
    q->next = *at;
    *at = q;
}

// Frees s's slot: the sample is finished.
static void finish(gen_t *g, seq_t *s) {
    model_slot_release(g->m, s->slot);
    g->active[s->slot] = NULL;
    g->n_active--;
    s->slot = -1;
    grp_t *q = s->grp;
    if (--q->left == 0) done_add(g, q);
}

// Multi-turn: s's turn ended; it waits in its slot for the caller.
static void turn_ended(gen_t *g, seq_t *s) {
    gen_sample *out = s->out;
    push_u32(&out->turns, (uint32_t)s->turn_start);
    push_u32(&out->turns, (uint32_t)out->ids.n);
    s->turns++;
    s->state = SEQ_TURN;
    g->n_turn++;
    fifo_push(&g->turned, s);
}

long gen_step(gen_t *g, rl_err *err) {
    size_t n = 0, prefill = 0;
    for (int sl = 0; sl < g->cache_slots; sl++) {
        seq_t *s = g->active[sl];
        if (!s || s->state != SEQ_DECODE) continue;
        g->steps[n] = (model_step_seq){.slot = sl, .ids = &s->pending, .n = 1};
        g->step_seq[n++] = s;
    }
    // Samples back from their environment: their tokens, then the next turn.
    while (g->resume.head < g->resume.tail && n < (size_t)g->o.slots) {
        seq_t *s = g->resume.v[g->resume.head];
        if (prefill && prefill + s->feed.n > PREFILL_TOKENS) break;
        g->resume.head++;
        s->state = SEQ_DECODE;
        // The environment's tokens carry the version that computes their keys and values.
        for (size_t i = s->out->ids.n - (s->feed.n - 1); i < s->out->ids.n; i++) s->out->ver.v[i] = g->ver;
        g->steps[n] = (model_step_seq){.slot = s->slot, .ids = s->feed.v, .n = s->feed.n};
        g->step_seq[n++] = s;
        prefill += s->feed.n;
    }
    g->nstep++;
    while (g->waiting.head < g->waiting.tail && n < (size_t)g->o.slots) {
        seq_t *s = g->waiting.v[g->waiting.head];
        model_step_seq e = start_entry(g, s);
        if (prefill && prefill + e.n > PREFILL_TOKENS) break;
        int sl = model_slot_acquire(g->m);
        if (sl < 0) break;
        e.slot = sl;
        if (!e.shared) {   // it leads: the group's later samples share its rows
            s->grp->lead_step = g->nstep;
            s->grp->lead_slot = sl;
        }
        s->pver = g->ver;   // a sharer's source computed them with the weights in use too
        g->waiting.head++;
        s->slot = sl;
        s->state = SEQ_DECODE;
        g->active[sl] = s;
        g->n_active++;
        prefill += e.n;
        g->steps[n] = e;
        g->step_seq[n++] = s;
    }
    if (n == 0) return 0;
    // Each sample's uniform from its own generator (none when greedy, as smp_draw).
    for (size_t i = 0; i < n; i++) g->u[i] = g->o.sp.temperature > 0 ? rng_uniform(&g->step_seq[i]->rng) : 0;
    if (model_step_sample(g->m, g->steps, n, &g->o.sp, g->u, g->drawn, g->logp, err)) return -1;
    for (size_t i = 0; i < n; i++) {
        seq_t *s = g->step_seq[i];
        if (!advance(g, s, g->drawn[i], g->logp[i])) continue;
        if (g->o.multi_turn) turn_ended(g, s);
        else finish(g, s);
    }
    return (long)n;
}

int gen_next_turn(gen_t *g, gen_turn *t) {
    if (g->turned.head == g->turned.tail) return 0;
    seq_t *s = g->turned.v[g->turned.head++];
    *t = (gen_turn){.seq = s, .number = s->number, .prompt = s->grp->pub.prompt, .s = s->out, .turn = s->turns};
    return 1;
}

size_t gen_room(const gen_t *g, const gen_seq *q) {
    size_t len = (size_t)model_slot_len(g->m, q->slot) + 1;   // the turn's last token goes in first
    return len < (size_t)g->o.max_len ? (size_t)g->o.max_len - len : 0;
}

void gen_continue(gen_t *g, gen_seq *q, const uint32_t *ids, size_t n) {
    gen_sample *out = q->out;
    q->feed.n = 0;
    push_u32(&q->feed, q->pending);
    for (size_t i = 0; i < n; i++) {
        push_u32(&q->feed, ids[i]);
        push_u32(&out->ids, ids[i]);
        push_f32(&out->logp, 0);
        push_u32(&out->ver, g->ver);
        push_u8(&out->mask, 0);
    }
    q->turn_start = out->ids.n;
    out->text.len = out->answer_len = 0;
    out->stopped = 0;
    out->stop_reason = NULL;
    out->stop_reason_len = 0;
    q->state = SEQ_RESUME;
    g->n_turn--;
    fifo_push(&g->resume, q);
}

void gen_end(gen_t *g, gen_seq *q) {
    g->n_turn--;
    finish(g, q);
}

size_t gen_turns_waiting(const gen_t *g) { return (size_t)g->n_turn; }
int gen_busy(const gen_t *g) { return g->n_active > 0 || g->waiting.head < g->waiting.tail; }

const gen_group *gen_peek(gen_t *g) {
    if (!g->done_head || (g->o.in_order && g->done_head->pub.group != g->next_out)) return NULL;
    return &g->done_head->pub;
}

void gen_pop(gen_t *g) {
    grp_t *q = g->done_head;
    if (!q) return;
    g->done_head = q->next;
    if (!g->done_head) g->done_tail = NULL;
    g->next_out = q->pub.group + 1;
    grp_free(q);
}

uint32_t *gen_stop_ids(const model_config *cfg, const tokenizer *tok, const chat_t *chat, const char *const *stop,
                       size_t n_stop, int ignore_eos, size_t *n) {
    uint32_t *ids = xmalloc(((size_t)cfg->n_eos + 3 + n_stop) * sizeof *ids);
    size_t k = 0;
    if (!ignore_eos) {
        for (int i = 0; i < cfg->n_eos; i++) ids[k++] = (uint32_t)cfg->eos_ids[i];
        if (!cfg->n_eos && cfg->eos_id >= 0) ids[k++] = (uint32_t)cfg->eos_id;
        if (chat && chat_eos(chat) >= 0) ids[k++] = (uint32_t)chat_eos(chat);
        if (chat && chat_end_of_turn(chat) >= 0) ids[k++] = (uint32_t)chat_end_of_turn(chat);
    }
    for (size_t i = 0; i < n_stop; i++) {
        int64_t id = tok_id(tok, stop[i]);
        if (id >= 0 && tok_is_special(tok, (uint32_t)id)) ids[k++] = (uint32_t)id;
    }
    *n = k;
    return ids;
}
