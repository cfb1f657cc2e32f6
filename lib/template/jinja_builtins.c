// jinja_builtins.c — the filters, tests and methods a template may call, each
// as jinja2 3.1 (filters, tests) or Python's str/dict/list (methods) behaves.
// Filters and tests not listed here are refused when the template is parsed;
// a Python method not implemented here is refused when it is looked up.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "template/jinja_case.h"
#include "template/jinja_internal.h"

static jinja_val *NONE_ARG;   // marks "not given" in argument binding (compared by address only)

// Binds call arguments to parameter names (Python's rules, no *args):
// out[i] is the value of names[i] or NULL when not given. 0, or -1 (error set).
static int bind(jx_ctx *c, int line, const char *fn, const jx_args *a, const char *const *names, size_t n,
                jinja_val **out) {
    (void)NONE_ARG;
    for (size_t i = 0; i < n; i++) out[i] = NULL;
    if (a->npos > n) return jx_fail(c, line, "%s() takes at most %zu argument(s) (%zu given)", fn, n, a->npos);
    for (size_t i = 0; i < a->npos; i++) out[i] = a->pos[i];
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < n; i++)
            if (!strcmp(names[i], a->kwn[k])) break;
        if (i == n) return jx_fail(c, line, "%s() got an unexpected keyword argument '%s'", fn, a->kwn[k]);
        if (out[i]) return jx_fail(c, line, "%s() got multiple values for argument '%s'", fn, a->kwn[k]);
        out[i] = a->kwv[k];
    }
    return 0;
}

#define BIND(fn, ...)                                                                  \
    static const char *const names_[] = {__VA_ARGS__};                                  \
    jinja_val *arg[sizeof names_ / sizeof *names_];                                     \
    if (bind(c, line, fn, args, names_, sizeof names_ / sizeof *names_, arg)) return -1

static jinja_val *to_str(jx_ctx *c, jinja_val *v) {
    if (v->kind == JV_STR) return v;
    sbuf b = {0};
    jx_str(&b, v);
    return jx_sbuf_str(c, &b);
}

static int is_int(const jinja_val *v) { return v->kind == JV_INT || v->kind == JV_BOOL; }
static int64_t ival(const jinja_val *v) { return v->kind == JV_INT ? v->u.i : v->u.b; }

static int need_str(jx_ctx *c, int line, const char *fn, jinja_val *v) {
    if (v->kind != JV_STR) return jx_fail(c, line, "%s: expected a string, got '%s'", fn, jx_type_name(v));
    return 0;
}
static int need_int(jx_ctx *c, int line, const char *fn, jinja_val *v) {
    if (!is_int(v)) return jx_fail(c, line, "%s: '%s' object cannot be interpreted as an integer", fn, jx_type_name(v));
    return 0;
}

// ---- case mapping, as Python's str methods (jinja_case.h) ---------------------------
typedef enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_SWAP } case_op;

static jinja_val *recase(jx_ctx *c, jinja_val *s, case_op op) {
    static void (*const FN[])(sbuf *, const char *, size_t) = {
        [CASE_UPPER] = jx_case_upper, [CASE_LOWER] = jx_case_lower, [CASE_TITLE] = jx_case_title,
        [CASE_CAPITALIZE] = jx_case_capitalize, [CASE_SWAP] = jx_case_swapcase};
    sbuf b = {0};
    FN[op](&b, s->u.s.p, s->u.s.n);
    return jx_sbuf_str(c, &b);
}

// The separators of jinja2's title filter: '-', whitespace and opening brackets.
static int title_sep(uint32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jx_isspace(cp);
}

// jinja2's title filter: the text split before and after each run of
// separators, each piece's first code point upper-cased and the rest
// lower-cased as a string of its own (item[0].upper() + item[1:].lower()).
static jinja_val *title_filter(jx_ctx *c, jinja_val *s) {
    sbuf b = {0};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t first_end = jx_utf8_next(p, n, i, &cp), end = first_end;
        int sep = title_sep(cp);
        while (end < n) {   // the piece: a run of separators, or of the rest
            size_t next = jx_utf8_next(p, n, end, &cp);
            if (sep != title_sep(cp)) break;
            end = next;
        }
        jx_case_upper(&b, p + i, first_end - i);
        jx_case_lower(&b, p + first_end, end - first_end);
        i = end;
    }
    return jx_sbuf_str(c, &b);
}

// ---- str helpers --------------------------------------------------------------------
static int in_chars(uint32_t cp, const jinja_val *chars) {
    if (!chars) return jx_isspace(cp);
    for (size_t i = 0; i < chars->u.s.n;) {
        uint32_t k;
        i = jx_utf8_next(chars->u.s.p, chars->u.s.n, i, &k);
        if (k == cp) return 1;
    }
    return 0;
}

// strip (left and/or right) the code points in chars (NULL: whitespace).
static jinja_val *strip(jx_ctx *c, jinja_val *s, const jinja_val *chars, int left, int right) {
    const char *p = s->u.s.p;
    size_t st = 0, e = s->u.s.n;
    while (left && st < e) {
        uint32_t cp;
        size_t j = jx_utf8_next(p, e, st, &cp);
        if (!in_chars(cp, chars)) break;
        st = j;
    }
    while (right && e > st) {
        size_t b = e - 1;
        while (b > st && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
        uint32_t cp;
        if (jx_utf8_next(p, e, b, &cp) != e) b = e - 1, cp = (unsigned char)p[b];
        if (!in_chars(cp, chars)) break;
        e = b;
    }
    if (st == 0 && e == s->u.s.n) return s;
    return jx_mkstr(c, p + st, e - st);
}

static jinja_val *replace(jx_ctx *c, int line, jinja_val *s, jinja_val *old, jinja_val *new_, int64_t count) {
    sbuf b = {0};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0;
    int64_t done = 0;
    if (old->u.s.n == 0) {   // Python inserts new between code points (and at both ends)
        for (;;) {
            if (count < 0 || done < count) { sbuf_put(&b, new_->u.s.p, new_->u.s.n); done++; }
            if (i >= n) break;
            size_t j = jx_utf8_next(p, n, i, NULL);
            sbuf_put(&b, p + i, j - i);
            i = j;
            if (b.len > JX_MAX_OUTPUT) break;
        }
    } else {
        while (i < n) {
            const char *f = (count < 0 || done < count) ? memmem(p + i, n - i, old->u.s.p, old->u.s.n) : NULL;
            if (!f) break;
            sbuf_put(&b, p + i, (size_t)(f - (p + i)));
            sbuf_put(&b, new_->u.s.p, new_->u.s.n);
            i = (size_t)(f - p) + old->u.s.n;
            done++;
            if (b.len > JX_MAX_OUTPUT) break;
        }
        sbuf_put(&b, p + i, n - i);
    }
    if (jx_check_size(c, line, b.len)) { sbuf_free(&b); return NULL; }
    return jx_sbuf_str(c, &b);
}

// str.split / str.rsplit (sep NULL: runs of whitespace).
static jinja_val *split(jx_ctx *c, int line, jinja_val *s, jinja_val *sep, int64_t maxsplit, int from_right) {
    jinja_arena *a = jx_arena(c);
    jinja_val *out = jinja_list(a);
    const char *p = s->u.s.p;
    size_t n = s->u.s.n;
    if (sep && sep->u.s.n == 0) { jx_fail(c, line, "empty separator"); return NULL; }
    if (!from_right) {
        if (!sep) {
            size_t i = 0;
            for (;;) {
                uint32_t cp;
                while (i < n) {
                    size_t j = jx_utf8_next(p, n, i, &cp);
                    if (!jx_isspace(cp)) break;
                    i = j;
                }
                if (i >= n) break;
                if (maxsplit >= 0 && (int64_t)out->u.l.n >= maxsplit) {
                    // the rest, right-stripped of whitespace
                    size_t e = n;
                    jinja_val *rest = strip(c, jx_mkstr(c, p + i, e - i), NULL, 0, 1);
                    jinja_list_push(out, rest);
                    break;
                }
                size_t st = i;
                while (i < n) {
                    size_t j = jx_utf8_next(p, n, i, &cp);
                    if (jx_isspace(cp)) break;
                    i = j;
                }
                jinja_list_push(out, jx_mkstr(c, p + st, i - st));
            }
            return out;
        }
        size_t i = 0;
        for (;;) {
            const char *f = (maxsplit < 0 || (int64_t)out->u.l.n < maxsplit) ? memmem(p + i, n - i, sep->u.s.p, sep->u.s.n) : NULL;
            if (!f) {
                jinja_list_push(out, jx_mkstr(c, p + i, n - i));
                return out;
            }
            jinja_list_push(out, jx_mkstr(c, p + i, (size_t)(f - (p + i))));
            i = (size_t)(f - p) + sep->u.s.n;
        }
    }
    // rsplit: collect from the right, then reverse.
    jinja_val *rev = jinja_list(a);
    if (!sep) {
        size_t e = n;
        for (;;) {
            while (e > 0) {
                size_t b = e - 1;
                while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
                uint32_t cp;
                jx_utf8_next(p, e, b, &cp);
                if (!jx_isspace(cp)) break;
                e = b;
            }
            if (e == 0) break;
            if (maxsplit >= 0 && (int64_t)rev->u.l.n >= maxsplit) {
                jinja_list_push(rev, strip(c, jx_mkstr(c, p, e), NULL, 1, 0));
                break;
            }
            size_t st = e;
            while (st > 0) {
                size_t b = st - 1;
                while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
                uint32_t cp;
                jx_utf8_next(p, st, b, &cp);
                if (jx_isspace(cp)) break;
                st = b;
            }
            jinja_list_push(rev, jx_mkstr(c, p + st, e - st));
            e = st;
        }
    } else {
        size_t e = n;
        for (;;) {
            const char *f = NULL;
            if (maxsplit < 0 || (int64_t)rev->u.l.n < maxsplit)
                for (size_t k = e; k >= sep->u.s.n; k--)
                    if (memcmp(p + k - sep->u.s.n, sep->u.s.p, sep->u.s.n) == 0) { f = p + k - sep->u.s.n; break; }
            if (!f) {
                jinja_list_push(rev, jx_mkstr(c, p, e));
                break;
            }
            size_t at = (size_t)(f - p);
            jinja_list_push(rev, jx_mkstr(c, p + at + sep->u.s.n, e - at - sep->u.s.n));
            e = at;
        }
    }
    for (size_t i = rev->u.l.n; i-- > 0;) jinja_list_push(out, rev->u.l.v[i]);
    return out;
}

// str.splitlines(keepends=False)
static jinja_val *splitlines(jx_ctx *c, jinja_val *s, int keepends) {
    jinja_val *out = jinja_list(jx_arena(c));
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, st = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t j = jx_utf8_next(p, n, i, &cp);
        int brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
                  cp == 0x2028 || cp == 0x2029;
        if (!brk) { i = j; continue; }
        if (cp == '\r' && j < n && p[j] == '\n') j++;
        jinja_list_push(out, jx_mkstr(c, p + st, (keepends ? j : i) - st));
        st = i = j;
    }
    if (st < n) jinja_list_push(out, jx_mkstr(c, p + st, n - st));
    return out;
}

static int str_find(jinja_val *s, jinja_val *sub, int from_right, int64_t *cp_index) {
    const char *p = s->u.s.p;
    size_t n = s->u.s.n;
    const char *f = NULL;
    if (!from_right) f = memmem(p, n, sub->u.s.p, sub->u.s.n);
    else
        for (size_t k = n + 1; k-- > 0;)
            if (k + sub->u.s.n <= n && memcmp(p + k, sub->u.s.p, sub->u.s.n) == 0) { f = p + k; break; }
    if (!f) { *cp_index = -1; return 0; }
    *cp_index = (int64_t)jx_utf8_len(p, (size_t)(f - p));
    return 1;
}

static int str_affix(jx_ctx *c, int line, jinja_val *s, jinja_val *x, int end, int *res) {
    if (x->kind == JV_LIST && x->tuple) {
        *res = 0;
        for (size_t i = 0; i < x->u.l.n && !*res; i++)
            if (str_affix(c, line, s, x->u.l.v[i], end, res)) return -1;
        return 0;
    }
    if (x->kind != JV_STR)
        return jx_fail(c, line, "%s first arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith", jx_type_name(x));
    *res = x->u.s.n <= s->u.s.n && memcmp(s->u.s.p + (end ? s->u.s.n - x->u.s.n : 0), x->u.s.p, x->u.s.n) == 0;
    return 0;
}

// str.format with "{}", "{0}" and "{name}" fields, no conversion or format spec.
static jinja_val *format(jx_ctx *c, int line, jinja_val *s, const jx_args *args) {
    sbuf b = {0};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, auto_i = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '}' ) {
            if (i + 1 < n && p[i + 1] == '}') { sbuf_putc(&b, '}'); i++; continue; }
            sbuf_free(&b);
            jx_fail(c, line, "Single '}' encountered in format string");
            return NULL;
        }
        if (p[i] != '{') { sbuf_putc(&b, (uint8_t)p[i]); continue; }
        if (i + 1 < n && p[i + 1] == '{') { sbuf_putc(&b, '{'); i++; continue; }
        const char *e = memchr(p + i, '}', n - i);
        if (!e) { sbuf_free(&b); jx_fail(c, line, "Single '{' encountered in format string"); return NULL; }
        const char *f = p + i + 1;
        size_t fl = (size_t)(e - f);
        jinja_val *v = NULL;
        if (fl == 0) {
            if (auto_i < args->npos) v = args->pos[auto_i++];
            else { sbuf_free(&b); jx_fail(c, line, "Replacement index %zu out of range for positional args tuple", auto_i); return NULL; }
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t k = 0, m;
            for (m = 0; m < fl && f[m] >= '0' && f[m] <= '9'; m++) k = k * 10 + (size_t)(f[m] - '0');
            if (m == fl && k < args->npos) v = args->pos[k];
        } else {
            size_t m;
            for (m = 0; m < fl && (f[m] == '_' || (f[m] | 0x20) >= 'a') && (f[m] | 0x20) <= 'z'; m++) {}
            for (size_t k = 0; m == fl && k < args->nkw && !v; k++)
                if (strlen(args->kwn[k]) == fl && memcmp(args->kwn[k], f, fl) == 0) v = args->kwv[k];
        }
        if (!v) {
            sbuf_free(&b);
            jx_fail(c, line, "str.format field '{%.*s}' is not supported", (int)(fl < 60 ? fl : 60), f);
            return NULL;
        }
        jx_str(&b, v);
        i = (size_t)(e - p);
    }
    if (jx_check_size(c, line, b.len)) { sbuf_free(&b); return NULL; }
    return jx_sbuf_str(c, &b);
}

// ---- sorting ------------------------------------------------------------------------
typedef struct {
    jx_ctx *c;
    int line;
    int failed;
    int case_sensitive;
    int reverse;
} sort_ctx;

static int sort_cmp(sort_ctx *S, jinja_val *x, jinja_val *y) {
    if (S->failed) return 0;
    int r;
    if (!S->case_sensitive && x->kind == JV_STR && y->kind == JV_STR) {
        x = recase(S->c, x, CASE_LOWER);
        y = recase(S->c, y, CASE_LOWER);
    }
    if (jx_compare(x, y, &r)) {
        S->failed = 1;
        jx_fail(S->c, S->line, "'<' not supported between instances of '%s' and '%s'", jx_type_name(x), jx_type_name(y));
        return 0;
    }
    if (r == 2) r = 0;
    return S->reverse ? -r : r;
}

// Stable merge sort of v[0..n) by keys k[0..n) (moved together).
static void merge_sort(sort_ctx *S, jinja_val **v, jinja_val **k, size_t n, jinja_val **tv, jinja_val **tk) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(S, v, k, h, tv, tk);
    merge_sort(S, v + h, k + h, n - h, tv, tk);
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n) {
        if (jx_step(S->c, S->line)) S->failed = 1;
        if (sort_cmp(S, k[j], k[i]) < 0) { tv[o] = v[j]; tk[o++] = k[j++]; }
        else { tv[o] = v[i]; tk[o++] = k[i++]; }
    }
    while (i < h) { tv[o] = v[i]; tk[o++] = k[i++]; }
    while (j < n) { tv[o] = v[j]; tk[o++] = k[j++]; }
    memcpy(v, tv, n * sizeof *v);
    memcpy(k, tk, n * sizeof *k);
}

static int sort_by(jx_ctx *c, int line, jinja_val *list, jinja_val **keys, int case_sensitive, int reverse) {
    size_t n = list->u.l.n;
    jinja_val **tv = xmalloc((n + 1) * sizeof *tv), **tk = xmalloc((n + 1) * sizeof *tk);
    sort_ctx S = {c, line, 0, case_sensitive, reverse};
    merge_sort(&S, list->u.l.v, keys, n, tv, tk);
    free(tv);
    free(tk);
    return S.failed ? -1 : 0;
}

// Item or attribute "a.b.0" of v as jinja2's make_attrgetter resolves it.
static jinja_val *attr_path(jx_ctx *c, int line, jinja_val *v, jinja_val *attr) {
    if (attr->kind == JV_INT) {
        jinja_val *out;
        jinja_val *key = attr;
        if (v->kind == JV_LIST) {
            int64_t i = attr->u.i < 0 ? attr->u.i + (int64_t)v->u.l.n : attr->u.i;
            return i >= 0 && (uint64_t)i < v->u.l.n ? v->u.l.v[i] : jx_undef(jx_arena(c));
        }
        if (v->kind == JV_DICT && (out = jx_dict_get(v, key))) return out;
        return jx_undef(jx_arena(c));
    }
    if (attr->kind != JV_STR) { jx_fail(c, line, "an attribute name must be a string"); return NULL; }
    const char *p = attr->u.s.p;
    size_t n = attr->u.s.n, st = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '.') continue;
        const char *part = p + st;
        size_t pl = i - st;
        st = i + 1;
        if (v->kind == JV_UNDEF) return v;
        int digits = pl > 0;
        for (size_t k = 0; k < pl; k++) digits &= part[k] >= '0' && part[k] <= '9';
        jinja_val *next = NULL;
        if (digits && v->kind == JV_LIST) {
            size_t idx = (size_t)strtoull(jx_strdup(jx_arena(c), part, pl), NULL, 10);
            next = idx < v->u.l.n ? v->u.l.v[idx] : NULL;
        } else if (v->kind == JV_DICT) next = jx_dict_gets(v, part, pl);
        v = next ? next : jx_undef(jx_arena(c));
    }
    return v;
}

// ---- filters -------------------------------------------------------------------------
static const char *const filter_names[] = {
    "abs", "attr", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
    "unique", "upper", NULL};

int jx_filter_known(const char *name) {
    for (int i = 0; filter_names[i]; i++)
        if (!strcmp(filter_names[i], name)) return 1;
    return 0;
}

static int len_of(jx_ctx *c, int line, jinja_val *v, int64_t *out) {
    switch (v->kind) {
    case JV_STR: *out = (int64_t)jx_utf8_len(v->u.s.p, v->u.s.n); return 0;
    case JV_LIST: if (v->gen) break; *out = (int64_t)v->u.l.n; return 0;
    case JV_DICT: if (v->ns) break; *out = (int64_t)v->u.d.n; return 0;
    case JV_UNDEF: *out = 0; return 0;
    default: break;
    }
    return jx_fail(c, line, "object of type '%s' has no len()", jx_type_name(v));
}

static int tojson_filter(jx_ctx *c, int line, jinja_val *v, const jx_args *args, jinja_val **out) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    char indent_buf[64];
    jx_json_opts o = {0, NULL, 0, ", ", ": ", 0};
    if (arg[0]) o.ascii = jx_truthy(arg[0]);
    if (arg[1] && arg[1]->kind != JV_NONE) {
        if (is_int(arg[1])) {
            int64_t k = ival(arg[1]);
            if (k < 0) k = 0;
            if (k > 60) return jx_fail(c, line, "tojson: an indent over 60 is not supported");
            memset(indent_buf, ' ', (size_t)k);
            o.indent = indent_buf;
            o.indent_n = (size_t)k;
        } else if (arg[1]->kind == JV_STR) {
            o.indent = arg[1]->u.s.p;
            o.indent_n = arg[1]->u.s.n;
        } else return jx_fail(c, line, "tojson: indent must be an int or a str");
        o.item_sep = ",";
    }
    if (arg[2] && arg[2]->kind != JV_NONE) {
        jinja_val *s = arg[2];
        if (s->kind != JV_LIST || s->u.l.n != 2 || s->u.l.v[0]->kind != JV_STR || s->u.l.v[1]->kind != JV_STR)
            return jx_fail(c, line, "tojson: separators must be a pair of strings");
        o.item_sep = s->u.l.v[0]->u.s.p;
        o.key_sep = s->u.l.v[1]->u.s.p;
    }
    if (arg[3]) o.sort_keys = jx_truthy(arg[3]);
    sbuf b = {0};
    rl_err e;
    if (jx_tojson(&b, v, &o, 0, &e)) {
        sbuf_free(&b);
        return jx_fail(c, line, "tojson: %s", e.msg);
    }
    if (jx_check_size(c, line, b.len)) { sbuf_free(&b); return -1; }
    *out = jx_sbuf_str(c, &b);
    return 0;
}

static int indent_filter(jx_ctx *c, int line, jinja_val *v, const jx_args *args, jinja_val **out) {
    BIND("indent", "width", "first", "blank");
    jinja_val *s = to_str(c, v);
    sbuf ind = {0};
    if (!arg[0]) sbuf_put(&ind, "    ", 4);
    else if (arg[0]->kind == JV_STR) sbuf_put(&ind, arg[0]->u.s.p, arg[0]->u.s.n);
    else if (is_int(arg[0])) {   // Python's " " * width: any width (the output limit bounds the result)
        if (ival(arg[0]) > 0 && jx_check_size(c, line, (size_t)ival(arg[0]))) return -1;
        for (int64_t i = 0; i < ival(arg[0]); i++) sbuf_putc(&ind, ' ');
    }
    else return jx_fail(c, line, "indent: width must be an int or a str");
    // jinja2 appends "\n" before splitting lines (so a trailing newline is dropped).
    sbuf t = {0};
    sbuf_put(&t, s->u.s.p, s->u.s.n);
    sbuf_putc(&t, '\n');
    jinja_val *lines = splitlines(c, jx_sbuf_str(c, &t), 0);
    sbuf b = {0};
    int blank = arg[2] && jx_truthy(arg[2]);
    if (arg[1] && jx_truthy(arg[1])) sbuf_put(&b, ind.data, ind.len);
    for (size_t i = 0; i < lines->u.l.n; i++) {
        jinja_val *l = lines->u.l.v[i];
        if (i) {
            sbuf_putc(&b, '\n');
            if (blank || l->u.s.n) sbuf_put(&b, ind.data, ind.len);
        }
        sbuf_put(&b, l->u.s.p, l->u.s.n);
        if (b.len > JX_MAX_OUTPUT) break;
    }
    sbuf_free(&ind);
    if (jx_check_size(c, line, b.len)) { sbuf_free(&b); return -1; }
    *out = jx_sbuf_str(c, &b);
    return 0;
}

// select/reject/selectattr/rejectattr: keep items whose (attribute's) test is
// true (select) or false (reject); no test: truthiness.
static int select_filter(jx_ctx *c, int line, jinja_val *v, const jx_args *args, int by_attr, int keep, jinja_val **out) {
    // jinja2 walks the value only when it is true: none|select(...) is empty.
    jinja_val *items = jx_truthy(v) ? jx_iter_items(c, line, v) : jinja_list(jx_arena(c));
    if (!items) return -1;
    size_t first = by_attr ? 1 : 0;
    if (by_attr && args->npos < 1) return jx_fail(c, line, "selectattr/rejectattr need an attribute name");
    const char *test = NULL;
    if (args->npos > first) {
        if (args->pos[first]->kind != JV_STR) return jx_fail(c, line, "a test name must be a string");
        test = args->pos[first]->u.s.p;
        if (!jx_test_known(test)) return jx_fail(c, line, "test '%s' is not supported", test);
    }
    if (args->nkw) return jx_fail(c, line, "keyword arguments to select filters are not supported");
    jx_args targs = {args->pos + first + 1, args->npos > first + 1 ? args->npos - first - 1 : 0, NULL, NULL, 0};
    jinja_val *res = jinja_list(jx_arena(c));
    for (size_t i = 0; i < items->u.l.n; i++) {
        jinja_val *x = items->u.l.v[i], *t = x;
        if (by_attr && !(t = attr_path(c, line, x, args->pos[0]))) return -1;
        int r;
        if (test) {
            if (jx_apply_test(c, line, test, t, &targs, &r)) return -1;
        } else r = jx_truthy(t);
        if (r == keep) jinja_list_push(res, x);
    }
    res->gen = 1;
    *out = res;
    return 0;
}

static jinja_val *lower_key(jx_ctx *c, jinja_val *v, int case_sensitive) {
    return !case_sensitive && v->kind == JV_STR ? recase(c, v, CASE_LOWER) : v;
}

int jx_apply_filter(jx_ctx *c, int line, const char *name, jinja_val *v, const jx_args *args, jinja_val **out) {
    jinja_arena *a = jx_arena(c);
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        BIND(name, "default_value", "boolean");
        int boolean = arg[1] && jx_truthy(arg[1]);
        *out = (v->kind == JV_UNDEF || (boolean && !jx_truthy(v))) ? (arg[0] ? arg[0] : jinja_str(a, "", 0)) : v;
        return 0;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        int64_t n = 0;
        if (len_of(c, line, v, &n)) return -1;
        *out = jinja_int(a, n);
        return 0;
    }
    if (!strcmp(name, "tojson")) return tojson_filter(c, line, v, args, out);
    if (!strcmp(name, "indent")) return indent_filter(c, line, v, args, out);
    if (!strcmp(name, "string") || !strcmp(name, "safe")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        if (v->kind == JV_LIST && v->gen) return jx_fail(c, line, "str() of a generator is not supported");
        *out = to_str(c, v);
        if (name[1] == 'a' && !(*out)->markup) {
            jinja_val *m = jx_mkstr(c, (*out)->u.s.p, (*out)->u.s.n);
            m->markup = 1;
            *out = m;
        }
        return 0;
    }
    if (!strcmp(name, "trim")) {
        BIND(name, "chars");
        if (arg[0] && arg[0]->kind != JV_NONE && need_str(c, line, name, arg[0])) return -1;
        jinja_val *r = strip(c, to_str(c, v), arg[0] && arg[0]->kind == JV_STR ? arg[0] : NULL, 1, 1);
        if (r->markup != (v->kind == JV_STR && v->markup)) {   // Markup.strip() stays Markup
            r = jx_mkstr(c, r->u.s.p, r->u.s.n);
            r->markup = v->kind == JV_STR && v->markup;
        }
        *out = r;
        return 0;
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") || !strcmp(name, "title")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        jinja_val *s = to_str(c, v);
        *out = name[0] == 'u' ? recase(c, s, CASE_UPPER) : name[0] == 'l' ? recase(c, s, CASE_LOWER)
             : name[0] == 'c' ? recase(c, s, CASE_CAPITALIZE) : title_filter(c, s);
        return 0;
    }
    if (!strcmp(name, "replace")) {
        BIND(name, "old", "new", "count");
        if (!arg[0] || !arg[1]) return jx_fail(c, line, "replace() needs old and new");
        int64_t count = -1;
        if (arg[2] && arg[2]->kind != JV_NONE) {
            if (need_int(c, line, name, arg[2])) return -1;
            count = ival(arg[2]);
        }
        return (*out = replace(c, line, to_str(c, v), to_str(c, arg[0]), to_str(c, arg[1]), count)) ? 0 : -1;
    }
    if (!strcmp(name, "join")) {
        BIND(name, "d", "attribute");
        jinja_val *items = jx_iter_items(c, line, v);
        if (!items) return -1;
        jinja_val *sep = arg[0] ? to_str(c, arg[0]) : NULL;
        sbuf b = {0};
        for (size_t i = 0; i < items->u.l.n; i++) {
            jinja_val *x = items->u.l.v[i];
            if (arg[1] && arg[1]->kind != JV_NONE && !(x = attr_path(c, line, x, arg[1]))) { sbuf_free(&b); return -1; }
            if (i && sep) sbuf_put(&b, sep->u.s.p, sep->u.s.n);
            jx_str(&b, x);
            if (b.len > JX_MAX_OUTPUT) break;
        }
        if (jx_check_size(c, line, b.len)) { sbuf_free(&b); return -1; }
        *out = jx_sbuf_str(c, &b);
        return 0;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        jinja_val *items = jx_iter_items(c, line, v);
        if (!items) return -1;
        *out = items->u.l.n == 0 ? jx_undef(a) : items->u.l.v[name[0] == 'f' ? 0 : items->u.l.n - 1];
        return 0;
    }
    if (!strcmp(name, "list")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        jinja_val *items = jx_iter_items(c, line, v);
        if (!items) return -1;
        jinja_val *l = jinja_list(a);
        for (size_t i = 0; i < items->u.l.n; i++) jinja_list_push(l, items->u.l.v[i]);
        *out = l;
        return 0;
    }
    if (!strcmp(name, "reverse")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        if (v->kind == JV_STR) {
            jinja_val *items = jx_iter_items(c, line, v);
            sbuf b = {0};
            for (size_t i = items->u.l.n; i-- > 0;) sbuf_put(&b, items->u.l.v[i]->u.s.p, items->u.l.v[i]->u.s.n);
            *out = jx_sbuf_str(c, &b);
            return 0;
        }
        jinja_val *items = jx_iter_items(c, line, v);
        if (!items) return -1;
        jinja_val *l = jinja_list(a);
        for (size_t i = items->u.l.n; i-- > 0;) jinja_list_push(l, items->u.l.v[i]);
        l->gen = 1;   // reversed(list): an iterator
        *out = l;
        return 0;
    }
    if (!strcmp(name, "items")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        jinja_val *l = jinja_list(a);
        if (v->kind != JV_UNDEF) {
            if (v->kind != JV_DICT || v->ns) return jx_fail(c, line, "items: can only get item pairs from a mapping");
            for (size_t i = 0; i < v->u.d.n; i++) {
                jinja_val *t = jx_tuple(a);
                jinja_list_push(t, v->u.d.k[i]);
                jinja_list_push(t, v->u.d.v[i]);
                jinja_list_push(l, t);
            }
        }
        *out = l;
        return 0;
    }
    if (!strcmp(name, "dictsort")) {
        BIND(name, "case_sensitive", "by", "reverse");
        if (v->kind != JV_DICT || v->ns) return jx_fail(c, line, "dictsort: expected a dict, got '%s'", jx_type_name(v));
        int by_value = 0;
        if (arg[1]) {
            if (arg[1]->kind != JV_STR) return jx_fail(c, line, "dictsort: by must be 'key' or 'value'");
            if (!strcmp(arg[1]->u.s.p, "value")) by_value = 1;
            else if (strcmp(arg[1]->u.s.p, "key")) return jx_fail(c, line, "You can only sort by either 'key' or 'value'");
        }
        int cs = arg[0] && jx_truthy(arg[0]);
        jinja_val *l = jinja_list(a);
        jinja_val **keys = jx_alloc(a, (v->u.d.n + 1) * sizeof *keys);
        for (size_t i = 0; i < v->u.d.n; i++) {
            jinja_val *t = jx_tuple(a);
            jinja_list_push(t, v->u.d.k[i]);
            jinja_list_push(t, v->u.d.v[i]);
            jinja_list_push(l, t);
            keys[i] = lower_key(c, by_value ? v->u.d.v[i] : v->u.d.k[i], cs);
        }
        if (sort_by(c, line, l, keys, 1, arg[2] && jx_truthy(arg[2]))) return -1;
        *out = l;
        return 0;
    }
    if (!strcmp(name, "sort")) {
        BIND(name, "reverse", "case_sensitive", "attribute");
        jinja_val *items = jx_iter_items(c, line, v);
        if (!items) return -1;
        jinja_val *l = jinja_list(a);
        jinja_val **keys = jx_alloc(a, (items->u.l.n + 1) * sizeof *keys);
        int cs = arg[1] && jx_truthy(arg[1]);
        for (size_t i = 0; i < items->u.l.n; i++) {
            jinja_val *k = items->u.l.v[i];
            if (arg[2] && arg[2]->kind != JV_NONE && !(k = attr_path(c, line, k, arg[2]))) return -1;
            jinja_list_push(l, items->u.l.v[i]);
            keys[i] = lower_key(c, k, cs);
        }
        if (sort_by(c, line, l, keys, 1, arg[0] && jx_truthy(arg[0]))) return -1;
        *out = l;
        return 0;
    }
    if (!strcmp(name, "unique") || !strcmp(name, "min") || !strcmp(name, "max")) {
        BIND(name, "case_sensitive", "attribute");
        jinja_val *items = jx_iter_items(c, line, v);
        if (!items) return -1;
        int cs = arg[0] && jx_truthy(arg[0]);
        jinja_val *l = jinja_list(a), *seen = jinja_list(a), *best = NULL, *best_key = NULL;
        for (size_t i = 0; i < items->u.l.n; i++) {
            jinja_val *k = items->u.l.v[i];
            if (arg[1] && arg[1]->kind != JV_NONE && !(k = attr_path(c, line, k, arg[1]))) return -1;
            k = lower_key(c, k, cs);
            if (name[0] == 'u') {
                int dup = 0;
                for (size_t j = 0; j < seen->u.l.n && !dup; j++) dup = jx_equal(seen->u.l.v[j], k);
                if (!dup) {
                    jinja_list_push(seen, k);
                    jinja_list_push(l, items->u.l.v[i]);
                }
                if (jx_step(c, line)) return -1;
                continue;
            }
            int r = 0;
            if (best_key && jx_compare(k, best_key, &r))
                return jx_fail(c, line, "'<' not supported between instances of '%s' and '%s'", jx_type_name(k), jx_type_name(best_key));
            if (!best_key || (name[1] == 'i' ? r < 0 : r > 0)) {
                best = items->u.l.v[i];
                best_key = k;
            }
        }
        l->gen = 1;
        *out = name[0] == 'u' ? l : best ? best : jx_undef(a);
        return 0;
    }
    if (!strcmp(name, "map")) {
        jinja_val *items = jx_truthy(v) ? jx_iter_items(c, line, v) : jinja_list(a);
        if (!items) return -1;
        jinja_val *l = jinja_list(a);
        jinja_val *attribute = NULL, *dflt = NULL;
        for (size_t k = 0; k < args->nkw; k++) {
            if (!strcmp(args->kwn[k], "attribute")) attribute = args->kwv[k];
            else if (!strcmp(args->kwn[k], "default")) dflt = args->kwv[k];
            else if (!attribute) return jx_fail(c, line, "map: keyword arguments with a filter name are not supported");
        }
        if (attribute) {
            if (args->npos) return jx_fail(c, line, "map: an attribute and a filter name together");
            for (size_t i = 0; i < items->u.l.n; i++) {
                jinja_val *x = attr_path(c, line, items->u.l.v[i], attribute);
                if (!x) return -1;
                if (x->kind == JV_UNDEF && dflt) x = dflt;
                jinja_list_push(l, x);
            }
        } else {
            if (args->npos < 1 || args->pos[0]->kind != JV_STR) return jx_fail(c, line, "map: expected a filter name or attribute=");
            const char *f = args->pos[0]->u.s.p;
            if (!jx_filter_known(f)) return jx_fail(c, line, "filter '%s' is not supported", f);
            jx_args fa = {args->pos + 1, args->npos - 1, NULL, NULL, 0};
            for (size_t i = 0; i < items->u.l.n; i++) {
                jinja_val *x;
                if (jx_apply_filter(c, line, f, items->u.l.v[i], &fa, &x)) return -1;
                jinja_list_push(l, x);
            }
        }
        l->gen = 1;
        *out = l;
        return 0;
    }
    if (!strcmp(name, "select")) return select_filter(c, line, v, args, 0, 1, out);
    if (!strcmp(name, "reject")) return select_filter(c, line, v, args, 0, 0, out);
    if (!strcmp(name, "selectattr")) return select_filter(c, line, v, args, 1, 1, out);
    if (!strcmp(name, "rejectattr")) return select_filter(c, line, v, args, 1, 0, out);
    if (!strcmp(name, "int")) {
        BIND(name, "default", "base");
        jinja_val *dflt = arg[0] ? arg[0] : jinja_int(a, 0);
        if (is_int(v)) { *out = jinja_int(a, ival(v)); return 0; }
        if (v->kind == JV_FLOAT) {
            if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18) { *out = dflt; return 0; }
            *out = jinja_int(a, (int64_t)v->u.f);
            return 0;
        }
        if (v->kind == JV_STR) {
            int base = arg[1] ? (int)ival(arg[1]) : 10;
            jinja_val *t = strip(c, v, NULL, 1, 1);
            char *s = jx_strdup(a, t->u.s.p, t->u.s.n), *e;
            if (base == 10 && t->u.s.n && !strchr(s, '_')) {
                errno = 0;
                long long x = strtoll(s, &e, 10);
                if (*e == 0 && errno == 0 && !(s[0] == '+' && 0)) { *out = jinja_int(a, x); return 0; }
                double d = strtod(s, &e);
                if (*e == 0 && isfinite(d) && fabs(d) < 9.2e18 && !strchr(s, 'x') && !strchr(s, 'X') && !strpbrk(s, "nN")) {
                    *out = jinja_int(a, (int64_t)d);
                    return 0;
                }
            }
            if (base != 10 || strchr(s, '_')) return jx_fail(c, line, "int: a base or '_' in the string is not supported");
        }
        *out = dflt;
        return 0;
    }
    if (!strcmp(name, "float")) {
        BIND(name, "default");
        jinja_val *dflt = arg[0] ? arg[0] : jinja_float(a, 0);
        if (v->kind == JV_FLOAT) { *out = v; return 0; }
        if (is_int(v)) { *out = jinja_float(a, (double)ival(v)); return 0; }
        if (v->kind == JV_STR) {
            jinja_val *t = strip(c, v, NULL, 1, 1);
            char *s = jx_strdup(a, t->u.s.p, t->u.s.n), *e;
            if (t->u.s.n && !strchr(s, '_') && !strchr(s, 'x') && !strchr(s, 'X')) {
                double d = strtod(s, &e);
                if (*e == 0) { *out = jinja_float(a, d); return 0; }
            }
        }
        *out = dflt;
        return 0;
    }
    if (!strcmp(name, "abs")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        if (v->kind == JV_FLOAT) { *out = jinja_float(a, fabs(v->u.f)); return 0; }
        if (is_int(v)) {
            if (ival(v) == INT64_MIN) return jx_fail(c, line, "integer overflow: a result beyond 64 bits is not supported");
            *out = jinja_int(a, ival(v) < 0 ? -ival(v) : ival(v));
            return 0;
        }
        return jx_fail(c, line, "bad operand type for abs(): '%s'", jx_type_name(v));
    }
    if (!strcmp(name, "round")) {
        BIND(name, "precision", "method");
        int64_t prec = 0;
        if (arg[0]) {
            if (need_int(c, line, name, arg[0])) return -1;
            prec = ival(arg[0]);
        }
        const char *method = "common";
        if (arg[1]) {
            if (need_str(c, line, name, arg[1])) return -1;
            method = arg[1]->u.s.p;
        }
        if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
            return jx_fail(c, line, "method must be common, ceil or floor");
        if (!is_int(v) && v->kind != JV_FLOAT) return jx_fail(c, line, "round: expected a number, got '%s'", jx_type_name(v));
        if (!strcmp(method, "common") && is_int(v)) {
            if (prec < 0) return jx_fail(c, line, "round: a negative precision of an int is not supported");
            *out = jinja_int(a, ival(v));
            return 0;
        }
        if (prec < -20 || prec > 20) return jx_fail(c, line, "round: a precision beyond 20 digits is not supported");
        double x = v->kind == JV_FLOAT ? v->u.f : (double)ival(v), m = pow(10, (double)prec), r;
        if (!strcmp(method, "common")) {
            // Python rounds the exact decimal value, half to even: print it with
            // enough digits and let printf (which rounds exactly) do it.
            if (!isfinite(x)) { *out = jinja_float(a, x); return 0; }
            char buf[400];
            if (prec >= 0) {
                snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
                r = strtod(buf, NULL);
            } else {
                r = nearbyint(x / m) * m;   // ties to even at the default rounding mode
            }
        } else r = (!strcmp(method, "ceil") ? ceil(x * m) : floor(x * m)) / m;
        *out = jinja_float(a, r);
        return 0;
    }
    if (!strcmp(name, "sum")) {
        BIND(name, "attribute", "start");
        jinja_val *items = jx_iter_items(c, line, v);
        if (!items) return -1;
        jinja_val *acc = arg[1] ? arg[1] : jinja_int(a, 0);
        for (size_t i = 0; i < items->u.l.n; i++) {
            jinja_val *x = items->u.l.v[i];
            if (arg[0] && arg[0]->kind != JV_NONE && !(x = attr_path(c, line, x, arg[0]))) return -1;
            if (!(is_int(acc) || acc->kind == JV_FLOAT) || !(is_int(x) || x->kind == JV_FLOAT))
                return jx_fail(c, line, "sum: only numbers are supported");
            if (is_int(acc) && is_int(x)) {
                int64_t r;
                if (__builtin_add_overflow(ival(acc), ival(x), &r)) return jx_fail(c, line, "integer overflow: a result beyond 64 bits is not supported");
                acc = jinja_int(a, r);
            } else acc = jinja_float(a, (acc->kind == JV_FLOAT ? acc->u.f : (double)ival(acc)) + (x->kind == JV_FLOAT ? x->u.f : (double)ival(x)));
        }
        *out = acc;
        return 0;
    }
    if (!strcmp(name, "center")) {
        BIND(name, "width");
        jinja_val *s = to_str(c, v);
        int64_t w = 80;
        if (arg[0]) {
            if (need_int(c, line, name, arg[0])) return -1;
            w = ival(arg[0]);
        }
        int64_t len = (int64_t)jx_utf8_len(s->u.s.p, s->u.s.n);
        if (w > 100000) return jx_fail(c, line, "center: a width over 100000 is not supported");
        if (w <= len) { *out = s; return 0; }
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
        sbuf b = {0};
        for (int64_t i = 0; i < left; i++) sbuf_putc(&b, ' ');
        sbuf_put(&b, s->u.s.p, s->u.s.n);
        for (int64_t i = 0; i < pad - left; i++) sbuf_putc(&b, ' ');
        *out = jx_sbuf_str(c, &b);
        return 0;
    }
    if (!strcmp(name, "e") || !strcmp(name, "escape")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        if (v->kind == JV_STR && v->markup) { *out = v; return 0; }
        jinja_val *s = to_str(c, v);
        sbuf b = {0};
        jx_html_escape(&b, s->u.s.p, s->u.s.n);
        if (jx_check_size(c, line, b.len)) { sbuf_free(&b); return -1; }
        *out = jx_sbuf_str(c, &b);
        (*out)->markup = 1;
        return 0;
    }
    if (!strcmp(name, "attr")) {
        BIND(name, "name");
        if (!arg[0] || need_str(c, line, name, arg[0])) return arg[0] ? -1 : jx_fail(c, line, "attr() needs a name");
        if (v->kind == JV_UNDEF) return jx_fail(c, line, "an undefined value was used");
        jinja_val *r = v->kind == JV_DICT && v->ns ? jx_dict_gets(v, arg[0]->u.s.p, arg[0]->u.s.n) : NULL;
        if (!r && jx_has_method(v, arg[0]->u.s.p)) return jx_fail(c, line, "attr() of a method is not supported");
        *out = r ? r : jx_undef(a);
        return 0;
    }
    return jx_fail(c, line, "filter '%s' is not supported", name);
}

// ---- tests ----------------------------------------------------------------------------
static const char *const test_names[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "string", "number", "integer", "float", "mapping",
    "iterable", "sequence", "callable", "equalto", "eq", "==", "ne", "!=", "lt", "<", "lessthan", "gt", ">",
    "greaterthan", "le", "<=", "ge", ">=", "in", "odd", "even", "divisibleby", "sameas", "lower", "upper", "escaped",
    "filter", "test", NULL};

int jx_test_known(const char *name) {
    for (int i = 0; test_names[i]; i++)
        if (!strcmp(test_names[i], name)) return 1;
    return 0;
}

// str.isupper (upper) or str.islower: no code point of the other case or
// titlecase, and at least one of this case.
static int cased_all(jinja_val *s, int upper) {
    int any = 0;
    for (size_t i = 0; i < s->u.s.n;) {
        uint32_t cp;
        i = jx_utf8_next(s->u.s.p, s->u.s.n, i, &cp);
        if (utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_LT) return 0;
        if (upper ? jx_is_lower(cp) : jx_is_upper(cp)) return 0;
        if (upper ? jx_is_upper(cp) : jx_is_lower(cp)) any = 1;
    }
    return any;
}

int jx_apply_test(jx_ctx *c, int line, const char *name, jinja_val *v, const jx_args *args, int *out) {
    jinja_val *x = args->npos ? args->pos[0] : args->nkw ? args->kwv[0] : NULL;
    int k = v->kind;
    if (!strcmp(name, "defined")) { *out = k != JV_UNDEF; return 0; }
    if (!strcmp(name, "undefined")) { *out = k == JV_UNDEF; return 0; }
    if (!strcmp(name, "none")) { *out = k == JV_NONE; return 0; }
    if (!strcmp(name, "boolean")) { *out = k == JV_BOOL; return 0; }
    if (!strcmp(name, "false")) { *out = k == JV_BOOL && !v->u.b; return 0; }
    if (!strcmp(name, "true")) { *out = k == JV_BOOL && v->u.b; return 0; }
    if (!strcmp(name, "string")) { *out = k == JV_STR; return 0; }
    if (!strcmp(name, "number")) { *out = k == JV_INT || k == JV_FLOAT || k == JV_BOOL; return 0; }
    if (!strcmp(name, "integer")) { *out = k == JV_INT; return 0; }
    if (!strcmp(name, "float")) { *out = k == JV_FLOAT; return 0; }
    if (!strcmp(name, "mapping")) { *out = k == JV_DICT && !v->ns; return 0; }
    if (!strcmp(name, "iterable")) { *out = k == JV_STR || k == JV_LIST || (k == JV_DICT && !v->ns) || k == JV_UNDEF; return 0; }
    if (!strcmp(name, "sequence")) { *out = k == JV_STR || k == JV_LIST || (k == JV_DICT && !v->ns) || k == JV_UNDEF; return 0; }
    if (!strcmp(name, "callable")) { *out = k == JV_MACRO || k == JV_BUILTIN || k == JV_METHOD; return 0; }
    if (!strcmp(name, "escaped")) { *out = 0; return 0; }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        *out = cased_all(to_str(c, v), name[0] == 'u');
        return 0;
    }
    if (!strcmp(name, "filter") || !strcmp(name, "test")) {
        *out = k == JV_STR && (name[0] == 'f' ? jx_filter_known(v->u.s.p) : jx_test_known(v->u.s.p));
        return 0;
    }
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (!is_int(v)) return jx_fail(c, line, "test '%s' of a '%s' is not supported", name, jx_type_name(v));
        int64_t m = ival(v) % 2;
        *out = name[0] == 'o' ? m != 0 : m == 0;
        return 0;
    }
    if (!x) return jx_fail(c, line, "test '%s' needs an argument", name);
    if (!strcmp(name, "sameas")) {
        *out = v == x || (k == JV_NONE && x->kind == JV_NONE) || (k == JV_BOOL && x->kind == JV_BOOL && v->u.b == x->u.b);
        return 0;
    }
    if (!strcmp(name, "in")) {
        jinja_val *r;
        static const char *const nm[] = {""};
        (void)nm;
        if (x->kind == JV_STR) {
            if (k != JV_STR) return jx_fail(c, line, "'in <string>' requires string as left operand, not %s", jx_type_name(v));
            *out = memmem(x->u.s.p, x->u.s.n, v->u.s.p, v->u.s.n) != NULL || v->u.s.n == 0;
            return 0;
        }
        if (x->kind == JV_LIST) {
            *out = 0;
            for (size_t i = 0; i < x->u.l.n && !*out; i++) *out = jx_equal(x->u.l.v[i], v);
            return 0;
        }
        if (x->kind == JV_DICT && !x->ns) { r = jx_dict_get(x, v); *out = r != NULL; return 0; }
        if (x->kind == JV_UNDEF) { *out = 0; return 0; }
        return jx_fail(c, line, "argument of type '%s' is not iterable", jx_type_name(x));
    }
    int r;
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==")) { *out = jx_equal(v, x); return 0; }
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) { *out = !jx_equal(v, x); return 0; }
    if (!strcmp(name, "divisibleby")) {
        if (!is_int(v) || !is_int(x)) return jx_fail(c, line, "divisibleby of other than integers is not supported");
        int64_t d = ival(x);
        if (d == 0) return jx_fail(c, line, "integer division or modulo by zero");
        *out = d == -1 || ival(v) % d == 0;
        return 0;
    }
    if (jx_compare(v, x, &r)) {
        if (k == JV_UNDEF || x->kind == JV_UNDEF) return jx_fail(c, line, "an undefined value was used");
        return jx_fail(c, line, "comparison not supported between instances of '%s' and '%s'", jx_type_name(v), jx_type_name(x));
    }
    if (r == 2) { *out = 0; return 0; }
    if (!strcmp(name, "lt") || !strcmp(name, "<") || !strcmp(name, "lessthan")) *out = r < 0;
    else if (!strcmp(name, "gt") || !strcmp(name, ">") || !strcmp(name, "greaterthan")) *out = r > 0;
    else if (!strcmp(name, "le") || !strcmp(name, "<=")) *out = r <= 0;
    else *out = r >= 0;
    return 0;
}

// ---- methods ---------------------------------------------------------------------------
// Every method Python's str, dict and list have: those not implemented below are
// refused rather than taken for missing attributes (undefined).
static const char *const str_methods_all[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
    "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
    "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans", "partition",
    "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
    "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill", NULL};
static const char *const dict_methods_all[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem",
                                               "setdefault", "update", "values", NULL};
static const char *const list_methods_all[] = {"append", "clear", "copy", "count", "extend", "index", "insert", "pop",
                                               "remove", "reverse", "sort", NULL};
static const char *const dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const list_unsafe[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort", NULL};

static int in_list(const char *const *l, const char *name) {
    for (; *l; l++)
        if (!strcmp(*l, name)) return 1;
    return 0;
}

int jx_unsafe_method(const jinja_val *self, const char *name) {
    if (self->kind == JV_DICT && !self->ns) return in_list(dict_unsafe, name);
    if (self->kind == JV_LIST && !self->tuple) return in_list(list_unsafe, name);
    return 0;
}

int jx_has_method(const jinja_val *self, const char *name) {
    if (self->kind == JV_STR) return in_list(str_methods_all, name);
    if (self->kind == JV_DICT && !self->ns) return in_list(dict_methods_all, name);
    if (self->kind == JV_LIST) return self->tuple ? (!strcmp(name, "count") || !strcmp(name, "index")) : in_list(list_methods_all, name);
    return 0;
}

static int str_method(jx_ctx *c, int line, jinja_val *s, const char *name, const jx_args *args, jinja_val **out) {
    jinja_arena *a = jx_arena(c);
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        BIND(name, "chars");
        if (args->nkw) return jx_fail(c, line, "%s() takes no keyword arguments", name);
        jinja_val *chars = arg[0] && arg[0]->kind != JV_NONE ? arg[0] : NULL;
        if (chars && need_str(c, line, name, chars)) return -1;
        *out = strip(c, s, chars, name[0] != 'r', name[0] != 'l');
        return 0;
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        BIND(name, "sep", "maxsplit");
        jinja_val *sep = arg[0] && arg[0]->kind != JV_NONE ? arg[0] : NULL;
        if (sep && need_str(c, line, name, sep)) return -1;
        int64_t maxsplit = -1;
        if (arg[1]) {
            if (need_int(c, line, name, arg[1])) return -1;
            maxsplit = ival(arg[1]);
        }
        return (*out = split(c, line, s, sep, maxsplit, name[0] == 'r')) ? 0 : -1;
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (args->npos != 1 || args->nkw) return jx_fail(c, line, "%s() with other than one argument is not supported", name);
        int r;
        if (str_affix(c, line, s, args->pos[0], name[0] == 'e', &r)) return -1;
        *out = jinja_bool(a, r);
        return 0;
    }
    if (!strcmp(name, "replace")) {
        if (args->nkw || args->npos < 2 || args->npos > 3) return jx_fail(c, line, "replace() takes 2 or 3 positional arguments");
        if (need_str(c, line, name, args->pos[0]) || need_str(c, line, name, args->pos[1])) return -1;
        int64_t count = -1;
        if (args->npos == 3) {
            if (need_int(c, line, name, args->pos[2])) return -1;
            count = ival(args->pos[2]);
        }
        return (*out = replace(c, line, s, args->pos[0], args->pos[1], count)) ? 0 : -1;
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize") ||
        !strcmp(name, "swapcase")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        case_op op = name[0] == 'u' ? CASE_UPPER : name[0] == 'l' ? CASE_LOWER : name[0] == 't' ? CASE_TITLE
                   : name[0] == 'c' ? CASE_CAPITALIZE : CASE_SWAP;
        *out = recase(c, s, op);
        return 0;
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "rindex") ||
        !strcmp(name, "count")) {
        if (args->npos != 1 || args->nkw) return jx_fail(c, line, "%s() with start/end arguments is not supported", name);
        if (need_str(c, line, name, args->pos[0])) return -1;
        jinja_val *sub = args->pos[0];
        if (!strcmp(name, "count")) {
            int64_t k = 0;
            if (sub->u.s.n == 0) k = (int64_t)jx_utf8_len(s->u.s.p, s->u.s.n) + 1;
            else
                for (const char *p = s->u.s.p, *e = p + s->u.s.n, *f; (f = memmem(p, (size_t)(e - p), sub->u.s.p, sub->u.s.n)); p = f + sub->u.s.n) k++;
            *out = jinja_int(a, k);
            return 0;
        }
        int64_t idx;
        if (!str_find(s, sub, name[0] == 'r', &idx) && name[name[0] == 'r' ? 1 : 0] == 'i')
            return jx_fail(c, line, "substring not found");
        *out = jinja_int(a, idx);
        return 0;
    }
    if (!strcmp(name, "join")) {
        if (args->npos != 1 || args->nkw) return jx_fail(c, line, "join() takes exactly one argument");
        jinja_val *items = jx_iter_items(c, line, args->pos[0]);
        if (!items) return -1;
        sbuf b = {0};
        for (size_t i = 0; i < items->u.l.n; i++) {
            if (items->u.l.v[i]->kind != JV_STR) {
                sbuf_free(&b);
                return jx_fail(c, line, "sequence item %zu: expected str instance, %s found", i, jx_type_name(items->u.l.v[i]));
            }
            if (i) sbuf_put(&b, s->u.s.p, s->u.s.n);
            sbuf_put(&b, items->u.l.v[i]->u.s.p, items->u.l.v[i]->u.s.n);
            if (b.len > JX_MAX_OUTPUT) break;
        }
        if (jx_check_size(c, line, b.len)) { sbuf_free(&b); return -1; }
        *out = jx_sbuf_str(c, &b);
        return 0;
    }
    if (!strcmp(name, "format")) return (*out = format(c, line, s, args)) ? 0 : -1;
    if (!strcmp(name, "splitlines")) {
        BIND(name, "keepends");
        *out = splitlines(c, s, arg[0] && jx_truthy(arg[0]));
        return 0;
    }
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        if (args->npos != 1 || args->nkw || need_str(c, line, name, args->pos[0])) return args->npos == 1 ? -1 : jx_fail(c, line, "%s() takes one argument", name);
        jinja_val *x = args->pos[0];
        int r;
        str_affix(c, line, s, x, name[6] == 's', &r);
        *out = r ? jx_mkstr(c, s->u.s.p + (name[6] == 's' ? 0 : x->u.s.n), s->u.s.n - x->u.s.n) : s;
        return 0;
    }
    if (!strncmp(name, "is", 2) && strcmp(name, "isidentifier") && strcmp(name, "isprintable")) {
        if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
        if (!strcmp(name, "islower") || !strcmp(name, "isupper")) { *out = jinja_bool(a, cased_all(s, name[2] == 'u')); return 0; }
        if (!strcmp(name, "istitle")) return jx_fail(c, line, "str.istitle() is not supported");
        int all = s->u.s.n > 0;
        if (!strcmp(name, "isascii")) all = 1;
        for (size_t i = 0; i < s->u.s.n && all;) {
            uint32_t cp;
            i = jx_utf8_next(s->u.s.p, s->u.s.n, i, &cp);
            utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
            int letter = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
            int digit = k == UTF8PROC_CATEGORY_ND;
            if (!strcmp(name, "isspace")) all = jx_isspace(cp);
            else if (!strcmp(name, "isascii")) all = cp < 0x80;
            else if (!strcmp(name, "isalpha")) all = letter;
            else if (!strcmp(name, "isalnum")) all = letter || digit || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
            else if (!strcmp(name, "isdecimal")) all = digit;
            else if (!strcmp(name, "isdigit") || !strcmp(name, "isnumeric")) {
                if (cp >= 0x80 && !digit) return jx_fail(c, line, "str.%s() of non-ASCII digits is not supported", name);
                all = digit;
            } else return jx_fail(c, line, "str.%s() is not supported", name);
        }
        *out = jinja_bool(a, all);
        return 0;
    }
    return jx_fail(c, line, "str.%s() is not supported", name);
}

int jx_call_method(jx_ctx *c, int line, jinja_val *self, const char *name, const jx_args *args, jinja_val **out) {
    jinja_arena *a = jx_arena(c);
    if (self->kind == JV_LOOP) {   // loop.cycle(a, b, ...)
        if (!args->npos) return jx_fail(c, line, "no items for cycling given");
        *out = args->pos[self->u.loop->i % args->npos];
        return 0;
    }
    if (self->kind == JV_STR) return str_method(c, line, self, name, args, out);
    if (self->kind == JV_DICT) {
        if (!strcmp(name, "get")) {
            if (args->nkw || args->npos < 1 || args->npos > 2) return jx_fail(c, line, "get expected 1 or 2 arguments");
            jinja_val *k = args->pos[0];
            if ((k->kind == JV_LIST && !k->tuple) || k->kind == JV_DICT) return jx_fail(c, line, "unhashable type: '%s'", jx_type_name(k));
            jinja_val *r = jx_dict_get(self, k);
            *out = r ? r : args->npos == 2 ? args->pos[1] : jinja_none(a);
            return 0;
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            if (args->npos || args->nkw) return jx_fail(c, line, "%s() takes no arguments", name);
            jinja_val *l = jinja_list(a);
            for (size_t i = 0; i < self->u.d.n; i++) {
                if (name[0] == 'k') jinja_list_push(l, self->u.d.k[i]);
                else if (name[0] == 'v') jinja_list_push(l, self->u.d.v[i]);
                else {
                    jinja_val *t = jx_tuple(a);
                    jinja_list_push(t, self->u.d.k[i]);
                    jinja_list_push(t, self->u.d.v[i]);
                    jinja_list_push(l, t);
                }
            }
            *out = l;
            return 0;
        }
        return jx_fail(c, line, "dict.%s() is not supported", name);
    }
    if (self->kind == JV_LIST) {
        if ((!strcmp(name, "count") || !strcmp(name, "index")) && args->npos == 1 && !args->nkw) {
            int64_t k = 0, at = -1;
            for (size_t i = 0; i < self->u.l.n; i++)
                if (jx_equal(self->u.l.v[i], args->pos[0])) {
                    if (at < 0) at = (int64_t)i;
                    k++;
                }
            if (name[0] == 'i' && at < 0) return jx_fail(c, line, "list.index(x): x not in list");
            *out = jinja_int(a, name[0] == 'c' ? k : at);
            return 0;
        }
        return jx_fail(c, line, "%s.%s() is not supported", jx_type_name(self), name);
    }
    return jx_fail(c, line, "'%s' object has no method '%s'", jx_type_name(self), name);
}
