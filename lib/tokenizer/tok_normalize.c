// tok_normalize.c — normalizers of tokenizer.json, as tokenizers 0.20.3.
//
// Unicode normalisation uses utf8proc's data (Unicode 15.0) for
// decompositions, combining classes and compositions, with one correction:
// tokenizers normalises with the tables of Unicode 9.0
// (unicode-normalization-alignments 0.1.12), where the characters in
// HF_UNKNOWN below do not exist yet: for it they have combining class 0, no
// decomposition and no composition. The list was measured against tokenizers
// over every code point (utf8proc's combining class or decomposition, and
// tokenizers' NFKD and reordering of each), and tests/py/test_tokenizer.py
// checks it again. Lowercase is utf8proc_tolower but for U+0130, which Rust's
// to_lowercase (tokenizers' choice) maps to "i" U+0307.
#include "tokenizer/tok_normalize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_json.h"
#include "tokenizer/tok_unicode.h"

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWERCASE, N_STRIP, N_PREPEND, N_REPLACE };

typedef struct {
    int kind;
    int left, right;          // Strip
    char *text;               // Prepend: the string; Replace: the content
    size_t text_len;
    tok_re *re;               // Replace: the pattern
} nstep;

struct tok_normalizer {
    nstep *step;
    size_t n;
};

// ---- Unicode normalisation ------------------------------------------------------

// Code points with a combining class or a decomposition in Unicode 15.0 that
// Unicode 9.0 (tokenizers' tables) did not have (see the top of the file).
static const uint32_t HF_UNKNOWN[][2] = {
    {0x7FD, 0x7FD}, {0x898, 0x89F}, {0x8CA, 0x8D3}, {0x9FE, 0x9FE}, {0xC3C, 0xC3C}, {0xD3B, 0xD3C},
    {0xEBA, 0xEBA}, {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA}, {0x32FF, 0x32FF},
    {0xA7F2, 0xA7F4}, {0xA82C, 0xA82C}, {0xAB69, 0xAB69}, {0x10781, 0x10785}, {0x10787, 0x107B0},
    {0x107B2, 0x107BA}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50},
    {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A},
    {0x11938, 0x11938}, {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34},
    {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97},
    {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}, {0x1F16C, 0x1F16C}, {0x1FBF0, 0x1FBF9},
};

static int hf_unknown(uint32_t cp) {
    return cp >= HF_UNKNOWN[0][0] && tok_in_ranges(cp, HF_UNKNOWN, sizeof HF_UNKNOWN / sizeof *HF_UNKNOWN);
}

static int ccc(uint32_t cp) {
    if (cp < 0x300 || hf_unknown(cp)) return 0;
    return utf8proc_get_property((utf8proc_int32_t)cp)->combining_class;
}

// The canonical composition of the pair (a, b), or -1.
static int32_t compose_pair(uint32_t a, uint32_t b) {
    if (hf_unknown(a) || hf_unknown(b)) return -1;
    utf8proc_int32_t pair[2] = {(utf8proc_int32_t)a, (utf8proc_int32_t)b};
    // On two code points utf8proc composes exactly this pair, or nothing.
    if (utf8proc_normalize_utf32(pair, 2, UTF8PROC_COMPOSE | UTF8PROC_STABLE) != 1) return -1;
    return hf_unknown((uint32_t)pair[0]) ? -1 : pair[0];
}

static void cp_reserve(tok_norm_work *w, size_t n) {
    GROW(w->cp, w->cp_cap, n, 256);
}

// NF(K)C / NF(K)D of s[0..n) appended to out.
static void unicode_normalize(tok_norm_work *w, const uint8_t *s, size_t n, int compat, int compose, sbuf *out) {
    size_t i = 0, k = 0;
    while (i < n && s[i] < 0x80) i++;
    if (i == n) {  // ASCII is in every normal form
        sbuf_put(out, s, n);
        return;
    }
    // 1. Decompose (canonically, or with compatibility mappings), code point by code point.
    utf8proc_option_t opt = UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0);
    for (i = 0; i < n;) {
        uint32_t cp;
        i += tok_utf8_next(s + i, n - i, &cp);
        cp_reserve(w, k + 32);
        if (cp < 0xA0 || hf_unknown(cp)) {
            w->cp[k++] = (int32_t)cp;
            continue;
        }
        int last = 0;
        utf8proc_ssize_t got = utf8proc_decompose_char((utf8proc_int32_t)cp, w->cp + k, 32, opt, &last);
        if (got < 0 || got > 32) {  // no decomposition is that long: keep the character
            w->cp[k++] = (int32_t)cp;
            continue;
        }
        k += (size_t)got;
    }
    // 2. Canonical order: each run of non-starters sorted (stably) by combining class.
    for (size_t a = 1; a < k; a++) {
        int32_t c = w->cp[a];
        int cc = ccc((uint32_t)c);
        if (!cc) continue;
        size_t b = a;
        while (b > 0 && ccc((uint32_t)w->cp[b - 1]) > cc) {
            w->cp[b] = w->cp[b - 1];
            b--;
        }
        w->cp[b] = c;
    }
    // 3. Compose: each character with the last starter, unless a character
    // between them has a class at least its own (or is a starter).
    size_t len = k;
    if (compose) {
        long starter = -1;
        int max_cc = -1;  // the largest class since the starter; -1: none between
        size_t o = 0;
        for (size_t a = 0; a < len; a++) {
            int32_t c = w->cp[a];
            int cc = ccc((uint32_t)c);
            if (starter >= 0 && cc > max_cc) {
                int32_t r = compose_pair((uint32_t)w->cp[starter], (uint32_t)c);
                if (r >= 0) {
                    w->cp[starter] = r;
                    continue;
                }
            }
            w->cp[o] = c;
            if (cc) {
                if (cc > max_cc) max_cc = cc;
            } else {
                starter = (long)o;
                max_cc = -1;
            }
            o++;
        }
        len = o;
    }
    sbuf_reserve(out, len * 4);
    for (size_t a = 0; a < len; a++) out->len += tok_utf8_put((uint32_t)w->cp[a], out->data + out->len);
}

static void lowercase(const uint8_t *s, size_t n, sbuf *out) {
    sbuf_reserve(out, n + n / 2 + 4);
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            uint8_t c = s[i++];
            sbuf_putc(out, c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c);
            continue;
        }
        uint32_t cp;
        i += tok_utf8_next(s + i, n - i, &cp);
        uint8_t u[4];
        if (cp == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE: "i" + COMBINING DOT ABOVE
            sbuf_put(out, "i\xCC\x87", 3);
            continue;
        }
        sbuf_put(out, u, tok_utf8_put((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u));
    }
}

// Strip: the white space at the left and/or right. Returns 1 if it removed
// something at the left.
static int strip(const uint8_t *s, size_t n, int left, int right, sbuf *out) {
    size_t a = 0, b = n;
    if (left)
        while (a < b) {
            uint32_t cp;
            size_t k = tok_utf8_next(s + a, b - a, &cp);
            if (!tok_is_white_space(cp)) break;
            a += k;
        }
    if (right)
        while (b > a) {
            size_t k = 1;
            while (k < b - a && (s[b - k] & 0xC0) == 0x80) k++;
            uint32_t cp;
            tok_utf8_next(s + b - k, k, &cp);
            if (!tok_is_white_space(cp)) break;
            b -= k;
        }
    sbuf_put(out, s + a, b - a);
    return a > 0;
}

// Replace: every match of the pattern by the content. Returns 1 if a match at
// the start was replaced by nothing.
static int replace(const nstep *st, tok_norm_work *w, tok_re_scratch *sc, const uint8_t *s, size_t n, sbuf *out,
                   rl_err *err) {
    w->m.n = 0;
    if (tok_re_find_all(st->re, sc, s, n, &w->m, err)) return -1;
    size_t prev = 0;
    int moved = 0;
    for (size_t k = 0; k < w->m.n; k += 2) {
        size_t a = w->m.at[k], b = w->m.at[k + 1];
        sbuf_put(out, s + prev, a - prev);
        sbuf_put(out, st->text, st->text_len);
        if (a == 0 && b > 0 && !st->text_len) moved = 1;
        prev = b;
    }
    sbuf_put(out, s + prev, n - prev);
    return moved;
}

int tok_norm_apply(const tok_normalizer *nz, tok_norm_work *w, tok_re_scratch *sc, const uint8_t *s, size_t n,
                   sbuf *out, int *start_moved, rl_err *err) {
    *start_moved = 0;
    size_t base = out->len;
    sbuf_put(out, s, n);
    for (size_t i = 0; i < nz->n; i++) {
        const nstep *st = &nz->step[i];
        // The current text is out[base..]; the step writes into tmp, which then replaces it.
        const uint8_t *cur = out->data + base;
        size_t len = out->len - base;
        w->tmp.len = 0;
        switch (st->kind) {
        case N_NFC: unicode_normalize(w, cur, len, 0, 1, &w->tmp); break;
        case N_NFD: unicode_normalize(w, cur, len, 0, 0, &w->tmp); break;
        case N_NFKC: unicode_normalize(w, cur, len, 1, 1, &w->tmp); break;
        case N_NFKD: unicode_normalize(w, cur, len, 1, 0, &w->tmp); break;
        case N_LOWERCASE: lowercase(cur, len, &w->tmp); break;
        case N_STRIP:
            if (strip(cur, len, st->left, st->right, &w->tmp)) *start_moved = 1;
            break;
        case N_PREPEND:  // only a non-empty text gets it
            if (len) sbuf_put(&w->tmp, st->text, st->text_len);
            sbuf_put(&w->tmp, cur, len);
            break;
        case N_REPLACE: {
            int moved = replace(st, w, sc, cur, len, &w->tmp, err);
            if (moved < 0) return -1;
            if (moved) *start_moved = 1;
            break;
        }
        }
        out->len = base;
        sbuf_put(out, w->tmp.data, w->tmp.len);
    }
    return 0;
}

void tok_norm_work_free(tok_norm_work *w) {
    sbuf_free(&w->tmp);
    free(w->cp);
    free(w->m.at);
    memset(w, 0, sizeof *w);
}

// ---- loading ------------------------------------------------------------------------

void tok_norm_free(tok_normalizer *nz) {
    if (!nz) return;
    for (size_t i = 0; i < nz->n; i++) {
        free(nz->step[i].text);
        tok_re_free(nz->step[i].re);
    }
    free(nz->step);
    free(nz);
}

static int load_one(void *ctx, const cJSON *x, const char *ty, const char *path, const char *where, rl_err *err) {
    tok_normalizer *nz = ctx;
    nstep st = {0};
    static const char *const plain[] = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase"};
    static const int plain_kind[] = {N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWERCASE};
    for (size_t k = 0; k < sizeof plain / sizeof *plain; k++)
        if (!strcmp(ty, plain[k])) st.kind = plain_kind[k] + 100;
    if (st.kind) {
        st.kind -= 100;
    } else if (!strcmp(ty, "Strip")) {
        st.kind = N_STRIP;
        if (tok_json_bool(path, x, where, "strip_left", -1, &st.left, err) ||
            tok_json_bool(path, x, where, "strip_right", -1, &st.right, err))
            return -1;
    } else if (!strcmp(ty, "Prepend")) {
        const char *s;
        if (tok_json_string(path, x, where, "prepend", &s, err)) return -1;
        st.kind = N_PREPEND;
        st.text = xstrdup(s);
        st.text_len = strlen(s);
    } else if (!strcmp(ty, "Replace")) {
        st.kind = N_REPLACE;
        if (tok_json_replace(path, x, where, &st.re, &st.text, &st.text_len, err)) return -1;
    } else {
        return err_set(err, "%s: %s: normalizer %s is not supported (supported: NFC, NFD, NFKC, NFKD, "
                            "Lowercase, Strip, Prepend, Replace, Sequence)", path, where, ty);
    }
    nz->step = xrealloc(nz->step, (nz->n + 1) * sizeof *nz->step);
    nz->step[nz->n++] = st;
    return 0;
}

int tok_norm_load(const cJSON *x, const char *path, tok_normalizer **out, rl_err *err) {
    *out = NULL;
    if (tok_json_absent(x)) return 0;
    tok_normalizer *nz = xmalloc(sizeof *nz);
    memset(nz, 0, sizeof *nz);
    if (tok_json_component(path, x, "normalizer", "normalizers", load_one, nz, err)) {
        tok_norm_free(nz);
        return -1;
    }
    if (!nz->n) {
        tok_norm_free(nz);
        return 0;
    }
    *out = nz;
    return 0;
}
