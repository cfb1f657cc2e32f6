// jinja_render — drives lib/template/jinja*.c for tests/py/test_jinja.py, which
// compares it with transformers' own chat-template renderer (jinja2).
//
//   jinja_render [--spans] TEMPLATE VARS.json
//       stdout: the rendered bytes; with --spans, then one line per
//       {% generation %} span, "S START END" (byte offsets).
//   jinja_render --batch TEMPLATE
//       stdin: records "<byte count>\n<VARS JSON bytes>"; stdout per record
//       "OK <byte count> <span count>\n<bytes>" followed by a line
//       "S START END" per span, or "ERR <byte count>\n<message>".
//
// Errors go to stderr as "jinja_render: error: ..." with exit status 1 (in
// --batch mode, a template that does not parse); usage errors exit 2.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja.h"

static const char USAGE[] =
    "Usage: jinja_render [--spans] TEMPLATE VARS.json\n"
    "       jinja_render --batch TEMPLATE < records\n"
    "Records are \"<byte count>\\n<JSON bytes>\"; see the comment in tests/tools/jinja_render.c.\n";

static int fail(const char *msg) {
    fprintf(stderr, "jinja_render: error: %s\n", msg);
    return 1;
}

// Renders the JSON vars[0..n) with t: 0 with out and gen, or -1 with err.
static int render(const jinja_tpl *t, const char *vars, size_t n, sbuf *out, jinja_spans *gen, rl_err *err) {
    jinja_arena *a = jinja_arena_new();
    jinja_val *v;
    int rc = jinja_from_json(a, vars, n, &v, err);
    if (rc == 0) rc = jinja_render(t, a, v, out, gen, err);
    jinja_arena_free(a);
    return rc;
}

static int batch(const jinja_tpl *t) {
    size_t len;
    while (scanf("%zu", &len) == 1) {
        if (getchar() != '\n') return fail("bad record header on stdin");
        char *buf = malloc(len + 1);
        if (!buf || fread(buf, 1, len, stdin) != len) {
            free(buf);
            return fail("truncated record on stdin");
        }
        sbuf out = {0};
        jinja_spans gen = {0};
        rl_err err;
        if (render(t, buf, len, &out, &gen, &err) == 0) {
            printf("OK %zu %zu\n", out.len, gen.n);
            fwrite(out.data, 1, out.len, stdout);
            for (size_t i = 0; i < gen.n; i++) printf("S %zu %zu\n", gen.v[i].start, gen.v[i].end);
        } else {
            printf("ERR %zu\n%s", strlen(err.msg), err.msg);
        }
        fflush(stdout);
        sbuf_free(&out);
        free(gen.v);
        free(buf);
    }
    return 0;
}

int main(int argc, char **argv) {
    int spans = 0, is_batch = 0, i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        if (!strcmp(argv[i], "--spans")) spans = 1;
        else if (!strcmp(argv[i], "--batch")) is_batch = 1;
        else if (!strcmp(argv[i], "--help")) {
            fputs(USAGE, stdout);
            return 0;
        } else {
            fputs(USAGE, stderr);
            return 2;
        }
    }
    if (argc - i != (is_batch ? 1 : 2)) {
        fputs(USAGE, stderr);
        return 2;
    }
    rl_err err;
    sbuf src = {0}, vars = {0};
    if (read_whole_file(argv[i], (size_t)64 << 20, &src, &err)) return fail(err.msg);
    jinja_tpl *t = jinja_parse((const char *)src.data, src.len, argv[i], &err);
    sbuf_free(&src);
    if (!t) return fail(err.msg);
    int rc = 0;
    if (is_batch) rc = batch(t);
    else if (read_whole_file(argv[i + 1], (size_t)64 << 20, &vars, &err)) rc = fail(err.msg);
    else {
        sbuf out = {0};
        jinja_spans gen = {0};
        if (render(t, (const char *)vars.data, vars.len, &out, &gen, &err)) rc = fail(err.msg);
        else {
            fwrite(out.data, 1, out.len, stdout);
            for (size_t k = 0; spans && k < gen.n; k++) printf("S %zu %zu\n", gen.v[k].start, gen.v[k].end);
        }
        sbuf_free(&out);
        free(gen.v);
    }
    sbuf_free(&vars);
    jinja_free(t);
    return rc;
}
