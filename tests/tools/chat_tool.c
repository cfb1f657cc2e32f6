// chat_tool — drives lib/template/chat.c (and toolcall.c) for tests/py/test_chat.py
// and test_chat_tools.py, which compare it with transformers' apply_chat_template.
//
//   chat_tool [--gen] [--mask] [--arg NAME=VALUE]... MODEL_DIR
//       stdin: JSON lines {"messages": [...]}, with "tools": [...] for a
//       conversation's own tools; stdout: one JSON line each,
//       {"text": RENDERED, "ids": [...]} (with --mask also "mask": [0/1...])
//       or {"error": MESSAGE} when the conversation or the template fails.
//       --gen: with the generation prompt (add_generation_prompt=True).
//   chat_tool --turns [--arg NAME=VALUE]... MODEL_DIR
//       stdin: the same; each conversation as a multi-turn rollout makes
//       its tokens (token in, token out): the messages before the first
//       assistant's rendered with the generation prompt, then each
//       assistant's content tokenized and the end-of-turn token after it, as
//       a model writes them, then the messages after it as chat_continue
//       appends them. stdout: {"ids": [...], "rewrote": N} (N: continuations
//       that took the template's probe conversation), or {"error": MESSAGE}.
//   chat_tool --toolcalls MODEL_DIR
//       stdin: JSON lines {"text": ASSISTANT_TEXT}; stdout: the tool calls
//       parsed from each in the template's format (chat_tool_format),
//       {"format": NAME, "tool_calls": [...]} ([] when none).
//   chat_tool --info MODEL_DIR
//       stdout: {"end_of_turn": ID, "eos": ID} (-1: none), or {"none": true}
//       when the model has no template.
//
// A template that cannot be loaded: "chat_tool: error: ..." on stderr, exit 1;
// usage errors exit 2.
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/json.h"
#include "records/mparray.h"
#include "template/chat.h"

static void die(const char *fmt, const char *a) {
    fprintf(stderr, "chat_tool: error: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    exit(1);
}

static void put_u32s(sbuf *out, const char *key, const uint32_t *v, size_t n) {
    sbuf_printf(out, ", \"%s\": [", key);
    for (size_t i = 0; i < n; i++) sbuf_printf(out, i ? ", %u" : "%u", v[i]);
    sbuf_putc(out, ']');
}

// The messages of the msgpack array p[0..n): where each is (el), and each
// decoded (o); the number of them, or -1.
static long split(const uint8_t *p, size_t n, mpa_elems *el, msgpack_object *o, msgpack_zone *z, long most) {
    if (mpa_split(p, n, el) || (long)el->n >= most) return -1;
    for (size_t i = 0; i < el->n; i++) {
        size_t at = 0;
        if (msgpack_unpack((const char *)p + el->off[i], el->off[i + 1] - el->off[i], &at, z, &o[i]) !=
            MSGPACK_UNPACK_SUCCESS)
            return -1;
    }
    return (long)el->n;
}

// The string value of key in map m, or NULL.
static const msgpack_object *str_of(const msgpack_object *m, const char *key) {
    for (uint32_t k = 0; m->type == MSGPACK_OBJECT_MAP && k < m->via.map.size; k++) {
        const msgpack_object *kk = &m->via.map.ptr[k].key;
        if (kk->type == MSGPACK_OBJECT_STR && kk->via.str.size == strlen(key) && !memcmp(kk->via.str.ptr, key, strlen(key)))
            return m->via.map.ptr[k].val.type == MSGPACK_OBJECT_STR ? &m->via.map.ptr[k].val : NULL;
    }
    return NULL;
}

// Messages [0, count) of p as an array.
static void subarray(const uint8_t *p, const size_t *off, long count, sbuf *out) {
    out->len = 0;
    mpa_put_header(out, (uint32_t)count);
    sbuf_put(out, p + off[0], off[count] - off[0]);
}

// --turns: the tokens of a conversation made as a multi-turn rollout makes them.
static int turns(const chat_t *c, const tokenizer *tok, const rec_t *conv, const uint8_t *p, size_t n, u32_vec *ids,
                 int *rewrote, rl_err *err) {
    enum { MOST = 256 };
    mpa_elems el = {0};
    msgpack_object o[MOST];
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    sbuf sub = {0}, text = {0};
    u32_vec part = {0};
    int rc = -1;
    long m = split(p, n, &el, o, &z, MOST), a = 0;
    if (m < 0) {
        err_set(err, "not a list of at most %d messages", MOST - 1);
        goto out;
    }
    const msgpack_object *role;
    while (a < m && !((role = str_of(&o[a], "role")) && role->via.str.size == 9 && !memcmp(role->via.str.ptr, "assistant", 9)))
        a++;
    if (a == 0 || a == m) {
        err_set(err, "no assistant's turn after the first message");
        goto out;
    }
    subarray(p, el.off, a, &sub);
    if (chat_encode(c, sub.data, sub.len, conv, 1, 0, NULL, ids, NULL, NULL, err)) goto out;
    *rewrote = 0;
    while (a < m) {   // o[a] is an assistant's turn
        const msgpack_object *content = str_of(&o[a], "content");
        part.n = 0;
        if (content && tok_encode_ex(tok, content->via.str.ptr, content->via.str.size, 0, &part.v, &part.n, &part.cap,
                                     NULL, err))
            goto out;
        GROW(ids->v, ids->cap, ids->n + part.n + 1, 64);
        memcpy(ids->v + ids->n, part.v, part.n * sizeof *part.v);
        ids->n += part.n;
        ids->v[ids->n++] = (uint32_t)chat_end_of_turn(c);
        long b = a + 1;
        while (b < m && !((role = str_of(&o[b], "role")) && role->via.str.size == 9 && !memcmp(role->via.str.ptr, "assistant", 9)))
            b++;
        if (b == a + 1) break;   // it ends the conversation
        int rw;
        subarray(p, el.off, b, &sub);
        text.len = 0;
        if (chat_continue(c, sub.data, sub.len, conv, (size_t)a + 1, 1, &text, &rw, err)) goto out;
        *rewrote += rw;
        part.n = 0;
        if (tok_encode_ex(tok, (const char *)text.data, text.len, 0, &part.v, &part.n, &part.cap, NULL, err)) goto out;
        GROW(ids->v, ids->cap, ids->n + part.n, 64);
        memcpy(ids->v + ids->n, part.v, part.n * sizeof *part.v);
        ids->n += part.n;
        a = b;
    }
    rc = 0;
out:
    mpa_elems_free(&el);
    msgpack_zone_destroy(&z);
    sbuf_free(&sub);
    sbuf_free(&text);
    u32_vec_free(&part);
    return rc;
}

// --toolcalls: the calls of the assistant's text in r's "text", as one JSON line into out.
static void toolcalls(const chat_t *c, const rec_t *r, sbuf *out) {
    const char *s;
    size_t n;
    rl_err e;
    if (rec_get_str(r, "text", &s, &n) != REC_OK) die("%s", "a line without a string \"text\"");
    rec_t *o = rec_new();
    sbuf calls = {0};
    rec_set_cstr(o, "format", tc_format_name(chat_tool_format(c)));
    if (tc_parse(chat_tool_format(c), s, n, &calls)) rec_set_raw(o, "tool_calls", 10, calls.data, calls.len);
    else rec_set_raw(o, "tool_calls", 10, (const uint8_t *)"\x90", 1);
    if (json_from_rec(o, out, &e)) die("%s", e.msg);
    sbuf_putc(out, '\n');
    sbuf_free(&calls);
    rec_free(o);
}

int main(int argc, char **argv) {
    int gen = 0, mask = 0, info = 0, multi = 0, calls = 0;
    const char *args[32];
    int nargs = 0, i = 1;
    for (; i < argc - 1; i++) {
        if (!strcmp(argv[i], "--gen")) gen = 1;
        else if (!strcmp(argv[i], "--mask")) mask = 1;
        else if (!strcmp(argv[i], "--info")) info = 1;
        else if (!strcmp(argv[i], "--turns")) multi = 1;
        else if (!strcmp(argv[i], "--toolcalls")) calls = 1;
        else if (!strcmp(argv[i], "--arg") && i + 2 < argc && nargs < 32) args[nargs++] = argv[++i];
        else break;
    }
    if (i != argc - 1) {
        fprintf(stderr, "Usage: chat_tool [--gen] [--mask] [--arg NAME=VALUE]... MODEL_DIR < conversations.jsonl\n"
                        "       chat_tool --turns [--arg NAME=VALUE]... MODEL_DIR < conversations.jsonl\n"
                        "       chat_tool --toolcalls MODEL_DIR < assistant-texts.jsonl\n"
                        "       chat_tool --info MODEL_DIR\n");
        return 2;
    }
    const char *dir = argv[i];
    rl_err e;
    char *tpath = path_join(dir, "tokenizer.json");
    tokenizer *tok = tok_load(tpath, &e);
    free(tpath);
    if (!tok) die("%s", e.msg);
    chat_t *c = chat_load(dir, tok, &e);
    if (!c && e.msg[0]) die("%s", e.msg);
    if (info) {
        if (c) printf("{\"end_of_turn\": %lld, \"eos\": %lld}\n", (long long)chat_end_of_turn(c), (long long)chat_eos(c));
        else printf("{\"none\": true}\n");
        chat_free(c);
        tok_free(tok);
        return 0;
    }
    if (!c) die("%s has no chat template", dir);
    for (int k = 0; k < nargs; k++)
        if (chat_set_arg(c, args[k], &e)) die("%s", e.msg);
    rec_t *r = rec_new();
    sbuf out = {0}, text = {0};
    u32_vec ids = {0};
    u8_vec m = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        out.len = text.len = 0;
        if (json_to_rec(line, (size_t)len, r, &e)) die("a line that is not JSON: %s", e.msg);
        if (calls) {
            toolcalls(c, r, &out);
            if (fwrite(out.data, 1, out.len, stdout) != out.len) die("%s", "writing standard output");
            continue;
        }
        long k = rec_find(r, "messages");
        if (k < 0) die("%s", "a line without \"messages\"");
        size_t n;
        const uint8_t *msgs = rec_value(r, (size_t)k, &n);
        int rewrote = 0;
        if (multi ? turns(c, tok, r, msgs, n, &ids, &rewrote, &e)
                  : chat_encode(c, msgs, n, r, gen, 0, &text, &ids, mask ? &m : NULL, NULL, &e)) {
            sbuf_put(&out, "{\"error\": ", 10);
            json_put_str(&out, e.msg, strlen(e.msg));
        } else if (multi) {
            sbuf_printf(&out, "{\"rewrote\": %d", rewrote);
            put_u32s(&out, "ids", ids.v, ids.n);
        } else {
            sbuf_put(&out, "{\"text\": ", 9);
            json_put_str(&out, (const char *)text.data, text.len);
            put_u32s(&out, "ids", ids.v, ids.n);
            if (mask) {
                sbuf_put(&out, ", \"mask\": [", 11);
                for (size_t t = 0; t < m.n; t++) sbuf_printf(&out, t ? ", %u" : "%u", m.v[t]);
                sbuf_putc(&out, ']');
            }
        }
        sbuf_put(&out, "}\n", 2);
        if (fwrite(out.data, 1, out.len, stdout) != out.len) die("%s", "writing standard output");
    }
    fflush(stdout);
    free(line);
    sbuf_free(&out);
    sbuf_free(&text);
    u32_vec_free(&ids);
    u8_vec_free(&m);
    rec_free(r);
    chat_free(c);
    tok_free(tok);
    return 0;
}
