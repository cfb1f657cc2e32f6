// tokenizer.c — Hugging Face tokenizer.json (BPE model) loading, encoding and
// decoding, matching the `tokenizers` library (the reference the tests compare
// against) on every file it accepts:
//
//   encode: text -> added tokens split out (two passes, as HF: first the tokens
//           with normalized=false, then those with normalized=true in the pieces
//           between; leftmost match, longest first) -> per remaining piece:
//           ByteLevel pre-tokenizer (optional leading space, bytes -> GPT-2
//           alphabet) or, with no pre-tokenizer, the piece's characters ->
//           BPE by merge rank (lowest rank first, then leftmost; a stale
//           candidate is recognised the way HF does, by its result id).
//   decode: ids -> token strings (added tokens: their content; special ones
//           dropped on request) -> ByteLevel decoder (each token whose every
//           character is in the alphabet becomes those bytes, any other token
//           its own UTF-8) or, with no decoder, the strings joined by " "
//           (HF's behaviour, kept so decoded text agrees with it).
//
// Deliberate differences, all refusals rather than different ids: a byte (or,
// without ByteLevel, a character) with no token is an error where HF would emit
// unk_token or silently drop it; an id outside the vocabulary is an error where
// HF skips it; an added token whose id disagrees with the id HF would assign
// it is an error where HF warns and re-numbers. decode returns the bytes; HF
// returns String::from_utf8_lossy of them (invalid sequences become U+FFFD).
// post_processor, truncation and padding are ignored: rlpipe never adds
// bos/eos implicitly (callers do), as transformers' fast tokenizers ignore the
// file's truncation/padding and apply their call arguments.
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_ID UINT32_MAX
// Larger ids are refused: the per-id tables would be absurdly large, and no
// real vocabulary comes near.
#define MAX_ID (1u << 24)
#define TOK_MAX_FILE ((size_t)1 << 30)   // the largest tokenizer.json read (real ones are a few MB)

// ---- the GPT-2 byte alphabet -------------------------------------------------
// Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the
// other 68 bytes, in increasing order, become U+0100..U+0143.

#define ALPHABET_CPS 0x144

static void byte_alphabet(uint32_t byte_cp[256], int cp_byte[ALPHABET_CPS]) {
    uint32_t n = 0;
    for (int cp = 0; cp < ALPHABET_CPS; cp++) cp_byte[cp] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        byte_cp[b] = printable ? (uint32_t)b : 256 + n++;
        cp_byte[byte_cp[b]] = b;
    }
}

// UTF-8 of cp (< 0x800 here), returns its length.
static size_t put_cp2(uint8_t out[2], uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    out[0] = (uint8_t)(0xC0 | (cp >> 6));
    out[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
}

// Decodes one well-formed UTF-8 character at p[0..n); returns its length, or 0
// when the bytes there are not one.
static size_t utf8_char(const uint8_t *p, size_t n, uint32_t *cp) {
    uint8_t c = p[0];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n || !utf8_valid(p, len)) return 0;
    static const uint8_t lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t v = c & lead_mask[len];
    for (size_t i = 1; i < len; i++) v = (v << 6) | (p[i] & 0x3F);
    *cp = v;
    return len;
}

// ---- hash tables ---------------------------------------------------------------

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then a final mix for the low bits
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

static uint64_t hash_u64(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// String -> id. Keys live in the tokenizer's string pool (offsets, since the
// pool moves as it grows); slots hold entry index + 1, 0 = empty.
typedef struct {
    uint32_t off, len, id;
} str_entry;

typedef struct {
    str_entry *ent;
    size_t n, cap;
    uint32_t *slot;
    size_t mask;  // slots - 1; slots is a power of two, at most half full
} strmap;

typedef struct {
    uint64_t key;  // a << 32 | b; UINT64_MAX = empty (ids are < 2^24)
    uint32_t rank, new_id;
} pair_entry;

typedef struct {
    pair_entry *slot;
    size_t n, mask;
} pairmap;

// ---- the tokenizer -----------------------------------------------------------------

typedef struct {
    uint32_t off, len, id;  // content in the pool
} added_token;

// Added tokens of one pass, sorted by first byte and then longest first, so
// that the first candidate that matches at a position is the longest.
typedef struct {
    added_token *tok;
    size_t n;
    uint32_t first[257];  // tokens starting with byte c: tok[first[c] .. first[c + 1])
} matcher;

enum { DEC_JOIN, DEC_BYTELEVEL };

struct tokenizer {
    char *path;
    sbuf pool;                    // every string: tokens, added contents, decoded bytes
    strmap vocab;                 // the model's vocabulary
    strmap added;                 // added tokens' contents
    pairmap merges;               // (left id, right id) -> rank, merged id
    matcher pass[2];              // [0]: normalized=false, [1]: normalized=true
    size_t n_ids;                 // 1 + the largest id
    uint32_t *tok_off, *tok_len;  // per id: its string (tok_off NO_ID: no token)
    uint32_t *dec_off, *dec_len;  // per id: what the decoder turns it into
    uint8_t *special;             // per id: 1 if a special added token
    int byte_level, add_prefix_space, ignore_merges, decoder;
    uint32_t byte_id[256];        // ByteLevel: id of each byte's one-character token
    uint32_t byte_cp[256];
};

static uint32_t pool_add(tokenizer *t, const void *p, size_t n) {
    uint32_t off = (uint32_t)t->pool.len;
    sbuf_put(&t->pool, p, n);
    return off;
}

static const char *pool_at(const tokenizer *t, uint32_t off) {
    return (const char *)t->pool.data + off;
}

static void strmap_grow(strmap *m, const tokenizer *t) {
    size_t slots = m->mask ? (m->mask + 1) * 2 : 1024;
    free(m->slot);
    m->slot = xmalloc(slots * sizeof *m->slot);
    memset(m->slot, 0, slots * sizeof *m->slot);
    m->mask = slots - 1;
    for (size_t i = 0; i < m->n; i++) {
        size_t h = hash_bytes(pool_at(t, m->ent[i].off), m->ent[i].len) & m->mask;
        while (m->slot[h]) h = (h + 1) & m->mask;
        m->slot[h] = (uint32_t)i + 1;
    }
}

// Slot where s is, or where it would go.
static size_t strmap_slot(const strmap *m, const tokenizer *t, const char *s, size_t n) {
    size_t h = hash_bytes(s, n) & m->mask;
    for (;;) {
        uint32_t e = m->slot[h];
        if (!e) return h;
        const str_entry *x = &m->ent[e - 1];
        if (x->len == n && !memcmp(pool_at(t, x->off), s, n)) return h;
        h = (h + 1) & m->mask;
    }
}

static uint32_t strmap_get(const strmap *m, const tokenizer *t, const char *s, size_t n) {
    if (!m->mask) return NO_ID;
    uint32_t e = m->slot[strmap_slot(m, t, s, n)];
    return e ? m->ent[e - 1].id : NO_ID;
}

// Adds s (already in the pool at off) -> id; returns the id it already had, or NO_ID.
static uint32_t strmap_put(strmap *m, tokenizer *t, uint32_t off, size_t n, uint32_t id) {
    if ((m->n + 1) * 2 > m->mask + 1) strmap_grow(m, t);
    size_t h = strmap_slot(m, t, pool_at(t, off), n);
    if (m->slot[h]) return m->ent[m->slot[h] - 1].id;
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 1024;
        m->ent = xrealloc(m->ent, m->cap * sizeof *m->ent);
    }
    m->ent[m->n] = (str_entry){off, (uint32_t)n, id};
    m->slot[h] = (uint32_t)++m->n;
    return NO_ID;
}

static void strmap_free(strmap *m) {
    free(m->ent);
    free(m->slot);
}

static void pairmap_init(pairmap *m, size_t expected) {
    size_t slots = 1024;
    while (slots < expected * 2) slots *= 2;
    m->slot = xmalloc(slots * sizeof *m->slot);
    for (size_t i = 0; i < slots; i++) m->slot[i].key = UINT64_MAX;
    m->mask = slots - 1;
    m->n = 0;
}

static const pair_entry *pairmap_get(const pairmap *m, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t h = hash_u64(key) & m->mask;
    for (;;) {
        const pair_entry *e = &m->slot[h];
        if (e->key == key) return e;
        if (e->key == UINT64_MAX) return NULL;
        h = (h + 1) & m->mask;
    }
}

// A repeated pair takes the later rank, as HF's map of merges does.
static void pairmap_put(pairmap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t new_id) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t h = hash_u64(key) & m->mask;
    while (m->slot[h].key != UINT64_MAX && m->slot[h].key != key) h = (h + 1) & m->mask;
    if (m->slot[h].key == UINT64_MAX) m->n++;
    m->slot[h] = (pair_entry){key, rank, new_id};
}

void tok_free(tokenizer *t) {
    if (!t) return;
    free(t->path);
    sbuf_free(&t->pool);
    strmap_free(&t->vocab);
    strmap_free(&t->added);
    free(t->merges.slot);
    for (int i = 0; i < 2; i++) free(t->pass[i].tok);
    free(t->tok_off);
    free(t->tok_len);
    free(t->dec_off);
    free(t->dec_len);
    free(t->special);
    free(t);
}

size_t tok_vocab_size(const tokenizer *t) { return t->n_ids; }

int64_t tok_id(const tokenizer *t, const char *token) {
    size_t n = strlen(token);
    uint32_t id = strmap_get(&t->added, t, token, n);
    if (id == NO_ID) id = strmap_get(&t->vocab, t, token, n);
    return id == NO_ID ? -1 : (int64_t)id;
}

const char *tok_token(const tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->n_ids || t->tok_off[id] == NO_ID) return NULL;
    *len = t->tok_len[id];
    return pool_at(t, t->tok_off[id]);
}

int tok_is_special(const tokenizer *t, uint32_t id) {
    return id < t->n_ids && t->special[id];
}

// ---- loading -----------------------------------------------------------------------

// A member that is absent or JSON null.
static int is_absent(const cJSON *x) { return !x || cJSON_IsNull(x); }

// The string "type" of a component object, or NULL.
static const char *type_of(const cJSON *x) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(x, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

// An optional boolean member: absent/null -> dflt; other types are an error.
static int get_bool(const char *path, const cJSON *obj, const char *where, const char *key,
                    int dflt, int *out, rl_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (is_absent(x)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(x)) return err_set(err, "%s: %s%s must be true or false", path, where, key);
    *out = cJSON_IsTrue(x);
    return 0;
}

// An id: a JSON number that is a non-negative integer below MAX_ID.
static int get_id(const cJSON *x, uint32_t *id) {
    if (!cJSON_IsNumber(x)) return -1;
    double v = x->valuedouble;
    if (!(v >= 0 && v < MAX_ID) || v != (double)(uint32_t)v) return -1;
    *id = (uint32_t)v;
    return 0;
}

static int check_pre_tokenizer_one(tokenizer *t, const cJSON *x, const char *where, int *n_byte_level,
                                   rl_err *err) {
    const char *p = t->path;
    if (!cJSON_IsObject(x)) return err_set(err, "%s: %s must be an object or null", p, where);
    const char *ty = type_of(x);
    if (!ty) return err_set(err, "%s: %s.type must be a string", p, where);
    if (!strcmp(ty, "ByteLevel")) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(x, "use_regex");
        int use_regex = 1;  // HF's default when the key is absent
        if (!is_absent(ur)) {
            if (!cJSON_IsBool(ur)) return err_set(err, "%s: %s.use_regex must be true or false", p, where);
            use_regex = cJSON_IsTrue(ur);
        }
        if (use_regex)
            return err_set(err,
                           "%s: pre_tokenizer ByteLevel with use_regex true (regex pre-tokenization) "
                           "is not supported yet", p);
        const cJSON *aps = cJSON_GetObjectItemCaseSensitive(x, "add_prefix_space");
        if (!cJSON_IsBool(aps))  // HF requires it too
            return err_set(err, "%s: %s.add_prefix_space must be true or false", p, where);
        if (++*n_byte_level > 1)
            return err_set(err, "%s: pre_tokenizer: more than one ByteLevel is not supported", p);
        t->byte_level = 1;
        t->add_prefix_space = cJSON_IsTrue(aps);
        return 0;
    }
    if (!strcmp(ty, "Split"))
        return err_set(err, "%s: pre_tokenizer Split (regex pre-tokenization) is not supported yet", p);
    return err_set(err, "%s: pre_tokenizer %s is not supported yet (only ByteLevel with use_regex false)",
                   p, ty);
}

static int load_pre_tokenizer(tokenizer *t, const cJSON *root, rl_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (is_absent(x)) return 0;
    int n_byte_level = 0;
    if (cJSON_IsObject(x) && type_of(x) && !strcmp(type_of(x), "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(x, "pretokenizers");
        if (!cJSON_IsArray(list))
            return err_set(err, "%s: pre_tokenizer.pretokenizers must be an array", t->path);
        int i = 0;
        const cJSON *el;
        cJSON_ArrayForEach(el, list) {
            char where[64];
            snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%d]", i++);
            if (check_pre_tokenizer_one(t, el, where, &n_byte_level, err)) return -1;
        }
        return 0;
    }
    return check_pre_tokenizer_one(t, x, "pre_tokenizer", &n_byte_level, err);
}

static int load_normalizer(const tokenizer *t, const cJSON *root, rl_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (is_absent(x)) return 0;
    if (!cJSON_IsObject(x)) return err_set(err, "%s: normalizer must be an object or null", t->path);
    const char *ty = type_of(x);
    if (!ty) return err_set(err, "%s: normalizer.type must be a string", t->path);
    if (!strcmp(ty, "Sequence")) {  // an empty sequence normalises nothing
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(x, "normalizers");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 0) return 0;
        const cJSON *first = cJSON_IsArray(list) ? cJSON_GetArrayItem(list, 0) : NULL;
        if (first && type_of(first))
            return err_set(err, "%s: normalizer %s (in a Sequence) is not supported yet", t->path,
                           type_of(first));
    }
    return err_set(err, "%s: normalizer %s is not supported yet (only null)", t->path, ty);
}

static int load_decoder(tokenizer *t, const cJSON *root, rl_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    t->decoder = DEC_JOIN;
    if (is_absent(x)) return 0;
    if (!cJSON_IsObject(x)) return err_set(err, "%s: decoder must be an object or null", t->path);
    const char *ty = type_of(x);
    if (!ty) return err_set(err, "%s: decoder.type must be a string", t->path);
    if (strcmp(ty, "ByteLevel"))
        return err_set(err, "%s: decoder %s is not supported yet (only ByteLevel or null)", t->path, ty);
    t->decoder = DEC_BYTELEVEL;
    return 0;
}

// Post-processors only add special tokens (which rlpipe's callers add
// themselves) and adjust offsets (which rlpipe does not report): known kinds
// are accepted and ignored.
static int check_post_processor(const tokenizer *t, const cJSON *x, const char *where, rl_err *err) {
    if (is_absent(x)) return 0;
    if (!cJSON_IsObject(x)) return err_set(err, "%s: %s must be an object or null", t->path, where);
    const char *ty = type_of(x);
    if (!ty) return err_set(err, "%s: %s.type must be a string", t->path, where);
    static const char *const known[] = {"ByteLevel", "TemplateProcessing", "RobertaProcessing",
                                        "BertProcessing"};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(ty, known[i])) return 0;
    if (!strcmp(ty, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(x, "processors");
        if (!cJSON_IsArray(list)) return err_set(err, "%s: %s.processors must be an array", t->path, where);
        const cJSON *el;
        cJSON_ArrayForEach(el, list) {
            if (is_absent(el)) return err_set(err, "%s: %s.processors has a null entry", t->path, where);
            if (check_post_processor(t, el, where, err)) return -1;
        }
        return 0;
    }
    return err_set(err, "%s: post_processor %s is not supported yet", t->path, ty);
}

static int load_vocab(tokenizer *t, const cJSON *vocab, rl_err *err) {
    const char *p = t->path;
    if (!cJSON_IsObject(vocab)) return err_set(err, "%s: model.vocab must be an object", p);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        uint32_t id;
        if (get_id(e, &id))
            return err_set(err, "%s: model.vocab[\"%.200s\"] must be an integer id in [0, %u)", p,
                           e->string, MAX_ID);
        size_t n = strlen(e->string);
        uint32_t off = pool_add(t, e->string, n);
        if (strmap_put(&t->vocab, t, off, n, id) != NO_ID)
            return err_set(err, "%s: model.vocab has the token \"%.200s\" twice", p, e->string);
        if (id >= t->n_ids) t->n_ids = (size_t)id + 1;
    }
    // Two tokens with one id would make decoding ambiguous (HF keeps either).
    uint32_t *owner = xmalloc(t->n_ids * sizeof *owner);
    for (size_t i = 0; i < t->n_ids; i++) owner[i] = NO_ID;
    int rc = 0;
    for (size_t i = 0; i < t->vocab.n && !rc; i++) {
        const str_entry *x = &t->vocab.ent[i];
        if (owner[x->id] != NO_ID) {
            const str_entry *y = &t->vocab.ent[owner[x->id]];
            rc = err_set(err, "%s: model.vocab gives id %u to both \"%.*s\" and \"%.*s\"", p, x->id,
                         (int)(y->len > 100 ? 100 : y->len), pool_at(t, y->off), (int)(x->len > 100 ? 100 : x->len),
                         pool_at(t, x->off));
        }
        owner[x->id] = (uint32_t)i;
    }
    free(owner);
    return rc;
}

// One merge's two tokens; a legacy "a b" string is split at its one space, or,
// when tokens contain spaces, at the only space where a, b and ab are all
// vocabulary tokens (as HF resolves it).
static int merge_parts(tokenizer *t, const cJSON *m, size_t i, const char **a, size_t *na,
                       const char **b, size_t *nb, rl_err *err) {
    const char *p = t->path;
    if (cJSON_IsArray(m)) {
        const cJSON *x = cJSON_GetArrayItem(m, 0), *y = cJSON_GetArrayItem(m, 1);
        if (cJSON_GetArraySize(m) != 2 || !cJSON_IsString(x) || !cJSON_IsString(y))
            return err_set(err, "%s: model.merges[%zu] must be a pair of strings or an \"a b\" string", p, i);
        *a = x->valuestring, *na = strlen(x->valuestring);
        *b = y->valuestring, *nb = strlen(y->valuestring);
        return 0;
    }
    if (!cJSON_IsString(m))
        return err_set(err, "%s: model.merges[%zu] must be a pair of strings or an \"a b\" string", p, i);
    const char *s = m->valuestring;
    size_t n = strlen(s);
    const char *first = strchr(s, ' ');
    if (!first) return err_set(err, "%s: model.merges[%zu] \"%.200s\" has no space between two tokens", p, i, s);
    const char *cut = first;
    if (strchr(first + 1, ' ')) {  // tokens with spaces: find the one cut that makes sense
        cut = NULL;
        sbuf ab = {0};
        for (const char *c = first; c; c = strchr(c + 1, ' ')) {
            size_t la = (size_t)(c - s), lb = n - la - 1;
            if (strmap_get(&t->vocab, t, s, la) == NO_ID || strmap_get(&t->vocab, t, c + 1, lb) == NO_ID)
                continue;
            ab.len = 0;
            sbuf_put(&ab, s, la);
            sbuf_put(&ab, c + 1, lb);
            if (strmap_get(&t->vocab, t, (const char *)ab.data, ab.len) == NO_ID) continue;
            if (cut) {
                sbuf_free(&ab);
                return err_set(err, "%s: model.merges[%zu] \"%.200s\" is ambiguous (more than one split "
                                    "gives vocabulary tokens); write it as a pair", p, i, s);
            }
            cut = c;
        }
        sbuf_free(&ab);
        if (!cut)
            return err_set(err, "%s: model.merges[%zu] \"%.200s\" cannot be split into two vocabulary "
                                "tokens whose concatenation is one", p, i, s);
    }
    *a = s, *na = (size_t)(cut - s);
    *b = cut + 1, *nb = n - *na - 1;
    return 0;
}

static int load_merges(tokenizer *t, const cJSON *merges, rl_err *err) {
    const char *p = t->path;
    if (!cJSON_IsArray(merges)) return err_set(err, "%s: model.merges must be an array", p);
    size_t count = (size_t)cJSON_GetArraySize(merges), i = 0;
    pairmap_init(&t->merges, count);
    sbuf ab = {0};
    const cJSON *m;
    int rc = 0;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((rc = merge_parts(t, m, i, &a, &na, &b, &nb, err))) break;
        uint32_t ia = strmap_get(&t->vocab, t, a, na), ib = strmap_get(&t->vocab, t, b, nb);
        ab.len = 0;
        sbuf_put(&ab, a, na);
        sbuf_put(&ab, b, nb);
        uint32_t iab = strmap_get(&t->vocab, t, (const char *)ab.data, ab.len);
        const char *missing = ia == NO_ID ? a : ib == NO_ID ? b : iab == NO_ID ? (const char *)ab.data : NULL;
        if (missing) {
            int len = (int)(ia == NO_ID ? na : ib == NO_ID ? nb : ab.len);
            rc = err_set(err, "%s: model.merges[%zu]: \"%.*s\" is not in model.vocab", p, i,
                         len > 200 ? 200 : len, missing);
            break;
        }
        pairmap_put(&t->merges, ia, ib, (uint32_t)i, iab);
        i++;
    }
    sbuf_free(&ab);
    return rc;
}

static int load_model(tokenizer *t, const cJSON *root, rl_err *err) {
    const char *p = t->path;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return err_set(err, "%s: model must be an object", p);
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (is_absent(ty)) {  // older files: only BPE has merges
        if (!merges) return err_set(err, "%s: model.type is missing and there are no merges: not a BPE model", p);
    } else if (!cJSON_IsString(ty)) {
        return err_set(err, "%s: model.type must be a string", p);
    } else if (strcmp(ty->valuestring, "BPE")) {
        return err_set(err, "%s: model type %.100s is not supported (only BPE)", p, ty->valuestring);
    }
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!is_absent(x) && !(cJSON_IsNumber(x) && x->valuedouble == 0))
        return err_set(err, "%s: model.dropout must be null or 0 (BPE dropout is not supported)", p);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        x = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (!is_absent(x) && !(cJSON_IsString(x) && !x->valuestring[0]))
            return err_set(err, "%s: model.%s must be null (it is not supported)", p, affixes[i]);
    }
    int flag;
    if (get_bool(p, model, "model.", "byte_fallback", 0, &flag, err)) return -1;
    if (flag) return err_set(err, "%s: model.byte_fallback true is not supported", p);
    if (get_bool(p, model, "model.", "ignore_merges", 0, &t->ignore_merges, err)) return -1;
    x = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (!is_absent(x) && !cJSON_IsString(x)) return err_set(err, "%s: model.unk_token must be a string or null", p);
    x = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!x) return err_set(err, "%s: model.vocab is missing", p);
    if (load_vocab(t, x, err)) return -1;
    if (!merges) return err_set(err, "%s: model.merges is missing", p);
    return load_merges(t, merges, err);
}

static int cmp_added(const void *pa, const void *pb, void *pool) {
    const added_token *a = pa, *b = pb;
    const uint8_t *d = pool;
    if (d[a->off] != d[b->off]) return d[a->off] < d[b->off] ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return memcmp(d + a->off, d + b->off, a->len);
}

static void matcher_build(matcher *m, const sbuf *pool) {
    if (m->n) qsort_r(m->tok, m->n, sizeof *m->tok, cmp_added, pool->data);
    size_t k = 0;
    for (int c = 0; c < 256; c++) {
        m->first[c] = (uint32_t)k;
        while (k < m->n && pool->data[m->tok[k].off] == c) k++;
    }
    m->first[256] = (uint32_t)k;
}

// Added tokens: ids checked against the ids HF assigns on loading (a content in
// the vocabulary keeps its id; a new one gets the next id past the vocabulary
// and the added tokens so far).
static int load_added(tokenizer *t, const cJSON *root, uint32_t **special_ids, size_t *n_special,
                      rl_err *err) {
    const char *p = t->path;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (is_absent(list)) return 0;
    if (!cJSON_IsArray(list)) return err_set(err, "%s: added_tokens must be an array", p);
    size_t model_size = t->vocab.n, i = 0;
    int64_t max_added = -1;
    const cJSON *a;
    cJSON_ArrayForEach(a, list) {
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu].", i);
        if (!cJSON_IsObject(a)) return err_set(err, "%s: added_tokens[%zu] must be an object", p, i);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsString(content)) return err_set(err, "%s: %scontent must be a string", p, where);
        uint32_t id;
        if (get_id(cJSON_GetObjectItemCaseSensitive(a, "id"), &id))
            return err_set(err, "%s: %sid must be an integer id in [0, %u)", p, where, MAX_ID);
        int special, normalized, single_word, lstrip, rstrip;
        if (get_bool(p, a, where, "special", 0, &special, err) ||
            get_bool(p, a, where, "normalized", !special, &normalized, err) ||
            get_bool(p, a, where, "single_word", 0, &single_word, err) ||
            get_bool(p, a, where, "lstrip", 0, &lstrip, err) ||
            get_bool(p, a, where, "rstrip", 0, &rstrip, err))
            return -1;
        const char *flag = single_word ? "single_word" : lstrip ? "lstrip" : rstrip ? "rstrip" : NULL;
        if (flag)
            return err_set(err, "%s: added token \"%.200s\": %s true is not supported yet", p,
                           content->valuestring, flag);
        size_t n = strlen(content->valuestring);
        i++;
        if (!n) continue;  // HF ignores empty added tokens
        uint32_t off = pool_add(t, content->valuestring, n);
        uint32_t expect = strmap_get(&t->vocab, t, content->valuestring, n);
        if (expect == NO_ID)
            expect = max_added < 0 ? (uint32_t)model_size
                     : ((uint64_t)max_added >= model_size || !model_size) ? (uint32_t)max_added + 1
                                                                          : (uint32_t)model_size;
        if (id != expect)
            return err_set(err, "%s: added token \"%.200s\" has id %u, but Hugging Face tokenizers "
                                "would give it id %u", p, content->valuestring, id, expect);
        if (strmap_put(&t->added, t, off, n, id) != NO_ID)
            return err_set(err, "%s: added token \"%.200s\" appears twice", p, content->valuestring);
        if ((int64_t)id > max_added) max_added = id;
        if (id >= t->n_ids) t->n_ids = (size_t)id + 1;
        matcher *m = &t->pass[normalized ? 1 : 0];
        m->tok = xrealloc(m->tok, (m->n + 1) * sizeof *m->tok);
        m->tok[m->n++] = (added_token){off, (uint32_t)n, id};
        if (special) {
            *special_ids = xrealloc(*special_ids, (*n_special + 1) * sizeof **special_ids);
            (*special_ids)[(*n_special)++] = id;
        }
    }
    return 0;
}

// Per-id tables: each id's string (added tokens override the vocabulary, as
// HF looks them up first) and its decoded bytes.
static void build_id_tables(tokenizer *t, const uint32_t *special_ids, size_t n_special) {
    size_t n = t->n_ids;
    t->tok_off = xmalloc(n * sizeof(uint32_t));
    t->tok_len = xmalloc(n * sizeof(uint32_t));
    t->dec_off = xmalloc(n * sizeof(uint32_t));
    t->dec_len = xmalloc(n * sizeof(uint32_t));
    t->special = xmalloc(n);
    memset(t->special, 0, n);
    for (size_t i = 0; i < n; i++) t->tok_off[i] = NO_ID, t->tok_len[i] = 0;
    for (size_t i = 0; i < t->vocab.n; i++) {
        const str_entry *e = &t->vocab.ent[i];
        t->tok_off[e->id] = e->off, t->tok_len[e->id] = e->len;
    }
    for (size_t i = 0; i < t->added.n; i++) {
        const str_entry *e = &t->added.ent[i];
        t->tok_off[e->id] = e->off, t->tok_len[e->id] = e->len;
    }
    for (size_t i = 0; i < n_special; i++) t->special[special_ids[i]] = 1;
    int cp_byte[ALPHABET_CPS];
    uint32_t byte_cp[256];
    byte_alphabet(byte_cp, cp_byte);
    for (size_t id = 0; id < n; id++) {
        t->dec_off[id] = t->tok_off[id], t->dec_len[id] = t->tok_len[id];
        if (t->tok_off[id] == NO_ID || t->decoder != DEC_BYTELEVEL) continue;
        // ByteLevel: the token's bytes if every character is in the alphabet,
        // else its own UTF-8 unchanged.
        uint8_t tmp[256];
        size_t len = t->tok_len[id], out = 0, k = 0;
        uint8_t *bytes = len <= sizeof tmp ? tmp : xmalloc(len);
        while (k < len) {
            uint32_t cp;
            size_t step = utf8_char((const uint8_t *)pool_at(t, t->tok_off[id]) + k, len - k, &cp);
            if (!step || cp >= ALPHABET_CPS || cp_byte[cp] < 0) break;
            bytes[out++] = (uint8_t)cp_byte[cp];
            k += step;
        }
        if (k == len) {
            t->dec_off[id] = pool_add(t, bytes, out);
            t->dec_len[id] = (uint32_t)out;
        }
        if (bytes != tmp) free(bytes);
    }
}

static void build_byte_ids(tokenizer *t) {
    int cp_byte[ALPHABET_CPS];
    byte_alphabet(t->byte_cp, cp_byte);
    for (int b = 0; b < 256; b++) {
        uint8_t u[2];
        size_t n = put_cp2(u, t->byte_cp[b]);
        t->byte_id[b] = strmap_get(&t->vocab, t, (const char *)u, n);
    }
}

static int json_error(const char *path, const sbuf *text, const char *at, rl_err *err) {
    size_t line = 1, col = 1;
    const char *s = (const char *)text->data, *end = s + text->len;
    if (!at || at < s || at > end) at = end;
    for (const char *c = s; c < at; c++) {
        if (*c == '\n') line++, col = 1;
        else col++;
    }
    return err_set(err, "%s: not valid JSON (line %zu, column %zu)", path, line, col);
}

tokenizer *tok_load(const char *path, rl_err *err) {
    sbuf text = {0};
    if (read_whole_file(path, TOK_MAX_FILE, &text, err)) {
        sbuf_free(&text);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)text.data, text.len, &end, 0);
    if (!root) {
        json_error(path, &text, end ? end : cJSON_GetErrorPtr(), err);
        sbuf_free(&text);
        return NULL;
    }
    tokenizer *t = xmalloc(sizeof *t);
    memset(t, 0, sizeof *t);
    t->path = xstrdup(path);
    uint32_t *special_ids = NULL;
    size_t n_special = 0;
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        err_set(err, "%s: the top level must be a JSON object", path);
        goto done;
    }
    if (load_model(t, root, err) || load_normalizer(t, root, err) || load_pre_tokenizer(t, root, err) ||
        load_decoder(t, root, err) ||
        check_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), "post_processor", err) ||
        load_added(t, root, &special_ids, &n_special, err))
        goto done;
    if (t->pool.len >= NO_ID / 2) {  // offsets are 32-bit, and decoded bytes go in too
        err_set(err, "%s: the vocabulary's strings are too large (%zu bytes)", path, t->pool.len);
        goto done;
    }
    for (int i = 0; i < 2; i++) matcher_build(&t->pass[i], &t->pool);
    build_id_tables(t, special_ids, n_special);
    if (t->byte_level) build_byte_ids(t);
    rc = 0;
done:
    free(special_ids);
    cJSON_Delete(root);
    sbuf_free(&text);
    if (rc) {
        tok_free(t);
        return NULL;
    }
    return t;
}

// ---- encoding --------------------------------------------------------------------------

typedef struct {
    uint32_t id, len;   // len 0: merged into the symbol on its left
    int32_t prev, next;  // -1: none
} symbol;

typedef struct {
    uint32_t rank, pos, new_id;
} merge_cand;

// Per-call working memory (the tokenizer itself stays read-only).
typedef struct {
    symbol *sym;
    size_t sym_cap;
    merge_cand *heap;
    size_t heap_n, heap_cap;
    sbuf word;  // ignore_merges: the piece as one token string
} scratch;

static int cand_less(const merge_cand *a, const merge_cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(scratch *s, merge_cand c) {
    if (s->heap_n == s->heap_cap) {
        s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 256;
        s->heap = xrealloc(s->heap, s->heap_cap * sizeof *s->heap);
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[up])) break;
        s->heap[i] = s->heap[up];
        i = up;
    }
    s->heap[i] = c;
}

static merge_cand heap_pop(scratch *s) {
    merge_cand top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void push_pair(const tokenizer *t, scratch *s, uint32_t pos) {
    const symbol *a = &s->sym[pos];
    if (a->next < 0) return;
    const pair_entry *e = pairmap_get(&t->merges, a->id, s->sym[a->next].id);
    if (e) heap_push(s, (merge_cand){e->rank, pos, e->new_id});
}

// BPE on symbols s->sym[0..n): repeatedly merge the candidate pair of lowest
// rank (leftmost among equals). A candidate is stale when the pair now at its
// position no longer merges into the same id (HF's test). n log n overall.
static void bpe_merge(const tokenizer *t, scratch *s, size_t n) {
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, s, (uint32_t)i);
    while (s->heap_n) {
        merge_cand c = heap_pop(s);
        symbol *a = &s->sym[c.pos];
        if (!a->len || a->next < 0) continue;
        symbol *b = &s->sym[a->next];
        const pair_entry *e = pairmap_get(&t->merges, a->id, b->id);
        if (!e || e->new_id != c.new_id) continue;
        a->id = c.new_id;
        a->len += b->len;
        a->next = b->next;
        b->len = 0;
        if (a->next >= 0) s->sym[a->next].prev = (int32_t)c.pos;
        if (a->prev >= 0) push_pair(t, s, (uint32_t)a->prev);
        push_pair(t, s, c.pos);
    }
}

static void out_id(uint32_t **ids, size_t *n_ids, size_t *cap, uint32_t id) {
    if (*n_ids == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *ids = xrealloc(*ids, *cap * sizeof **ids);
    }
    (*ids)[(*n_ids)++] = id;
}

// Appends byte c's alphabet character (UTF-8).
static void put_byte_char(const tokenizer *t, sbuf *out, uint8_t c) {
    uint8_t u[2];
    sbuf_put(out, u, put_cp2(u, t->byte_cp[c]));
}

static void sym_reserve(scratch *s, size_t n) {
    if (n <= s->sym_cap) return;
    s->sym_cap = n < 256 ? 256 : n;
    s->sym = xrealloc(s->sym, s->sym_cap * sizeof *s->sym);
}

static void add_symbol(scratch *s, size_t *n, uint32_t id, uint32_t len) {
    s->sym[*n] = (symbol){id, len, (int32_t)*n - 1, -1};
    ++*n;
}

// The model on one piece text[a..b) that holds no added token (b > a).
static int encode_piece(const tokenizer *t, scratch *s, const uint8_t *text, size_t a, size_t b,
                        uint32_t **ids, size_t *n_ids, size_t *cap, rl_err *err) {
    if (b - a >= INT32_MAX - 1)
        return err_set(err, "a text of %zu bytes between added tokens is too long to encode", b - a);
    size_t n = 0;
    s->word.len = 0;
    if (t->byte_level) {
        sym_reserve(s, b - a + 1);
        // HF's ByteLevel add_prefix_space: each piece not starting with a space gets one.
        if (t->add_prefix_space && text[a] != ' ') {
            if (t->byte_id[' '] == NO_ID)
                return err_set(err, "byte 0x20 (the space add_prefix_space inserts) has no token in %s",
                               t->path);
            add_symbol(s, &n, t->byte_id[' '], 1);
            if (t->ignore_merges) put_byte_char(t, &s->word, ' ');
        }
        for (size_t i = a; i < b; i++) {
            uint32_t id = t->byte_id[text[i]];
            if (id == NO_ID) return err_set(err, "byte 0x%02x at offset %zu has no token in %s", text[i], i, t->path);
            add_symbol(s, &n, id, 1);
            if (t->ignore_merges) put_byte_char(t, &s->word, text[i]);
        }
    } else {
        sym_reserve(s, b - a);
        for (size_t i = a; i < b;) {
            uint32_t cp;
            size_t len = utf8_char(text + i, b - i, &cp);
            if (!len)
                return err_set(err, "invalid UTF-8 at offset %zu (%s has no ByteLevel pre_tokenizer)", i,
                               t->path);
            uint32_t id = strmap_get(&t->vocab, t, (const char *)text + i, len);
            if (id == NO_ID)
                return err_set(err, "character U+%04X at offset %zu has no token in %s", (unsigned)cp, i,
                               t->path);
            add_symbol(s, &n, id, (uint32_t)len);
            i += len;
        }
        if (t->ignore_merges) sbuf_put(&s->word, text + a, b - a);
    }
    // HF's ignore_merges: a piece that is itself a token is that token.
    if (t->ignore_merges) {
        uint32_t id = strmap_get(&t->vocab, t, (const char *)s->word.data, s->word.len);
        if (id != NO_ID) {
            out_id(ids, n_ids, cap, id);
            return 0;
        }
    }
    for (size_t i = 0; i + 1 < n; i++) s->sym[i].next = (int32_t)i + 1;
    bpe_merge(t, s, n);
    for (size_t i = 0; i < n; i++)
        if (s->sym[i].len) out_id(ids, n_ids, cap, s->sym[i].id);
    return 0;
}

// Leftmost, then longest, added token of matcher m in text[a..b): its index, or -1.
static int64_t find_added(const tokenizer *t, const matcher *m, const uint8_t *text, size_t a, size_t b,
                          size_t *at) {
    if (!m->n) return -1;
    for (size_t i = a; i < b; i++) {
        uint8_t c = text[i];
        for (uint32_t k = m->first[c]; k < m->first[c + 1]; k++) {
            const added_token *x = &m->tok[k];
            if (x->len <= b - i && !memcmp(text + i, pool_at(t, x->off), x->len)) {
                *at = i;
                return k;
            }
        }
    }
    return -1;
}

// Splits text[a..b) on the added tokens of pass `pass` (and then of the later
// passes in the pieces between), running the model on what remains.
static int encode_range(const tokenizer *t, scratch *s, int pass, const uint8_t *text, size_t a,
                        size_t b, uint32_t **ids, size_t *n_ids, size_t *cap, rl_err *err) {
    if (a == b) return 0;
    if (pass == 2) return encode_piece(t, s, text, a, b, ids, n_ids, cap, err);
    const matcher *m = &t->pass[pass];
    while (a < b) {
        size_t at;
        int64_t k = find_added(t, m, text, a, b, &at);
        size_t stop = k < 0 ? b : at;
        if (encode_range(t, s, pass + 1, text, a, stop, ids, n_ids, cap, err)) return -1;
        if (k < 0) break;
        out_id(ids, n_ids, cap, m->tok[k].id);
        a = at + m->tok[k].len;
    }
    return 0;
}

int tok_encode(const tokenizer *t, const char *text, size_t n, uint32_t **ids, size_t *n_ids,
               size_t *cap, rl_err *err) {
    scratch s = {0};
    size_t start = *n_ids;
    int rc = encode_range(t, &s, 0, (const uint8_t *)text, 0, n, ids, n_ids, cap, err);
    if (rc) *n_ids = start;  // nothing appended on failure
    free(s.sym);
    free(s.heap);
    sbuf_free(&s.word);
    return rc;
}

int tok_encode_special(const tokenizer *t, const char *text, size_t n, uint32_t **ids, size_t *n_ids,
                       size_t *cap, rl_err *err) {
    return tok_encode(t, text, n, ids, n_ids, cap, err);   // post_processor: to come
}

// ---- decoding --------------------------------------------------------------------------

int tok_decode(const tokenizer *t, const uint32_t *ids, size_t n, unsigned flags, sbuf *out,
               rl_err *err) {
    int skip_special = flags & TOK_SKIP_SPECIAL;
    size_t start = out->len;
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->n_ids || t->tok_off[id] == NO_ID) {
            out->len = start;
            return err_set(err, "token id %u (position %zu) is not in the vocabulary of %s (size %zu)", id, i,
                           t->path, t->n_ids);
        }
        if (skip_special && t->special[id]) continue;
        if (t->decoder == DEC_JOIN && !first) sbuf_putc(out, ' ');
        sbuf_put(out, pool_at(t, t->dec_off[id]), t->dec_len[id]);
        first = 0;
    }
    return 0;
}
