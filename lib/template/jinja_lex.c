// jinja_lex.c — template source to tokens, as jinja2's lexer splits it under
// trim_blocks and lstrip_blocks: text between tags (whitespace control
// applied), then the tokens of each {{ }} and {% %}; comments vanish.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"

typedef struct {
    jinja_arena *a;
    const char *s;        // normalised source
    size_t n;
    const char *name;
    jx_toks *out;
    rl_err *err;
    size_t line_pos;      // line counting has reached s[line_pos]
    int line;
} lexer;

static int line_at(lexer *L, size_t pos) {
    for (; L->line_pos < pos && L->line_pos < L->n; L->line_pos++)
        if (L->s[L->line_pos] == '\n') L->line++;
    return L->line;
}

static int lex_fail(lexer *L, size_t pos, const char *what) {
    return err_set(L->err, "%s line %d: %s", L->name, line_at(L, pos), what);
}

static void emit(lexer *L, jx_tok_kind kind, size_t pos, const char *p, size_t n) {
    jx_toks *t = L->out;
    if (t->n == t->cap) {
        size_t cap = GROW_CAP(t->cap, t->n + 1, 64, sizeof *t->v);
        jx_tok *nv = jx_alloc(L->a, cap * sizeof *nv);
        if (t->n) memcpy(nv, t->v, t->n * sizeof *nv);
        t->v = nv;
        t->cap = cap;
    }
    jx_tok *k = &t->v[t->n++];
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->line = line_at(L, pos);
    k->p = p;
    k->n = n;
}

// Python's \s at s[i]: its length in bytes, 0 when not whitespace.
static size_t space_at(const char *s, size_t n, size_t i) {
    uint32_t cp;
    size_t j = jx_utf8_next(s, n, i, &cp);
    return jx_isspace(cp) ? j - i : 0;
}

static size_t skip_space(const char *s, size_t n, size_t i) {
    size_t k;
    while (i < n && (k = space_at(s, n, i))) i += k;
    return i;
}

// str.rstrip() of s[st..e): the new end.
static size_t rstrip_end(const char *s, size_t st, size_t e) {
    while (e > st) {
        size_t b = e - 1;
        while (b > st && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        uint32_t cp;
        if (jx_utf8_next(s, e, b, &cp) != e || !jx_isspace(cp)) break;
        e = b;
    }
    return e;
}

// Text s[st..e) before a tag whose whitespace sign is sign ('-', '+' or 0):
// jinja2's '-' and lstrip_blocks rules; emits what remains.
static void emit_text(lexer *L, size_t st, size_t e, char sign, int is_var, int line_starting) {
    if (sign == '-') e = rstrip_end(L->s, st, e);
    else if (sign != '+' && !is_var) {
        size_t l = e;
        while (l > st && L->s[l - 1] != '\n') l--;
        if ((l > st || line_starting) && l < e && skip_space(L->s, e, l) == e) e = l;
    }
    if (e > st) emit(L, JT_TEXT, st, L->s + st, e - st);
}

// The end of a block tag at i ("+%}", "-%}" and following whitespace, or
// "%}" and one newline): its end, or 0 when there is none at i.
static size_t block_end_at(lexer *L, size_t i, const char *close) {
    const char *s = L->s;
    size_t n = L->n;
    if (i + 3 <= n && s[i] == '+' && s[i + 1] == close[0] && s[i + 2] == close[1]) return i + 3;
    if (i + 3 <= n && s[i] == '-' && s[i + 1] == close[0] && s[i + 2] == close[1]) return skip_space(s, n, i + 3);
    if (i + 2 <= n && s[i] == close[0] && s[i + 1] == close[1]) {
        i += 2;
        if (close[0] != '}' && i < n && s[i] == '\n') i++;   // trim_blocks ({{ }} are not blocks)
        return i;
    }
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// digits with single '_' between them (Python's literal grammar); returns the end.
static size_t digits_at(const char *s, size_t n, size_t i, int (*ok)(char)) {
    if (i >= n || !ok(s[i])) return i;
    i++;
    for (;;) {
        if (i < n && ok(s[i])) i++;
        else if (i + 1 < n && s[i] == '_' && ok(s[i + 1])) i += 2;
        else return i;
    }
}
static int dec(char c) { return c >= '0' && c <= '9'; }
static int hex(char c) { return dec(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int oct(char c) { return c >= '0' && c <= '7'; }
static int bin(char c) { return c == '0' || c == '1'; }

static size_t copy_digits(const char *s, size_t st, size_t e, char *buf, size_t cap) {
    size_t k = 0;
    for (size_t i = st; i < e && k + 1 < cap; i++)
        if (s[i] != '_') buf[k++] = s[i];
    buf[k] = 0;
    return k;
}

static int lex_number(lexer *L, size_t *pi) {
    const char *s = L->s;
    size_t n = L->n, i = *pi;
    // float: digits then (.digits)?e[+-]digits, or digits.digits
    size_t d = digits_at(s, n, i, dec), e = 0;
    if (d > i) {
        size_t j = d;
        if (j + 1 < n && s[j] == '.' && dec(s[j + 1])) j = digits_at(s, n, j + 1, dec);
        size_t k = j;
        if (k < n && (s[k] == 'e' || s[k] == 'E')) {
            k++;
            if (k < n && (s[k] == '+' || s[k] == '-')) k++;
            size_t m = digits_at(s, n, k, dec);
            if (m > k) e = m;
        }
        if (!e && j > d) e = j;
    }
    char buf[512];
    if (e) {
        if (e - i >= sizeof buf) return lex_fail(L, i, "number literal too long");
        copy_digits(s, i, e, buf, sizeof buf);
        emit(L, JT_FLOAT, i, s + i, e - i);
        L->out->v[L->out->n - 1].f = strtod(buf, NULL);
        *pi = e;
        return 0;
    }
    int base = 10;
    size_t st = i;
    if (s[i] == '0' && i + 1 < n && strchr("xXoObB", s[i + 1])) {
        char c = (char)(s[i + 1] | 0x20);
        base = c == 'x' ? 16 : c == 'o' ? 8 : 2;
        size_t j = i + 2;
        if (j < n && s[j] == '_') j++;
        e = digits_at(s, n, j, base == 16 ? hex : base == 8 ? oct : bin);
        if (e == j) return lex_fail(L, i, "bad number literal");
        st = j;
    } else if (s[i] == '0') {
        e = i + 1;
        while (e < n && (s[e] == '0' || (s[e] == '_' && e + 1 < n && s[e + 1] == '0'))) e++;
    } else e = d;
    if (e - st >= sizeof buf) return lex_fail(L, i, "number literal too long");
    copy_digits(s, st, e, buf, sizeof buf);
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, base);
    if (errno == ERANGE || v > INT64_MAX) return lex_fail(L, i, "integer literal beyond 64 bits is not supported");
    emit(L, JT_INT, i, s + i, e - i);
    L->out->v[L->out->n - 1].i = (int64_t)v;
    *pi = e;
    return 0;
}

// A string literal at *pi, decoded as Python's unicode-escape decodes it.
static int lex_string(lexer *L, size_t *pi) {
    const char *s = L->s;
    size_t n = L->n, i = *pi;
    char q = s[i];
    size_t j = i + 1;
    while (j < n && s[j] != q) j += s[j] == '\\' ? 2 : 1;
    if (j >= n) return lex_fail(L, i, "unexpected end of string");
    sbuf b = {0};
    for (size_t k = i + 1; k < j;) {
        if (s[k] != '\\') { sbuf_putc(&b, (uint8_t)s[k++]); continue; }
        char c = s[k + 1];
        k += 2;
        switch (c) {
        case '\n': break;
        case '\\': sbuf_putc(&b, '\\'); break;
        case '\'': sbuf_putc(&b, '\''); break;
        case '"': sbuf_putc(&b, '"'); break;
        case 'a': sbuf_putc(&b, '\a'); break;
        case 'b': sbuf_putc(&b, '\b'); break;
        case 'f': sbuf_putc(&b, '\f'); break;
        case 'n': sbuf_putc(&b, '\n'); break;
        case 'r': sbuf_putc(&b, '\r'); break;
        case 't': sbuf_putc(&b, '\t'); break;
        case 'v': sbuf_putc(&b, '\v'); break;
        case 'x': case 'u': case 'U': {
            size_t len = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (size_t m = 0; m < len; m++, k++) {
                if (k >= j || !hex(s[k])) { sbuf_free(&b); return lex_fail(L, i, "truncated escape in string literal"); }
                cp = cp * 16 + (uint32_t)(dec(s[k]) ? s[k] - '0' : (s[k] | 0x20) - 'a' + 10);
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
                sbuf_free(&b);
                return lex_fail(L, i, "escape of a surrogate or beyond U+10FFFF in a string literal is not supported");
            }
            jx_utf8_put(&b, cp);
            break;
        }
        case 'N': sbuf_free(&b); return lex_fail(L, i, "escape \\N{...} in a string literal is not supported");
        default:
            if (oct(c)) {
                uint32_t cp = (uint32_t)(c - '0');
                for (int m = 0; m < 2 && k < j && oct(s[k]); m++, k++) cp = cp * 8 + (uint32_t)(s[k] - '0');
                jx_utf8_put(&b, cp);
            } else {   // unknown escapes stay as written
                sbuf_putc(&b, '\\');
                k--;
            }
        }
    }
    emit(L, JT_STRING, i, jx_strdup(L->a, b.data ? (const char *)b.data : "", b.len), b.len);
    sbuf_free(&b);
    *pi = j + 1;
    return 0;
}

static const char *const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                  ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

// The tokens of one {{ }} or {% %} from *pi to its end tag; *pi moves past it
// and *ends_line says whether what the end tag consumed ended with a newline.
static int lex_tag(lexer *L, size_t *pi, int is_var, int *ends_line) {
    const char *s = L->s;
    size_t n = L->n, i = *pi;
    char stack[JX_MAX_NESTING];
    int depth = 0;
    for (;;) {
        if (i >= n) return lex_fail(L, i, "unexpected end of template inside a tag");
        if (depth == 0) {
            size_t e = block_end_at(L, i, is_var ? "}}" : "%}");
            if (is_var && e && s[i] == '+') e = 0;   // "+}}" is not an end in jinja2
            if (e) {
                emit(L, is_var ? JT_VAR_END : JT_BLOCK_END, i, s + i, e - i);
                *ends_line = s[e - 1] == '\n';
                *pi = e;
                return 0;
            }
        }
        size_t k = space_at(s, n, i);
        if (k) { i += k; continue; }
        char c = s[i];
        if (dec(c) && !(i > 0 && s[i - 1] == '.' && 0)) {
            if (lex_number(L, &i)) return -1;
            continue;
        }
        if (is_name_start(c)) {
            size_t j = i;
            while (j < n && is_name_char(s[j])) j++;
            emit(L, JT_NAME, i, jx_strdup(L->a, s + i, j - i), j - i);
            i = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            if (lex_string(L, &i)) return -1;
            continue;
        }
        size_t m;
        for (m = 0; m < sizeof ops / sizeof *ops; m++) {
            size_t len = strlen(ops[m]);
            if (i + len <= n && memcmp(s + i, ops[m], len) == 0) break;
        }
        if (m == sizeof ops / sizeof *ops) return lex_fail(L, i, "unexpected character");
        const char *op = ops[m];
        if (strchr("([{", op[0])) {
            if (depth == JX_MAX_NESTING) return lex_fail(L, i, "brackets nested too deep (limit 256)");
            stack[depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
        } else if (strchr(")]}", op[0])) {
            if (depth == 0 || stack[depth - 1] != op[0]) return lex_fail(L, i, "unbalanced bracket");
            depth--;
        }
        emit(L, JT_OP, i, op, strlen(op));
        i += strlen(op);
    }
}

// "{%" sign? ws* "raw" ws* ("-%}" ws* | "%}") at i: its end, or 0.
static size_t raw_begin_at(lexer *L, size_t i, char *sign) {
    const char *s = L->s;
    size_t n = L->n;
    i += 2;
    *sign = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *sign = s[i++];
    i = skip_space(s, n, i);
    if (i + 3 > n || memcmp(s + i, "raw", 3) != 0) return 0;
    i = skip_space(s, n, i + 3);
    if (i + 3 <= n && memcmp(s + i, "-%}", 3) == 0) return skip_space(s, n, i + 3);
    if (i + 2 <= n && memcmp(s + i, "%}", 2) == 0) return i + 2;
    return 0;
}

// The "{% endraw %}" after i: its start (*st), sign, and end; -1 if none.
static int raw_end_find(lexer *L, size_t i, size_t *st, char *sign, size_t *end) {
    const char *s = L->s;
    size_t n = L->n;
    for (; i + 1 < n; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        size_t j = i + 2;
        char sg = 0;
        if (j < n && (s[j] == '-' || s[j] == '+')) sg = s[j++];
        j = skip_space(s, n, j);
        if (j + 6 > n || memcmp(s + j, "endraw", 6) != 0) continue;
        j = skip_space(s, n, j + 6);
        size_t e = block_end_at(L, j, "%}");
        if (!e) continue;
        *st = i;
        *sign = sg;
        *end = e;
        return 0;
    }
    return -1;
}

int jx_lex(jinja_arena *a, const char *src, size_t n, const char *name, jx_toks *out, rl_err *err) {
    // Newlines normalised and one trailing newline dropped, as jinja2 does.
    char *s = jx_alloc(a, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else s[m++] = src[i];
    }
    if (m && s[m - 1] == '\n') m--;
    lexer L = {a, s, m, name, out, err, 0, 1};
    memset(out, 0, sizeof *out);
    size_t i = 0;
    int line_starting = 1;
    while (i < m) {
        size_t t = i;
        while (t + 1 < m && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#'))) t++;
        if (t + 1 >= m) {
            emit(&L, JT_TEXT, i, s + i, m - i);
            break;
        }
        char kind = s[t + 1];
        char rsign;
        size_t raw_end = kind == '%' ? raw_begin_at(&L, t, &rsign) : 0;
        if (raw_end) {
            emit_text(&L, i, t, rsign, 0, line_starting);
            size_t est, eend;
            char esign;
            if (raw_end_find(&L, raw_end, &est, &esign, &eend)) return lex_fail(&L, t, "missing end of raw directive");
            size_t save = L.out->n;
            emit_text(&L, raw_end, est, esign, 0, s[raw_end - 1] == '\n');
            for (size_t k = save; k < L.out->n; k++) L.out->v[k].kind = JT_RAW;
            line_starting = s[eend - 1] == '\n';
            i = eend;
            continue;
        }
        char sign = t + 2 < m && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        emit_text(&L, i, t, sign, kind == '{', line_starting);
        size_t j = t + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t q = j;
            while (q + 1 < m && !(s[q] == '#' && s[q + 1] == '}')) q++;
            if (q + 1 >= m) return lex_fail(&L, t, "missing end of comment tag");
            size_t e;
            if (q > j && s[q - 1] == '-') e = skip_space(s, m, q + 2);
            else if (q > j && s[q - 1] == '+') e = q + 2;
            else {
                e = q + 2;
                if (e < m && s[e] == '\n') e++;
            }
            line_starting = s[e - 1] == '\n';
            i = e;
            continue;
        }
        emit(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, t, s + t, j - t);
        if (lex_tag(&L, &j, kind == '{', &line_starting)) return -1;
        i = j;
    }
    emit(&L, JT_EOF, m, s + m, 0);
    return 0;
}
