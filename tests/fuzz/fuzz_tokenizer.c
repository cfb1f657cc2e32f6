// fuzz_tokenizer.c — tokenizer.json (tokenizer.c, tok_*.c) loaded, then a
// text encoded and the ids decoded with each of tok_decode's flags.
// The first byte m of the input chooses:
//   m = 0: the rest is a tokenizer.json, then, after a NUL byte, the text
//          (no NUL: a fixed text with digits, spaces, accents and CJK);
//   m > 0: a fixed tokenizer, number (m & 0x7f) mod their count, from
//          $FUZZ_TOKENIZERS (paths separated by ':'; default
//          models/tiny/tokenizer.json), loaded once; the rest is a text
//          (m < 0x80) or little-endian u16 ids to decode (m >= 0x80), ids
//          taken modulo the vocabulary size + 4 so that a few lie outside.
// Decoding token by token with TOK_CONTINUE must give the bytes of the whole
// decoded with TOK_RAW_BYTES, as tokenizer.h promises (checked on the first
// CONTINUE_IDS ids).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

#define CONTINUE_IDS 64   // ids decoded one by one with TOK_CONTINUE

static const char fixed_text[] = "Hello, world! 12345 + 678 = 9;  tabs\tand\nnewlines; café naïve 日本語 🙂 <|bos|>";

static tokenizer **fixed;
static size_t nfixed;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char deflt[4096];
    const char *list = getenv("FUZZ_TOKENIZERS");
    if (!list || !*list) {
        snprintf(deflt, sizeof deflt, "%s/models/tiny/tokenizer.json", fz_root());
        list = deflt;
    }
    char *copy = strdup(list), *save = NULL;
    if (!copy) abort();
    for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        rl_err err;
        tokenizer *t = tok_load(p, &err);
        if (!t) {
            fprintf(stderr, "fuzz_tokenizer: FUZZ_TOKENIZERS: %s\n", err.msg);
            exit(1);
        }
        fixed = realloc(fixed, (nfixed + 1) * sizeof *fixed);
        if (!fixed) abort();
        fixed[nfixed++] = t;
    }
    free(copy);
    return 0;
}

static void decode_all(const tokenizer *t, const uint32_t *ids, size_t n) {
    static const unsigned flags[] = {0, TOK_SKIP_SPECIAL, TOK_RAW_BYTES, TOK_SKIP_SPECIAL | TOK_RAW_BYTES};
    sbuf out = {0}, whole = {0}, pieces = {0};
    rl_err err;
    for (size_t f = 0; f < sizeof flags / sizeof *flags; f++) {
        out.len = 0;
        (void)tok_decode(t, ids, n, flags[f], &out, &err);
    }
    // On the first ids only: each tok_decode call has a cost of its own.
    size_t k = n < CONTINUE_IDS ? n : CONTINUE_IDS;
    int ok = !tok_decode(t, ids, k, TOK_RAW_BYTES, &whole, &err);
    for (size_t i = 0; i < k && ok; i++)
        ok = !tok_decode(t, ids + i, 1, i ? TOK_CONTINUE : TOK_RAW_BYTES, &pieces, &err);
    if (ok && (whole.len != pieces.len || (whole.len && memcmp(whole.data, pieces.data, whole.len)))) {
        fprintf(stderr, "fuzz_tokenizer: decoding token by token (TOK_CONTINUE) gave %zu bytes, the whole %zu\n",
                pieces.len, whole.len);
        __builtin_trap();
    }
    for (size_t i = 0; i < n; i++) {
        size_t len;
        (void)tok_token(t, ids[i], &len);
        (void)tok_is_special(t, ids[i]);
    }
    sbuf_free(&out);
    sbuf_free(&whole);
    sbuf_free(&pieces);
}

static void encode(const tokenizer *t, const char *text, size_t n) {
    uint32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    rl_err err;
    tok_report rep;
    char line[256];
    sbuf pieces = {0};
    (void)tok_pieces(t, text, n, &pieces, &err);
    if (!tok_encode_ex(t, text, n, 0, &ids, &n_ids, &cap, &rep, &err)) {
        tok_report_text(&rep, line, sizeof line);
        decode_all(t, ids, n_ids);
    }
    n_ids = 0;
    if (!tok_encode_special(t, text, n, &ids, &n_ids, &cap, &err)) decode_all(t, ids, n_ids);
    free(ids);
    sbuf_free(&pieces);
}

static void decode_bytes(const tokenizer *t, const uint8_t *p, size_t n) {
    size_t vocab = tok_vocab_size(t), n_ids = n / 2;
    uint32_t *ids = malloc((n_ids ? n_ids : 1) * sizeof *ids);
    if (!ids) abort();
    for (size_t i = 0; i < n_ids; i++) ids[i] = (uint32_t)((p[2 * i] | p[2 * i + 1] << 8) % (vocab + 4));
    decode_all(t, ids, n_ids);
    free(ids);
}

static void load_and_use(const uint8_t *data, size_t size) {
    static int fd = -1;
    if (fd < 0) fd = fz_memfd("fuzz_tokenizer");
    const uint8_t *json, *text;
    size_t njson, ntext;
    if (!fz_split(data, size, 0, &json, &njson, &text, &ntext))
        text = (const uint8_t *)fixed_text, ntext = sizeof fixed_text - 1;
    rl_err err;
    tokenizer *t = tok_load(fz_fill(fd, json, njson), &err);
    if (!t) return;
    (void)tok_longest_token(t);
    (void)tok_id(t, "<|bos|>");
    encode(t, (const char *)text, ntext);
    tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t m = data[0];
    if (m == 0) {
        load_and_use(data + 1, size - 1);
    } else if (nfixed) {
        const tokenizer *t = fixed[(m & 0x7f) % nfixed];
        if (m & 0x80)
            decode_bytes(t, data + 1, size - 1);
        else
            encode(t, (const char *)data + 1, size - 1);
    }
    return 0;
}
