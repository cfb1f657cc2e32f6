// tok_regex.c — tokenizer.json regular expressions on PCRE2, with
// Oniguruma's meaning.
//
// Hugging Face tokenizers compiles Split and Replace patterns with Oniguruma
// (onig 6.9.8, its default syntax, UTF-8). PCRE2 10.42 has the same Unicode
// tables for \p{L}, \p{N}, \p{M}, \p{P}, \p{S} and scripts (both Unicode 14;
// tests/py/test_tokenizer.py checks every code point), but other constructs
// mean different things; the translation below rewrites them:
//
//   Oniguruma             PCRE2 (with UTF, UCP, MULTILINE, newline LF)
//   \s \S                 \p{White_Space} \P{White_Space} (PCRE2's \s adds U+180E)
//   \d \D                 \p{Nd} \P{Nd}
//   \w \W \b \B           Alphabetic, marks, Nd, Pc, and outside classes
//                         U+00B2 U+00B3 U+00B9 U+00BC..U+00BE (measured:
//                         Oniguruma's word class), and boundaries built on
//                         it (PCRE2's \w is L, N, _)
//   \h \H                 hex digits (PCRE2's \h is horizontal space)
//   \v                    U+000B (PCRE2's \v is vertical space)
//   \uHHHH                \x{HHHH}
//   {,n}                  {0,n} (PCRE2 reads "{,n}" as text)
//   (?m) (?-m)            (?s) (?-s): in Oniguruma m makes . match newlines;
//                         ^ and $ always match at line ends (PCRE2_MULTILINE)
//   \p{Han} (a script)    \p{sc:Han} (PCRE2's \p{Han} is Script_Extensions)
//
// Refused, with the construct named, because the two engines would disagree
// and no translation is written: case-insensitive classes, properties,
// non-ASCII letters or the letter pairs ss st ff fi fl (Oniguruma folds
// multi-character: (?i:ss) matches "ß"), \W \H inside a class, nested
// classes, POSIX brackets and && in classes, (?x), and the escapes \X \K \G
// \y \Y \N \O \g and other letters Oniguruma gives a meaning to.
#include "tokenizer/tok_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tok_re {
    pcre2_code *code;
    int jit;  // the JIT compiled it
};

struct tok_re_scratch {
    pcre2_match_data *md;
};

// Oniguruma's \w, as the inside of a character class: inside a class it is
// ONIG_WORD_IN_CLASS; alone (and for \b) U+00B2 U+00B3 U+00B9 U+00BC..U+00BE
// are word characters too (measured).
#define ONIG_WORD_IN_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
#define ONIG_WORD ONIG_WORD_IN_CLASS "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}"

static int why_set(char *why, size_t size, const char *fmt, const char *arg) {
    snprintf(why, size, fmt, arg);
    return -1;
}

// The general categories, by their short and long names, as Oniguruma
// accepts them (case, spaces, '_' and '-' ignored).
static const char *const GC_NAMES[][2] = {
    {"l", "L"}, {"letter", "L"}, {"lu", "Lu"}, {"uppercaseletter", "Lu"}, {"ll", "Ll"},
    {"lowercaseletter", "Ll"}, {"lt", "Lt"}, {"titlecaseletter", "Lt"}, {"lm", "Lm"},
    {"modifierletter", "Lm"}, {"lo", "Lo"}, {"otherletter", "Lo"}, {"lc", "L&"}, {"casedletter", "L&"},
    {"m", "M"}, {"mark", "M"}, {"combiningmark", "M"}, {"mn", "Mn"}, {"nonspacingmark", "Mn"}, {"mc", "Mc"},
    {"spacingmark", "Mc"}, {"me", "Me"}, {"enclosingmark", "Me"}, {"n", "N"}, {"number", "N"}, {"nd", "Nd"},
    {"decimalnumber", "Nd"}, {"nl", "Nl"}, {"letternumber", "Nl"}, {"no", "No"}, {"othernumber", "No"},
    {"p", "P"}, {"punctuation", "P"}, {"pc", "Pc"}, {"connectorpunctuation", "Pc"}, {"pd", "Pd"},
    {"dashpunctuation", "Pd"}, {"ps", "Ps"}, {"openpunctuation", "Ps"}, {"pe", "Pe"},
    {"closepunctuation", "Pe"}, {"pi", "Pi"}, {"initialpunctuation", "Pi"}, {"pf", "Pf"},
    {"finalpunctuation", "Pf"}, {"po", "Po"}, {"otherpunctuation", "Po"}, {"s", "S"}, {"symbol", "S"},
    {"sm", "Sm"}, {"mathsymbol", "Sm"}, {"sc", "Sc"}, {"currencysymbol", "Sc"}, {"sk", "Sk"},
    {"modifiersymbol", "Sk"}, {"so", "So"}, {"othersymbol", "So"}, {"z", "Z"}, {"separator", "Z"},
    {"zs", "Zs"}, {"spaceseparator", "Zs"}, {"zl", "Zl"}, {"lineseparator", "Zl"}, {"zp", "Zp"},
    {"paragraphseparator", "Zp"}, {"c", "C"}, {"other", "C"}, {"cc", "Cc"}, {"control", "Cc"}, {"cf", "Cf"},
    {"format", "Cf"}, {"cs", "Cs"}, {"surrogate", "Cs"}, {"co", "Co"}, {"privateuse", "Co"}, {"cn", "Cn"},
    {"unassigned", "Cn"}, {"any", "Any"},
};

// Translates \p{NAME} / \P{NAME} / \p{^NAME} starting at p[i] == 'p' or 'P';
// returns the index after the closing brace, or 0 (why set).
static size_t put_property(const char *p, size_t n, size_t i, sbuf *out, char *why, size_t why_size) {
    int negate = p[i] == 'P';
    if (i + 1 >= n || p[i + 1] != '{') {
        why_set(why, why_size, "%s", "\\p without {NAME} is not supported");
        return 0;
    }
    size_t a = i + 2, b = a;
    while (b < n && p[b] != '}') b++;
    if (b >= n) {
        why_set(why, why_size, "%s", "unterminated \\p{");
        return 0;
    }
    if (a < b && p[a] == '^') negate = !negate, a++;
    char name[64], loose[64];
    size_t len = b - a, k = 0;
    if (len == 0 || len >= sizeof name) {
        why_set(why, why_size, "%s", "a \\p{} property name is empty or too long");
        return 0;
    }
    memcpy(name, p + a, len);
    name[len] = 0;
    for (size_t j = 0; j < len; j++) {
        char c = name[j];
        if (c == ' ' || c == '_' || c == '-') continue;
        loose[k++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    loose[k] = 0;
    const char *gc = NULL;
    for (size_t j = 0; j < sizeof GC_NAMES / sizeof *GC_NAMES; j++)
        if (!strcmp(loose, GC_NAMES[j][0])) gc = GC_NAMES[j][1];
    // Anything else is taken as a script (Oniguruma's \p{Han} is the Script
    // property); an unknown name makes PCRE2 refuse the pattern.
    sbuf_printf(out, "\\%c{%s%s}", negate ? 'P' : 'p', gc ? "" : "sc:", gc ? gc : name);
    return b + 1;
}

// Translates the escape at p[i] == '\\'. in_class: inside [...]. Returns the
// index after it, or 0 (why set).
static size_t put_escape(const char *p, size_t n, size_t i, int in_class, int caseless, sbuf *out, char *why,
                         size_t why_size) {
    if (i + 1 >= n) {
        why_set(why, why_size, "%s", "the pattern ends with a backslash");
        return 0;
    }
    char c = p[i + 1];
    switch (c) {
    case 's': sbuf_printf(out, "\\p{White_Space}"); return i + 2;
    case 'S': sbuf_printf(out, "\\P{White_Space}"); return i + 2;
    case 'd': sbuf_printf(out, "\\p{Nd}"); return i + 2;
    case 'D': sbuf_printf(out, "\\P{Nd}"); return i + 2;
    case 'w': sbuf_printf(out, in_class ? ONIG_WORD_IN_CLASS : "[" ONIG_WORD "]"); return i + 2;
    case 'h': sbuf_printf(out, in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]"); return i + 2;
    case 'W':
    case 'H':
        if (in_class) {
            why_set(why, why_size, "\\%s inside a character class is not supported", c == 'W' ? "W" : "H");
            return 0;
        }
        sbuf_printf(out, c == 'W' ? "[^" ONIG_WORD "]" : "[^0-9A-Fa-f]");
        return i + 2;
    case 'b':
    case 'B':
        if (in_class) {  // a backspace in both
            sbuf_printf(out, "\\x{08}");
            return i + 2;
        }
        sbuf_printf(out, c == 'b' ? "(?:(?<=[" ONIG_WORD "])(?![" ONIG_WORD "])|(?<![" ONIG_WORD "])(?=[" ONIG_WORD "]))"
                                  : "(?:(?<=[" ONIG_WORD "])(?=[" ONIG_WORD "])|(?<![" ONIG_WORD "])(?![" ONIG_WORD "]))");
        return i + 2;
    case 'v': sbuf_printf(out, "\\x{0B}"); return i + 2;
    case 'p':
    case 'P':
        if (caseless) {
            why_set(why, why_size, "%s", "a \\p{} property in a case-insensitive group is not supported");
            return 0;
        }
        return put_property(p, n, i + 1, out, why, why_size);
    case 'u': {
        size_t k = 0;
        while (k < 4 && i + 2 + k < n && strchr("0123456789abcdefABCDEF", p[i + 2 + k]) && p[i + 2 + k]) k++;
        if (k != 4) {
            why_set(why, why_size, "%s", "\\u must be followed by 4 hex digits");
            return 0;
        }
        sbuf_printf(out, "\\x{%.4s}", p + i + 2);
        return i + 6;
    }
    // The same in both engines; \x{...}, \o{...} and \k<name> are copied whole.
    case 'x': case 'o': case 'k': {
        char close = i + 2 < n ? (p[i + 2] == '{' ? '}' : p[i + 2] == '<' ? '>' : 0) : 0;
        size_t e = i + 2;
        if (close) {
            while (e < n && p[e] != close) e++;
            if (e < n) e++;
        } else if (c == 'x') {
            while (e < n && e < i + 4 && strchr("0123456789abcdefABCDEF", p[e]) && p[e]) e++;
        }
        sbuf_put(out, p + i, e - i);
        return e;
    }
    case 'c':  // a control character: \cX
        if (i + 2 >= n) {
            why_set(why, why_size, "%s", "\\c at the end of the pattern");
            return 0;
        }
        sbuf_put(out, p + i, 3);
        return i + 3;
    case 'A': case 'z': case 'Z': case 'n': case 't': case 'r': case 'f': case 'a': case 'e': case 'R':
    case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
        sbuf_put(out, p + i, 2);
        return i + 2;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (unsigned char)c >= 0x80) {
            char esc[3] = {'\\', c, 0};
            why_set(why, why_size, "the escape %s is not supported", (unsigned char)c >= 0x80 ? "\\<non-ASCII>" : esc);
            return 0;
        }
        sbuf_put(out, p + i, 2);  // an escaped punctuation character: itself
        return i + 2;
    }
}

// Translates a character class starting at p[i] == '['; returns the index
// after its ']', or 0.
static size_t put_class(const char *p, size_t n, size_t i, int caseless, sbuf *out, char *why, size_t why_size) {
    if (caseless) {
        why_set(why, why_size, "%s", "a character class in a case-insensitive group is not supported");
        return 0;
    }
    sbuf_putc(out, '[');
    i++;
    if (i < n && p[i] == '^') sbuf_putc(out, '^'), i++;
    if (i < n && p[i] == ']') sbuf_putc(out, ']'), i++;  // a leading ] is literal in both
    while (i < n && p[i] != ']') {
        if (p[i] == '\\') {
            if (!(i = put_escape(p, n, i, 1, 0, out, why, why_size))) return 0;
        } else if (p[i] == '[') {
            why_set(why, why_size, "%s", "nested classes and POSIX brackets ([ inside [...]) are not supported");
            return 0;
        } else if (p[i] == '&' && i + 1 < n && p[i + 1] == '&') {
            why_set(why, why_size, "%s", "class intersection (&&) is not supported");
            return 0;
        } else {
            sbuf_putc(out, (uint8_t)p[i++]);
        }
    }
    if (i >= n) {
        why_set(why, why_size, "%s", "unterminated character class");
        return 0;
    }
    sbuf_putc(out, ']');
    return i + 1;
}

// Translates a group opening "(?..." at p[i]; pushes the group's case
// flag. Returns the index after what was read, or 0.
static size_t put_group(const char *p, size_t n, size_t i, int *caseless, sbuf *out, char *why, size_t why_size) {
    // Plain groups, lookarounds, atomic and named groups are the same.
    static const char *const same[] = {"(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>", "(?<", "(?'", "(?P<"};
    for (size_t k = 0; k < sizeof same / sizeof *same; k++) {
        size_t len = strlen(same[k]);
        if (n - i >= len && !memcmp(p + i, same[k], len)) {
            sbuf_put(out, p + i, len);
            return i + len;
        }
    }
    if (n - i >= 3 && p[i + 2] == '#') {  // a comment
        size_t e = i;
        while (e < n && p[e] != ')') e++;
        return e < n ? e + 1 : (why_set(why, why_size, "%s", "unterminated (?#"), 0);
    }
    // Option flags: (?i-m) or (?i-m:...). Oniguruma's m is PCRE2's s.
    size_t k = i + 2;
    int on = 1, new_caseless = *caseless;
    sbuf_put(out, "(?", 2);
    for (; k < n && p[k] != ')' && p[k] != ':'; k++) {
        char c = p[k];
        if (c == '-') on = 0, sbuf_putc(out, '-');
        else if (c == 'i') new_caseless = on, sbuf_putc(out, 'i');
        else if (c == 'm') sbuf_putc(out, 's');
        else {
            char flag[2] = {c, 0};
            why_set(why, why_size, "the group option (?%s...) is not supported", flag);
            return 0;
        }
    }
    if (k >= n) {
        why_set(why, why_size, "%s", "unterminated group option");
        return 0;
    }
    sbuf_putc(out, (uint8_t)p[k]);
    *caseless = new_caseless;
    return k + 1;
}

// 1 if the two ASCII letters (lowercased) are a pair some character folds to.
static int folded_pair(char a, char b) {
    static const char *const pairs[] = {"ss", "st", "ff", "fi", "fl"};
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++)
        if (a == pairs[k][0] && b == pairs[k][1]) return 1;
    return 0;
}

#define MAX_DEPTH 64

// Oniguruma pattern -> PCRE2 pattern (NUL-terminated in out); 0, or -1 with why.
static int translate(const char *p, size_t n, sbuf *out, char *why, size_t why_size) {
    int stack[MAX_DEPTH], depth = 0, caseless = 0;
    char prev_letter = 0;  // the previous literal ASCII letter in a case-insensitive run, lowercased
    size_t i = 0;
    while (i < n) {
        char c = p[i];
        char letter = 0;
        if (c == '\\') {
            i = put_escape(p, n, i, 0, caseless, out, why, why_size);
        } else if (c == '[') {
            i = put_class(p, n, i, caseless, out, why, why_size);
        } else if (c == '(') {
            if (depth == MAX_DEPTH) return why_set(why, why_size, "%s", "groups nested too deep");
            stack[depth++] = caseless;
            if (i + 1 < n && p[i + 1] == '?') {
                int inner = caseless;
                size_t next = put_group(p, n, i, &inner, out, why, why_size);
                if (!next) return -1;
                if (p[next - 1] == ')') {  // (?i): applies until the enclosing group ends
                    depth--;
                    caseless = inner;
                } else {
                    caseless = inner;
                }
                i = next;
            } else {
                sbuf_putc(out, '(');
                i++;
            }
        } else if (c == ')') {
            if (depth == 0) return why_set(why, why_size, "%s", "unmatched )");
            caseless = stack[--depth];
            sbuf_putc(out, ')');
            i++;
        } else if (c == '{' && i + 1 < n && p[i + 1] == ',') {
            size_t k = i + 2;
            while (k < n && p[k] >= '0' && p[k] <= '9') k++;
            if (k > i + 2 && k < n && p[k] == '}') sbuf_put(out, "{0", 2);
            else sbuf_putc(out, '{');
            i++;
        } else {
            if (caseless && (unsigned char)c >= 0x80)
                return why_set(why, why_size, "%s", "a non-ASCII character in a case-insensitive group is not "
                                                    "supported (Oniguruma folds it to several characters)");
            if (caseless && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
                letter = (char)(c | 0x20);
                if (prev_letter && folded_pair(prev_letter, letter)) {
                    char pair[3] = {prev_letter, letter, 0};
                    return why_set(why, why_size, "the letters \"%s\" in a case-insensitive group are not supported "
                                                  "(Oniguruma matches them against one character)", pair);
                }
            }
            sbuf_putc(out, (uint8_t)c);
            i++;
        }
        if (!i) return -1;
        prev_letter = letter;
    }
    if (depth) return why_set(why, why_size, "%s", "unmatched (");
    sbuf_putc(out, 0);
    return 0;
}

static tok_re *compile(const char *pattern, size_t len, uint32_t extra, char *why, size_t why_size) {
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (!cc) {
        fprintf(stderr, "out of memory creating a PCRE2 compile context\n");
        abort();
    }
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int code;
    PCRE2_SIZE at;
    uint32_t options = PCRE2_UTF | (extra & PCRE2_LITERAL ? 0 : PCRE2_UCP) | extra;  // LITERAL refuses UCP
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, options, &code, &at, cc);
    pcre2_compile_context_free(cc);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(why, why_size, "PCRE2 cannot compile it: %s (at offset %zu of the translation)", (char *)msg,
                 (size_t)at);
        return NULL;
    }
    tok_re *r = xmalloc(sizeof *r);
    r->code = re;
    r->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return r;
}

tok_re *tok_re_onig(const char *pattern, size_t len, char *why, size_t why_size) {
    sbuf out = {0};
    if (translate(pattern, len, &out, why, why_size)) {
        sbuf_free(&out);
        return NULL;
    }
    tok_re *r = compile((const char *)out.data, out.len - 1, PCRE2_MULTILINE, why, why_size);
    sbuf_free(&out);
    return r;
}

// For patterns that cannot fail: ours, and literals (which compile unless
// they are not UTF-8, and JSON strings are).
static tok_re *compile_or_abort(const char *pattern, size_t len, uint32_t extra) {
    char why[300];
    tok_re *r = compile(pattern, len, extra, why, sizeof why);
    if (!r) {
        fprintf(stderr, "tok_regex: %.*s: %s\n", (int)(len > 200 ? 200 : len), pattern, why);
        abort();
    }
    return r;
}

tok_re *tok_re_pcre2(const char *pattern) { return compile_or_abort(pattern, strlen(pattern), 0); }

tok_re *tok_re_literal(const char *s, size_t len) { return compile_or_abort(s, len, PCRE2_LITERAL); }

void tok_re_free(tok_re *re) {
    if (!re) return;
    pcre2_code_free(re->code);
    free(re);
}

tok_re_scratch *tok_re_scratch_new(void) {
    tok_re_scratch *s = xmalloc(sizeof *s);
    s->md = pcre2_match_data_create(1, NULL);  // only the whole match is read
    if (!s->md) {
        fprintf(stderr, "out of memory creating PCRE2 match data\n");
        abort();
    }
    return s;
}

void tok_re_scratch_free(tok_re_scratch *s) {
    if (!s) return;
    pcre2_match_data_free(s->md);
    free(s);
}

// One match of re in s[0..n) at or after `from`: 1 (ov set), 0 (none), or a
// PCRE2 error code (< 0). The subject was checked as UTF-8 by the caller.
static int match_at(const tok_re *re, tok_re_scratch *sc, const uint8_t *s, size_t n, size_t from,
                    uint32_t options, size_t ov[2]) {
    // The JIT's fast entry takes no anchoring options; pcre2_match uses the JIT when it can.
    int rc = re->jit && !options ? pcre2_jit_match(re->code, s, n, from, 0, sc->md, NULL)
                                 : pcre2_match(re->code, s, n, from, options | PCRE2_NO_UTF_CHECK, sc->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter has a larger stack
        rc = pcre2_match(re->code, s, n, from, options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, sc->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return rc;
    PCRE2_SIZE *v = pcre2_get_ovector_pointer(sc->md);  // rc 0: more groups than slots, pair 0 is set
    ov[0] = v[0], ov[1] = v[1];
    return 1;
}

static size_t utf8_len_at(const uint8_t *s, size_t n, size_t i) {
    size_t k = 1;
    while (i + k < n && (s[i + k] & 0xC0) == 0x80) k++;
    return k;
}

int tok_re_find_all(const tok_re *re, tok_re_scratch *sc, const uint8_t *s, size_t n, tok_matches *m,
                    rl_err *err) {
    size_t from = 0, last_end = SIZE_MAX;
    while (from <= n) {
        size_t ov[2];
        int rc = match_at(re, sc, s, n, from, 0, ov);
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set(err, "regular expression failed on a %zu-byte text: %s", n, (char *)msg);
        }
        if (!rc) break;
        if (ov[0] == ov[1] && ov[1] == last_end) {  // an empty match right after the last one
            if (from >= n) break;
            from += utf8_len_at(s, n, from);
            continue;
        }
        GROW(m->at, m->cap, m->n + 2, 64);
        m->at[m->n++] = ov[0];
        m->at[m->n++] = ov[1];
        from = last_end = ov[1];
    }
    return 0;
}

int tok_re_whole(const tok_re *re, tok_re_scratch *sc, const uint8_t *s, size_t n) {
    size_t ov[2];
    return match_at(re, sc, s, n, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, ov) == 1;
}
