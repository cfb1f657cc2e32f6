// chat_tool — drives lib/template/chat.c for tests/py/test_chat.py, which compares
// it with transformers' apply_chat_template.
//
//   chat_tool [--gen] [--mask] [--arg NAME=VALUE]... MODEL_DIR
//       stdin: JSON lines {"messages": [...]}; stdout: one JSON line each,
//       {"text": RENDERED, "ids": [...]} (with --mask also "mask": [0/1...])
//       or {"error": MESSAGE} when the conversation or the template fails.
//       --gen: with the generation prompt (add_generation_prompt=True).
//   chat_tool --info MODEL_DIR
//       stdout: {"end_of_turn": ID, "eos": ID} (-1: none), or {"none": true}
//       when the model has no template.
//
// A template that cannot be loaded: "chat_tool: error: ..." on stderr, exit 1;
// usage errors exit 2.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/json.h"
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

int main(int argc, char **argv) {
    int gen = 0, mask = 0, info = 0;
    const char *args[32];
    int nargs = 0, i = 1;
    for (; i < argc - 1; i++) {
        if (!strcmp(argv[i], "--gen")) gen = 1;
        else if (!strcmp(argv[i], "--mask")) mask = 1;
        else if (!strcmp(argv[i], "--info")) info = 1;
        else if (!strcmp(argv[i], "--arg") && i + 2 < argc && nargs < 32) args[nargs++] = argv[++i];
        else break;
    }
    if (i != argc - 1) {
        fprintf(stderr, "Usage: chat_tool [--gen] [--mask] [--arg NAME=VALUE]... MODEL_DIR < conversations.jsonl\n"
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
        long k = rec_find(r, "messages");
        if (k < 0) die("%s", "a line without \"messages\"");
        size_t n;
        const uint8_t *msgs = rec_value(r, (size_t)k, &n);
        if (chat_encode(c, msgs, n, gen, 0, &text, &ids, mask ? &m : NULL, NULL, &e)) {
            sbuf_put(&out, "{\"error\": ", 10);
            json_put_str(&out, e.msg, strlen(e.msg));
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
