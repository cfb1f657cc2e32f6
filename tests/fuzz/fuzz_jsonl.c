// fuzz_jsonl.c — JSON lines (jsonl.c, json.c): what rl-cat --pack reads, and
// the prompt sets of rl-sample (prompts.c, source.c, tokenized with
// models/tiny's tokenizer). Every record read goes back to JSON as rl-cat
// --json writes it, and that JSON must read back to the same JSON.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "records/fields.h"
#include "records/json.h"
#include "records/jsonl.h"
#include "sample/prompts.h"
#include "tokenizer/tokenizer.h"

static tokenizer *tiny;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny/tokenizer.json", fz_root());
    rl_err err;
    if (!(tiny = tok_load(path, &err))) {
        fprintf(stderr, "fuzz_jsonl: %s\n", err.msg);
        exit(1);
    }
    return 0;
}

// json_from_rec, then json_to_rec of its text, then json_from_rec again: the same text.
static void round_trip(const rec_t *r, rec_t *back, sbuf *a, sbuf *b) {
    rl_err err;
    a->len = b->len = 0;
    if (json_from_rec(r, a, &err)) return;
    if (json_to_rec((const char *)a->data, a->len, back, &err) || json_from_rec(back, b, &err) ||
        a->len != b->len || memcmp(a->data, b->data, a->len)) {
        fprintf(stderr, "fuzz_jsonl: JSON written does not read back the same: %.*s\n", (int)a->len,
                (const char *)a->data);
        __builtin_trap();
    }
}

static void read_lines(const char *path) {
    rl_err err;
    jsonl_t *j = jsonl_open(path, &err);
    if (!j) __builtin_trap();   // a memfd always opens
    rec_t *r = rec_new(), *back = rec_new();
    sbuf a = {0}, b = {0};
    recr_event e;
    while ((e = jsonl_next(j, r)) != RECR_END && e != RECR_ERROR) {
        (void)fld_check(r, &err);
        round_trip(r, back, &a, &b);
    }
    if (e == RECR_ERROR) (void)strlen(jsonl_error(j));
    (void)jsonl_line(j), (void)jsonl_bytes_in(j);
    sbuf_free(&a);
    sbuf_free(&b);
    rec_free(r);
    rec_free(back);
    jsonl_close(j);
}

static void read_prompts(const char *path) {
    prompt_set ps = {0};
    prm_opts o = {.tok = tiny, .vocab = tok_vocab_size(tiny), .max_ids = 255};
    rl_err err;
    (void)prm_read(&ps, path, &o, &err);
    prm_free(&ps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    if (fd < 0) fd = fz_memfd("fuzz_jsonl");
    const char *path = fz_fill(fd, data, size);
    read_lines(path);
    read_prompts(path);
    return 0;
}
