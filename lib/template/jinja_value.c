// jinja_value.c — values of the Jinja interpreter as Python sees them: the
// arena they live in, truthiness, equality and order, str() and repr()
// (floats as Python's shortest round-trip repr), json.dumps, and json.loads
// (jinja_from_json).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"

// ---- arena -----------------------------------------------------------------
struct jx_block {
    struct jx_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define JX_BLOCK_SIZE ((size_t)64 << 10)

jinja_arena *jinja_arena_new(void) {
    jinja_arena *a = xmalloc(sizeof *a);
    memset(a, 0, sizeof *a);
    return a;
}

void jinja_arena_free(jinja_arena *a) {
    if (!a) return;
    for (struct jx_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

void *jx_alloc(jinja_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct jx_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        // A large request gets a block of its own, behind the current one, so
        // the current block keeps serving small requests.
        size_t cap = n > JX_BLOCK_SIZE / 4 ? n : JX_BLOCK_SIZE;
        struct jx_block *nb = xmalloc(sizeof *nb + cap);
        nb->used = 0;
        nb->cap = cap;
        if (b && cap != JX_BLOCK_SIZE) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *jx_strdup(jinja_arena *a, const char *s, size_t n) {
    char *p = jx_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    return p;
}

// ---- constructors ------------------------------------------------------------
jinja_val *jx_new(jinja_arena *a, jx_kind kind) {
    jinja_val *v = jx_alloc(a, sizeof *v);
    v->kind = (uint8_t)kind;
    if (kind == JV_LIST) v->u.l.a = a;
    if (kind == JV_DICT) v->u.d.a = a;
    return v;
}

jinja_val *jx_undef(jinja_arena *a) { return jx_new(a, JV_UNDEF); }
jinja_val *jinja_none(jinja_arena *a) { return jx_new(a, JV_NONE); }
jinja_val *jinja_list(jinja_arena *a) { return jx_new(a, JV_LIST); }
jinja_val *jinja_dict(jinja_arena *a) { return jx_new(a, JV_DICT); }

jinja_val *jx_tuple(jinja_arena *a) {
    jinja_val *v = jx_new(a, JV_LIST);
    v->tuple = 1;
    return v;
}

jinja_val *jinja_bool(jinja_arena *a, int b) {
    jinja_val *v = jx_new(a, JV_BOOL);
    v->u.b = !!b;
    return v;
}

jinja_val *jinja_int(jinja_arena *a, int64_t i) {
    jinja_val *v = jx_new(a, JV_INT);
    v->u.i = i;
    return v;
}

jinja_val *jinja_float(jinja_arena *a, double f) {
    jinja_val *v = jx_new(a, JV_FLOAT);
    v->u.f = f;
    return v;
}

jinja_val *jinja_str(jinja_arena *a, const char *s, size_t n) {
    jinja_val *v = jx_new(a, JV_STR);
    v->u.s.p = jx_strdup(a, s, n);
    v->u.s.n = n;
    return v;
}

void jinja_list_push(jinja_val *list, jinja_val *v) {
    if (list->u.l.n == list->u.l.cap) {
        size_t cap = GROW_CAP(list->u.l.cap, list->u.l.n + 1, 4, sizeof *list->u.l.v);
        jinja_val **nv = jx_alloc(list->u.l.a, cap * sizeof *nv);
        if (list->u.l.n) memcpy(nv, list->u.l.v, list->u.l.n * sizeof *nv);
        list->u.l.v = nv;
        list->u.l.cap = cap;
    }
    list->u.l.v[list->u.l.n++] = v;
}

static int key_equal(const jinja_val *k, const jinja_val *key) {
    if (k->kind == JV_STR && key->kind == JV_STR)
        return k->u.s.n == key->u.s.n && memcmp(k->u.s.p, key->u.s.p, k->u.s.n) == 0;
    return jx_equal(k, key);
}

jinja_val *jx_dict_get(const jinja_val *d, const jinja_val *key) {
    for (size_t i = 0; i < d->u.d.n; i++)
        if (key_equal(d->u.d.k[i], key)) return d->u.d.v[i];
    return NULL;
}

jinja_val *jx_dict_gets(const jinja_val *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->u.d.n; i++) {
        const jinja_val *k = d->u.d.k[i];
        if (k->kind == JV_STR && k->u.s.n == n && memcmp(k->u.s.p, key, n) == 0) return d->u.d.v[i];
    }
    return NULL;
}

void jx_dict_put(jinja_val *d, jinja_val *key, jinja_val *v) {
    for (size_t i = 0; i < d->u.d.n; i++)
        if (key_equal(d->u.d.k[i], key)) {
            d->u.d.v[i] = v;
            return;
        }
    if (d->u.d.n == d->u.d.cap) {
        size_t cap = GROW_CAP(d->u.d.cap, d->u.d.n + 1, 4, sizeof *d->u.d.v);
        jinja_val **nk = jx_alloc(d->u.d.a, cap * sizeof *nk);
        jinja_val **nv = jx_alloc(d->u.d.a, cap * sizeof *nv);
        if (d->u.d.n) {
            memcpy(nk, d->u.d.k, d->u.d.n * sizeof *nk);
            memcpy(nv, d->u.d.v, d->u.d.n * sizeof *nv);
        }
        d->u.d.k = nk;
        d->u.d.v = nv;
        d->u.d.cap = cap;
    }
    d->u.d.k[d->u.d.n] = key;
    d->u.d.v[d->u.d.n++] = v;
}

void jinja_dict_set(jinja_val *dict, const char *key, size_t klen, jinja_val *v) {
    jx_dict_put(dict, jinja_str(dict->u.d.a, key, klen), v);
}

// ---- UTF-8 -------------------------------------------------------------------
size_t jx_utf8_next(const char *s, size_t n, size_t i, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) len = 1;
    for (size_t k = 1; k < len; k++)
        if ((p[i + k] & 0xC0) != 0x80) {
            len = 1;
            break;
        }
    uint32_t v = c;
    if (len == 2) v = (c & 0x1F) << 6 | (p[i + 1] & 0x3F);
    if (len == 3) v = (c & 0x0F) << 12 | (p[i + 1] & 0x3F) << 6 | (p[i + 2] & 0x3F);
    if (len == 4) v = (c & 0x07) << 18 | (p[i + 1] & 0x3F) << 12 | (p[i + 2] & 0x3F) << 6 | (p[i + 3] & 0x3F);
    if (cp) *cp = v;
    return i + len;
}

size_t jx_utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i = jx_utf8_next(s, n, i, NULL)) k++;
    return k;
}

size_t jx_utf8_offset(const char *s, size_t n, size_t k) {
    size_t i = 0;
    while (k-- && i < n) i = jx_utf8_next(s, n, i, NULL);
    return i;
}

void jx_utf8_put(sbuf *b, uint32_t cp) {
    if (cp < 0x80) sbuf_putc(b, (uint8_t)cp);
    else if (cp < 0x800) {
        sbuf_putc(b, (uint8_t)(0xC0 | cp >> 6));
        sbuf_putc(b, (uint8_t)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        sbuf_putc(b, (uint8_t)(0xE0 | cp >> 12));
        sbuf_putc(b, (uint8_t)(0x80 | (cp >> 6 & 0x3F)));
        sbuf_putc(b, (uint8_t)(0x80 | (cp & 0x3F)));
    } else {
        sbuf_putc(b, (uint8_t)(0xF0 | cp >> 18));
        sbuf_putc(b, (uint8_t)(0x80 | (cp >> 12 & 0x3F)));
        sbuf_putc(b, (uint8_t)(0x80 | (cp >> 6 & 0x3F)));
        sbuf_putc(b, (uint8_t)(0x80 | (cp & 0x3F)));
    }
}

int jx_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// ---- Python semantics --------------------------------------------------------
int jx_truthy(const jinja_val *v) {
    switch (v->kind) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0;
    case JV_STR: return v->u.s.n != 0;
    case JV_LIST: return v->gen || v->u.l.n != 0;
    case JV_DICT: return v->ns || v->u.d.n != 0;
    default: return 1;
    }
}

static int is_number(const jinja_val *v) { return v->kind == JV_BOOL || v->kind == JV_INT || v->kind == JV_FLOAT; }
static double num_f(const jinja_val *v) {
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}
static int64_t num_i(const jinja_val *v) { return v->kind == JV_INT ? v->u.i : v->u.b; }

int jx_equal(const jinja_val *x, const jinja_val *y) {
    if (is_number(x) && is_number(y)) {
        if (x->kind == JV_FLOAT || y->kind == JV_FLOAT) {
            // Python compares an int and a float exactly; doubles hold every
            // int a template can make up to 2^53, enough here.
            return num_f(x) == num_f(y);
        }
        return num_i(x) == num_i(y);
    }
    if (x->kind != y->kind) return 0;
    switch (x->kind) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return x->u.s.n == y->u.s.n && memcmp(x->u.s.p, y->u.s.p, x->u.s.n) == 0;
    case JV_LIST:
        if (x->tuple != y->tuple || x->u.l.n != y->u.l.n) return 0;
        for (size_t i = 0; i < x->u.l.n; i++)
            if (!jx_equal(x->u.l.v[i], y->u.l.v[i])) return 0;
        return 1;
    case JV_DICT:
        if (x->ns || y->ns) return x == y;
        if (x->u.d.n != y->u.d.n) return 0;
        for (size_t i = 0; i < x->u.d.n; i++) {
            const jinja_val *o = jx_dict_get(y, x->u.d.k[i]);
            if (!o || !jx_equal(x->u.d.v[i], o)) return 0;
        }
        return 1;
    default: return x == y;
    }
}

int jx_compare(const jinja_val *x, const jinja_val *y, int *res) {
    if (is_number(x) && is_number(y)) {
        if (x->kind == JV_FLOAT || y->kind == JV_FLOAT) {
            double a = num_f(x), b = num_f(y);
            *res = a < b ? -1 : a > b ? 1 : a == b ? 0 : 2;   // 2: a NaN, every comparison false
        } else {
            int64_t a = num_i(x), b = num_i(y);
            *res = a < b ? -1 : a > b;
        }
        return 0;
    }
    if (x->kind == JV_STR && y->kind == JV_STR) {
        // Byte order of UTF-8 is code point order.
        size_t n = x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n;
        int c = memcmp(x->u.s.p, y->u.s.p, n);
        *res = c ? (c < 0 ? -1 : 1) : x->u.s.n < y->u.s.n ? -1 : x->u.s.n > y->u.s.n;
        return 0;
    }
    if (x->kind == JV_LIST && y->kind == JV_LIST && x->tuple == y->tuple) {
        for (size_t i = 0; i < x->u.l.n && i < y->u.l.n; i++) {
            if (jx_equal(x->u.l.v[i], y->u.l.v[i])) continue;
            return jx_compare(x->u.l.v[i], y->u.l.v[i], res);
        }
        *res = x->u.l.n < y->u.l.n ? -1 : x->u.l.n > y->u.l.n;
        return 0;
    }
    return -1;
}

const char *jx_type_name(const jinja_val *v) {
    switch (v->kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->gen ? "generator" : v->tuple ? "tuple" : "list";
    case JV_DICT: return v->ns ? "Namespace" : "dict";
    case JV_LOOP: return "LoopContext";
    case JV_MACRO: return "Macro";
    default: return "function";
    }
}

// ---- str() and repr() --------------------------------------------------------
void jx_float_repr(sbuf *b, double f) {
    if (isnan(f)) { sbuf_put(b, "nan", 3); return; }
    if (isinf(f)) { sbuf_put(b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3); return; }
    // The shortest digits that read back as f, then Python's layout: fixed
    // notation for exponents -4..15, else d.ddde+XX.
    char buf[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    char digits[32];
    size_t nd = 0;
    const char *p = buf;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int e10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) sbuf_putc(b, '-');
    if (e10 < -4 || e10 >= 16) {
        sbuf_putc(b, (uint8_t)digits[0]);
        if (nd > 1) {
            sbuf_putc(b, '.');
            sbuf_put(b, digits + 1, nd - 1);
        }
        sbuf_printf(b, "e%c%02d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
    } else if (e10 < 0) {
        sbuf_put(b, "0.", 2);
        for (int i = 0; i < -e10 - 1; i++) sbuf_putc(b, '0');
        sbuf_put(b, digits, nd);
    } else {
        for (int i = 0; i <= e10; i++) sbuf_putc(b, (uint8_t)((size_t)i < nd ? digits[i] : '0'));
        sbuf_putc(b, '.');
        if ((size_t)e10 + 1 < nd) sbuf_put(b, digits + e10 + 1, nd - (size_t)e10 - 1);
        else sbuf_putc(b, '0');
    }
}

// str.isprintable for one code point: not a control, format, separator
// (but ' '), surrogate, private-use or unassigned character. Only the ranges
// chat text meets are listed; the rest of the BMP and beyond counts as printable.
static int py_printable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return 0;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
        (c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB) || c == 0x061C || c == 0x180E ||
        (c >= 0x0600 && c <= 0x0605) || c == 0x06DD || c == 0x070F || c >= 0xF0000 ||
        (c >= 0xE0000 && c <= 0xE007F))
        return 0;
    return 1;
}

void jx_str_repr(sbuf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sbuf_putc(b, (uint8_t)q);
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t j = jx_utf8_next(s, n, i, &c);
        if (c == (uint32_t)q || c == '\\') {
            sbuf_putc(b, '\\');
            sbuf_putc(b, (uint8_t)c);
        } else if (c == '\n') sbuf_put(b, "\\n", 2);
        else if (c == '\r') sbuf_put(b, "\\r", 2);
        else if (c == '\t') sbuf_put(b, "\\t", 2);
        else if (!py_printable(c)) {
            if (c < 0x100) sbuf_printf(b, "\\x%02x", c);
            else if (c < 0x10000) sbuf_printf(b, "\\u%04x", c);
            else sbuf_printf(b, "\\U%08x", c);
        } else sbuf_put(b, s + i, j - i);
        i = j;
    }
    sbuf_putc(b, (uint8_t)q);
}

static void repr_any(sbuf *b, const jinja_val *v, int depth) {
    if (depth > 200) { sbuf_put(b, "...", 3); return; }
    switch (v->kind) {
    case JV_STR:
        if (v->markup) sbuf_put(b, "Markup(", 7);
        jx_str_repr(b, v->u.s.p, v->u.s.n);
        if (v->markup) sbuf_putc(b, ')');
        return;
    case JV_LIST:
        sbuf_putc(b, v->tuple ? '(' : '[');
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i) sbuf_put(b, ", ", 2);
            repr_any(b, v->u.l.v[i], depth + 1);
        }
        if (v->tuple && v->u.l.n == 1) sbuf_putc(b, ',');
        sbuf_putc(b, v->tuple ? ')' : ']');
        return;
    case JV_DICT:
        if (v->ns) { sbuf_printf(b, "<Namespace %p>", (const void *)v); return; }
        sbuf_putc(b, '{');
        for (size_t i = 0; i < v->u.d.n; i++) {
            if (i) sbuf_put(b, ", ", 2);
            repr_any(b, v->u.d.k[i], depth + 1);
            sbuf_put(b, ": ", 2);
            repr_any(b, v->u.d.v[i], depth + 1);
        }
        sbuf_putc(b, '}');
        return;
    default: jx_str(b, v); return;
    }
}

void jx_html_escape(sbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '&') sbuf_put(b, "&amp;", 5);
        else if (ch == '<') sbuf_put(b, "&lt;", 4);
        else if (ch == '>') sbuf_put(b, "&gt;", 4);
        else if (ch == '"') sbuf_put(b, "&#34;", 5);
        else if (ch == '\'') sbuf_put(b, "&#39;", 5);
        else sbuf_putc(b, (uint8_t)ch);
    }
}

void jx_str(sbuf *b, const jinja_val *v) {
    switch (v->kind) {
    case JV_UNDEF: return;
    case JV_NONE: sbuf_put(b, "None", 4); return;
    case JV_BOOL: v->u.b ? sbuf_put(b, "True", 4) : sbuf_put(b, "False", 5); return;
    case JV_INT: sbuf_printf(b, "%lld", (long long)v->u.i); return;
    case JV_FLOAT: jx_float_repr(b, v->u.f); return;
    case JV_STR: sbuf_put(b, v->u.s.p, v->u.s.n); return;
    case JV_LIST: case JV_DICT: repr_any(b, v, 0); return;
    case JV_LOOP: sbuf_put(b, "<LoopContext>", 13); return;
    case JV_MACRO: sbuf_put(b, "<Macro>", 7); return;
    default: sbuf_put(b, "<function>", 10); return;
    }
}

// ---- json.dumps ----------------------------------------------------------------
static void json_str(sbuf *b, const char *s, size_t n, int ascii) {
    sbuf_putc(b, '"');
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t j = jx_utf8_next(s, n, i, &c);
        switch (c) {
        case '"': sbuf_put(b, "\\\"", 2); break;
        case '\\': sbuf_put(b, "\\\\", 2); break;
        case '\n': sbuf_put(b, "\\n", 2); break;
        case '\r': sbuf_put(b, "\\r", 2); break;
        case '\t': sbuf_put(b, "\\t", 2); break;
        case '\b': sbuf_put(b, "\\b", 2); break;
        case '\f': sbuf_put(b, "\\f", 2); break;
        default:
            if (c < 0x20) sbuf_printf(b, "\\u%04x", c);
            else if (ascii && c >= 0x7F) {
                if (c >= 0x10000) {
                    uint32_t v = c - 0x10000;
                    sbuf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else sbuf_printf(b, "\\u%04x", c);
            } else sbuf_put(b, s + i, j - i);
        }
        i = j;
    }
    sbuf_putc(b, '"');
}

static void json_newline(sbuf *b, const jx_json_opts *o, int depth) {
    sbuf_putc(b, '\n');
    for (int i = 0; i < depth; i++) sbuf_put(b, o->indent, o->indent_n);
}

static int json_key(sbuf *b, const jinja_val *k, const jx_json_opts *o, rl_err *err) {
    switch (k->kind) {
    case JV_STR: json_str(b, k->u.s.p, k->u.s.n, o->ascii); return 0;
    case JV_INT: sbuf_printf(b, "\"%lld\"", (long long)k->u.i); return 0;
    case JV_BOOL: sbuf_put(b, k->u.b ? "\"true\"" : "\"false\"", k->u.b ? 6 : 7); return 0;
    case JV_NONE: sbuf_put(b, "\"null\"", 6); return 0;
    case JV_FLOAT:
        sbuf_putc(b, '"');
        if (isnan(k->u.f)) sbuf_put(b, "NaN", 3);
        else if (isinf(k->u.f)) k->u.f < 0 ? sbuf_put(b, "-Infinity", 9) : sbuf_put(b, "Infinity", 8);
        else jx_float_repr(b, k->u.f);
        sbuf_putc(b, '"');
        return 0;
    default: return err_set(err, "keys must be str, int, float, bool or None, not %s", jx_type_name(k));
    }
}

static int key_cmp_sort(const jinja_val *x, const jinja_val *y, int *res) { return jx_compare(x, y, res); }

int jx_tojson(sbuf *b, const jinja_val *v, const jx_json_opts *o, int depth, rl_err *err) {
    if (depth > 500) return err_set(err, "maximum recursion depth exceeded while encoding a JSON object");
    switch (v->kind) {
    case JV_NONE: sbuf_put(b, "null", 4); return 0;
    case JV_BOOL: v->u.b ? sbuf_put(b, "true", 4) : sbuf_put(b, "false", 5); return 0;
    case JV_INT: sbuf_printf(b, "%lld", (long long)v->u.i); return 0;
    case JV_FLOAT:
        if (isnan(v->u.f)) sbuf_put(b, "NaN", 3);
        else if (isinf(v->u.f)) v->u.f < 0 ? sbuf_put(b, "-Infinity", 9) : sbuf_put(b, "Infinity", 8);
        else jx_float_repr(b, v->u.f);
        return 0;
    case JV_STR: json_str(b, v->u.s.p, v->u.s.n, o->ascii); return 0;
    case JV_LIST:
        if (v->gen) break;
        if (v->u.l.n == 0) { sbuf_put(b, "[]", 2); return 0; }
        sbuf_putc(b, '[');
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i) sbuf_put(b, o->item_sep, strlen(o->item_sep));
            if (o->indent) json_newline(b, o, depth + 1);
            if (jx_tojson(b, v->u.l.v[i], o, depth + 1, err)) return -1;
        }
        if (o->indent) json_newline(b, o, depth);
        sbuf_putc(b, ']');
        return 0;
    case JV_DICT: {
        if (v->ns) break;
        if (v->u.d.n == 0) { sbuf_put(b, "{}", 2); return 0; }
        size_t n = v->u.d.n;
        size_t *order = xmalloc(n * sizeof *order);
        for (size_t i = 0; i < n; i++) order[i] = i;
        if (o->sort_keys) {   // insertion sort: stable, as Python's sorted
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0; j--) {
                    int r;
                    if (key_cmp_sort(v->u.d.k[order[j - 1]], v->u.d.k[order[j]], &r)) {
                        free(order);
                        return err_set(err, "'<' not supported between instances of '%s' and '%s'",
                                       jx_type_name(v->u.d.k[order[j]]), jx_type_name(v->u.d.k[order[j - 1]]));
                    }
                    if (r <= 0 || r == 2) break;
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        }
        sbuf_putc(b, '{');
        for (size_t i = 0; i < n; i++) {
            if (i) sbuf_put(b, o->item_sep, strlen(o->item_sep));
            if (o->indent) json_newline(b, o, depth + 1);
            if (json_key(b, v->u.d.k[order[i]], o, err) ||
                (sbuf_put(b, o->key_sep, strlen(o->key_sep)), jx_tojson(b, v->u.d.v[order[i]], o, depth + 1, err))) {
                free(order);
                return -1;
            }
        }
        free(order);
        if (o->indent) json_newline(b, o, depth);
        sbuf_putc(b, '}');
        return 0;
    }
    default: break;
    }
    return err_set(err, "Object of type %s is not JSON serializable", jx_type_name(v));
}

// ---- json.loads ------------------------------------------------------------------
typedef struct {
    jinja_arena *a;
    const char *s;
    size_t n, i;
    int depth;
    rl_err *err;
} jparse;

static void jp_ws(jparse *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static int jp_fail(jparse *p, const char *what) { return err_set(p->err, "column %zu: %s", p->i + 1, what); }

static int jp_hex4(jparse *p, uint32_t *out) {
    if (p->n - p->i < 4) return jp_fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return jp_fail(p, "bad \\u escape");
    }
    *out = v;
    return 0;
}

static int jp_string(jparse *p, jinja_val **out) {
    sbuf b = {0};
    p->i++;   // the opening quote
    for (;;) {
        if (p->i >= p->n) { sbuf_free(&b); return jp_fail(p, "unterminated string"); }
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') { p->i++; break; }
        if (c < 0x20) { sbuf_free(&b); return jp_fail(p, "control character in string"); }
        if (c != '\\') { sbuf_putc(&b, c); p->i++; continue; }
        p->i++;
        if (p->i >= p->n) { sbuf_free(&b); return jp_fail(p, "unterminated string"); }
        char e = p->s[p->i++];
        switch (e) {
        case '"': sbuf_putc(&b, '"'); break;
        case '\\': sbuf_putc(&b, '\\'); break;
        case '/': sbuf_putc(&b, '/'); break;
        case 'b': sbuf_putc(&b, '\b'); break;
        case 'f': sbuf_putc(&b, '\f'); break;
        case 'n': sbuf_putc(&b, '\n'); break;
        case 'r': sbuf_putc(&b, '\r'); break;
        case 't': sbuf_putc(&b, '\t'); break;
        case 'u': {
            uint32_t cp;
            if (jp_hex4(p, &cp)) { sbuf_free(&b); return -1; }
            if (cp >= 0xD800 && cp < 0xDC00 && p->n - p->i >= 6 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                size_t save = p->i;
                uint32_t lo;
                p->i += 2;
                if (jp_hex4(p, &lo)) { sbuf_free(&b); return -1; }
                if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else p->i = save;
            }
            // A lone surrogate (Python keeps it in the str) cannot be UTF-8: refuse it.
            if (cp >= 0xD800 && cp < 0xE000) { sbuf_free(&b); return jp_fail(p, "lone surrogate in \\u escape"); }
            jx_utf8_put(&b, cp);
            break;
        }
        default: sbuf_free(&b); return jp_fail(p, "bad escape in string");
        }
    }
    *out = jinja_str(p->a, b.data ? (const char *)b.data : "", b.len);
    sbuf_free(&b);
    return 0;
}

static int jp_number(jparse *p, jinja_val **out) {
    size_t st = p->i;
    int is_float = 0;
    if (p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jp_fail(p, "bad number");
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        is_float = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jp_fail(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_float = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jp_fail(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    char buf[400];
    size_t len = p->i - st;
    if (len >= sizeof buf) return jp_fail(p, "number too long");
    memcpy(buf, p->s + st, len);
    buf[len] = 0;
    if (is_float) {
        *out = jinja_float(p->a, strtod(buf, NULL));
        return 0;
    }
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE) return err_set(p->err, "column %zu: integer %s is beyond 64 bits", st + 1, buf);
    *out = jinja_int(p->a, v);
    return 0;
}

static int jp_value(jparse *p, jinja_val **out) {
    jp_ws(p);
    if (p->i >= p->n) return jp_fail(p, "expected a value");
    if (++p->depth > 1000) return jp_fail(p, "nesting too deep");
    char c = p->s[p->i];
    int rc = 0;
    if (c == '{') {
        jinja_val *d = jinja_dict(p->a);
        p->i++;
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == '}') p->i++;
        else
            for (;;) {
                jp_ws(p);
                if (p->i >= p->n || p->s[p->i] != '"') { rc = jp_fail(p, "expected a key string"); break; }
                jinja_val *k, *v;
                if ((rc = jp_string(p, &k))) break;
                jp_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') { rc = jp_fail(p, "expected ':'"); break; }
                p->i++;
                if ((rc = jp_value(p, &v))) break;
                jx_dict_put(d, k, v);
                jp_ws(p);
                if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
                if (p->i < p->n && p->s[p->i] == '}') { p->i++; break; }
                rc = jp_fail(p, "expected ',' or '}'");
                break;
            }
        *out = d;
    } else if (c == '[') {
        jinja_val *l = jinja_list(p->a);
        p->i++;
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == ']') p->i++;
        else
            for (;;) {
                jinja_val *v;
                if ((rc = jp_value(p, &v))) break;
                jinja_list_push(l, v);
                jp_ws(p);
                if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
                if (p->i < p->n && p->s[p->i] == ']') { p->i++; break; }
                rc = jp_fail(p, "expected ',' or ']'");
                break;
            }
        *out = l;
    } else if (c == '"') rc = jp_string(p, out);
    else if (p->n - p->i >= 9 && memcmp(p->s + p->i, "-Infinity", 9) == 0) { p->i += 9; *out = jinja_float(p->a, -INFINITY); }
    else if (c == '-' || (c >= '0' && c <= '9')) rc = jp_number(p, out);
    else if (p->n - p->i >= 4 && memcmp(p->s + p->i, "true", 4) == 0) { p->i += 4; *out = jinja_bool(p->a, 1); }
    else if (p->n - p->i >= 5 && memcmp(p->s + p->i, "false", 5) == 0) { p->i += 5; *out = jinja_bool(p->a, 0); }
    else if (p->n - p->i >= 4 && memcmp(p->s + p->i, "null", 4) == 0) { p->i += 4; *out = jinja_none(p->a); }
    else if (p->n - p->i >= 3 && memcmp(p->s + p->i, "NaN", 3) == 0) { p->i += 3; *out = jinja_float(p->a, NAN); }
    else if (p->n - p->i >= 8 && memcmp(p->s + p->i, "Infinity", 8) == 0) { p->i += 8; *out = jinja_float(p->a, INFINITY); }
    else rc = jp_fail(p, "expected a value");
    p->depth--;
    return rc;
}

int jinja_from_json(jinja_arena *a, const char *s, size_t n, jinja_val **out, rl_err *err) {
    jparse p = {a, s, n, 0, 0, err};
    if (jp_value(&p, out)) return -1;
    jp_ws(&p);
    if (p.i != n) return jp_fail(&p, "extra data after the value");
    return 0;
}
