// jinja_eval.c — renders a parsed template: scopes, statements, expressions
// and the operators with Python's semantics, macros, and the globals
// (range, namespace, dict, raise_exception, strftime_now). Filters, tests and
// methods are in jinja_builtins.c; errors and limits in jinja_runtime.c.
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "template/jinja_internal.h"

// Names visible at one level: a for-loop iteration, a macro call, the top.
struct jx_scope {
    jx_scope *parent;
    jinja_val *vars;     // a dict
};

enum { FLOW_NONE = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2, FLOW_ERR = -1 };

static int emit(jx_ctx *c, int line, const void *p, size_t n) {
    if (c->out->len + n > JX_MAX_OUTPUT) return jx_fail(c, line, "the output limit (%zu MiB) was exceeded", JX_MAX_OUTPUT >> 20);
    sbuf_put(c->out, p, n);
    return 0;
}

// ---- scopes ----------------------------------------------------------------------
static jx_scope *scope_new(jx_ctx *c, jx_scope *parent) {
    jx_scope *s = jx_alloc(c->a, sizeof *s);
    s->parent = parent;
    s->vars = jinja_dict(c->a);
    return s;
}

static jinja_val *builtin(jx_ctx *c, int fn) {
    jinja_val *v = jx_new(c->a, JV_BUILTIN);
    v->u.fn = fn;
    return v;
}

static jinja_val *lookup(jx_ctx *c, jx_scope *s, const char *name, size_t n) {
    for (; s; s = s->parent) {
        jinja_val *v = jx_dict_gets(s->vars, name, n);
        if (v) return v;
    }
    jinja_val *v = jx_dict_gets(c->globals, name, n);
    if (v) return v;
    static const struct { const char *name; int fn; } globals[] = {
        {"range", JX_FN_RANGE}, {"namespace", JX_FN_NAMESPACE}, {"dict", JX_FN_DICT},
        {"raise_exception", JX_FN_RAISE}, {"strftime_now", JX_FN_STRFTIME},
    };
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++)
        if (strlen(globals[i].name) == n && memcmp(globals[i].name, name, n) == 0) return builtin(c, globals[i].fn);
    return jx_undef(c->a);
}

static void assign(jx_ctx *c, jx_scope *s, const jx_node *name, jinja_val *v) {
    jx_dict_put(s->vars, jinja_str(c->a, name->name, name->name_n), v);
}

// ---- expressions -------------------------------------------------------------------
static jinja_val *eval(jx_ctx *c, jx_scope *s, const jx_node *n);

static int is_num(const jinja_val *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }
static double as_f(const jinja_val *v) {
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}
static int64_t as_i(const jinja_val *v) { return v->kind == JV_INT ? v->u.i : v->u.b; }

static const char *op_name(int op) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
    return names[op];
}

static jinja_val *undefined_error(jx_ctx *c, int line, const jinja_val *v) {
    (void)v;
    jx_fail(c, line, "an undefined value was used");
    return NULL;
}

static jinja_val *type_error(jx_ctx *c, int line, int op, const jinja_val *x, const jinja_val *y) {
    if (x->kind == JV_UNDEF || y->kind == JV_UNDEF) return undefined_error(c, line, x);
    jx_fail(c, line, "unsupported operand types for %s: '%s' and '%s'", op_name(op), jx_type_name(x), jx_type_name(y));
    return NULL;
}

static jinja_val *repeat(jx_ctx *c, int line, const jinja_val *seq, int64_t k) {
    if (k < 0) k = 0;
    if (seq->kind == JV_STR) {
        if (seq->u.s.n && (uint64_t)k > JX_MAX_OUTPUT / seq->u.s.n) {
            jx_fail(c, line, "a string longer than the output limit (%zu MiB)", JX_MAX_OUTPUT >> 20);
            return NULL;
        }
        size_t total = seq->u.s.n * (size_t)k;
        char *p = jx_alloc(c->a, total + 1);
        for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * seq->u.s.n, seq->u.s.p, seq->u.s.n);
        jinja_val *v = jx_new(c->a, JV_STR);
        v->u.s.p = p;
        v->u.s.n = total;
        return v;
    }
    if (seq->u.l.n && (uint64_t)k > (JX_MAX_OUTPUT / 8) / seq->u.l.n) {
        jx_fail(c, line, "a list longer than the memory limit allows");
        return NULL;
    }
    jinja_val *v = seq->tuple ? jx_tuple(c->a) : jinja_list(c->a);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq->u.l.n; j++) jinja_list_push(v, seq->u.l.v[j]);
    return v;
}

static jinja_val *overflow(jx_ctx *c, int line) {
    jx_fail(c, line, "integer overflow: a result beyond 64 bits is not supported");
    return NULL;
}

static double py_fmod(double a, double b) {
    double m = fmod(a, b);
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    else if (m == 0) m = copysign(0.0, b);
    return m;
}

static jinja_val *arith(jx_ctx *c, int line, int op, jinja_val *x, jinja_val *y) {
    jinja_arena *a = c->a;
    if (op == JO_ADD) {
        if (x->kind == JV_STR && y->kind == JV_STR && x->markup != y->markup) {
            // Markup + str escapes the str (markupsafe), and the sum is Markup.
            sbuf b = {0};
            if (x->markup) sbuf_put(&b, x->u.s.p, x->u.s.n);
            else jx_html_escape(&b, x->u.s.p, x->u.s.n);
            if (y->markup) sbuf_put(&b, y->u.s.p, y->u.s.n);
            else jx_html_escape(&b, y->u.s.p, y->u.s.n);
            if (jx_check_size(c, line, b.len)) { sbuf_free(&b); return NULL; }
            jinja_val *v = jx_sbuf_str(c, &b);
            v->markup = 1;
            return v;
        }
        if (x->kind == JV_STR && y->kind == JV_STR) {
            if (jx_check_size(c, line, x->u.s.n + y->u.s.n)) return NULL;
            jinja_val *v = jx_new(a, JV_STR);
            char *p = jx_alloc(a, x->u.s.n + y->u.s.n + 1);
            memcpy(p, x->u.s.p, x->u.s.n);
            memcpy(p + x->u.s.n, y->u.s.p, y->u.s.n);
            v->u.s.p = p;
            v->u.s.n = x->u.s.n + y->u.s.n;
            v->markup = x->markup;
            return v;
        }
        if (x->kind == JV_LIST && y->kind == JV_LIST && x->tuple == y->tuple && !x->gen && !y->gen) {
            jinja_val *v = x->tuple ? jx_tuple(a) : jinja_list(a);
            for (size_t i = 0; i < x->u.l.n; i++) jinja_list_push(v, x->u.l.v[i]);
            for (size_t i = 0; i < y->u.l.n; i++) jinja_list_push(v, y->u.l.v[i]);
            return v;
        }
    }
    if (op == JO_MUL) {
        if ((x->kind == JV_STR || x->kind == JV_LIST) && (y->kind == JV_INT || y->kind == JV_BOOL)) return repeat(c, line, x, as_i(y));
        if ((y->kind == JV_STR || y->kind == JV_LIST) && (x->kind == JV_INT || x->kind == JV_BOOL)) return repeat(c, line, y, as_i(x));
    }
    if (!is_num(x) || !is_num(y)) return type_error(c, line, op, x, y);
    int ints = x->kind != JV_FLOAT && y->kind != JV_FLOAT;
    if (ints) {
        int64_t p = as_i(x), q = as_i(y), r;
        switch (op) {
        case JO_ADD: if (__builtin_add_overflow(p, q, &r)) return overflow(c, line); return jinja_int(a, r);
        case JO_SUB: if (__builtin_sub_overflow(p, q, &r)) return overflow(c, line); return jinja_int(a, r);
        case JO_MUL: if (__builtin_mul_overflow(p, q, &r)) return overflow(c, line); return jinja_int(a, r);
        case JO_DIV:
            if (q == 0) { jx_fail(c, line, "division by zero"); return NULL; }
            return jinja_float(a, (double)p / (double)q);
        case JO_FLOORDIV: case JO_MOD: {
            if (q == 0) { jx_fail(c, line, "integer division or modulo by zero"); return NULL; }
            if (p == INT64_MIN && q == -1) return op == JO_MOD ? jinja_int(a, 0) : overflow(c, line);
            int64_t d = p / q, m = p % q;
            if (m != 0 && ((m < 0) != (q < 0))) { d--; m += q; }
            return jinja_int(a, op == JO_MOD ? m : d);
        }
        case JO_POW: {
            if (q < 0) return jinja_float(a, pow((double)p, (double)q));
            int64_t acc = 1, base = p;
            while (q) {
                if (q & 1 && __builtin_mul_overflow(acc, base, &acc)) return overflow(c, line);
                q >>= 1;
                if (q && __builtin_mul_overflow(base, base, &base)) return overflow(c, line);
            }
            return jinja_int(a, acc);
        }
        }
    }
    double p = as_f(x), q = as_f(y);
    switch (op) {
    case JO_ADD: return jinja_float(a, p + q);
    case JO_SUB: return jinja_float(a, p - q);
    case JO_MUL: return jinja_float(a, p * q);
    case JO_DIV:
        if (q == 0) { jx_fail(c, line, "float division by zero"); return NULL; }
        return jinja_float(a, p / q);
    case JO_FLOORDIV: case JO_MOD: {
        if (q == 0) { jx_fail(c, line, "float modulo or floor division by zero"); return NULL; }
        double m = py_fmod(p, q);
        if (op == JO_MOD) return jinja_float(a, m);
        double d = (p - fmod(p, q)) / q;
        if (fmod(p, q) != 0 && ((q < 0) != (fmod(p, q) < 0))) d -= 1;
        double fd = floor(d);
        if (d - fd > 0.5) fd += 1;
        return jinja_float(a, d == 0 ? copysign(0.0, p / q) : fd);
    }
    case JO_POW:
        if (p == 0 && q < 0) { jx_fail(c, line, "0.0 cannot be raised to a negative power"); return NULL; }
        if (p < 0 && q != floor(q)) { jx_fail(c, line, "a negative number to a fractional power is complex: not supported"); return NULL; }
        {
            double r = pow(p, q);
            if (isinf(r) && !isinf(p) && !isinf(q)) { jx_fail(c, line, "numerical result out of range"); return NULL; }
            return jinja_float(a, r);
        }
    }
    return type_error(c, line, op, x, y);
}

// `a in b`, as Python's b.__contains__(a) (an undefined b contains nothing).
static int contains(jx_ctx *c, int line, jinja_val *item, jinja_val *seq, int *res) {
    switch (seq->kind) {
    case JV_STR:
        if (item->kind != JV_STR)
            return jx_fail(c, line, "'in <string>' requires string as left operand, not %s", jx_type_name(item));
        *res = item->u.s.n == 0 || memmem(seq->u.s.p, seq->u.s.n, item->u.s.p, item->u.s.n) != NULL;
        return 0;
    case JV_LIST:
        *res = 0;
        for (size_t i = 0; i < seq->u.l.n && !*res; i++) *res = jx_equal(seq->u.l.v[i], item);
        return 0;
    case JV_DICT:
        if (seq->ns) break;
        *res = jx_dict_get(seq, item) != NULL;
        return 0;
    case JV_UNDEF: *res = 0; return 0;
    default: break;
    }
    return jx_fail(c, line, "argument of type '%s' is not iterable", jx_type_name(seq));
}

static jinja_val *compare(jx_ctx *c, int line, int op, jinja_val *x, jinja_val *y) {
    int r;
    switch (op) {
    case JO_EQ: return jinja_bool(c->a, jx_equal(x, y));
    case JO_NE: return jinja_bool(c->a, !jx_equal(x, y));
    case JO_IN: case JO_NOTIN:
        if (contains(c, line, x, y, &r)) return NULL;
        return jinja_bool(c->a, op == JO_IN ? r : !r);
    default:
        if (jx_compare(x, y, &r)) {
            if (x->kind == JV_UNDEF || y->kind == JV_UNDEF) return undefined_error(c, line, x);
            jx_fail(c, line, "'%s' not supported between instances of '%s' and '%s'", op_name(op), jx_type_name(x), jx_type_name(y));
            return NULL;
        }
        if (r == 2) return jinja_bool(c->a, 0);
        return jinja_bool(c->a, op == JO_LT ? r < 0 : op == JO_LE ? r <= 0 : op == JO_GT ? r > 0 : r >= 0);
    }
}

// Attribute x.name as jinja2's sandbox resolves it: a method, else an item of
// a dict, else undefined (an error only when used).
static jinja_val *get_attr(jx_ctx *c, int line, jinja_val *x, const char *name, size_t n) {
    if (x->kind == JV_UNDEF) return undefined_error(c, line, x);
    if (x->kind == JV_LOOP) {
        jx_loop *L = x->u.loop;
        size_t len = L->iter->u.l.n, i = L->i;
        jinja_arena *a = c->a;
        if (!strcmp(name, "index")) return jinja_int(a, (int64_t)i + 1);
        if (!strcmp(name, "index0")) return jinja_int(a, (int64_t)i);
        if (!strcmp(name, "revindex")) return jinja_int(a, (int64_t)(len - i));
        if (!strcmp(name, "revindex0")) return jinja_int(a, (int64_t)(len - i - 1));
        if (!strcmp(name, "first")) return jinja_bool(a, i == 0);
        if (!strcmp(name, "last")) return jinja_bool(a, i + 1 == len);
        if (!strcmp(name, "length")) return jinja_int(a, (int64_t)len);
        if (!strcmp(name, "depth")) return jinja_int(a, 1);
        if (!strcmp(name, "depth0")) return jinja_int(a, 0);
        if (!strcmp(name, "previtem")) return i > 0 ? L->iter->u.l.v[i - 1] : jx_undef(a);
        if (!strcmp(name, "nextitem")) return i + 1 < len ? L->iter->u.l.v[i + 1] : jx_undef(a);
        if (!strcmp(name, "cycle")) {
            jinja_val *m = jx_new(a, JV_METHOD);
            m->u.meth.self = x;
            m->u.meth.name = "cycle";
            return m;
        }
        if (!strcmp(name, "changed")) { jx_fail(c, line, "loop.changed is not supported"); return NULL; }
        return jx_undef(a);
    }
    if (x->kind == JV_DICT && x->ns) {
        jinja_val *v = jx_dict_gets(x, name, n);
        return v ? v : jx_undef(c->a);
    }
    if (jx_unsafe_method(x, name)) return jx_undef(c->a);   // calling it fails, as jinja2's SecurityError
    if (jx_has_method(x, name)) {
        jinja_val *m = jx_new(c->a, JV_METHOD);
        m->u.meth.self = x;
        m->u.meth.name = jx_strdup(c->a, name, n);
        return m;
    }
    if (x->kind == JV_DICT) {
        jinja_val *v = jx_dict_gets(x, name, n);
        if (v) return v;
    }
    return jx_undef(c->a);
}

static int norm_index(int64_t i, size_t len, size_t *out) {
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return -1;
    *out = (size_t)i;
    return 0;
}

// x[key] as jinja2's getitem: an item, else (for a str key) an attribute, else undefined.
static jinja_val *get_item(jx_ctx *c, int line, jinja_val *x, jinja_val *key) {
    if (x->kind == JV_UNDEF) return undefined_error(c, line, x);
    if (x->kind == JV_DICT && !x->ns) {
        jinja_val *v = jx_dict_get(x, key);
        if (v) return v;
    } else if (((x->kind == JV_LIST && !x->gen) || x->kind == JV_STR) && (key->kind == JV_INT || key->kind == JV_BOOL)) {
        size_t len = x->kind == JV_LIST ? x->u.l.n : jx_utf8_len(x->u.s.p, x->u.s.n), i;
        if (norm_index(as_i(key), len, &i) == 0) {
            if (x->kind == JV_LIST) return x->u.l.v[i];
            size_t st = jx_utf8_offset(x->u.s.p, x->u.s.n, i);
            return jx_mkstr(c, x->u.s.p + st, jx_utf8_next(x->u.s.p, x->u.s.n, st, NULL) - st);
        }
        return jx_undef(c->a);
    }
    if (key->kind == JV_STR) return get_attr(c, line, x, key->u.s.p, key->u.s.n);
    return jx_undef(c->a);
}

static int slice_bound(jx_ctx *c, int line, jinja_val *v, int *none, int64_t *out) {
    *none = !v || v->kind == JV_NONE;
    if (*none) return 0;
    if (v->kind != JV_INT && v->kind != JV_BOOL)
        return jx_fail(c, line, "slice indices must be integers or None, not %s", jx_type_name(v));
    *out = as_i(v);
    return 0;
}

static jinja_val *get_slice(jx_ctx *c, int line, jinja_val *x, jinja_val *lo, jinja_val *hi, jinja_val *stepv) {
    if (x->kind == JV_UNDEF) return undefined_error(c, line, x);
    int n0, n1, n2;
    int64_t start = 0, stop = 0, step = 1;
    if (slice_bound(c, line, lo, &n0, &start) || slice_bound(c, line, hi, &n1, &stop) ||
        slice_bound(c, line, stepv, &n2, &step))
        return NULL;
    if (n2) step = 1;
    if (step == 0) { jx_fail(c, line, "slice step cannot be zero"); return NULL; }
    if ((x->kind != JV_LIST || x->gen) && x->kind != JV_STR) return jx_undef(c->a);
    // A str is sliced by code points: index them first.
    size_t *offs = NULL;
    int64_t len;
    if (x->kind == JV_STR) {
        len = (int64_t)jx_utf8_len(x->u.s.p, x->u.s.n);
        offs = xmalloc(((size_t)len + 1) * sizeof *offs);
        size_t k = 0;
        for (size_t i = 0; i < x->u.s.n; i = jx_utf8_next(x->u.s.p, x->u.s.n, i, NULL)) offs[k++] = i;
        offs[k] = x->u.s.n;
    } else len = (int64_t)x->u.l.n;
    // slice.indices(len)
    if (n0) start = step < 0 ? len - 1 : 0;
    else {
        if (start < 0) start += len;
        if (start < 0) start = step < 0 ? -1 : 0;
        if (start >= len) start = step < 0 ? len - 1 : len;
    }
    if (n1) stop = step < 0 ? -1 : len;
    else {
        if (stop < 0) stop += len;
        if (stop < 0) stop = step < 0 ? -1 : 0;
        if (stop >= len) stop = step < 0 ? len - 1 : len;
    }
    jinja_val *v;
    if (x->kind == JV_STR) {
        sbuf b = {0};
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            sbuf_put(&b, x->u.s.p + offs[i], offs[i + 1] - offs[i]);
        free(offs);
        v = jx_sbuf_str(c, &b);
    } else {
        v = x->tuple ? jx_tuple(c->a) : jinja_list(c->a);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jinja_list_push(v, x->u.l.v[i]);
    }
    return v;
}

static int eval_args(jx_ctx *c, jx_scope *s, const jx_node *n, jx_args *args) {
    memset(args, 0, sizeof *args);
    args->npos = n->args.n;
    args->nkw = n->kwargs.n;
    args->pos = jx_alloc(c->a, (args->npos + 1) * sizeof *args->pos);
    args->kwn = jx_alloc(c->a, (args->nkw + 1) * sizeof *args->kwn);
    args->kwv = jx_alloc(c->a, (args->nkw + 1) * sizeof *args->kwv);
    for (size_t i = 0; i < n->args.n; i++)
        if (!(args->pos[i] = eval(c, s, n->args.v[i]))) return -1;
    for (size_t i = 0; i < n->kwargs.n; i++) {
        args->kwn[i] = n->kwargs.v[i]->name;
        if (!(args->kwv[i] = eval(c, s, n->kwargs.v[i]->a))) return -1;
    }
    return 0;
}

static int exec_body(jx_ctx *c, jx_scope *s, const jx_nodes *body);

// Renders body into a fresh buffer (block set, macro, caller, filter block).
static jinja_val *capture(jx_ctx *c, jx_scope *s, const jx_nodes *body, int *flow) {
    sbuf buf = {0}, *saved = c->out;
    c->out = &buf;
    int rc = exec_body(c, s, body);
    c->out = saved;
    if (flow) *flow = rc;
    if (rc < 0) {
        sbuf_free(&buf);
        return NULL;
    }
    return jx_sbuf_str(c, &buf);
}

static jinja_val *call_macro(jx_ctx *c, int line, jinja_val *m, jinja_val **pos, size_t npos, const char **kwn,
                             jinja_val **kwv, size_t nkw, jinja_val *caller) {
    const jx_node *def = m->u.m.def;
    if (c->call_depth >= JX_MAX_CALL_DEPTH) {
        jx_fail(c, line, "macro calls nested deeper than the limit (%d)", JX_MAX_CALL_DEPTH);
        return NULL;
    }
    size_t np = def->args.n;
    if (npos > np) {
        jx_fail(c, line, "macro '%s' takes not more than %zu argument(s)", def->name ? def->name : "caller", np);
        return NULL;
    }
    jx_scope *s = scope_new(c, m->u.m.closure);
    for (size_t k = 0; k < nkw; k++) {
        size_t i;
        for (i = 0; i < np; i++)
            if (!strcmp(def->args.v[i]->name, kwn[k])) break;
        if (i == np) {
            jx_fail(c, line, "macro '%s' takes no keyword argument '%s'", def->name ? def->name : "caller", kwn[k]);
            return NULL;
        }
        if (i < npos) {
            jx_fail(c, line, "macro '%s' got multiple values for argument '%s'", def->name ? def->name : "caller", kwn[k]);
            return NULL;
        }
    }
    for (size_t i = 0; i < np; i++) {
        const jx_node *p = def->args.v[i];
        jinja_val *v = i < npos ? pos[i] : NULL;
        for (size_t k = 0; k < nkw && !v; k++)
            if (!strcmp(p->name, kwn[k])) v = kwv[k];
        // A parameter not given and without a default is undefined, as in jinja2.
        if (!v) v = p->a ? eval(c, s, p->a) : jx_undef(c->a);
        if (!v) return NULL;
        assign(c, s, p, v);
    }
    if (caller) jinja_dict_set(s->vars, "caller", 6, caller);
    c->call_depth++;
    int flow;
    jinja_val *out = capture(c, s, &def->body, &flow);
    c->call_depth--;
    return out;
}

static jinja_val *fn_range(jx_ctx *c, int line, jinja_val **pos, size_t npos) {
    int64_t st = 0, en, step = 1;
    if (npos < 1 || npos > 3) { jx_fail(c, line, "range expected 1 to 3 arguments, got %zu", npos); return NULL; }
    for (size_t i = 0; i < npos; i++)
        if (pos[i]->kind != JV_INT && pos[i]->kind != JV_BOOL) {
            jx_fail(c, line, "'%s' object cannot be interpreted as an integer", jx_type_name(pos[i]));
            return NULL;
        }
    if (npos == 1) en = as_i(pos[0]);
    else {
        st = as_i(pos[0]);
        en = as_i(pos[1]);
        if (npos == 3) step = as_i(pos[2]);
    }
    if (step == 0) { jx_fail(c, line, "range() arg 3 must not be zero"); return NULL; }
    double count = step > 0 ? ceil(((double)en - (double)st) / (double)step) : ceil(((double)st - (double)en) / (double)-step);
    if (count > JX_MAX_RANGE) {   // jinja2's sandbox: OverflowError
        jx_fail(c, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JX_MAX_RANGE);
        return NULL;
    }
    jinja_val *v = jinja_list(c->a);
    for (int64_t i = st; step > 0 ? i < en : i > en; i += step) jinja_list_push(v, jinja_int(c->a, i));
    return v;
}

int jx_call_value(jx_ctx *c, int line, jinja_val *fn, jinja_val **pos, size_t npos, const char **kwn,
                  jinja_val **kwv, size_t nkw, jinja_val **out) {
    jinja_arena *a = c->a;
    switch (fn->kind) {
    case JV_MACRO: return (*out = call_macro(c, line, fn, pos, npos, kwn, kwv, nkw, NULL)) ? 0 : -1;
    case JV_METHOD: {
        jx_args args = {pos, npos, kwn, kwv, nkw};
        return jx_call_method(c, line, fn->u.meth.self, fn->u.meth.name, &args, out);
    }
    case JV_BUILTIN:
        switch (fn->u.fn) {
        case JX_FN_RANGE:
            if (nkw) return jx_fail(c, line, "range() takes no keyword arguments");
            return (*out = fn_range(c, line, pos, npos)) ? 0 : -1;
        case JX_FN_NAMESPACE: case JX_FN_DICT: {
            jinja_val *d = jinja_dict(a);
            d->ns = fn->u.fn == JX_FN_NAMESPACE;
            if (npos > 1) return jx_fail(c, line, "%s expected at most 1 positional argument", d->ns ? "namespace()" : "dict()");
            if (npos == 1) {
                if (pos[0]->kind != JV_DICT || pos[0]->ns)
                    return jx_fail(c, line, "a positional argument of namespace() or dict() other than a dict is not supported");
                for (size_t i = 0; i < pos[0]->u.d.n; i++) jx_dict_put(d, pos[0]->u.d.k[i], pos[0]->u.d.v[i]);
            }
            for (size_t i = 0; i < nkw; i++) jinja_dict_set(d, kwn[i], strlen(kwn[i]), kwv[i]);
            *out = d;
            return 0;
        }
        case JX_FN_RAISE: {
            if (npos != 1 || nkw) return jx_fail(c, line, "raise_exception() takes exactly one argument");
            sbuf b = {0};
            jx_str(&b, pos[0]);
            int rc = jx_fail(c, line, "the template raised: %.*s", (int)(b.len < 700 ? b.len : 700), b.data ? (const char *)b.data : "");
            sbuf_free(&b);
            return rc;
        }
        case JX_FN_STRFTIME: {
            if (npos != 1 || nkw || pos[0]->kind != JV_STR) return jx_fail(c, line, "strftime_now() takes one string argument");
            time_t now = time(NULL);
            struct tm tm;
            if (!localtime_r(&now, &tm)) return jx_fail(c, line, "localtime failed");
            char buf[512];
            size_t k = strftime(buf, sizeof buf, pos[0]->u.s.p, &tm);
            if (k == 0 && pos[0]->u.s.n) return jx_fail(c, line, "strftime_now(): the format gives nothing or too much");
            *out = jx_mkstr(c, buf, k);
            return 0;
        }
        }
        break;
    case JV_UNDEF: return jx_fail(c, line, "an undefined value was called (an unknown or unsafe function or method)");
    default: break;
    }
    return jx_fail(c, line, "'%s' object is not callable", jx_type_name(fn));
}

static jinja_val *eval_filter(jx_ctx *c, jx_scope *s, const jx_node *n, jinja_val *operand) {
    jx_args args;
    if (eval_args(c, s, n, &args)) return NULL;
    jinja_val *out;
    return jx_apply_filter(c, n->line, n->name, operand, &args, &out) ? NULL : out;
}

// A filter chain whose innermost operand is v (block set and filter blocks).
static jinja_val *apply_chain(jx_ctx *c, jx_scope *s, const jx_node *f, jinja_val *v) {
    if (f->a) {
        v = apply_chain(c, s, f->a, v);
        if (!v) return NULL;
    }
    return eval_filter(c, s, f, v);
}

static jinja_val *eval_node(jx_ctx *c, jx_scope *s, const jx_node *n) {
    if (jx_step(c, n->line)) return NULL;
    jinja_arena *a = c->a;
    jinja_val *x, *y;
    switch (n->kind) {
    case JN_CONST: return n->value;
    case JN_NAME: return lookup(c, s, n->name, n->name_n);
    case JN_LIST: case JN_TUPLE:
        x = n->kind == JN_TUPLE ? jx_tuple(a) : jinja_list(a);
        for (size_t i = 0; i < n->args.n; i++) {
            if (!(y = eval(c, s, n->args.v[i]))) return NULL;
            jinja_list_push(x, y);
        }
        return x;
    case JN_DICT:
        x = jinja_dict(a);
        for (size_t i = 0; i + 1 < n->args.n; i += 2) {
            jinja_val *k = eval(c, s, n->args.v[i]), *v;
            if (!k || !(v = eval(c, s, n->args.v[i + 1]))) return NULL;
            if (k->kind == JV_LIST && !k->tuple) { jx_fail(c, n->line, "unhashable type: 'list'"); return NULL; }
            if (k->kind == JV_DICT) { jx_fail(c, n->line, "unhashable type: 'dict'"); return NULL; }
            jx_dict_put(x, k, v);
        }
        return x;
    case JN_ATTR:
        if (!(x = eval(c, s, n->a))) return NULL;
        return get_attr(c, n->line, x, n->name, n->name_n);
    case JN_ITEM:
        if (!(x = eval(c, s, n->a)) || !(y = eval(c, s, n->b))) return NULL;
        return get_item(c, n->line, x, y);
    case JN_SLICE: {
        jinja_val *lo = NULL, *hi = NULL, *st = NULL;
        if (!(x = eval(c, s, n->a))) return NULL;
        if ((n->b && !(lo = eval(c, s, n->b))) || (n->c && !(hi = eval(c, s, n->c))) || (n->d && !(st = eval(c, s, n->d))))
            return NULL;
        return get_slice(c, n->line, x, lo, hi, st);
    }
    case JN_CALL: {
        if (!(x = eval(c, s, n->a))) return NULL;
        jx_args args;
        if (eval_args(c, s, n, &args)) return NULL;
        jinja_val *out;
        return jx_call_value(c, n->line, x, args.pos, args.npos, args.kwn, args.kwv, args.nkw, &out) ? NULL : out;
    }
    case JN_FILTER:
        if (!(x = eval(c, s, n->a))) return NULL;
        return eval_filter(c, s, n, x);
    case JN_TEST: {
        if (!(x = eval(c, s, n->a))) return NULL;
        jx_args args;
        if (eval_args(c, s, n, &args)) return NULL;
        int r;
        if (jx_apply_test(c, n->line, n->name, x, &args, &r)) return NULL;
        return jinja_bool(a, n->op ? !r : r);
    }
    case JN_BINOP:
        if (!(x = eval(c, s, n->a)) || !(y = eval(c, s, n->b))) return NULL;
        if (n->op == JO_CONCAT) {
            sbuf b = {0};
            jx_str(&b, x);
            jx_str(&b, y);
            if (jx_check_size(c, n->line, b.len)) { sbuf_free(&b); return NULL; }
            return jx_sbuf_str(c, &b);
        }
        if (n->op >= JO_EQ) return compare(c, n->line, n->op, x, y);
        if (n->op == JO_MOD && x->kind == JV_STR) { jx_fail(c, n->line, "string formatting with %% is not supported"); return NULL; }
        return arith(c, n->line, n->op, x, y);
    case JN_NOT:
        if (!(x = eval(c, s, n->a))) return NULL;
        return jinja_bool(a, !jx_truthy(x));
    case JN_NEG: case JN_POS:
        if (!(x = eval(c, s, n->a))) return NULL;
        if (x->kind == JV_UNDEF) return undefined_error(c, n->line, x);
        if (!is_num(x)) { jx_fail(c, n->line, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jx_type_name(x)); return NULL; }
        if (n->kind == JN_POS) return x->kind == JV_BOOL ? jinja_int(a, x->u.b) : x;
        if (x->kind == JV_FLOAT) return jinja_float(a, -x->u.f);
        if (as_i(x) == INT64_MIN) return overflow(c, n->line);
        return jinja_int(a, -as_i(x));
    case JN_AND:
        if (!(x = eval(c, s, n->a))) return NULL;
        return jx_truthy(x) ? eval(c, s, n->b) : x;
    case JN_OR:
        if (!(x = eval(c, s, n->a))) return NULL;
        return jx_truthy(x) ? x : eval(c, s, n->b);
    case JN_COND:
        if (!(x = eval(c, s, n->a))) return NULL;
        if (jx_truthy(x)) return eval(c, s, n->b);
        return n->c ? eval(c, s, n->c) : jx_undef(a);
    default: break;
    }
    jx_fail(c, n->line, "internal error: a statement where an expression belongs");
    return NULL;
}

// The C stack bounds how deep evaluation may go: a tree deeper than the
// parser's limit (chains inside chains) or recursive macros stop here with
// an error, not a crash.
static int enter(jx_ctx *c, int line) {
    if (c->depth >= JX_MAX_DEPTH) return jx_fail(c, line, "evaluation nested deeper than the limit (%d levels)", JX_MAX_DEPTH);
    c->depth++;
    return 0;
}

static jinja_val *eval(jx_ctx *c, jx_scope *s, const jx_node *n) {
    if (enter(c, n->line)) return NULL;
    jinja_val *v = eval_node(c, s, n);
    c->depth--;
    return v;
}

// ---- statements -----------------------------------------------------------------------
static int unpack(jx_ctx *c, jx_scope *s, const jx_node *target, jinja_val *v, int line);

static int assign_target(jx_ctx *c, jx_scope *s, const jx_node *t, jinja_val *v, int line) {
    if (t->kind == JN_NAME) {
        assign(c, s, t, v);
        return 0;
    }
    if (t->kind == JN_ATTR) {
        jinja_val *ns = lookup(c, s, t->a->name, t->a->name_n);
        if (ns->kind != JV_DICT || !ns->ns) return jx_fail(c, line, "cannot assign attribute on non-namespace object");
        jinja_dict_set(ns, t->name, t->name_n, v);
        return 0;
    }
    return unpack(c, s, t, v, line);
}

static int unpack(jx_ctx *c, jx_scope *s, const jx_node *target, jinja_val *v, int line) {
    size_t want = target->args.n;
    jinja_val *items = v;
    if (v->kind == JV_STR) {
        items = jinja_list(c->a);
        for (size_t i = 0; i < v->u.s.n;) {
            size_t j = jx_utf8_next(v->u.s.p, v->u.s.n, i, NULL);
            jinja_list_push(items, jx_mkstr(c, v->u.s.p + i, j - i));
            i = j;
        }
    } else if (v->kind == JV_DICT && !v->ns) {
        items = jinja_list(c->a);
        for (size_t i = 0; i < v->u.d.n; i++) jinja_list_push(items, v->u.d.k[i]);
    } else if (v->kind == JV_UNDEF) {
        items = jinja_list(c->a);
    } else if (v->kind != JV_LIST)
        return jx_fail(c, line, "cannot unpack non-iterable %s object", jx_type_name(v));
    if (items->u.l.n != want)
        return jx_fail(c, line, "%s values to unpack (expected %zu, got %zu)", items->u.l.n > want ? "too many" : "not enough",
                       want, items->u.l.n);
    for (size_t i = 0; i < want; i++)
        if (assign_target(c, s, target->args.v[i], items->u.l.v[i], line)) return -1;
    return 0;
}

static int exec_for(jx_ctx *c, jx_scope *s, const jx_node *n) {
    jinja_val *seq = eval(c, s, n->b);
    if (!seq || !(seq = jx_iter_items(c, n->line, seq))) return FLOW_ERR;
    if (n->c) {   // for x in xs if cond: the loop sees only the items that pass
        jinja_val *kept = jinja_list(c->a);
        for (size_t i = 0; i < seq->u.l.n; i++) {
            jx_scope *fs = scope_new(c, s);
            if (assign_target(c, fs, n->a, seq->u.l.v[i], n->line)) return FLOW_ERR;
            jinja_val *ok = eval(c, fs, n->c);
            if (!ok) return FLOW_ERR;
            if (jx_truthy(ok)) jinja_list_push(kept, seq->u.l.v[i]);
        }
        seq = kept;
    } else if (seq->kind == JV_LIST && seq->u.l.n) {
        // The loop walks a snapshot, as Python iterates the list it was given.
        jinja_val *copy = jinja_list(c->a);
        for (size_t i = 0; i < seq->u.l.n; i++) jinja_list_push(copy, seq->u.l.v[i]);
        seq = copy;
    }
    jx_loop *L = jx_alloc(c->a, sizeof *L);
    L->iter = seq;
    jinja_val *loop = jx_new(c->a, JV_LOOP);
    loop->u.loop = L;
    for (L->i = 0; L->i < seq->u.l.n; L->i++) {
        if (jx_step(c, n->line)) return FLOW_ERR;
        jx_scope *it = scope_new(c, s);   // each iteration's assignments are its own, as in jinja2
        jinja_dict_set(it->vars, "loop", 4, loop);
        if (assign_target(c, it, n->a, seq->u.l.v[L->i], n->line)) return FLOW_ERR;
        int rc = exec_body(c, it, &n->body);
        if (rc == FLOW_ERR) return FLOW_ERR;
        if (rc == FLOW_BREAK) break;
    }
    if (seq->u.l.n == 0 && n->orelse.n) return exec_body(c, s, &n->orelse);
    return FLOW_NONE;
}

static int exec_stmt(jx_ctx *c, jx_scope *s, const jx_node *n) {
    if (jx_step(c, n->line)) return FLOW_ERR;
    jinja_val *v;
    switch (n->kind) {
    case JN_TEXT: return emit(c, n->line, n->value->u.s.p, n->value->u.s.n);
    case JN_OUTPUT: {
        if (!(v = eval(c, s, n->a))) return FLOW_ERR;
        if (v->kind == JV_STR) return emit(c, n->line, v->u.s.p, v->u.s.n);
        if (v->kind == JV_LIST && v->gen) return jx_fail(c, n->line, "printing a generator (from map, select, ...) is not supported");
        sbuf b = {0};
        jx_str(&b, v);
        int rc = emit(c, n->line, b.data, b.len);
        sbuf_free(&b);
        return rc;
    }
    case JN_IF:
        if (!(v = eval(c, s, n->a))) return FLOW_ERR;
        return exec_body(c, s, jx_truthy(v) ? &n->body : &n->orelse);
    case JN_FOR: return exec_for(c, s, n);
    case JN_SET:
        if (!(v = eval(c, s, n->b))) return FLOW_ERR;
        return assign_target(c, s, n->a, v, n->line);
    case JN_SET_BLOCK:
        if (!(v = capture(c, s, &n->body, NULL))) return FLOW_ERR;
        if (n->c && !(v = apply_chain(c, s, n->c, v))) return FLOW_ERR;
        assign(c, s, n->a, v);
        return 0;
    case JN_FILTER_BLOCK:
        if (!(v = capture(c, s, &n->body, NULL)) || !(v = apply_chain(c, s, n->c, v))) return FLOW_ERR;
        {
            sbuf b = {0};
            jx_str(&b, v);
            int rc = emit(c, n->line, b.data, b.len);
            sbuf_free(&b);
            return rc;
        }
    case JN_MACRO:
        v = jx_new(c->a, JV_MACRO);
        v->u.m.def = n;
        v->u.m.closure = s;
        assign(c, s, n, v);
        return 0;
    case JN_CALL_BLOCK: {
        const jx_node *call = n->a;
        jinja_val *fn = eval(c, s, call->a);
        if (!fn) return FLOW_ERR;
        if (fn->kind != JV_MACRO) return jx_fail(c, n->line, "{%% call %%} of something other than a macro is not supported");
        jx_args args;
        if (eval_args(c, s, call, &args)) return FLOW_ERR;
        jinja_val *caller = jx_new(c->a, JV_MACRO);
        caller->u.m.def = n;   // its params are n->args, its body n->body
        caller->u.m.closure = s;
        if (!(v = call_macro(c, n->line, fn, args.pos, args.npos, args.kwn, args.kwv, args.nkw, caller))) return FLOW_ERR;
        return emit(c, n->line, v->u.s.p, v->u.s.n);
    }
    case JN_BREAK: return FLOW_BREAK;
    case JN_CONTINUE: return FLOW_CONTINUE;
    case JN_GENERATION: {
        size_t start = c->out->len;
        int rc = exec_body(c, s, &n->body);
        if (rc < 0) return rc;
        if (c->gen && c->out == c->main_out) {
            jinja_spans *g = c->gen;
            GROW(g->v, g->cap, g->n + 1, 8);
            g->v[g->n].start = start;
            g->v[g->n].end = c->out->len;
            g->n++;
        }
        return rc;
    }
    default: break;
    }
    return jx_fail(c, n->line, "internal error: an expression where a statement belongs");
}

static int exec_node(jx_ctx *c, jx_scope *s, const jx_node *n) {
    if (enter(c, n->line)) return FLOW_ERR;
    int rc = exec_stmt(c, s, n);
    c->depth--;
    return rc;
}

static int exec_body(jx_ctx *c, jx_scope *s, const jx_nodes *body) {
    for (size_t i = 0; i < body->n; i++) {
        int rc = exec_node(c, s, body->v[i]);
        if (rc != FLOW_NONE) return rc;
    }
    return FLOW_NONE;
}

int jinja_render(const jinja_tpl *t, jinja_arena *a, const jinja_val *vars, sbuf *out, jinja_spans *gen, rl_err *err) {
    jx_ctx c = {0};
    c.a = a;
    c.name = t->name;
    jinja_val *empty = NULL;
    if (!vars || vars->kind != JV_DICT) vars = empty = jinja_dict(a);
    c.globals = vars;
    c.main_out = c.out = out;
    c.gen = gen;
    c.err = err;
    size_t used0 = a->used;
    // The memory limit counts what this render makes, not what the caller put in.
    a->used = 0;
    jx_scope *top = scope_new(&c, NULL);
    int rc = exec_body(&c, top, &t->root->body);
    a->used += used0;
    return rc < 0 ? -1 : 0;
}
