// jinja_runtime.c — the state of one render as filters, tests and methods see
// it: errors that name the template and line, the step, memory and size
// limits (JX_MAX_*), and values made in the render's arena.
#include <stdio.h>

#include "template/jinja_internal.h"

int jx_fail(jx_ctx *c, int line, const char *fmt, ...) {
    if (c->failed) return -1;
    char what[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    c->failed = 1;
    return err_set(c->err, "%s line %d: %s", c->name, line, what);
}

jinja_arena *jx_arena(jx_ctx *c) { return c->a; }

int jx_step(jx_ctx *c, int line) {
    if (++c->steps > JX_MAX_STEPS) return jx_fail(c, line, "the evaluation step limit (%lld) was exceeded", JX_MAX_STEPS);
    if (c->a->used > JX_MAX_MEMORY) return jx_fail(c, line, "the memory limit (%zu MiB) was exceeded", JX_MAX_MEMORY >> 20);
    return 0;
}

int jx_check_size(jx_ctx *c, int line, size_t n) {
    if (n > JX_MAX_OUTPUT) return jx_fail(c, line, "a string longer than the output limit (%zu MiB)", JX_MAX_OUTPUT >> 20);
    return 0;
}

jinja_val *jx_mkstr(jx_ctx *c, const char *s, size_t n) { return jinja_str(c->a, s, n); }

jinja_val *jx_sbuf_str(jx_ctx *c, sbuf *b) {
    jinja_val *v = jinja_str(c->a, b->data ? (const char *)b->data : "", b->len);
    sbuf_free(b);
    return v;
}

jinja_val *jx_iter_items(jx_ctx *c, int line, jinja_val *v) {
    jinja_val *items;
    switch (v->kind) {
    case JV_LIST: return v;
    case JV_UNDEF: return jinja_list(c->a);
    case JV_DICT:
        if (v->ns) break;
        items = jinja_list(c->a);
        for (size_t i = 0; i < v->u.d.n; i++) jinja_list_push(items, v->u.d.k[i]);
        return items;
    case JV_STR:
        items = jinja_list(c->a);
        for (size_t i = 0; i < v->u.s.n;) {
            size_t j = jx_utf8_next(v->u.s.p, v->u.s.n, i, NULL);
            jinja_list_push(items, jx_mkstr(c, v->u.s.p + i, j - i));
            i = j;
        }
        return items;
    default: break;
    }
    jx_fail(c, line, "'%s' object is not iterable", jx_type_name(v));
    return NULL;
}
