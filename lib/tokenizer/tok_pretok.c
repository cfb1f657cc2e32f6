// tok_pretok.c — pre-tokenizers (see tok_pretok.h).
//
// Each step turns the list of pieces into a new one. Splitting steps list,
// for each piece, its matches and the text between them as (start, end,
// is_match) parts covering it (tokenizers' find_matches: empty matches
// included), flip is_match with invert, then fold them by the behavior
// (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous) and
// keep the non-empty parts. The matches come from a regex (Split, ByteLevel's
// GPT-2 pattern, Whitespace) or from a character test, each matching
// character being one match (Digits, Punctuation, WhitespaceSplit,
// Metaspace's split, CharDelimiterSplit). The character tests follow Rust's
// char methods, which tokenizers calls, with utf8proc's tables (Unicode 15.0,
// as Rust's): is_numeric is the categories Nd, Nl, No; Punctuation is ASCII
// punctuation or a P* category as tokenizers' unicode_categories tables
// (Unicode 8.0) have it (see PUNCT_SINCE_8).
// Whitespace's \w+|[^\w\s]+ is the regex crate's (see TOK_RUST_WORD).
#include "tokenizer/tok_pretok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_bpe.h"
#include "tokenizer/tok_json.h"
#include "tokenizer/tok_unicode.h"

enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };
enum { P_SPLIT, P_PREFIX_SPACE, P_MAP_BYTES, P_DIGITS, P_METASPACE, P_PUNCT, P_WS_SPLIT, P_CHAR_DELIM };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

struct pstep {
    int kind;
    int behavior, invert;
    tok_re *re;                    // P_SPLIT (Split, ByteLevel's regex, Whitespace)
    uint32_t cp;                   // P_METASPACE: the replacement; P_CHAR_DELIM: the delimiter
    char repl[5];                  // P_METASPACE: the replacement's UTF-8
    size_t repl_len;
    int prepend, split;            // P_METASPACE
};

typedef struct pstep pstep;

struct tok_pretok {
    pstep *step;
    size_t n;
    int bytes_out;  // the last ByteLevel mapping was left to the model
};

struct tok_split {
    size_t a, b;
    uint8_t match;
};

// The GPT-2 pattern ByteLevel splits with (use_regex true), in Oniguruma syntax.
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
// Whitespace's pattern, the regex crate's \w+|[^\w\s]+.
#define WHITESPACE_PATTERN "[" TOK_RUST_WORD "]+|[^" TOK_RUST_WORD "\\p{White_Space}]+"

int tok_pretok_bytes_out(const tok_pretok *pt) { return pt && pt->bytes_out; }

int tok_pretok_byte_safe(const tok_pretok *pt) {
    for (size_t i = 0; pt && i < pt->n; i++)
        if (pt->step[i].kind != P_PREFIX_SPACE && pt->step[i].kind != P_MAP_BYTES) return 0;
    return 1;
}

// ---- pieces --------------------------------------------------------------------------

static void put_piece(tok_pretok_work *w, size_t off, size_t len, int first) {
    GROW(w->q, w->capq, w->nq + 1, 64);
    w->q[w->nq++] = (tok_piece){off, len, first};
}

// The new list becomes the current one.
static void swap_lists(tok_pretok_work *w) {
    tok_piece *t = w->p;
    size_t c = w->cap;
    w->p = w->q, w->n = w->nq, w->cap = w->capq;
    w->q = t, w->capq = c, w->nq = 0;
}

void tok_pretok_start(tok_pretok_work *w, const uint8_t *s, size_t n, int first) {
    w->text.len = 0;
    w->nq = 0;
    sbuf_put(&w->text, s, n);
    put_piece(w, 0, n, first);
    swap_lists(w);
}

void tok_pretok_work_free(tok_pretok_work *w) {
    sbuf_free(&w->text);
    free(w->p);
    free(w->q);
    free(w->m.at);
    free(w->split);
    memset(w, 0, sizeof *w);
}

static void put_part(tok_pretok_work *w, size_t *k, size_t a, size_t b, int match) {
    GROW(w->split, w->split_cap, *k + 1, 64);
    w->split[(*k)++] = (struct tok_split){a, b, (uint8_t)match};
}

// Parts of a piece of length n from the (start, end) matches in w->m.
static size_t parts_from_matches(tok_pretok_work *w, size_t n) {
    size_t k = 0, prev = 0;
    for (size_t i = 0; i < w->m.n; i += 2) {
        if (prev != w->m.at[i]) put_part(w, &k, prev, w->m.at[i], 0);
        put_part(w, &k, w->m.at[i], w->m.at[i + 1], 1);
        prev = w->m.at[i + 1];
    }
    if (prev != n) put_part(w, &k, prev, n, 0);
    return k;
}

// Punctuation (General Category P*) that Unicode 9.0 to 15.0 added: not
// punctuation for tokenizers' unicode_categories tables (Unicode 8.0).
// Measured against tokenizers over every code point.
static const uint32_t PUNCT_SINCE_8[][2] = {
    {0x61D, 0x61D}, {0x9FD, 0x9FD}, {0xA76, 0xA76}, {0xC77, 0xC77}, {0xC84, 0xC84}, {0x1B7D, 0x1B7E},
    {0x2E43, 0x2E4F}, {0x2E52, 0x2E5D}, {0x10EAD, 0x10EAD}, {0x10F55, 0x10F59}, {0x10F86, 0x10F89},
    {0x1144B, 0x1144F}, {0x1145A, 0x1145B}, {0x1145D, 0x1145D}, {0x11660, 0x1166C}, {0x116B9, 0x116B9},
    {0x1183B, 0x1183B}, {0x11944, 0x11946}, {0x119E2, 0x119E2}, {0x11A3F, 0x11A46}, {0x11A9A, 0x11A9C},
    {0x11A9E, 0x11AA2}, {0x11B00, 0x11B09}, {0x11C41, 0x11C45}, {0x11C70, 0x11C71}, {0x11EF7, 0x11EF8},
    {0x11F43, 0x11F4F}, {0x11FFF, 0x11FFF}, {0x12FF1, 0x12FF2}, {0x16E97, 0x16E9A}, {0x16FE2, 0x16FE2},
    {0x1E95E, 0x1E95F},
};

#define in_ranges(cp, table) tok_in_ranges(cp, table, sizeof table / sizeof *table)

static int char_matches(const pstep *st, uint32_t cp) {
    switch (st->kind) {
    case P_DIGITS: {
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
    }
    case P_PUNCT: {
        if (cp < 0x80) return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') || (cp >= '[' && cp <= '`') ||
                              (cp >= '{' && cp <= '~');
        if (cp == 0x166D || cp == 0x111C9) return 1;  // punctuation in Unicode 8.0, no longer in 15.0
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO && !in_ranges(cp, PUNCT_SINCE_8);
    }
    case P_WS_SPLIT: return tok_is_white_space(cp);
    default: return cp == st->cp;  // P_METASPACE, P_CHAR_DELIM
    }
}

// Parts of s[0..n) where each character passing the step's test is a match.
static size_t parts_from_chars(const pstep *st, tok_pretok_work *w, const uint8_t *s, size_t n) {
    size_t k = 0, prev = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = tok_utf8_next(s + i, n - i, &cp);
        if (char_matches(st, cp)) {
            if (prev < i) put_part(w, &k, prev, i, 0);
            put_part(w, &k, i, i + len, 1);
            prev = i + len;
        }
        i += len;
    }
    if (prev < n) put_part(w, &k, prev, n, 0);
    return k;
}

// Folds parts[0..k) by behavior (in place); returns the first kept index
// (parts [first, k') are the result) and sets *end to k'. Removed parts are
// marked match = 2.
static size_t fold(struct tok_split *x, size_t k, int behavior, size_t *end) {
    size_t j = 0;
    int prev = 0;
    switch (behavior) {
    case B_ISOLATED:
        for (size_t i = 0; i < k; i++) x[i].match = 0;
        *end = k;
        return 0;
    case B_REMOVED:
        for (size_t i = 0; i < k; i++) x[i].match = x[i].match ? 2 : 0;
        *end = k;
        return 0;
    case B_CONTIGUOUS:
    case B_MERGED_PREV:
        for (size_t i = 0; i < k; i++) {
            int m = x[i].match;
            int join = behavior == B_CONTIGUOUS ? m == prev : m && !prev;
            if (join && j) x[j - 1].b = x[i].b;
            else x[j++] = (struct tok_split){x[i].a, x[i].b, 0};
            prev = m;
        }
        *end = j;
        return 0;
    default:  // B_MERGED_NEXT: the same from the right, a match joining the part after it
        j = k;
        for (size_t i = k; i-- > 0;) {
            int m = x[i].match;
            if (m && !prev && j < k) x[j].a = x[i].a;
            else x[--j] = (struct tok_split){x[i].a, x[i].b, 0};
            prev = m;
        }
        *end = k;
        return j;
    }
}

// Splits every piece by the step's matches.
static int split_all(const pstep *st, tok_pretok_work *w, tok_re_scratch *sc, int behavior, int invert,
                     rl_err *err) {
    w->nq = 0;
    for (size_t i = 0; i < w->n; i++) {
        tok_piece pc = w->p[i];
        const uint8_t *s = w->text.data + pc.off;
        size_t k;
        if (st->re) {
            w->m.n = 0;
            if (tok_re_find_all(st->re, sc, s, pc.len, &w->m, err)) return -1;
            k = parts_from_matches(w, pc.len);
        } else {
            k = parts_from_chars(st, w, s, pc.len);
        }
        if (invert)
            for (size_t j = 0; j < k; j++) w->split[j].match = !w->split[j].match;
        size_t end, j = fold(w->split, k, behavior, &end);
        for (; j < end; j++) {
            const struct tok_split *x = &w->split[j];
            if (x->match != 2 && x->b > x->a) put_piece(w, pc.off + x->a, x->b - x->a, pc.first && x->a == 0);
        }
    }
    swap_lists(w);
    return 0;
}

// ByteLevel's add_prefix_space: a space before each piece not starting with one.
static void prefix_space(tok_pretok_work *w) {
    w->nq = 0;
    for (size_t i = 0; i < w->n; i++) {
        tok_piece pc = w->p[i];
        if (w->text.data[pc.off] == ' ') {
            put_piece(w, pc.off, pc.len, pc.first);
            continue;
        }
        size_t off = w->text.len;
        sbuf_reserve(&w->text, pc.len + 1);  // the copy reads from the same buffer
        sbuf_putc(&w->text, ' ');
        sbuf_put(&w->text, w->text.data + pc.off, pc.len);
        put_piece(w, off, pc.len + 1, pc.first);
    }
    swap_lists(w);
}

// ByteLevel's mapping of each byte to its alphabet character.
static void map_bytes(tok_pretok_work *w) {
    w->nq = 0;
    for (size_t i = 0; i < w->n; i++) {
        tok_piece pc = w->p[i];
        size_t off = w->text.len;
        sbuf_reserve(&w->text, 2 * pc.len);
        for (size_t k = 0; k < pc.len; k++)
            w->text.len += tok_utf8_put(tok_byte_char(w->text.data[pc.off + k]), w->text.data + w->text.len);
        put_piece(w, off, w->text.len - off, pc.first);
    }
    swap_lists(w);
}

// Metaspace: spaces become the replacement, which is put first too (always,
// or only on the piece at the start of the text), then the pieces split
// before each replacement.
static void metaspace(const pstep *st, tok_pretok_work *w) {
    w->nq = 0;
    for (size_t i = 0; i < w->n; i++) {
        tok_piece pc = w->p[i];
        size_t off = w->text.len;
        const uint8_t *s = w->text.data + pc.off;
        int starts = s[0] == ' ' || (pc.len >= st->repl_len && !memcmp(s, st->repl, st->repl_len));
        int prepend = !starts && (st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && pc.first));
        sbuf_reserve(&w->text, pc.len * st->repl_len + st->repl_len);
        if (prepend) sbuf_put(&w->text, st->repl, st->repl_len);
        for (size_t k = 0; k < pc.len; k++) {
            uint8_t c = w->text.data[pc.off + k];
            if (c == ' ') sbuf_put(&w->text, st->repl, st->repl_len);
            else sbuf_putc(&w->text, c);
        }
        put_piece(w, off, w->text.len - off, pc.first);
    }
    swap_lists(w);
}

int tok_pretok_apply(const tok_pretok *pt, tok_pretok_work *w, tok_re_scratch *sc, rl_err *err) {
    size_t steps = pt->n - (size_t)pt->bytes_out;  // a final mapping is the model's
    for (size_t i = 0; i < steps && w->n; i++) {
        const pstep *st = &pt->step[i];
        switch (st->kind) {
        case P_PREFIX_SPACE: prefix_space(w); break;
        case P_MAP_BYTES: map_bytes(w); break;
        case P_METASPACE:
            metaspace(st, w);
            if (st->split && split_all(st, w, sc, B_MERGED_NEXT, 0, err)) return -1;
            break;
        default:
            if (split_all(st, w, sc, st->behavior, st->invert, err)) return -1;
        }
    }
    return 0;
}

// ---- loading --------------------------------------------------------------------------

void tok_pretok_free(tok_pretok *pt) {
    if (!pt) return;
    for (size_t i = 0; i < pt->n; i++) tok_re_free(pt->step[i].re);
    free(pt->step);
    free(pt);
}

static void add_step(tok_pretok *pt, pstep st) {
    pt->step = xrealloc(pt->step, (pt->n + 1) * sizeof *pt->step);
    pt->step[pt->n++] = st;
}

static int get_behavior(const char *path, const cJSON *x, const char *where, int dflt, int *out, rl_err *err) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(x, "behavior");
    if (tok_json_absent(b) && dflt >= 0) {
        *out = dflt;
        return 0;
    }
    for (int i = 0; i < 5 && cJSON_IsString(b); i++)
        if (!strcmp(b->valuestring, names[i])) {
            *out = i;
            return 0;
        }
    return err_set(err, "%s: %s.behavior must be one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                        "Contiguous", path, where);
}

static int load_metaspace(tok_pretok *pt, const cJSON *x, const char *path, const char *where, rl_err *err) {
    pstep st = {.kind = P_METASPACE};
    const char *repl, *scheme = "always";
    if (tok_json_char(path, x, where, "replacement", &repl, err)) return -1;
    st.repl_len = strlen(repl);
    memcpy(st.repl, repl, st.repl_len);
    tok_utf8_next((const uint8_t *)repl, st.repl_len, &st.cp);
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(x, "prepend_scheme");
    if (!tok_json_absent(ps) && !cJSON_IsString(ps))
        return err_set(err, "%s: %s.prepend_scheme must be \"first\", \"always\" or \"never\"", path, where);
    if (cJSON_IsString(ps)) scheme = ps->valuestring;
    if (!strcmp(scheme, "always")) st.prepend = PREPEND_ALWAYS;
    else if (!strcmp(scheme, "first")) st.prepend = PREPEND_FIRST;
    else if (!strcmp(scheme, "never")) st.prepend = PREPEND_NEVER;
    else return err_set(err, "%s: %s.prepend_scheme must be \"first\", \"always\" or \"never\"", path, where);
    int aps;  // the older add_prefix_space: false means "never" (and must agree with prepend_scheme)
    if (tok_json_bool(path, x, where, "add_prefix_space", 1, &aps, err) ||
        tok_json_bool(path, x, where, "split", 1, &st.split, err))
        return -1;
    if (!aps) {
        if (st.prepend != PREPEND_NEVER)
            return err_set(err, "%s: %s: add_prefix_space false does not match prepend_scheme \"%s\"", path, where,
                           scheme);
        st.prepend = PREPEND_NEVER;
    }
    add_step(pt, st);
    return 0;
}

static int load_one(void *ctx, const cJSON *x, const char *ty, const char *path, const char *where, rl_err *err) {
    tok_pretok *pt = ctx;
    char why[300];
    if (!strcmp(ty, "Split")) {
        pstep st = {.kind = P_SPLIT};
        if (get_behavior(path, x, where, -1, &st.behavior, err) ||
            tok_json_bool(path, x, where, "invert", -1, &st.invert, err) || tok_json_regex(path, x, where, &st.re, err))
            return -1;
        add_step(pt, st);
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) {
        int aps, use_regex;
        if (tok_json_bool(path, x, where, "add_prefix_space", -1, &aps, err) ||
            tok_json_bool(path, x, where, "use_regex", 1, &use_regex, err))
            return -1;
        if (aps) add_step(pt, (pstep){.kind = P_PREFIX_SPACE});
        if (use_regex) {
            tok_re *re = tok_re_onig(GPT2_PATTERN, strlen(GPT2_PATTERN), why, sizeof why);
            if (!re) return err_set(err, "%s: %s: the GPT-2 pattern: %s", path, where, why);  // cannot happen
            add_step(pt, (pstep){.kind = P_SPLIT, .behavior = B_ISOLATED, .re = re});
        }
        add_step(pt, (pstep){.kind = P_MAP_BYTES});
        return 0;
    }
    if (!strcmp(ty, "Digits")) {
        int individual;
        if (tok_json_bool(path, x, where, "individual_digits", -1, &individual, err)) return -1;
        add_step(pt, (pstep){.kind = P_DIGITS, .behavior = individual ? B_ISOLATED : B_CONTIGUOUS});
        return 0;
    }
    if (!strcmp(ty, "Metaspace")) return load_metaspace(pt, x, path, where, err);
    if (!strcmp(ty, "Punctuation")) {
        pstep st = {.kind = P_PUNCT};
        if (get_behavior(path, x, where, B_ISOLATED, &st.behavior, err)) return -1;
        add_step(pt, st);
        return 0;
    }
    if (!strcmp(ty, "Whitespace")) {  // keeps the matches of \w+|[^\w\s]+
        add_step(pt, (pstep){.kind = P_SPLIT, .behavior = B_REMOVED, .invert = 1,
                             .re = tok_re_pcre2(WHITESPACE_PATTERN)});
        return 0;
    }
    if (!strcmp(ty, "WhitespaceSplit")) {
        add_step(pt, (pstep){.kind = P_WS_SPLIT, .behavior = B_REMOVED});
        return 0;
    }
    if (!strcmp(ty, "CharDelimiterSplit")) {
        const char *d;
        if (tok_json_char(path, x, where, "delimiter", &d, err)) return -1;
        pstep st = {.kind = P_CHAR_DELIM, .behavior = B_REMOVED};
        tok_utf8_next((const uint8_t *)d, strlen(d), &st.cp);
        add_step(pt, st);
        return 0;
    }
    return err_set(err, "%s: %s: pre_tokenizer %s is not supported (supported: Split, ByteLevel, Digits, "
                        "Metaspace, Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit, Sequence)",
                   path, where, ty);
}

int tok_pretok_load(const cJSON *x, const char *path, tok_pretok **out, rl_err *err) {
    *out = NULL;
    if (tok_json_absent(x)) return 0;
    tok_pretok *pt = xmalloc(sizeof *pt);
    memset(pt, 0, sizeof *pt);
    if (tok_json_component(path, x, "pre_tokenizer", "pretokenizers", load_one, pt, err)) {
        tok_pretok_free(pt);
        return -1;
    }
    if (!pt->n) {
        tok_pretok_free(pt);
        return 0;
    }
    pt->bytes_out = pt->step[pt->n - 1].kind == P_MAP_BYTES;
    *out = pt;
    return 0;
}
