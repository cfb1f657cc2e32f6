// toolcall.c — tool calls parsed from an assistant's text (toolcall.h).
#include "template/toolcall.h"

#include <string.h>

#include "records/json.h"

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

// One call's object text into its msgpack map {"type", "function"}. 0 or -1.
static int one_call(const char *s, size_t n, sbuf *out) {
    rec_t *r = rec_new(), *fn = rec_new(), *call = rec_new();
    rl_err e;
    const char *name;
    size_t nl;
    int rc = -1;
    if (json_to_rec(s, n, r, &e) || rec_get_str(r, "name", &name, &nl) != REC_OK) goto out;
    rec_set_str(fn, "name", name, nl);
    long k = rec_find(r, "arguments");
    if (k < 0) k = rec_find(r, "parameters");   // Llama 3.1's word for them
    if (k >= 0) {
        size_t vl;
        const uint8_t *v = rec_value(r, (size_t)k, &vl);
        rec_set_raw(fn, "arguments", 9, v, vl);
    }
    sbuf enc = {0};
    rec_encode(fn, &enc);
    rec_set_cstr(call, "type", "function");
    rec_set_raw(call, "function", 8, enc.data, enc.len);
    sbuf_free(&enc);
    rec_encode(call, out);
    rc = 0;
out:
    rec_free(r);
    rec_free(fn);
    rec_free(call);
    return rc;
}

int tc_parse(tc_format f, const char *text, size_t n, sbuf *out) {
    (void)f;
    sbuf calls = {0};
    int count = 0;
    const char *p = text, *end = text + n;
    for (;;) {
        const char *o = memmem(p, (size_t)(end - p), OPEN, sizeof OPEN - 1);
        if (!o) break;
        o += sizeof OPEN - 1;
        const char *c = memmem(o, (size_t)(end - o), CLOSE, sizeof CLOSE - 1);
        if (!c || one_call(o, (size_t)(c - o), &calls)) {
            count = 0;
            break;
        }
        count++;
        p = c + sizeof CLOSE - 1;
    }
    if (count) {
        uint8_t h = (uint8_t)(0x90 | (count < 16 ? count : 15));
        if (count < 16) sbuf_put(out, &h, 1);
        else {
            uint8_t h3[3] = {0xdc, (uint8_t)(count >> 8), (uint8_t)count};
            sbuf_put(out, h3, 3);
        }
        sbuf_put(out, calls.data, calls.len);
    }
    sbuf_free(&calls);
    return count;
}
