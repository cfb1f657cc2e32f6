// jinja.h — the subset of Jinja2 that chat templates use, rendered as
// jinja2 3.1 renders them under Hugging Face transformers' settings
// (apply_chat_template): an ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks, the loopcontrols extension ({% break %}, {% continue %}),
// transformers' {% generation %} blocks, its tojson filter (json.dumps with
// ensure_ascii=False) and its globals raise_exception and strftime_now.
//
// Values follow Python's semantics where a template can see them: dicts keep
// insertion order, strings are UTF-8 and indexed, sliced and measured in
// code points, floats print as Python's repr, `+` of a string and a number is
// an error, `and`/`or` give an operand, an undefined value prints as "", is
// false, iterates as empty and compares unequal, but an attribute of it or
// arithmetic on it is an error. Integers are 64-bit: a result beyond is an
// error, not a wrapped value.
//
// Limits (each an error naming it): 256 MiB of output (and of any one
// string), 1e8 evaluation steps and 1 GiB of values per render, macro calls
// 64 deep, parse nesting 256, range() of 1e6 items.
//
// Statements: {{ }}, {# #}, if/elif/else, filter blocks, for (with else, loop.index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem,
// cycle, and unpacking `for k, v in`), set (names, namespace attributes and
// block set), macro/call (plain arguments and defaults), generation, break,
// continue, raw, whitespace control with '-' and '+'. Expressions: literals
// (strings with Python escapes, ints, floats, true/false/none/True/False/None,
// lists, tuples, dicts), names, attributes, subscripts and slices,
// calls with positional and keyword arguments, the operators of Jinja
// (or and not in, not in, is, is not, == != < <= > >=, + - ~ * / // % **,
// unary - +), the conditional expression `a if b else c` (with no else:
// undefined). Filters, tests and methods: the names jinja_builtins.c lists
// (str.format with plain {} / {0} / {name} fields only). `x|safe` gives a
// Markup string, and Markup + str escapes the str, as markupsafe does;
// map/select/reject/unique/reverse give generators (always true, no length,
// not JSON), as in jinja2.
//
// Anything else is refused with "NAME line L: ... not supported": a
// statement, filter or test by jinja_parse, a Python method or operation
// (str.zfill, '%' formatting, ...) when rendering reaches it; so a template
// renders exactly or not at all. Errors at render time (a
// raise_exception, an undefined attribute, a type error) name the line.
#ifndef RLPIPE_JINJA_H
#define RLPIPE_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct jinja_tpl jinja_tpl;       // a parsed template (immutable; may be rendered many times)
typedef struct jinja_val jinja_val;       // a value; lives in the arena that made it
typedef struct jinja_arena jinja_arena;   // every value made for, or during, renders; freed at once

jinja_tpl *jinja_parse(const char *src, size_t n, const char *name, rl_err *err);
void jinja_free(jinja_tpl *t);

jinja_arena *jinja_arena_new(void);
void jinja_arena_free(jinja_arena *a);

// Values to pass in (strings are copied and need not be NUL-terminated or UTF-8 checked
// by the caller: jinja_str refuses nothing, the caller checks UTF-8 where it reads input).
jinja_val *jinja_none(jinja_arena *a);
jinja_val *jinja_bool(jinja_arena *a, int v);
jinja_val *jinja_int(jinja_arena *a, int64_t v);
jinja_val *jinja_float(jinja_arena *a, double v);
jinja_val *jinja_str(jinja_arena *a, const char *s, size_t n);
jinja_val *jinja_list(jinja_arena *a);
jinja_val *jinja_dict(jinja_arena *a);
void jinja_list_push(jinja_val *list, jinja_val *v);
void jinja_dict_set(jinja_val *dict, const char *key, size_t klen, jinja_val *v);  // replaces, order kept

// 1 if t holds a {% generation %} block (its assistant text is marked).
int jinja_has_generation(const jinja_tpl *t);

// A span of the output, in bytes: [start, end).
typedef struct {
    size_t start, end;
} jinja_span;
typedef struct {
    jinja_span *v;
    size_t n, cap;
} jinja_spans;

// Renders t with the variables of the dict vars (and the globals range,
// namespace, dict, raise_exception and strftime_now) into out
// (appended). gen, when not NULL, receives the spans of the output produced
// inside {% generation %} blocks, in order (transformers' assistant masks).
// Values made while rendering go into arena a. 0, or -1 with err
// ("NAME line L: what"; a raise_exception: "NAME line L: the template raised: MESSAGE").
int jinja_render(const jinja_tpl *t, jinja_arena *a, const jinja_val *vars, sbuf *out, jinja_spans *gen,
                 rl_err *err);

// Parses one JSON value (the whole of s[0..n) but whitespace) into *out, as
// Python's json.loads would: an integer literal is an int, one with a '.' or
// an exponent a float, objects keep their key order (a repeated key: the last
// value, in the first one's place). 0, or -1 with err ("column C: what").
int jinja_from_json(jinja_arena *a, const char *s, size_t n, jinja_val **out, rl_err *err);

#endif
