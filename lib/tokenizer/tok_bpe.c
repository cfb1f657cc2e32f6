// tok_bpe.c — the BPE model (see tok_bpe.h).
//
// A piece becomes one symbol per character (per byte under ByteLevel):
// its vocabulary token, or, missing, its bytes' <0xNN> tokens
// (byte_fallback, when all exist), or unk_token (consecutive ones fused with
// fuse_unk), or none (tokenizers drops it: SmolLM2's vocabulary has no
// token for 21 bytes, 0xF1 among them). With ignore_merges a piece that is itself a token is that
// token. Then merges apply by rank, lowest first and leftmost among equals;
// a candidate is stale when the pair now at its position no longer merges
// into the same id (tokenizers' test). n log n with a binary heap.
#include "tokenizer/tok_bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_json.h"
#include "tokenizer/tok_unicode.h"

typedef struct {
    uint64_t key;  // a << 32 | b; UINT64_MAX = empty (ids are < 2^24)
    uint32_t rank, new_id;
} pair_entry;

struct tok_bpe {
    const char *path;             // for messages; the tokenizer's copy
    tok_map vocab;
    size_t n_ids;                 // 1 + the largest id
    pair_entry *merge;            // (left, right) -> rank, merged id
    size_t merge_mask;
    int ignore_merges, byte_fallback, fuse_unk;
    char *unk;                    // unk_token, or NULL
    uint32_t unk_id;              // its id, TOK_NO_ID if not in the vocabulary
    uint32_t byte_id[256];        // ByteLevel: the token of each byte's alphabet character
    uint32_t fallback_id[256];    // byte_fallback: the id of "<0xNN>"
};

struct tok_bpe_symbol {
    uint32_t id;
    int32_t prev, next;  // -1: none
    uint8_t live;        // 0: merged into the symbol on its left
};

struct tok_bpe_cand {
    uint32_t rank, pos, new_id;
};

typedef struct tok_bpe_symbol symbol;
typedef struct tok_bpe_cand cand;

// ---- the byte alphabet -------------------------------------------------------------

uint32_t tok_byte_char(uint8_t b) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable) return b;
    // The non-printable bytes below b, counted: 0..0x20 (33), 0x7F..0xA0 (34), 0xAD (1).
    uint32_t before = b <= 0x20 ? b : b <= 0xA0 ? 33u + (b - 0x7Fu) : 67u;
    return 0x100 + before;
}

int tok_char_byte(uint32_t cp) {
    if (cp < 0x100) {
        int b = (int)cp;
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        return printable ? b : -1;
    }
    if (cp > 0x143) return -1;
    uint32_t k = cp - 0x100;
    return k <= 0x20 ? (int)k : k < 67 ? (int)(0x7F + k - 33) : 0xAD;
}

// ---- merges ----------------------------------------------------------------------------

static uint64_t hash_u64(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static const pair_entry *merge_get(const tok_bpe *m, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t h = hash_u64(key) & m->merge_mask;
    for (;;) {
        const pair_entry *e = &m->merge[h];
        if (e->key == key) return e;
        if (e->key == UINT64_MAX) return NULL;
        h = (h + 1) & m->merge_mask;
    }
}

// A repeated pair takes the later rank, as tokenizers' map of merges does.
static void merge_put(tok_bpe *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t new_id) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t h = hash_u64(key) & m->merge_mask;
    while (m->merge[h].key != UINT64_MAX && m->merge[h].key != key) h = (h + 1) & m->merge_mask;
    m->merge[h] = (pair_entry){key, rank, new_id};
}

// ---- encoding ----------------------------------------------------------------------------

static int cand_less(const cand *a, const cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(tok_bpe_work *w, cand c) {
    GROW(w->heap, w->heap_cap, w->heap_n + 1, 256);
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[up])) break;
        w->heap[i] = w->heap[up];
        i = up;
    }
    w->heap[i] = c;
}

static cand heap_pop(tok_bpe_work *w) {
    cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!cand_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void push_pair(const tok_bpe *m, tok_bpe_work *w, uint32_t pos) {
    const symbol *a = &w->sym[pos];
    if (a->next < 0) return;
    const pair_entry *e = merge_get(m, a->id, w->sym[a->next].id);
    if (e) heap_push(w, (cand){e->rank, pos, e->new_id});
}

static void merge_all(const tok_bpe *m, tok_bpe_work *w, size_t n) {
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(m, w, (uint32_t)i);
    while (w->heap_n) {
        cand c = heap_pop(w);
        symbol *a = &w->sym[c.pos];
        if (!a->live || a->next < 0) continue;
        symbol *b = &w->sym[a->next];
        const pair_entry *e = merge_get(m, a->id, b->id);
        if (!e || e->new_id != c.new_id) continue;
        a->id = c.new_id;
        a->next = b->next;
        b->live = 0;
        if (a->next >= 0) w->sym[a->next].prev = (int32_t)c.pos;
        if (a->prev >= 0) push_pair(m, w, (uint32_t)a->prev);
        push_pair(m, w, c.pos);
    }
}

static void add_symbol(tok_bpe_work *w, size_t *n, uint32_t id) {
    GROW(w->sym, w->sym_cap, *n + 1, 256);
    w->sym[*n] = (symbol){id, (int32_t)*n - 1, -1, 1};
    if (*n) w->sym[*n - 1].next = (int32_t)*n;
    ++*n;
}

void tok_ids_push(uint32_t **ids, size_t *n_ids, size_t *cap, uint32_t id) {
    GROW(*ids, *cap, *n_ids + 1, 64);
    (*ids)[(*n_ids)++] = id;
}

// Adds the symbols of one character u[0..len) (code point cp): its token;
// or, missing, the <0xNN> tokens of its bytes (byte_fallback, when all
// exist); or unk_token, fused with a pending one under fuse_unk; or nothing
// (tokenizers drops a character it cannot represent; w counts those, unit
// naming the first: cp, or the byte under ByteLevel). *unk: an unk_token
// not yet added (a byte-fallback character leaves it pending, as in
// tokenizers' merge_word).
static int add_char(const tok_bpe *m, tok_bpe_work *w, const uint8_t *u, size_t len, uint32_t cp, uint32_t unit,
                    int *unk, size_t *count, rl_err *err) {
    uint32_t id = tok_map_get(&m->vocab, u, len);
    if (id != TOK_NO_ID) {
        if (*unk) add_symbol(w, count, m->unk_id), *unk = 0;
        add_symbol(w, count, id);
        return 0;
    }
    size_t k = 0;
    if (m->byte_fallback)
        while (k < len && m->fallback_id[u[k]] != TOK_NO_ID) k++;
    if (m->byte_fallback && k == len) {
        for (k = 0; k < len; k++) add_symbol(w, count, m->fallback_id[u[k]]);
        return 0;
    }
    if (!m->unk) {   // dropped, as tokenizers does; counted so that callers can say so
        if (!w->dropped++) w->first_dropped = unit;
        return 0;
    }
    if (m->unk_id == TOK_NO_ID)
        return err_set(err, "%s: unk_token \"%.200s\" is not in the vocabulary (needed for U+%04X)", m->path,
                       m->unk, (unsigned)cp);
    if (*unk && !m->fuse_unk) add_symbol(w, count, m->unk_id);
    *unk = 1;
    return 0;
}

int tok_bpe_encode(const tok_bpe *m, tok_bpe_work *w, const uint8_t *s, size_t n, int bytes, uint32_t **ids,
                   size_t *n_ids, size_t *cap, rl_err *err) {
    if (n >= INT32_MAX - 1) return err_set(err, "a piece of %zu bytes is too long to encode", n);
    if (m->ignore_merges) {  // a piece that is a token is that token
        const uint8_t *key = s;
        size_t key_len = n;
        if (bytes) {
            w->word.len = 0;
            sbuf_reserve(&w->word, 2 * n);
            for (size_t i = 0; i < n; i++) w->word.len += tok_utf8_put(tok_byte_char(s[i]), w->word.data + w->word.len);
            key = w->word.data, key_len = w->word.len;
        }
        uint32_t id = tok_map_get(&m->vocab, key, key_len);
        if (id != TOK_NO_ID) {
            tok_ids_push(ids, n_ids, cap, id);
            return 0;
        }
    }
    size_t count = 0;
    int unk = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        uint8_t u[4];
        size_t len;
        if (bytes) {  // the byte's alphabet character
            uint32_t id = m->byte_id[s[i]];
            if (id != TOK_NO_ID && !unk) {
                add_symbol(w, &count, id);
                i++;
                continue;
            }
            cp = tok_byte_char(s[i]);
            len = tok_utf8_put(cp, u);
            if (add_char(m, w, u, len, cp, s[i++], &unk, &count, err)) return -1;
        } else {
            len = tok_utf8_next(s + i, n - i, &cp);
            if (add_char(m, w, s + i, len, cp, cp, &unk, &count, err)) return -1;
            i += len;
        }
    }
    if (unk) add_symbol(w, &count, m->unk_id);
    merge_all(m, w, count);
    for (size_t i = 0; i < count; i++)
        if (w->sym[i].live) tok_ids_push(ids, n_ids, cap, w->sym[i].id);
    return 0;
}

void tok_bpe_work_free(tok_bpe_work *w) {
    free(w->sym);
    free(w->heap);
    sbuf_free(&w->word);
    memset(w, 0, sizeof *w);
}

// ---- loading -------------------------------------------------------------------------------

const tok_map *tok_bpe_vocab(const tok_bpe *m) { return &m->vocab; }

size_t tok_bpe_n_ids(const tok_bpe *m) { return m->n_ids; }

const char *tok_bpe_token(const tok_bpe *m, uint32_t id, size_t *len) { return tok_map_key_of(&m->vocab, id, len); }

void tok_bpe_free(tok_bpe *m) {
    if (!m) return;
    tok_map_free(&m->vocab);
    free(m->merge);
    free(m->unk);
    free(m);
}

// What a file may claim, checked before the tables are built: real vocabularies
// hold up to a few hundred thousand tokens and as many merges.
#define TOK_MAX_VOCAB (1u << 22)
#define TOK_MAX_MERGES (1u << 22)

static int load_vocab(tok_bpe *m, const cJSON *vocab, rl_err *err) {
    const char *p = m->path;
    if (!cJSON_IsObject(vocab)) return err_set(err, "%s: model.vocab must be an object", p);
    size_t count = (size_t)cJSON_GetArraySize(vocab);
    if (count > TOK_MAX_VOCAB)
        return err_set(err, "%s: model.vocab has %zu tokens, more than the %u allowed", p, count, TOK_MAX_VOCAB);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        uint32_t id;
        if (tok_json_id(e, TOK_MAX_ID, &id))
            return err_set(err, "%s: model.vocab[\"%.200s\"] must be an integer id in [0, %u)", p, e->string,
                           TOK_MAX_ID);
        if (tok_map_put(&m->vocab, e->string, strlen(e->string), id) != TOK_NO_ID)
            return err_set(err, "%s: model.vocab has the token \"%.200s\" twice", p, e->string);
        if (id >= m->n_ids) m->n_ids = (size_t)id + 1;
    }
    // Two tokens with one id would make decoding ambiguous (tokenizers keeps either).
    uint32_t dup = tok_map_index(&m->vocab, m->n_ids);
    if (dup != TOK_NO_ID) {
        const tok_map_entry *x = &m->vocab.ent[dup];
        size_t len;
        const char *first = tok_map_key_of(&m->vocab, x->id, &len);
        return err_set(err, "%s: model.vocab gives id %u to both \"%.*s\" and \"%.*s\"", p, x->id,
                       (int)(len > 100 ? 100 : len), first, (int)(x->len > 100 ? 100 : x->len),
                       tok_map_key(&m->vocab, dup));
    }
    return 0;
}

// One merge's two tokens; a legacy "a b" string is split at its one space, or,
// when tokens contain spaces, at the only space where a, b and ab are all
// vocabulary tokens.
static int merge_parts(tok_bpe *m, const cJSON *x, size_t i, const char **a, size_t *na, const char **b,
                       size_t *nb, sbuf *ab, rl_err *err) {
    const char *p = m->path;
    if (cJSON_IsArray(x)) {
        const cJSON *l = cJSON_GetArrayItem(x, 0), *r = cJSON_GetArrayItem(x, 1);
        if (cJSON_GetArraySize(x) != 2 || !cJSON_IsString(l) || !cJSON_IsString(r))
            return err_set(err, "%s: model.merges[%zu] must be a pair of strings or an \"a b\" string", p, i);
        *a = l->valuestring, *na = strlen(l->valuestring);
        *b = r->valuestring, *nb = strlen(r->valuestring);
        return 0;
    }
    if (!cJSON_IsString(x))
        return err_set(err, "%s: model.merges[%zu] must be a pair of strings or an \"a b\" string", p, i);
    const char *s = x->valuestring;
    size_t n = strlen(s);
    const char *first = strchr(s, ' ');
    if (!first) return err_set(err, "%s: model.merges[%zu] \"%.200s\" has no space between two tokens", p, i, s);
    const char *cut = first;
    if (strchr(first + 1, ' ')) {  // tokens with spaces: find the one cut that makes sense
        cut = NULL;
        for (const char *c = first; c; c = strchr(c + 1, ' ')) {
            size_t la = (size_t)(c - s), lb = n - la - 1;
            if (tok_map_get(&m->vocab, s, la) == TOK_NO_ID || tok_map_get(&m->vocab, c + 1, lb) == TOK_NO_ID)
                continue;
            ab->len = 0;
            sbuf_put(ab, s, la);
            sbuf_put(ab, c + 1, lb);
            if (tok_map_get(&m->vocab, ab->data, ab->len) == TOK_NO_ID) continue;
            if (cut)
                return err_set(err, "%s: model.merges[%zu] \"%.200s\" is ambiguous (more than one split gives "
                                    "vocabulary tokens); write it as a pair", p, i, s);
            cut = c;
        }
        if (!cut)
            return err_set(err, "%s: model.merges[%zu] \"%.200s\" cannot be split into two vocabulary tokens "
                                "whose concatenation is one", p, i, s);
    }
    *a = s, *na = (size_t)(cut - s);
    *b = cut + 1, *nb = n - *na - 1;
    return 0;
}

static int load_merges(tok_bpe *m, const cJSON *merges, rl_err *err) {
    const char *p = m->path;
    if (!cJSON_IsArray(merges)) return err_set(err, "%s: model.merges must be an array", p);
    size_t count = (size_t)cJSON_GetArraySize(merges), slots = 1024, i = 0;
    if (count > TOK_MAX_MERGES)
        return err_set(err, "%s: model.merges has %zu merges, more than the %u allowed", p, count, TOK_MAX_MERGES);
    while (slots < count * 2) slots *= 2;
    m->merge = xmalloc(slots * sizeof *m->merge);
    for (size_t k = 0; k < slots; k++) m->merge[k].key = UINT64_MAX;
    m->merge_mask = slots - 1;
    sbuf ab = {0};
    const cJSON *x;
    int rc = 0;
    cJSON_ArrayForEach(x, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((rc = merge_parts(m, x, i, &a, &na, &b, &nb, &ab, err))) break;
        uint32_t ia = tok_map_get(&m->vocab, a, na), ib = tok_map_get(&m->vocab, b, nb);
        ab.len = 0;
        sbuf_put(&ab, a, na);
        sbuf_put(&ab, b, nb);
        uint32_t iab = tok_map_get(&m->vocab, ab.data, ab.len);
        const char *missing = ia == TOK_NO_ID ? a : ib == TOK_NO_ID ? b : iab == TOK_NO_ID ? (const char *)ab.data : NULL;
        if (missing) {
            int len = (int)(ia == TOK_NO_ID ? na : ib == TOK_NO_ID ? nb : ab.len);
            rc = err_set(err, "%s: model.merges[%zu]: \"%.*s\" is not in model.vocab", p, i, len > 200 ? 200 : len,
                         missing);
            break;
        }
        merge_put(m, ia, ib, (uint32_t)i, iab);
        i++;
    }
    sbuf_free(&ab);
    return rc;
}

static int load_options(tok_bpe *m, const cJSON *model, rl_err *err) {
    const char *p = m->path;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!tok_json_absent(x) && !(cJSON_IsNumber(x) && x->valuedouble == 0))
        return err_set(err, "%s: model.dropout must be null or 0 (BPE dropout is not supported)", p);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        x = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (!tok_json_absent(x) && !(cJSON_IsString(x) && !x->valuestring[0]))
            return err_set(err, "%s: model.%s must be null (it is not supported)", p, affixes[i]);
    }
    if (tok_json_bool(p, model, "model", "byte_fallback", 0, &m->byte_fallback, err) ||
        tok_json_bool(p, model, "model", "fuse_unk", 0, &m->fuse_unk, err) ||
        tok_json_bool(p, model, "model", "ignore_merges", 0, &m->ignore_merges, err))
        return -1;
    x = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (!tok_json_absent(x) && !cJSON_IsString(x)) return err_set(err, "%s: model.unk_token must be a string or null", p);
    if (cJSON_IsString(x)) m->unk = xstrdup(x->valuestring);
    return 0;
}

tok_bpe *tok_bpe_load(const cJSON *model, const char *path, rl_err *err) {
    if (!cJSON_IsObject(model)) return err_set(err, "%s: model must be an object", path), NULL;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (tok_json_absent(ty)) {  // older files: only BPE has merges
        if (!merges)
            return err_set(err, "%s: model.type is missing and there are no merges: not a BPE model", path), NULL;
    } else if (!cJSON_IsString(ty)) {
        return err_set(err, "%s: model.type must be a string", path), NULL;
    } else if (strcmp(ty->valuestring, "BPE")) {
        return err_set(err, "%s: model type %.100s is not supported (only BPE)", path, ty->valuestring), NULL;
    }
    tok_bpe *m = xmalloc(sizeof *m);
    memset(m, 0, sizeof *m);
    m->path = path;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (load_options(m, model, err)) goto fail;
    if (!vocab) {
        err_set(err, "%s: model.vocab is missing", path);
        goto fail;
    }
    if (load_vocab(m, vocab, err)) goto fail;
    if (!merges) {
        err_set(err, "%s: model.merges is missing", path);
        goto fail;
    }
    if (load_merges(m, merges, err)) goto fail;
    m->unk_id = m->unk ? tok_map_get(&m->vocab, m->unk, strlen(m->unk)) : TOK_NO_ID;
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        m->byte_id[b] = tok_map_get(&m->vocab, u, tok_utf8_put(tok_byte_char((uint8_t)b), u));
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->fallback_id[b] = tok_map_get(&m->vocab, name, 6);
    }
    return m;
fail:
    tok_bpe_free(m);
    return NULL;
}
