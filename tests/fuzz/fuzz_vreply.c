// fuzz_vreply.c — a verifier's reply line (rl-sample --verifier-cmd) as
// rl-sample reads it (vr_parse). Whatever the bytes: no crash, leak or
// undefined behaviour; a refusal says why and leaves nothing held; a reply
// taken has a finite reward, finite named parts under non-empty names that
// differ, and a prediction without a NUL byte; and the reply written back as
// a JSON object (as a verifier would write it) reads back the same.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "records/json.h"
#include "sample/vreply.h"

// r as a reply object, the way rl-sample's records write numbers and strings.
static void write_back(const vr_reply *r, sbuf *out) {
    sbuf_put(out, "{\"reward\": ", 11);
    json_put_f64(out, r->reward);
    if (r->n) {
        sbuf_put(out, ", \"rewards\": {", 14);
        for (size_t i = 0; i < r->n; i++) {
            if (i) sbuf_put(out, ", ", 2);
            json_put_str(out, r->names[i], strlen(r->names[i]));
            sbuf_put(out, ": ", 2);
            json_put_f64(out, r->values[i]);
        }
        sbuf_putc(out, '}');
    }
    if (r->pred) {
        sbuf_put(out, ", \"pred\": ", 10);
        json_put_str(out, r->pred, r->pred_len);
    }
    sbuf_putc(out, '}');
}

static int same(const vr_reply *a, const vr_reply *b) {
    if (a->reward != b->reward || a->n != b->n || !a->pred != !b->pred) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->names[i], b->names[i]) || a->values[i] != b->values[i]) return 0;
    return !a->pred || (a->pred_len == b->pred_len && !memcmp(a->pred, b->pred, a->pred_len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vr_reply r, back;
    rl_err err;
    err.msg[0] = 0;
    if (vr_parse((const char *)data, size, &r, &err)) {
        if (!err.msg[0] || r.n || r.names || r.values || r.pred) __builtin_trap();
        return 0;
    }
    if (!isfinite(r.reward)) __builtin_trap();
    for (size_t i = 0; i < r.n; i++) {
        if (!r.names[i][0] || !isfinite(r.values[i])) __builtin_trap();
        for (size_t j = 0; j < i; j++)
            if (!strcmp(r.names[i], r.names[j])) __builtin_trap();
    }
    if (r.pred && (strlen(r.pred) != r.pred_len)) __builtin_trap();
    sbuf line = {0};
    write_back(&r, &line);
    if (vr_parse((const char *)line.data, line.len, &back, &err) || !same(&r, &back)) __builtin_trap();
    vr_free(&back);
    vr_free(&r);
    sbuf_free(&line);
    return 0;
}
