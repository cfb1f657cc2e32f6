// verifier.c — the built-in reward functions of rl-sample (see verifier.h).
// Numbers are compared as normalised decimal text, never through a double.
#include "sample/verifier.h"

#include <limits.h>
#include <string.h>

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
// A character that makes a following '-' an operator rather than a sign.
static int binds_minus(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_';
}

static void trim(const char **s, size_t *n) {
    while (*n && is_space(**s)) (*s)++, (*n)--;
    while (*n && is_space((*s)[*n - 1])) (*n)--;
}

static const struct {
    const char *name;
    vf_kind kind;
} kinds[] = {{"exact", VF_EXACT}, {"number", VF_NUMBER}, {"boxed", VF_BOXED}};

int vf_parse(const char *name, vf_kind *k) {
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(name, kinds[i].name)) {
            *k = kinds[i].kind;
            return 0;
        }
    return -1;
}

const char *vf_name(vf_kind k) {
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (kinds[i].kind == k) return kinds[i].name;
    return "?";
}

// ---- numbers -----------------------------------------------------------------

// A number read from text, normalised in place: ip[0..in) the integer digits
// and thousands commas from the first non-zero digit (in = 0 for zero),
// fp[0..fn) the fraction digits without trailing zeros; neg is 0 for zero.
typedef struct {
    int neg;
    const char *ip, *fp;
    size_t in, fn;
} number;

// Whether a number (as verifier.h defines one) begins at s[i].
static int number_at(const char *s, size_t n, size_t i) {
    if (is_digit(s[i])) return 1;
    return s[i] == '-' && i + 1 < n && is_digit(s[i + 1]) && (i == 0 || !binds_minus(s[i - 1]));
}

// Reads the number that begins at s[i] (number_at holds); returns where it ends.
static size_t read_number(const char *s, size_t n, size_t i, number *num) {
    size_t j = i;
    num->neg = s[j] == '-';
    j += (size_t)num->neg;
    size_t int_start = j;
    while (j < n && is_digit(s[j])) j++;
    // Thousands groups: ',' then exactly three digits, then no digit.
    while (j + 3 < n && s[j] == ',' && is_digit(s[j + 1]) && is_digit(s[j + 2]) && is_digit(s[j + 3]) &&
           (j + 4 == n || !is_digit(s[j + 4])))
        j += 4;
    size_t int_end = j;
    size_t frac_start = j, frac_end = j;
    if (j + 1 < n && s[j] == '.' && is_digit(s[j + 1])) {
        frac_start = ++j;
        while (j < n && is_digit(s[j])) j++;
        frac_end = j;
    }
    // A comma is always followed by digits, so skipping '0' and ',' stops at
    // the first non-zero digit or at the end.
    while (int_start < int_end && (s[int_start] == '0' || s[int_start] == ',')) int_start++;
    while (frac_end > frac_start && s[frac_end - 1] == '0') frac_end--;
    num->ip = s + int_start;
    num->in = int_end - int_start;
    num->fp = s + frac_start;
    num->fn = frac_end - frac_start;
    if (!num->in && !num->fn) num->neg = 0;
    return j;
}

// The last number in s[0..n): 1 and *num, or 0 when there is none.
static int last_number(const char *s, size_t n, number *num) {
    int found = 0;
    for (size_t i = 0; i < n;) {
        if (number_at(s, n, i)) {
            i = read_number(s, n, i, num);
            found = 1;
        } else {
            i++;
        }
    }
    return found;
}

// The trimmed s[0..n) read as exactly one number: 1 and *num, or 0.
static int whole_number(const char *s, size_t n, number *num) {
    trim(&s, &n);
    return n && number_at(s, n, 0) && read_number(s, n, 0, num) == n;
}

static int same_number(const number *a, const number *b) {
    if (a->neg != b->neg || a->fn != b->fn || memcmp(a->fp, b->fp, a->fn)) return 0;
    // Integer digits, the commas passed over.
    size_t i = 0, j = 0;
    for (;;) {
        while (i < a->in && a->ip[i] == ',') i++;
        while (j < b->in && b->ip[j] == ',') j++;
        if (i == a->in || j == b->in) return i == a->in && j == b->in;
        if (a->ip[i++] != b->ip[j++]) return 0;
    }
}

int vf_last_number(const char *s, size_t n, char *out, size_t size) {
    number num;
    if (!last_number(s, n, &num)) return 0;
    size_t commas = 0;
    for (size_t i = 0; i < num.in; i++) commas += num.ip[i] == ',';
    size_t len = (size_t)num.neg + (num.in ? num.in - commas : 1) + (num.fn ? 1 + num.fn : 0);
    if (len >= size || len > INT_MAX) return -1;
    char *o = out;
    if (num.neg) *o++ = '-';
    if (!num.in) *o++ = '0';
    for (size_t i = 0; i < num.in; i++)
        if (num.ip[i] != ',') *o++ = num.ip[i];
    if (num.fn) {
        *o++ = '.';
        memcpy(o, num.fp, num.fn);
        o += num.fn;
    }
    *o = 0;
    return (int)len;
}

// ---- \boxed{} ----------------------------------------------------------------

int vf_last_boxed(const char *s, size_t n, const char **b, size_t *bn) {
    static const char open[] = "\\boxed{";
    const size_t no = sizeof open - 1;
    if (n < no) return 0;
    size_t k = n - no + 1;
    do {
        if (k-- == 0) return 0;
    } while (memcmp(s + k, open, no));
    size_t start = k + no, depth = 1;
    for (size_t j = start; j < n; j++) {
        if (s[j] == '\\') j++;  // \{ and \} are literal braces; \\ is one token
        else if (s[j] == '{') depth++;
        else if (s[j] == '}' && --depth == 0) {
            *b = s + start;
            *bn = j - start;
            return 1;
        }
    }
    return 0;
}

// ---- scoring -----------------------------------------------------------------

static int same_trimmed(const char *a, size_t na, const char *b, size_t nb) {
    trim(&a, &na);
    trim(&b, &nb);
    return na == nb && !memcmp(a, b, na);
}

int vf_check_answer(vf_kind k, const char *answer, size_t n, rl_err *err) {
    number num;
    if (k != VF_NUMBER || whole_number(answer, n, &num)) return 0;
    // Quote at most 80 bytes, cut at a UTF-8 character boundary.
    size_t q = n;
    if (q > 80) {
        q = 80;
        while (q && ((unsigned char)answer[q] & 0xC0) == 0x80) q--;
    }
    return err_set(err, "answer '%.*s%s' is not a number, which --verifier number needs", (int)q, answer,
                   q < n ? "..." : "");
}

double vf_score(vf_kind k, const char *completion, size_t n, const char *answer, size_t na) {
    switch (k) {
    case VF_EXACT: return same_trimmed(completion, n, answer, na);
    case VF_NUMBER: {
        number got, want;
        return last_number(completion, n, &got) && whole_number(answer, na, &want) && same_number(&got, &want);
    }
    case VF_BOXED: {
        const char *b;
        size_t bn;
        return vf_last_boxed(completion, n, &b, &bn) && same_trimmed(b, bn, answer, na);
    }
    }
    return 0;
}
