// test_jinja.c — specification of the chat-template interpreter (jinja.h):
// each case one behaviour of jinja2 under transformers' settings, the
// expected strings as jinja2 3.1.6 renders them (tests/py/test_jinja.py
// compares many more with jinja2 itself).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "template/jinja.h"

// Renders src with the JSON vars: the output (static buffer), or NULL with
// the error message in last_err.
static char last_err[1024];
static char *render(const char *src, const char *vars) {
    static char buf[1 << 16];
    rl_err err;
    last_err[0] = 0;
    jinja_tpl *t = jinja_parse(src, strlen(src), "t", &err);
    if (!t) {
        snprintf(last_err, sizeof last_err, "%.1000s", err.msg);
        return NULL;
    }
    jinja_arena *a = jinja_arena_new();
    jinja_val *v;
    char *res = NULL;
    if (jinja_from_json(a, vars, strlen(vars), &v, &err) == 0) {
        sbuf out = {0};
        if (jinja_render(t, a, v, &out, NULL, &err) == 0) {
            snprintf(buf, sizeof buf, "%.*s", (int)out.len, out.data ? (const char *)out.data : "");
            res = buf;
        } else snprintf(last_err, sizeof last_err, "%.1000s", err.msg);
        sbuf_free(&out);
    } else snprintf(last_err, sizeof last_err, "vars: %.1000s", err.msg);
    jinja_arena_free(a);
    jinja_free(t);
    return res;
}

#define EXPECT(src, vars, want)                                                        \
    do {                                                                               \
        const char *got_ = render(src, vars);                                          \
        CHECK(got_ && strcmp(got_, want) == 0, "%s: got [%s] (%s), want [%s]", src,    \
              got_ ? got_ : "NULL", last_err, want);                                   \
    } while (0)

#define EXPECT_ERROR(src, vars, part)                                                  \
    do {                                                                               \
        const char *got_ = render(src, vars);                                          \
        CHECK(!got_ && strstr(last_err, part), "%s: got [%s], error [%s], want an error with [%s]", src, \
              got_ ? got_ : "NULL", last_err, part);                                   \
    } while (0)

static void test_minus_strips_whitespace_and_newlines_on_its_side(void) {
    EXPECT("a \n {{- 1 -}} \n b", "{}", "a1b");
}

static void test_trim_blocks_removes_one_newline_after_a_block_tag(void) {
    EXPECT("{% if true %}\n\nx{% endif %}\n", "{}", "\nx");
}

static void test_lstrip_blocks_strips_indentation_before_a_block_tag_not_before_output(void) {
    EXPECT("  {% if true %}a{% endif %}|  {{ 1 }}", "{}", "a|  1");
}

static void test_plus_disables_lstrip_blocks(void) {
    EXPECT("  {%+ if true %}a{% endif %}", "{}", "  a");
}

static void test_a_trailing_newline_of_the_template_is_dropped(void) {
    EXPECT("x\n", "{}", "x");
}

static void test_raw_block_prints_tags_verbatim(void) {
    EXPECT("{% raw %}{{ x }}{% endraw %}", "{}", "{{ x }}");
}

static void test_loop_variables(void) {
    EXPECT("{% for x in [5, 6, 7] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
           "{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.cycle('a', 'b') }};{% endfor %}",
           "{}", "103TrueFalse3a;212FalseFalse35b;321FalseTrue36a;");
}

static void test_loop_filter_counts_only_kept_items(void) {
    EXPECT("{% for x in range(6) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}", "{}", "1/3 3/3 5/3 ");
}

static void test_for_else_and_break_continue(void) {
    EXPECT("{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty");
    EXPECT("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
           "{{ x }}{% endfor %}", "{}", "13");
}

static void test_set_inside_a_loop_does_not_leak_but_a_namespace_does(void) {
    EXPECT("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 1 %}{% endfor %}{{ x }}", "{}", "1");
    EXPECT("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}", "{}", "4");
}

static void test_slicing_by_code_points_with_negative_steps(void) {
    EXPECT("{{ s[::-1] }}|{{ s[1:3] }}|{{ s[-1] }}|{{ s|length }}", "{\"s\": \"h\\u00e9\\u65e5x\"}", "x日éh|é日|x|4");
    EXPECT("{{ [1, 2, 3, 4][::2] }}{{ [1, 2, 3][-2:] }}", "{}", "[1, 3][2, 3]");
}

static void test_floats_print_as_python_repr(void) {
    EXPECT("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-05 }} {{ 0.0001 }} {{ 10 / 4 }} {{ -0.0 }}", "{}",
           "1.0 0.30000000000000004 1e+16 1000000000000000.0 1e-05 0.0001 2.5 -0.0");
}

static void test_values_print_as_python_str(void) {
    EXPECT("{{ none }} {{ true }} {{ [1, 'a', \"it's\", none] }} {{ {'k': (1,)} }}", "{}",
           "None True [1, 'a', \"it's\", None] {'k': (1,)}");
}

static void test_tojson_is_json_dumps_without_ascii_escaping(void) {
    EXPECT("{{ x|tojson }}", "{\"x\": {\"b\": [1, 2.0, null, true], \"a\": \"\\u00e9\\n\\\"\"}}",
           "{\"b\": [1, 2.0, null, true], \"a\": \"é\\n\\\"\"}");
    EXPECT("{{ x|tojson(indent=2, sort_keys=true) }}", "{\"x\": {\"b\": [], \"a\": [1]}}",
           "{\n  \"a\": [\n    1\n  ],\n  \"b\": []\n}");
}

static void test_undefined_prints_empty_is_falsy_and_iterates_nothing(void) {
    EXPECT("[{{ nope }}]{{ nope is defined }}{% if not nope %}F{% endif %}{% for x in nope %}x{% endfor %}"
           "{{ nope|length }}{{ nope == 1 }}", "{}", "[]FalseF0False");
}

static void test_undefined_attribute_and_arithmetic_are_errors(void) {
    EXPECT_ERROR("{{ nope.x }}", "{}", "t line 1: an undefined value was used");
    EXPECT_ERROR("\n{{ nope + 1 }}", "{}", "t line 2:");
    EXPECT("{{ d.missing }}|{{ d.missing is defined }}", "{\"d\": {}}", "|False");
}

static void test_python_type_rules_for_operators(void) {
    EXPECT_ERROR("{{ 'a' + 1 }}", "{}", "unsupported operand types for +: 'str' and 'int'");
    EXPECT_ERROR("{{ 'a' < 1 }}", "{}", "not supported between instances of 'str' and 'int'");
    EXPECT("{{ 1 == '1' }} {{ 1 == 1.0 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 'ab' * 2 }}", "{}", "False True -4 2 abab");
}

static void test_integers_beyond_64_bits_are_refused_not_wrapped(void) {
    EXPECT_ERROR("{{ 9223372036854775807 + 1 }}", "{}", "beyond 64 bits");
    EXPECT_ERROR("{{ x }}", "{\"x\": 99999999999999999999}", "beyond 64 bits");
}

static void test_mutating_methods_are_refused_as_in_the_sandbox(void) {
    EXPECT_ERROR("{{ xs.append(1) }}", "{\"xs\": []}", "undefined value was called");
    EXPECT("{{ d.get('a') }} {{ d.get('b', 2) }} {{ d.items()|list }}", "{\"d\": {\"a\": 1}}", "1 2 [('a', 1)]");
}

static void test_macros_with_defaults_and_caller(void) {
    EXPECT("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=3) }}", "{}", "1213");
    EXPECT("{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}in{% endcall %}", "{}", "[in]");
}

static void test_unsupported_constructs_are_refused_at_parse_time_naming_the_line(void) {
    EXPECT_ERROR("a\n{{ x|wordwrap }}", "{}", "t line 2: filter 'wordwrap' is not supported");
    EXPECT_ERROR("\n\n{% include 'x' %}", "{}", "t line 3: statement 'include' is not supported");
    EXPECT_ERROR("{{ x is wibble }}", "{}", "test 'wibble' is not supported");
}

static void test_raise_exception_names_the_line_and_message(void) {
    EXPECT_ERROR("\n{{ raise_exception('bad role') }}", "{}", "t line 2: the template raised: bad role");
}

static void test_limits_end_hostile_templates(void) {
    EXPECT_ERROR("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "{}", "macro calls nested deeper than the limit (64)");
    EXPECT("{{ range(100000)|length }}", "{}", "100000");
    EXPECT_ERROR("{{ range(100001)|length }}", "{}",
                 "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    // A million iterations of 200 steps that allocate nothing.
    static char busy[4000];
    strcpy(busy, "{% for i in range(1000) %}{% for j in range(1000) %}");
    for (int i = 0; i < 100; i++) strcat(busy, "{% if 1 %}{% endif %}");
    strcat(busy, "{% endfor %}{% endfor %}");
    EXPECT_ERROR(busy, "{}", "the evaluation step limit (100000000) was exceeded");
    EXPECT_ERROR("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}",
                 "the memory limit (1024 MiB) was exceeded");
    EXPECT_ERROR("{{ 'a'|indent(300000000) }}", "{}", "limit");
    EXPECT_ERROR("{{ 'x' * 300000000 }}", "{}", "output limit");
    char deep[2000] = "{{ ";
    for (int i = 0; i < 300; i++) strcat(deep, "(");
    EXPECT_ERROR(deep, "{}", "nest");
}

// A template of `head` then `link` n times then `tail`, in a buffer the caller frees.
static char *chain(const char *head, const char *link, int n, const char *tail) {
    size_t hl = strlen(head), ll = strlen(link), tl = strlen(tail);
    char *s = xmalloc(hl + (size_t)n * ll + tl + 1);
    memcpy(s, head, hl);
    for (int i = 0; i < n; i++) memcpy(s + hl + (size_t)i * ll, link, ll);
    memcpy(s + hl + (size_t)n * ll, tail, tl + 1);
    return s;
}

// Every chained form nests its tree one level a link: 100,000 links are
// refused at parse time (they overflowed the evaluator's stack), 200 render.
static void test_long_chains_are_refused_at_parse_time_short_ones_render(void) {
    static const struct { const char *head, *link, *tail, *short_want; } forms[] = {
        {"{{ 1", " + 1", " }}", "201"},
        {"{{ ('a'", " ~ 'a'", ")|length }}", "201"},
        {"{{ 1", " and 1", " }}", "1"},
        {"{{ 0", " < 1", " }}", "False"},
        {"{{ 'A'", "|lower", " }}", "a"},
        {"{{ x", "[0]", " }}", ""},
        {"{{ x", ".x", " }}", ""},
        {"{{ x", "()", " }}", ""},
        {"{{ 1", " if 1", " }}", "1"},
        {"{% set y | upper", " | upper", " %}a{% endset %}{{ y }}", "A"},
        {"{% if 0 %}", "{% elif 0 %}", "{% else %}e{% endif %}", "e"},
    };
    for (size_t k = 0; k < sizeof forms / sizeof *forms; k++) {
        char *t = chain(forms[k].head, forms[k].link, 100000, forms[k].tail);
        EXPECT_ERROR(t, "{}", "nesting deeper than the parse limit (256; each link of a chain");
        free(t);
        t = chain(forms[k].head, forms[k].link, 200, forms[k].tail);
        if (forms[k].short_want[0]) EXPECT(t, "{}", forms[k].short_want);
        else {   // renders an error (x is undefined), parses
            rl_err e;
            jinja_tpl *p = jinja_parse(t, strlen(t), "t", &e);
            CHECK(p, "200 links of %s: %s", forms[k].link, e.msg);
            if (p) jinja_free(p);
        }
        free(t);
    }
}

// "{{ (((1 + 1 ... + 1) + 1 ...) ...) }}": `levels` parenthesised chains of
// 100 links, one inside the other, a tree 100 * levels deep (NUL-terminated).
static void nested_chains(sbuf *b, int levels) {
    sbuf_put(b, "{{ ", 3);
    for (int i = 0; i < levels; i++) sbuf_put(b, "(", 1);
    sbuf_put(b, "1", 1);
    for (int i = 0; i < levels; i++) {
        for (int j = 0; j < 100; j++) sbuf_put(b, " + 1", 4);
        sbuf_put(b, ")", 1);
    }
    sbuf_put(b, " }}", 4);   // with its NUL
}

// Chains inside chains pass the parser's limit, each no longer than it, yet
// nest deeper than the C stack allows: the evaluation stops with an error.
static void test_chains_inside_chains_stop_at_the_evaluation_depth_limit(void) {
    sbuf b = {0};
    nested_chains(&b, 50);
    EXPECT_ERROR((const char *)b.data, "{}", "t line 1: evaluation nested deeper than the limit (4096 levels)");
    sbuf_free(&b);
    nested_chains(&b, 40);   // 4,000 deep is within it
    EXPECT((const char *)b.data, "{}", "4001");
    sbuf_free(&b);
}

static void test_generation_spans_are_byte_offsets_of_the_output(void) {
    const char *src = "<u>{% generation %}h\xc3\xa9{% endgeneration %}|{% generation %}x{% endgeneration %}";
    rl_err err;
    jinja_tpl *t = jinja_parse(src, strlen(src), "t", &err);
    CHECK(t, "%s", err.msg);
    jinja_arena *a = jinja_arena_new();
    sbuf out = {0};
    jinja_spans gen = {0};
    int rc = jinja_render(t, a, jinja_dict(a), &out, &gen, &err);
    int ok = rc == 0 && gen.n == 2 && gen.v[0].start == 3 && gen.v[0].end == 6 && gen.v[1].start == 7 && gen.v[1].end == 8;
    size_t n = gen.n;
    sbuf_free(&out);
    free(gen.v);
    jinja_arena_free(a);
    jinja_free(t);
    CHECK(ok, "rc %d, %zu spans", rc, n);
}

static void test_from_json_keeps_int_float_and_key_order_and_joins_surrogates(void) {
    EXPECT("{{ x }} {{ y }} {{ d|list }} {{ s }}", "{\"x\": 1, \"y\": 1e2, \"d\": {\"z\": 1, \"a\": 2, \"z\": 3}, "
           "\"s\": \"\\ud83d\\ude42\"}", "1 100.0 ['z', 'a'] 🙂");
    EXPECT_ERROR("{{ x }}", "{\"x\": \"\\ud83d\"}", "lone surrogate");
}

int main(void) {
    RUN(test_minus_strips_whitespace_and_newlines_on_its_side);
    RUN(test_trim_blocks_removes_one_newline_after_a_block_tag);
    RUN(test_lstrip_blocks_strips_indentation_before_a_block_tag_not_before_output);
    RUN(test_plus_disables_lstrip_blocks);
    RUN(test_a_trailing_newline_of_the_template_is_dropped);
    RUN(test_raw_block_prints_tags_verbatim);
    RUN(test_loop_variables);
    RUN(test_loop_filter_counts_only_kept_items);
    RUN(test_for_else_and_break_continue);
    RUN(test_set_inside_a_loop_does_not_leak_but_a_namespace_does);
    RUN(test_slicing_by_code_points_with_negative_steps);
    RUN(test_floats_print_as_python_repr);
    RUN(test_values_print_as_python_str);
    RUN(test_tojson_is_json_dumps_without_ascii_escaping);
    RUN(test_undefined_prints_empty_is_falsy_and_iterates_nothing);
    RUN(test_undefined_attribute_and_arithmetic_are_errors);
    RUN(test_python_type_rules_for_operators);
    RUN(test_integers_beyond_64_bits_are_refused_not_wrapped);
    RUN(test_mutating_methods_are_refused_as_in_the_sandbox);
    RUN(test_macros_with_defaults_and_caller);
    RUN(test_unsupported_constructs_are_refused_at_parse_time_naming_the_line);
    RUN(test_raise_exception_names_the_line_and_message);
    RUN(test_limits_end_hostile_templates);
    RUN(test_long_chains_are_refused_at_parse_time_short_ones_render);
    RUN(test_chains_inside_chains_stop_at_the_evaluation_depth_limit);
    RUN(test_generation_spans_are_byte_offsets_of_the_output);
    RUN(test_from_json_keeps_int_float_and_key_order_and_joins_surrogates);
    CHECK_DONE();
}
