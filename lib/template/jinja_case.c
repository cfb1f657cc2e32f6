// jinja_case.c — Python's str case methods (jinja_case.h), after CPython's
// unicodeobject.c: do_upper, do_lower (lower_ucs4, handle_capital_sigma),
// do_title, do_capitalize, do_swapcase.
#include "template/jinja_case.h"

#include "template/jinja_internal.h"

typedef struct {
    uint32_t cp;
    uint8_t n;        // bytes of the mapping
    const char *s;    // the mapping, UTF-8
} jx_case_map;

#include "template/jinja_case_data.h"

#define N(a) (sizeof a / sizeof *a)

static const jx_case_map *find(const jx_case_map *t, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && t[lo].cp == cp ? &t[lo] : NULL;
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid][1] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && r[lo][0] <= cp;
}

int jx_is_cased(uint32_t cp) { return in_ranges(CASED, N(CASED), cp); }
int jx_is_upper(uint32_t cp) { return in_ranges(UPPERCASE, N(UPPERCASE), cp); }
int jx_is_lower(uint32_t cp) { return in_ranges(LOWERCASE, N(LOWERCASE), cp); }
static int is_case_ignorable(uint32_t cp) { return in_ranges(CASE_IGNORABLE, N(CASE_IGNORABLE), cp); }

// cp's mapping in table t, or cp itself.
static void put_mapped(sbuf *b, const jx_case_map *t, size_t n, uint32_t cp) {
    const jx_case_map *m = find(t, n, cp);
    if (m) sbuf_put(b, m->s, m->n);
    else jx_utf8_put(b, cp);
}

// The code point that ends before byte i of s (i > 0).
static size_t prev_start(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

// Σ at s[i..next): final (ς) when a cased code point precedes it and none
// follows, case-ignorable ones looked past on both sides (Unicode's
// Final_Sigma, as CPython's handle_capital_sigma) in the string s[0..n).
static int final_sigma(const char *s, size_t n, size_t i, size_t next) {
    uint32_t cp = 0;
    size_t j = i;
    int found = 0;
    while (j > 0) {
        j = prev_start(s, j);
        jx_utf8_next(s, n, j, &cp);
        if (!is_case_ignorable(cp)) {
            found = 1;
            break;
        }
    }
    if (!found || !jx_is_cased(cp)) return 0;
    for (j = next; j < n;) {
        j = jx_utf8_next(s, n, j, &cp);
        if (!is_case_ignorable(cp)) return !jx_is_cased(cp);
    }
    return 1;
}

// One code point lowered, the one at s[i..next) of the string s[0..n).
static void lower_one(sbuf *b, const char *s, size_t n, size_t i, size_t next, uint32_t cp) {
    if (cp == 0x3A3) jx_utf8_put(b, final_sigma(s, n, i, next) ? 0x3C2 : 0x3C3);
    else put_mapped(b, LOWER, N(LOWER), cp);
}

void jx_case_upper(sbuf *b, const char *s, size_t n) {
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        i = jx_utf8_next(s, n, i, &cp);
        put_mapped(b, UPPER, N(UPPER), cp);
    }
}

void jx_case_lower(sbuf *b, const char *s, size_t n) {
    uint32_t cp;
    for (size_t i = 0, next; i < n; i = next) {
        next = jx_utf8_next(s, n, i, &cp);
        lower_one(b, s, n, i, next, cp);
    }
}

void jx_case_title(sbuf *b, const char *s, size_t n) {
    uint32_t cp;
    int previous_is_cased = 0;
    for (size_t i = 0, next; i < n; i = next) {
        next = jx_utf8_next(s, n, i, &cp);
        if (previous_is_cased) lower_one(b, s, n, i, next, cp);
        else put_mapped(b, TITLE, N(TITLE), cp);
        previous_is_cased = jx_is_cased(cp);
    }
}

void jx_case_capitalize(sbuf *b, const char *s, size_t n) {
    uint32_t cp;
    for (size_t i = 0, next; i < n; i = next) {
        next = jx_utf8_next(s, n, i, &cp);
        if (i == 0) put_mapped(b, TITLE, N(TITLE), cp);
        else lower_one(b, s, n, i, next, cp);
    }
}

void jx_case_swapcase(sbuf *b, const char *s, size_t n) {
    uint32_t cp;
    for (size_t i = 0, next; i < n; i = next) {
        next = jx_utf8_next(s, n, i, &cp);
        if (jx_is_upper(cp)) lower_one(b, s, n, i, next, cp);
        else if (jx_is_lower(cp)) put_mapped(b, UPPER, N(UPPER), cp);
        else jx_utf8_put(b, cp);
    }
}
