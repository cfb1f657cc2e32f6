// jinja_parse.c — tokens to a syntax tree, with jinja2's grammar and operator
// precedence (or < and < not < comparisons < + - < ~ < * / // % < ** <
// unary - + < filters and tests < postfix . [] ()). What the interpreter does
// not implement is refused here, naming the construct and its line.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"

typedef struct {
    jinja_arena *a;
    const jx_toks *t;
    size_t i;
    const char *name;
    rl_err *err;
    int depth;         // nesting of expressions and statements
    int loops;         // for-loops open around the statement being parsed
    int failed;
    int generations;   // {% generation %} blocks seen
} parser;

static const jx_tok *cur(parser *P) { return &P->t->v[P->i]; }
static const jx_tok *peek(parser *P, size_t k) {
    size_t j = P->i + k;
    return j < P->t->n ? &P->t->v[j] : &P->t->v[P->t->n - 1];
}
static void advance(parser *P) {
    if (P->t->v[P->i].kind != JT_EOF) P->i++;
}

static jx_node *fail(parser *P, int line, const char *fmt, const char *arg) {
    if (!P->failed) {
        char what[512];
        snprintf(what, sizeof what, fmt, arg);
        err_set(P->err, "%s line %d: %s", P->name, line, what);
        P->failed = 1;
    }
    return NULL;
}

static int is_op(const jx_tok *t, const char *op) { return t->kind == JT_OP && strcmp(t->p, op) == 0; }
static int is_name(const jx_tok *t, const char *nm) {
    return t->kind == JT_NAME && t->n == strlen(nm) && memcmp(t->p, nm, t->n) == 0;
}

static int expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        fail(P, cur(P)->line, "expected '%s'", op);
        return -1;
    }
    advance(P);
    return 0;
}

static jx_node *node(parser *P, jx_node_kind kind, int line) {
    jx_node *n = jx_alloc(P->a, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

static void push(parser *P, jx_nodes *l, jx_node *n) {
    if (l->n == l->cap) {
        size_t cap = GROW_CAP(l->cap, l->n + 1, 4, sizeof *l->v);
        jx_node **nv = jx_alloc(P->a, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

// One level deeper: a bracket, a statement's body, or a link of a chain
// (a + b + c, a|f|g, a.b.c, elif ...) whose tree nests one level a link.
static int enter(parser *P) {
    if (++P->depth > JX_MAX_NESTING) {
        fail(P, cur(P)->line, "%s",
             "nesting deeper than the parse limit (256; each link of a chain such as a + b + c or a|f|g counts one)");
        return -1;
    }
    return 0;
}

static jx_node *parse_expression(parser *P, int with_condexpr);
static jx_node *parse_or(parser *P);
static jx_node *parse_unary(parser *P, int with_filter);
static jx_node *parse_primary(parser *P);
static jx_node *parse_postfix(parser *P, jx_node *n);
static jx_node *parse_filter_expr(parser *P, jx_node *n);

// A comma-separated list of expressions: one expression, or a tuple. Ends at
// a closing tag, ')', or a name among ends.
static jx_node *parse_tuple(parser *P, int with_condexpr, int explicit_parens, const char *const *ends) {
    int line = cur(P)->line;
    jx_node *t = node(P, JN_TUPLE, line);
    int is_tuple = 0;
    for (;;) {
        if (t->args.n) {
            if (!is_op(cur(P), ",")) break;
            advance(P);
            is_tuple = 1;
        }
        const jx_tok *c = cur(P);
        int end = c->kind == JT_VAR_END || c->kind == JT_BLOCK_END || c->kind == JT_EOF || is_op(c, ")");
        for (const char *const *e = ends; e && *e && !end; e++) end = is_name(c, *e);
        if (end) break;
        jx_node *x = parse_expression(P, with_condexpr);
        if (!x) return NULL;
        push(P, &t->args, x);
    }
    if (!is_tuple) {
        if (t->args.n) return t->args.v[0];
        if (!explicit_parens) return fail(P, line, "%s", "expected an expression");
    }
    return t;
}

static jx_node *parse_expression(parser *P, int with_condexpr) {
    if (enter(P)) return NULL;
    jx_node *x = parse_or(P);
    int links = 0;
    while (x && with_condexpr && is_name(cur(P), "if")) {
        if (enter(P)) return NULL;
        links++;
        jx_node *c = node(P, JN_COND, cur(P)->line);
        advance(P);
        c->b = x;
        if (!(c->a = parse_or(P))) return NULL;
        if (is_name(cur(P), "else")) {
            advance(P);
            if (!(c->c = parse_expression(P, 1))) return NULL;
        }
        x = c;
    }
    P->depth -= links + 1;
    return x;
}

// operand (word operand)*, left-associative: "a and b and c", "a or b".
static jx_node *parse_chain(parser *P, const char *word, jx_node_kind kind, jx_node *(*operand)(parser *)) {
    jx_node *x = operand(P);
    int links = 0;
    while (x && is_name(cur(P), word)) {
        if (enter(P)) return NULL;
        links++;
        jx_node *n = node(P, kind, cur(P)->line);
        advance(P);
        n->a = x;
        if (!(n->b = operand(P))) return NULL;
        x = n;
    }
    P->depth -= links;
    return x;
}

static jx_node *parse_not(parser *P);
static jx_node *parse_and(parser *P) { return parse_chain(P, "and", JN_AND, parse_not); }
static jx_node *parse_or(parser *P) { return parse_chain(P, "or", JN_OR, parse_and); }

static jx_node *binop(parser *P, int op, int line, jx_node *a, jx_node *b) {
    jx_node *n = node(P, JN_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jx_node *parse_math1(parser *P);
static jx_node *parse_compare(parser *P) {
    jx_node *x = parse_math1(P), *chain = NULL;
    int links = 0;
    while (x) {
        const jx_tok *c = cur(P);
        int line = c->line, op;
        if (is_op(c, "==")) op = JO_EQ;
        else if (is_op(c, "!=")) op = JO_NE;
        else if (is_op(c, "<")) op = JO_LT;
        else if (is_op(c, "<=")) op = JO_LE;
        else if (is_op(c, ">")) op = JO_GT;
        else if (is_op(c, ">=")) op = JO_GE;
        else if (is_name(c, "in")) op = JO_IN;
        else if (is_name(c, "not") && is_name(peek(P, 1), "in")) {
            op = JO_NOTIN;
            advance(P);
        } else break;
        if (enter(P)) return NULL;
        links++;
        advance(P);
        jx_node *y = parse_math1(P);
        if (!y) return NULL;
        // a < b < c is (a < b) and (b < c), as in Python.
        jx_node *cmp = binop(P, op, line, chain ? chain->b : x, y);
        if (chain) {
            jx_node *n = node(P, JN_AND, line);
            n->a = x;
            n->b = cmp;
            x = n;
        } else x = cmp;
        chain = cmp;
    }
    P->depth -= links;
    return x;
}

static jx_node *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        if (enter(P)) return NULL;
        jx_node *n = node(P, JN_NOT, cur(P)->line);
        advance(P);
        if (!(n->a = parse_not(P))) return NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

// The left-associative binary levels below the comparisons, loosest first:
// + -, then ~, then * / // %, then ** (left-associative in jinja2 too).
static const struct {
    const char *op;
    jx_op code;
} BINARY_LEVELS[][4] = {
    {{"+", JO_ADD}, {"-", JO_SUB}},
    {{"~", JO_CONCAT}},
    {{"*", JO_MUL}, {"/", JO_DIV}, {"//", JO_FLOORDIV}, {"%", JO_MOD}},
    {{"**", JO_POW}},
};
#define N_BINARY_LEVELS (sizeof BINARY_LEVELS / sizeof *BINARY_LEVELS)

static jx_node *parse_binary(parser *P, size_t level) {
    if (level == N_BINARY_LEVELS) return parse_unary(P, 1);
    jx_node *x = parse_binary(P, level + 1);
    int links = 0;
    while (x) {
        const jx_tok *c = cur(P);
        size_t k = 0;
        while (k < 4 && BINARY_LEVELS[level][k].op && !is_op(c, BINARY_LEVELS[level][k].op)) k++;
        if (k == 4 || !BINARY_LEVELS[level][k].op) {
            P->depth -= links;
            return x;
        }
        if (enter(P)) return NULL;
        links++;
        int line = c->line;
        advance(P);
        jx_node *y = parse_binary(P, level + 1);
        if (!y) return NULL;
        x = binop(P, BINARY_LEVELS[level][k].code, line, x, y);
    }
    return NULL;
}

static jx_node *parse_math1(parser *P) { return parse_binary(P, 0); }

static jx_node *parse_unary(parser *P, int with_filter) {
    if (enter(P)) return NULL;
    const jx_tok *c = cur(P);
    jx_node *x;
    if (is_op(c, "-") || is_op(c, "+")) {
        x = node(P, is_op(c, "-") ? JN_NEG : JN_POS, c->line);
        advance(P);
        if (!(x->a = parse_unary(P, 0))) return NULL;
    } else if (!(x = parse_primary(P))) return NULL;
    x = parse_postfix(P, x);
    if (x && with_filter) x = parse_filter_expr(P, x);
    P->depth--;
    return x;
}

// Arguments of a call at '(': positional and name=value.
static int parse_call_args(parser *P, jx_node *call) {
    if (expect_op(P, "(")) return -1;
    while (!is_op(cur(P), ")")) {
        if (call->args.n || call->kwargs.n) {
            if (expect_op(P, ",")) return -1;
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            fail(P, cur(P)->line, "%s", "*args and **kwargs in a call are not supported");
            return -1;
        }
        if (cur(P)->kind == JT_NAME && is_op(peek(P, 1), "=")) {
            jx_node *kw = node(P, JN_NAME, cur(P)->line);
            kw->name = cur(P)->p;
            kw->name_n = cur(P)->n;
            advance(P);
            advance(P);
            if (!(kw->a = parse_expression(P, 1))) return -1;
            push(P, &call->kwargs, kw);
        } else {
            if (call->kwargs.n) {
                fail(P, cur(P)->line, "%s", "a positional argument follows a keyword argument");
                return -1;
            }
            jx_node *x = parse_expression(P, 1);
            if (!x) return -1;
            push(P, &call->args, x);
        }
    }
    advance(P);
    return 0;
}

static jx_node *parse_primary(parser *P) {
    const jx_tok *c = cur(P);
    jx_node *x;
    switch (c->kind) {
    case JT_NAME:
        if (is_name(c, "true") || is_name(c, "True") || is_name(c, "false") || is_name(c, "False")) {
            x = node(P, JN_CONST, c->line);
            x->value = jinja_bool(P->a, c->p[0] == 't' || c->p[0] == 'T');
        } else if (is_name(c, "none") || is_name(c, "None")) {
            x = node(P, JN_CONST, c->line);
            x->value = jinja_none(P->a);
        } else {
            x = node(P, JN_NAME, c->line);
            x->name = c->p;
            x->name_n = c->n;
        }
        advance(P);
        return x;
    case JT_STRING: {
        // Adjacent literals join, as in Python.
        sbuf b = {0};
        int line = c->line;
        while (cur(P)->kind == JT_STRING) {
            sbuf_put(&b, cur(P)->p, cur(P)->n);
            advance(P);
        }
        x = node(P, JN_CONST, line);
        x->value = jinja_str(P->a, b.data ? (const char *)b.data : "", b.len);
        sbuf_free(&b);
        return x;
    }
    case JT_INT:
        x = node(P, JN_CONST, c->line);
        x->value = jinja_int(P->a, c->i);
        advance(P);
        return x;
    case JT_FLOAT:
        x = node(P, JN_CONST, c->line);
        x->value = jinja_float(P->a, c->f);
        advance(P);
        return x;
    case JT_OP:
        if (is_op(c, "(")) {
            advance(P);
            x = parse_tuple(P, 1, 1, NULL);
            if (!x || expect_op(P, ")")) return NULL;
            return x;
        }
        if (is_op(c, "[")) {
            x = node(P, JN_LIST, c->line);
            advance(P);
            while (!is_op(cur(P), "]")) {
                if (x->args.n) {
                    if (expect_op(P, ",")) return NULL;
                    if (is_op(cur(P), "]")) break;
                }
                jx_node *e = parse_expression(P, 1);
                if (!e) return NULL;
                push(P, &x->args, e);
            }
            advance(P);
            return x;
        }
        if (is_op(c, "{")) {
            x = node(P, JN_DICT, c->line);
            advance(P);
            while (!is_op(cur(P), "}")) {
                if (x->args.n) {
                    if (expect_op(P, ",")) return NULL;
                    if (is_op(cur(P), "}")) break;
                }
                jx_node *k = parse_expression(P, 1), *v;
                if (!k || expect_op(P, ":") || !(v = parse_expression(P, 1))) return NULL;
                push(P, &x->args, k);
                push(P, &x->args, v);
            }
            advance(P);
            return x;
        }
        break;
    default: break;
    }
    if (c->kind == JT_EOF || c->kind == JT_VAR_END || c->kind == JT_BLOCK_END)
        return fail(P, c->line, "%s", "unexpected end of expression");
    char what[64];
    snprintf(what, sizeof what, "%.*s", (int)(c->n < 40 ? c->n : 40), c->p);
    return fail(P, c->line, "unexpected '%s'", what);
}

static jx_node *parse_subscript(parser *P, jx_node *obj) {
    int line = cur(P)->line;
    advance(P);   // '['
    jx_node *parts[3] = {NULL, NULL, NULL};
    int nparts = 0, is_slice = 0;
    for (;;) {
        if (is_op(cur(P), ":")) {
            is_slice = 1;
            advance(P);
            if (++nparts > 2) return fail(P, line, "%s", "a slice has at most three parts");
            continue;
        }
        if (is_op(cur(P), "]")) break;
        if (parts[nparts]) return fail(P, cur(P)->line, "%s", "expected ':' or ']'");
        if (!(parts[nparts] = parse_expression(P, 1))) return NULL;
        if (is_op(cur(P), ",")) return fail(P, cur(P)->line, "%s", "tuple subscripts are not supported");
    }
    advance(P);
    jx_node *n;
    if (is_slice) {
        n = node(P, JN_SLICE, line);
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
    } else {
        if (!parts[0]) return fail(P, line, "%s", "expected a subscript");
        n = node(P, JN_ITEM, line);
        n->b = parts[0];
    }
    n->a = obj;
    return n;
}

static jx_node *parse_postfix(parser *P, jx_node *x) {
    int links = 0;
    while (x) {
        const jx_tok *c = cur(P);
        if (!is_op(c, ".") && !is_op(c, "[") && !is_op(c, "(")) break;
        if (enter(P)) return NULL;
        links++;
        if (is_op(c, ".")) {
            advance(P);
            const jx_tok *t = cur(P);
            if (t->kind == JT_NAME) {
                jx_node *n = node(P, JN_ATTR, t->line);
                n->a = x;
                n->name = t->p;
                n->name_n = t->n;
                advance(P);
                x = n;
            } else if (t->kind == JT_INT) {
                jx_node *n = node(P, JN_ITEM, t->line);
                n->a = x;
                n->b = node(P, JN_CONST, t->line);
                n->b->value = jinja_int(P->a, t->i);
                advance(P);
                x = n;
            } else return fail(P, t->line, "%s", "expected a name after '.'");
        } else if (is_op(c, "[")) x = parse_subscript(P, x);
        else {
            jx_node *n = node(P, JN_CALL, c->line);
            n->a = x;
            if (parse_call_args(P, n)) return NULL;
            x = n;
        }
    }
    P->depth -= links;
    return x;
}

static jx_node *parse_filter(parser *P, jx_node *operand) {
    const jx_tok *t = cur(P);
    if (t->kind != JT_NAME) return fail(P, t->line, "%s", "expected a filter name after '|'");
    if (is_op(peek(P, 1), ".")) return fail(P, t->line, "%s", "dotted filter names are not supported");
    jx_node *f = node(P, JN_FILTER, t->line);
    f->a = operand;
    f->name = t->p;
    f->name_n = t->n;
    if (!jx_filter_known(t->p)) return fail(P, t->line, "filter '%s' is not supported", t->p);
    advance(P);
    if (is_op(cur(P), "(") && parse_call_args(P, f)) return NULL;
    return f;
}

static jx_node *parse_test(parser *P, jx_node *operand) {
    jx_node *n = node(P, JN_TEST, cur(P)->line);
    advance(P);   // 'is'
    if (is_name(cur(P), "not")) {
        n->op = 1;
        advance(P);
    }
    const jx_tok *t = cur(P);
    if (t->kind != JT_NAME) return fail(P, t->line, "%s", "expected a test name after 'is'");
    if (!jx_test_known(t->p)) return fail(P, t->line, "test '%s' is not supported", t->p);
    n->a = operand;
    n->name = t->p;
    n->name_n = t->n;
    advance(P);
    const jx_tok *c = cur(P);
    if (is_op(c, "(")) {
        if (parse_call_args(P, n)) return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) return fail(P, c->line, "%s", "you cannot chain multiple tests with is");
        jx_node *arg = parse_postfix(P, parse_primary(P));
        if (!arg) return NULL;
        push(P, &n->args, arg);
    }
    return n;
}

static jx_node *parse_filter_expr(parser *P, jx_node *x) {
    int links = 0;
    while (x) {
        if (!is_op(cur(P), "|") && !is_name(cur(P), "is") && !is_op(cur(P), "(")) break;
        if (enter(P)) return NULL;
        links++;
        if (is_op(cur(P), "|")) {
            advance(P);
            x = parse_filter(P, x);
        } else if (is_name(cur(P), "is")) x = parse_test(P, x);
        else if (is_op(cur(P), "(")) {
            jx_node *n = node(P, JN_CALL, cur(P)->line);
            n->a = x;
            if (parse_call_args(P, n)) return NULL;
            x = n;
        }
    }
    P->depth -= links;
    return x;
}

// ---- statements ----------------------------------------------------------------
static int expect_block_end(parser *P) {
    if (cur(P)->kind != JT_BLOCK_END) {
        fail(P, cur(P)->line, "%s", "expected the end of the statement");
        return -1;
    }
    advance(P);
    return 0;
}

// Statements up to a {% NAME %} with NAME among ends (the tag's name is left
// current); *which says which. At the top (ends NULL) up to the end.
static int parse_body(parser *P, jx_nodes *body, const char *const *ends, int *which);

static jx_node *parse_target(parser *P, int with_namespace, const char *end) {
    int line = cur(P)->line;
    jx_node *t = node(P, JN_TUPLE, line);
    int paren = 0;
    if (is_op(cur(P), "(")) {
        paren = 1;
        advance(P);
    }
    for (;;) {
        const jx_tok *c = cur(P);
        if (c->kind != JT_NAME) return fail(P, c->line, "%s", "expected a name to assign to");
        jx_node *n = node(P, JN_NAME, c->line);
        n->name = c->p;
        n->name_n = c->n;
        advance(P);
        if (with_namespace && is_op(cur(P), ".") && peek(P, 1)->kind == JT_NAME) {
            advance(P);
            jx_node *attr = node(P, JN_ATTR, c->line);
            attr->a = n;
            attr->name = cur(P)->p;
            attr->name_n = cur(P)->n;
            advance(P);
            n = attr;
        }
        push(P, &t->args, n);
        if (!is_op(cur(P), ",")) break;
        advance(P);
        if (paren && is_op(cur(P), ")")) break;
        if (end && is_name(cur(P), end)) break;
    }
    if (paren && expect_op(P, ")")) return NULL;
    if (t->args.n == 1 && !paren && !is_op(&P->t->v[P->i - 1], ",")) return t->args.v[0];
    return t;
}

static jx_node *parse_if(parser *P, int line) {
    jx_node *n = node(P, JN_IF, line);
    if (!(n->a = parse_tuple(P, 0, 0, NULL)) || expect_block_end(P)) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    int which;
    if (parse_body(P, &n->body, ends, &which)) return NULL;
    int l2 = cur(P)->line;
    advance(P);
    if (which == 0) {   // elif: an if nested in the else branch
        if (enter(P)) return NULL;
        jx_node *e = parse_if(P, l2);
        if (!e) return NULL;
        P->depth--;
        push(P, &n->orelse, e);
        return n;
    }
    if (which == 1) {
        if (expect_block_end(P)) return NULL;
        static const char *const end[] = {"endif", NULL};
        if (parse_body(P, &n->orelse, end, &which)) return NULL;
        advance(P);
    }
    return expect_block_end(P) ? NULL : n;
}

static jx_node *parse_for(parser *P, int line) {
    jx_node *n = node(P, JN_FOR, line);
    if (!(n->a = parse_target(P, 0, "in"))) return NULL;
    if (!is_name(cur(P), "in")) return fail(P, cur(P)->line, "%s", "expected 'in'");
    advance(P);
    static const char *const rec[] = {"recursive", NULL};
    if (!(n->b = parse_tuple(P, 0, 0, rec))) return NULL;
    if (is_name(cur(P), "if")) {
        advance(P);
        if (!(n->c = parse_expression(P, 1))) return NULL;
    }
    if (is_name(cur(P), "recursive")) return fail(P, cur(P)->line, "%s", "recursive for-loops are not supported");
    if (expect_block_end(P)) return NULL;
    static const char *const ends[] = {"else", "endfor", NULL};
    int which;
    P->loops++;
    int rc = parse_body(P, &n->body, ends, &which);
    P->loops--;
    if (rc) return NULL;
    advance(P);
    if (which == 0) {
        if (expect_block_end(P)) return NULL;
        static const char *const end[] = {"endfor", NULL};
        // The else body runs when the loop ran no iteration: not inside it.
        int saved = P->loops;
        P->loops = 0;
        rc = parse_body(P, &n->orelse, end, &which);
        P->loops = saved;
        if (rc) return NULL;
        advance(P);
    }
    return expect_block_end(P) ? NULL : n;
}

// A chain of filters applied to nothing yet ({% set x | f %}, {% filter f %}):
// the innermost filter's operand is NULL, the body's output at render time.
static jx_node *parse_filter_chain(parser *P) {
    jx_node *x = parse_filter(P, NULL);
    int links = 0;
    while (x && is_op(cur(P), "|")) {
        if (enter(P)) return NULL;
        links++;
        advance(P);
        x = parse_filter(P, x);
    }
    P->depth -= links;
    return x;
}

static jx_node *parse_set(parser *P, int line) {
    jx_node *target = parse_target(P, 1, NULL);
    if (!target) return NULL;
    if (is_op(cur(P), "=")) {
        advance(P);
        jx_node *n = node(P, JN_SET, line);
        n->a = target;
        if (!(n->b = parse_tuple(P, 1, 0, NULL)) || expect_block_end(P)) return NULL;
        return n;
    }
    jx_node *n = node(P, JN_SET_BLOCK, line);
    n->a = target;
    if (target->kind != JN_NAME) return fail(P, line, "%s", "a block set assigns to one name");
    if (is_op(cur(P), "|")) {
        advance(P);
        if (!(n->c = parse_filter_chain(P))) return NULL;
    }
    if (expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endset", NULL};
    int which;
    if (parse_body(P, &n->body, ends, &which)) return NULL;
    advance(P);
    return expect_block_end(P) ? NULL : n;
}

// Parameters "(a, b=default, ...)" of a macro or a call block's caller.
static int parse_params(parser *P, jx_node *n) {
    if (expect_op(P, "(")) return -1;
    while (!is_op(cur(P), ")")) {
        if (n->args.n && expect_op(P, ",")) return -1;
        if (is_op(cur(P), ")")) break;
        const jx_tok *c = cur(P);
        if (c->kind != JT_NAME) {
            fail(P, c->line, "%s", "expected a parameter name");
            return -1;
        }
        jx_node *p = node(P, JN_NAME, c->line);
        p->name = c->p;
        p->name_n = c->n;
        advance(P);
        if (is_op(cur(P), "=")) {
            advance(P);
            if (!(p->a = parse_expression(P, 1))) return -1;
        } else if (n->args.n && n->args.v[n->args.n - 1]->a) {
            fail(P, c->line, "%s", "a parameter without a default follows one with a default");
            return -1;
        }
        push(P, &n->args, p);
    }
    advance(P);
    return 0;
}

static jx_node *parse_macro(parser *P, int line) {
    const jx_tok *c = cur(P);
    if (c->kind != JT_NAME) return fail(P, c->line, "%s", "expected a macro name");
    jx_node *n = node(P, JN_MACRO, line);
    n->name = c->p;
    n->name_n = c->n;
    advance(P);
    if (parse_params(P, n) || expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endmacro", NULL};
    int which, saved = P->loops;
    P->loops = 0;
    int rc = parse_body(P, &n->body, ends, &which);
    P->loops = saved;
    if (rc) return NULL;
    advance(P);
    if (cur(P)->kind == JT_NAME && cur(P)->n == n->name_n && memcmp(cur(P)->p, n->name, n->name_n) == 0) advance(P);
    return expect_block_end(P) ? NULL : n;
}

static jx_node *parse_call_block(parser *P, int line) {
    jx_node *n = node(P, JN_CALL_BLOCK, line);
    if (is_op(cur(P), "(") && parse_params(P, n)) return NULL;
    if (!(n->a = parse_expression(P, 1))) return NULL;
    if (n->a->kind != JN_CALL) return fail(P, line, "%s", "expected a call after {% call %}");
    if (expect_block_end(P)) return NULL;
    static const char *const ends[] = {"endcall", NULL};
    int which, saved = P->loops;
    P->loops = 0;
    int rc = parse_body(P, &n->body, ends, &which);
    P->loops = saved;
    if (rc) return NULL;
    advance(P);
    return expect_block_end(P) ? NULL : n;
}

static jx_node *parse_statement(parser *P) {
    const jx_tok *c = cur(P);
    int line = c->line;
    if (c->kind != JT_NAME) return fail(P, line, "%s", "expected a statement name after '{%'");
    char kw[32];
    snprintf(kw, sizeof kw, "%.*s", (int)(c->n < 31 ? c->n : 31), c->p);
    advance(P);
    if (!strcmp(kw, "if")) return parse_if(P, line);
    if (!strcmp(kw, "for")) return parse_for(P, line);
    if (!strcmp(kw, "set")) return parse_set(P, line);
    if (!strcmp(kw, "macro")) return parse_macro(P, line);
    if (!strcmp(kw, "call")) return parse_call_block(P, line);
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        if (!P->loops) return fail(P, line, "'%s' outside a for-loop", kw);
        jx_node *n = node(P, kw[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(kw, "generation")) {
        jx_node *n = node(P, JN_GENERATION, line);
        P->generations++;
        if (expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endgeneration", NULL};
        int which;
        if (parse_body(P, &n->body, ends, &which)) return NULL;
        advance(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(kw, "filter")) {
        jx_node *n = node(P, JN_FILTER_BLOCK, line);
        if (!(n->c = parse_filter_chain(P)) || expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endfilter", NULL};
        int which;
        if (parse_body(P, &n->body, ends, &which)) return NULL;
        advance(P);
        return expect_block_end(P) ? NULL : n;
    }
    return fail(P, line, "statement '%s' is not supported", kw);
}

static int parse_body(parser *P, jx_nodes *body, const char *const *ends, int *which) {
    if (enter(P)) return -1;
    for (;;) {
        const jx_tok *c = cur(P);
        switch (c->kind) {
        case JT_EOF:
            if (ends) {
                fail(P, c->line, "unexpected end of template: expected '{%% %s %%}'", ends[0]);
                return -1;
            }
            P->depth--;
            return 0;
        case JT_TEXT:
        case JT_RAW: {
            jx_node *n = node(P, JN_TEXT, c->line);
            n->value = jinja_str(P->a, c->p, c->n);
            push(P, body, n);
            advance(P);
            break;
        }
        case JT_VAR_BEGIN: {
            advance(P);
            jx_node *n = node(P, JN_OUTPUT, c->line);
            if (!(n->a = parse_tuple(P, 1, 0, NULL))) return -1;
            if (cur(P)->kind != JT_VAR_END) {
                fail(P, cur(P)->line, "%s", "expected '}}'");
                return -1;
            }
            advance(P);
            push(P, body, n);
            break;
        }
        case JT_BLOCK_BEGIN: {
            advance(P);
            const jx_tok *t = cur(P);
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(t, ends[k])) {
                    *which = k;
                    P->depth--;
                    return 0;
                }
            if (t->kind == JT_NAME && t->n > 3 && memcmp(t->p, "end", 3) == 0) {
                fail(P, t->line, "unexpected '%s'", t->p);
                return -1;
            }
            if (is_name(t, "elif") || is_name(t, "else")) {
                fail(P, t->line, "unexpected '%s'", t->p);
                return -1;
            }
            jx_node *n = parse_statement(P);
            if (!n) return -1;
            push(P, body, n);
            break;
        }
        default:
            fail(P, c->line, "%s", "unexpected token");
            return -1;
        }
    }
}

jx_node *jx_parse_tokens(jinja_arena *a, const jx_toks *toks, const char *name, int *generations, rl_err *err) {
    parser P = {a, toks, 0, name, err, 0, 0, 0, 0};
    jx_node *root = node(&P, JN_BODY, 1);
    int which;
    if (parse_body(&P, &root->body, NULL, &which)) return NULL;
    *generations = P.generations;
    return root;
}

jinja_tpl *jinja_parse(const char *src, size_t n, const char *name, rl_err *err) {
    jinja_tpl *t = xmalloc(sizeof *t);
    t->arena = jinja_arena_new();
    t->name = xstrdup(name ? name : "template");
    jx_toks toks;
    if (jx_lex(t->arena, src, n, t->name, &toks, err) ||
        !(t->root = jx_parse_tokens(t->arena, &toks, t->name, &t->generations, err))) {
        jinja_free(t);
        return NULL;
    }
    return t;
}

int jinja_has_generation(const jinja_tpl *t) { return t->generations > 0; }

void jinja_free(jinja_tpl *t) {
    if (!t) return;
    jinja_arena_free(t->arena);
    free(t->name);
    free(t);
}
