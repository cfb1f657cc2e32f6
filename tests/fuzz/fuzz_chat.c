// fuzz_chat.c — the chat-template interpreter (jinja_*.c): the input is a
// template, then, after a NUL byte when there is one, the JSON of its
// variables (else a fixed conversation). Whatever the bytes, parsing and
// rendering must end (within the step, output and memory limits) without a
// crash, a leak or undefined behaviour; a template that parses must render
// or fail with a message, never both or neither.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "template/jinja.h"

static const char DEFAULT_VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"hi \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>x</think>yo\"}], \"add_generation_prompt\": true,"
    " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *tpl, *vars;
    size_t ntpl, nvars;
    if (!fz_split(data, size, 0, &tpl, &ntpl, &vars, &nvars)) {
        vars = (const uint8_t *)DEFAULT_VARS;
        nvars = sizeof DEFAULT_VARS - 1;
    }
    rl_err err;
    jinja_tpl *t = jinja_parse((const char *)tpl, ntpl, "fuzz", &err);
    if (!t) {
        if (!err.msg[0]) __builtin_trap();   // a refusal must say why
        return 0;
    }
    jinja_arena *a = jinja_arena_new();
    jinja_val *v;
    if (jinja_from_json(a, (const char *)vars, nvars, &v, &err) == 0) {
        sbuf out = {0};
        jinja_spans gen = {0};
        err.msg[0] = 0;
        int rc = jinja_render(t, a, v, &out, &gen, &err);
        if (rc != 0 && !err.msg[0]) __builtin_trap();
        for (size_t i = 0; i < gen.n; i++)
            if (gen.v[i].start > gen.v[i].end || gen.v[i].end > out.len) __builtin_trap();
        sbuf_free(&out);
        free(gen.v);
    }
    jinja_arena_free(a);
    jinja_free(t);
    return 0;
}
