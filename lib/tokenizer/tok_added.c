// tok_added.c — added tokens (see tok_added.h).
//
// Matching follows tokenizers' AddedVocabulary::find_matches: an
// Aho-Corasick search, leftmost-longest, over the tokens of the pass (here:
// the tokens sorted by first byte and then longest first, tried at each
// position), resuming after each match's end even when a flag then discards
// it. The word and space tests are the regex crate's \w (TOK_RUST_WORD) and
// \s (White_Space).
#include "tokenizer/tok_added.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_bpe.h"
#include "tokenizer/tok_json.h"
#include "tokenizer/tok_unicode.h"

typedef struct {
    uint32_t off, len;  // the pattern in the pool (the content, or its normalized form)
    uint32_t id;
    uint8_t single_word, lstrip, rstrip;
} entry;

// The tokens of one pass, sorted by first byte and then longest first, so
// that the first candidate that matches at a position is the longest.
typedef struct {
    entry *e;
    size_t n;
    uint32_t first[257];  // tokens starting with byte c: e[first[c] .. first[c + 1])
} matcher;

struct tok_added {
    tok_map contents;     // content -> id
    sbuf pool;            // the patterns
    matcher pass[2];      // [0]: normalized false, [1]: normalized true
    uint8_t *special;     // per id below n_ids
    size_t n_ids;
    tok_re *word;         // Rust's \w, for single_word
};

const tok_map *tok_added_contents(const tok_added *ad) { return &ad->contents; }

int tok_added_is_special(const tok_added *ad, uint32_t id) { return id < ad->n_ids && ad->special[id]; }

size_t tok_added_n_ids(const tok_added *ad) { return ad->n_ids; }

const char *tok_added_content(const tok_added *ad, uint32_t id, size_t *len) {
    return tok_map_key_of(&ad->contents, id, len);
}

void tok_added_free(tok_added *ad) {
    if (!ad) return;
    tok_map_free(&ad->contents);
    sbuf_free(&ad->pool);
    for (int i = 0; i < 2; i++) free(ad->pass[i].e);
    free(ad->special);
    tok_re_free(ad->word);
    free(ad);
}

// ---- matching ----------------------------------------------------------------------------

static size_t char_before(const uint8_t *s, size_t at) {
    size_t k = at - 1;
    while (k > 0 && (s[k] & 0xC0) == 0x80) k--;
    return k;
}

static int is_word_at(const tok_added *ad, tok_re_scratch *sc, const uint8_t *s, size_t n, size_t at) {
    uint32_t cp;
    size_t len = tok_utf8_next(s + at, n - at, &cp);
    return tok_re_whole(ad->word, sc, s + at, len);
}

static int is_space_at(const uint8_t *s, size_t n, size_t at) {
    uint32_t cp;
    tok_utf8_next(s + at, n - at, &cp);
    return tok_is_white_space(cp);
}

static void put_cut(tok_cuts *out, size_t a, size_t b, uint32_t id) {
    GROW(out->cut, out->cap, out->n + 1, 32);
    out->cut[out->n++] = (tok_cut){a, b, id};
}

// The leftmost, then longest, token of m in s[from..n): its entry, and *at.
static const entry *find(const tok_added *ad, const matcher *m, const uint8_t *s, size_t n, size_t from,
                         size_t *at) {
    for (size_t i = from; i < n; i++) {
        uint8_t c = s[i];
        for (uint32_t k = m->first[c]; k < m->first[c + 1]; k++) {
            const entry *x = &m->e[k];
            if (x->len <= n - i && !memcmp(s + i, ad->pool.data + x->off, x->len)) {
                *at = i;
                return x;
            }
        }
    }
    return NULL;
}

void tok_added_cut(const tok_added *ad, int pass, tok_re_scratch *sc, const uint8_t *s, size_t n, tok_cuts *out) {
    const matcher *m = &ad->pass[pass];
    size_t done = 0, from = 0, at;
    const entry *x;
    while (m->n && from < n && (x = find(ad, m, s, n, from, &at))) {
        size_t start = at, stop = at + x->len;
        from = stop;
        if (x->single_word && ((start > 0 && is_word_at(ad, sc, s, n, char_before(s, start))) ||
                               (stop < n && is_word_at(ad, sc, s, n, stop))))
            continue;
        if (x->lstrip) {
            size_t k = start;
            while (k > 0 && is_space_at(s, n, char_before(s, k))) k = char_before(s, k);
            start = k > done ? k : done;  // not into what an earlier match took
        }
        if (x->rstrip)
            while (stop < n && is_space_at(s, n, stop)) {
                uint32_t cp;
                stop += tok_utf8_next(s + stop, n - stop, &cp);
            }
        if (done < start) put_cut(out, done, start, TOK_NO_ID);
        put_cut(out, start, stop, x->id);
        done = stop;
    }
    if (done < n) put_cut(out, done, n, TOK_NO_ID);
}

// ---- loading ---------------------------------------------------------------------------------

static int cmp_entry(const void *pa, const void *pb, void *pool) {
    const entry *a = pa, *b = pb;
    const uint8_t *d = pool;
    if (d[a->off] != d[b->off]) return d[a->off] < d[b->off] ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return memcmp(d + a->off, d + b->off, a->len);
}

static void matcher_build(matcher *m, const sbuf *pool) {
    if (m->n) qsort_r(m->e, m->n, sizeof *m->e, cmp_entry, pool->data);
    size_t k = 0;
    for (int c = 0; c < 256; c++) {
        m->first[c] = (uint32_t)k;
        while (k < m->n && pool->data[m->e[k].off] == c) k++;
    }
    m->first[256] = (uint32_t)k;
}

// The pattern of a normalized token: its content normalized.
static int normalized_pattern(tok_added *ad, const tok_normalizer *nz, const char *content, size_t n,
                              const char *path, rl_err *err) {
    if (!nz) {
        sbuf_put(&ad->pool, content, n);
        return 0;
    }
    tok_norm_work w = {0};
    tok_re_scratch *sc = tok_re_scratch_new();
    size_t before = ad->pool.len;
    int moved, rc = tok_norm_apply(nz, &w, sc, (const uint8_t *)content, n, &ad->pool, &moved, err);
    tok_norm_work_free(&w);
    tok_re_scratch_free(sc);
    if (!rc && ad->pool.len == before)
        rc = err_set(err, "%s: added token \"%.200s\" (normalized true) is empty once normalized", path, content);
    return rc;
}

static int load_one(tok_added *ad, const cJSON *a, size_t i, const char *path, const tok_map *vocab,
                    size_t model_size, const tok_normalizer *nz, int64_t *max_added, rl_err *err) {
    char where[64];
    snprintf(where, sizeof where, "added_tokens[%zu]", i);
    if (!cJSON_IsObject(a)) return err_set(err, "%s: %s must be an object", path, where);
    const char *content;
    if (tok_json_string(path, a, where, "content", &content, err)) return -1;
    uint32_t id;
    if (tok_json_id(cJSON_GetObjectItemCaseSensitive(a, "id"), TOK_MAX_ID, &id))
        return err_set(err, "%s: %s.id must be an integer id in [0, %u)", path, where, TOK_MAX_ID);
    int special, normalized, single_word, lstrip, rstrip;
    if (tok_json_bool(path, a, where, "special", 0, &special, err) ||
        tok_json_bool(path, a, where, "normalized", !special, &normalized, err) ||
        tok_json_bool(path, a, where, "single_word", 0, &single_word, err) ||
        tok_json_bool(path, a, where, "lstrip", 0, &lstrip, err) ||
        tok_json_bool(path, a, where, "rstrip", 0, &rstrip, err))
        return -1;
    size_t n = strlen(content);
    if (!n) return 0;  // tokenizers ignores empty added tokens
    uint32_t expect = tok_map_get(vocab, content, n);
    if (expect == TOK_NO_ID)
        expect = *max_added < 0 ? (uint32_t)model_size
                 : ((uint64_t)*max_added >= model_size || !model_size) ? (uint32_t)*max_added + 1
                                                                      : (uint32_t)model_size;
    if (id != expect)
        return err_set(err, "%s: added token \"%.200s\" has id %u, but Hugging Face tokenizers would give it id %u",
                       path, content, id, expect);
    if (tok_map_put(&ad->contents, content, n, id) != TOK_NO_ID)
        return err_set(err, "%s: added token \"%.200s\" appears twice", path, content);
    if ((int64_t)id > *max_added) *max_added = id;
    if (id >= ad->n_ids) {
        ad->special = xrealloc(ad->special, id + 1);
        memset(ad->special + ad->n_ids, 0, id + 1 - ad->n_ids);
        ad->n_ids = (size_t)id + 1;
    }
    ad->special[id] = (uint8_t)special;
    uint32_t off = (uint32_t)ad->pool.len;
    if (normalized) {
        if (normalized_pattern(ad, nz, content, n, path, err)) return -1;
    } else {
        sbuf_put(&ad->pool, content, n);
    }
    matcher *m = &ad->pass[normalized ? 1 : 0];
    m->e = xrealloc(m->e, (m->n + 1) * sizeof *m->e);
    m->e[m->n++] = (entry){off, (uint32_t)(ad->pool.len - off), id, (uint8_t)single_word, (uint8_t)lstrip,
                           (uint8_t)rstrip};
    if (single_word && !ad->word)
        ad->word = tok_re_pcre2("[" TOK_RUST_WORD "]");
    return 0;
}

tok_added *tok_added_load(const cJSON *list, const char *path, const tok_map *model_vocab, size_t model_size,
                          const tok_normalizer *nz, rl_err *err) {
    tok_added *ad = xmalloc(sizeof *ad);
    memset(ad, 0, sizeof *ad);
    if (!tok_json_absent(list)) {
        if (!cJSON_IsArray(list)) {
            err_set(err, "%s: added_tokens must be an array", path);
            goto fail;
        }
        int64_t max_added = -1;
        size_t i = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, list) {
            if (load_one(ad, a, i++, path, model_vocab, model_size, nz, &max_added, err)) goto fail;
        }
    }
    for (int i = 0; i < 2; i++) matcher_build(&ad->pass[i], &ad->pool);
    tok_map_index(&ad->contents, ad->n_ids);  // contents are unique, so are their ids (checked above)
    return ad;
fail:
    tok_added_free(ad);
    return NULL;
}
