// jinja_internal.h — what the parts of the Jinja interpreter share: the value
// layout and arena (jinja_value.c), tokens (jinja_lex.c), the syntax tree
// (jinja_parse.c), the state of a render (jinja_runtime.c) and the evaluator
// (jinja_eval.c, jinja_builtins.c).
#ifndef RLPIPE_JINJA_INTERNAL_H
#define RLPIPE_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "template/jinja.h"
#include "util.h"

// Limits that keep a hostile template from hanging or exhausting memory.
#define JX_MAX_OUTPUT ((size_t)256 << 20)   // bytes of rendered output
#define JX_MAX_MEMORY ((size_t)1 << 30)     // bytes of values made during one render
#define JX_MAX_STEPS 100000000LL            // evaluation steps per render
#define JX_MAX_CALL_DEPTH 64                // macro calls in progress
#define JX_MAX_NESTING 256                  // parse nesting (statements and expressions)
#define JX_MAX_DEPTH 4096                   // expressions and statements being evaluated, one inside another
#define JX_MAX_RANGE 100000                 // items of one range(): jinja2's sandbox's MAX_RANGE

// ---- arena -----------------------------------------------------------------
struct jinja_arena {
    struct jx_block *head;
    size_t used;     // bytes handed out, over the arena's life
};
void *jx_alloc(jinja_arena *a, size_t n);   // zeroed; aborts only when malloc does
char *jx_strdup(jinja_arena *a, const char *s, size_t n);   // NUL-terminated copy

// ---- values ----------------------------------------------------------------
typedef enum {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR,
    JV_LIST,      // list, or tuple when .tuple
    JV_DICT,      // dict, or namespace() when .ns (the only dict a template may assign into)
    JV_LOOP,      // the `loop` of a for
    JV_MACRO,     // a {% macro %} (or the caller of a {% call %})
    JV_BUILTIN,   // a global function: range, namespace, dict, raise_exception, strftime_now, cycle
    JV_METHOD,    // a method bound to its object: s.split, d.get, ...
} jx_kind;

typedef struct jx_node jx_node;
typedef struct jx_scope jx_scope;

typedef struct {
    jinja_val *iter;          // the list iterated (after any `if` filter)
    size_t i;                 // current index
} jx_loop;

struct jinja_val {
    uint8_t kind;
    uint8_t tuple;            // JV_LIST: a tuple (prints as (a, b))
    uint8_t ns;               // JV_DICT: a namespace
    uint8_t markup;           // JV_STR: markupsafe's Markup (from |safe): `+` escapes a plain str added to it
    uint8_t gen;              // JV_LIST: a generator (what map, select, ... give): always true, no len, not JSON
    union {
        int b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;    // UTF-8 bytes (NUL-terminated as a courtesy)
        struct { jinja_val **v; size_t n, cap; jinja_arena *a; } l;
        struct { jinja_val **k, **v; size_t n, cap; jinja_arena *a; } d;
        jx_loop *loop;
        struct { const jx_node *def; jx_scope *closure; } m;
        int fn;                                   // JV_BUILTIN: a JX_FN_*
        struct { jinja_val *self; const char *name; } meth;
    } u;
};

enum { JX_FN_RANGE, JX_FN_NAMESPACE, JX_FN_DICT, JX_FN_RAISE, JX_FN_STRFTIME, JX_FN_LOOP_CYCLE };

jinja_val *jx_undef(jinja_arena *a);
jinja_val *jx_new(jinja_arena *a, jx_kind kind);
jinja_val *jx_tuple(jinja_arena *a);
jinja_val *jx_dict_get(const jinja_val *d, const jinja_val *key);            // NULL when absent
jinja_val *jx_dict_gets(const jinja_val *d, const char *key, size_t n);      // string key
void jx_dict_put(jinja_val *d, jinja_val *key, jinja_val *v);                // replaces, order kept

// Python's semantics.
int jx_truthy(const jinja_val *v);
int jx_equal(const jinja_val *x, const jinja_val *y);        // ==, across types as Python
int jx_compare(const jinja_val *x, const jinja_val *y, int *res);   // <0/0/>0 into res; -1: unorderable
const char *jx_type_name(const jinja_val *v);                // Python's type name: 'str', 'dict', ...
void jx_str(sbuf *b, const jinja_val *v);                    // str(v)
void jx_float_repr(sbuf *b, double f);                       // repr(float)
void jx_str_repr(sbuf *b, const char *s, size_t n);          // repr(str)
void jx_html_escape(sbuf *b, const char *s, size_t n);       // markupsafe.escape

// json.dumps(v, ensure_ascii=ascii, indent=indent (NULL: none), separators, sort_keys).
// -1 with why in err (a value JSON cannot hold: Undefined, a macro, ...).
typedef struct {
    int ascii;
    const char *indent;       // NULL: no indent; else the string per level
    size_t indent_n;
    const char *item_sep, *key_sep;
    int sort_keys;
} jx_json_opts;
int jx_tojson(sbuf *b, const jinja_val *v, const jx_json_opts *o, int depth, rl_err *err);

// UTF-8 helpers: code points counted and found as Python's str does; a byte
// that does not start a well-formed sequence counts as one code point.
size_t jx_utf8_len(const char *s, size_t n);
size_t jx_utf8_next(const char *s, size_t n, size_t i, uint32_t *cp);  // index after the code point at i
size_t jx_utf8_offset(const char *s, size_t n, size_t k);             // byte offset of code point k (n past the end)
void jx_utf8_put(sbuf *b, uint32_t cp);
int jx_isspace(uint32_t cp);                                           // str.isspace

// ---- tokens and syntax tree -------------------------------------------------
typedef enum {
    JT_EOF, JT_TEXT,            // template text (already whitespace-controlled)
    JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
    JT_RAW,                     // the text of a {% raw %} block
} jx_tok_kind;

typedef struct {
    jx_tok_kind kind;
    int line;
    const char *p;              // JT_TEXT/JT_RAW/JT_STRING: decoded bytes; JT_NAME/JT_OP: spelling
    size_t n;
    int64_t i;                  // JT_INT
    double f;                   // JT_FLOAT
} jx_tok;

typedef struct {
    jx_tok *v;
    size_t n, cap;
} jx_toks;

// Splits src into tokens (the source's newlines normalised to "\n" and one
// trailing newline dropped, as jinja2 does). 0, or -1 with err "NAME line L: what".
int jx_lex(jinja_arena *a, const char *src, size_t n, const char *name, jx_toks *out, rl_err *err);

typedef enum {
    // expressions
    JN_CONST, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL,
    JN_FILTER, JN_TEST, JN_BINOP, JN_NOT, JN_NEG, JN_POS, JN_AND, JN_OR, JN_COND,
    // statements
    JN_BODY, JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_CALL_BLOCK,
    JN_BREAK, JN_CONTINUE, JN_GENERATION, JN_FILTER_BLOCK,
} jx_node_kind;

typedef enum {
    JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW, JO_CONCAT,
    JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE, JO_IN, JO_NOTIN,
} jx_op;

typedef struct {
    jx_node **v;
    size_t n, cap;
} jx_nodes;

struct jx_node {
    jx_node_kind kind;
    int line;
    int op;                     // JN_BINOP: a jx_op; JN_TEST: 1 when negated
    const char *name;           // JN_NAME, JN_ATTR, JN_FILTER, JN_TEST, JN_MACRO: NUL-terminated
    size_t name_n;
    jinja_val *value;           // JN_CONST, JN_TEXT
    jx_node *a, *b, *c, *d;     // operands / target, iterable, filter, ... (see jinja_parse.c)
    jx_nodes args;              // items, positional arguments, or a body's statements
    jx_nodes kwargs;            // keyword arguments (each a JN_NAME-named node: name = key, a = value)
    jx_nodes body, orelse;      // statement bodies
};

struct jinja_tpl {
    jinja_arena *arena;         // tokens, nodes and constants
    jx_node *root;
    char *name;
    int generations;            // {% generation %} blocks in it
};

jx_node *jx_parse_tokens(jinja_arena *a, const jx_toks *toks, const char *name, int *generations, rl_err *err);

// Which filters, tests and methods exist (jinja_builtins.c): the parser refuses others.
int jx_filter_known(const char *name);
int jx_test_known(const char *name);

// ---- the state of one render (jinja_runtime.c) --------------------------------
// jinja_eval.c sets it up and walks the tree with it; jinja_builtins.c uses
// it only through the functions below.
struct jx_ctx {
    jinja_arena *a;
    const char *name;
    const jinja_val *globals;   // the caller's variables
    sbuf *main_out;
    sbuf *out;                  // where output goes now (main_out, or a capture)
    jinja_spans *gen;
    rl_err *err;
    long long steps;
    int depth;                  // eval and exec_node calls in progress (JX_MAX_DEPTH)
    int call_depth;
    int failed;
};
typedef struct jx_ctx jx_ctx;
// Sets the error "NAME line L: what" (the first one only: later failures
// while unwinding keep it); returns -1.
int jx_fail(jx_ctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
jinja_arena *jx_arena(jx_ctx *c);
int jx_step(jx_ctx *c, int line);                               // counts a step; -1 past the budget
int jx_check_size(jx_ctx *c, int line, size_t n);   // a string of n bytes would not pass the limits: -1
jinja_val *jx_mkstr(jx_ctx *c, const char *s, size_t n);
jinja_val *jx_sbuf_str(jx_ctx *c, sbuf *b);   // takes b's bytes into a string value, frees b
// The items a for-loop or a filter walks, as Python's iter(): a list's items,
// a dict's keys, a str's characters, nothing for undefined; NULL (an error
// naming the line) for what is not iterable.
jinja_val *jx_iter_items(jx_ctx *c, int line, jinja_val *v);

// ---- evaluation (jinja_eval.c, jinja_builtins.c) ------------------------------
int jx_call_value(jx_ctx *c, int line, jinja_val *fn, jinja_val **args, size_t nargs,
                  const char **kwn, jinja_val **kwv, size_t nkw, jinja_val **out);

// Arguments of a filter/test/method call: positional then keyword.
typedef struct {
    jinja_val **pos;
    size_t npos;
    const char **kwn;
    jinja_val **kwv;
    size_t nkw;
} jx_args;

// Each: 0 with *out, or -1 with the context's error set.
int jx_apply_filter(jx_ctx *c, int line, const char *name, jinja_val *v, const jx_args *args, jinja_val **out);
int jx_apply_test(jx_ctx *c, int line, const char *name, jinja_val *v, const jx_args *args, int *out);
int jx_call_method(jx_ctx *c, int line, jinja_val *self, const char *name, const jx_args *args, jinja_val **out);
int jx_has_method(const jinja_val *self, const char *name);    // a method the sandbox allows
int jx_unsafe_method(const jinja_val *self, const char *name); // a mutating method (SecurityError)

#endif
