// Unit tests of common/tokenizer.c on models/tiny/tokenizer.json (run from the
// repository root) and on small tokenizer files written here. The expected ids
// are those of Hugging Face tokenizers 0.23.3, encode(text,
// add_special_tokens=False); tests/py/test_tokenizer.py compares the two at
// scale. This file is also built with AddressSanitizer + UBSan.
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tokenizer.h"

#define TINY "models/tiny/tokenizer.json"

// ---- helpers ---------------------------------------------------------------

static tokenizer *tiny(void) {
    rl_err e;
    tokenizer *t = tok_load(TINY, &e);
    if (!t) {
        printf("cannot load %s: %s\n", TINY, e.msg);
        exit(2);
    }
    return t;
}

// Writes text to a new temporary file; its path is left in path.
static void temp_json(char path[64], const char *text) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, 64, "%s/rlpipe-tok-XXXXXX", dir && strlen(dir) < 40 ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) { perror("mkstemp"); exit(2); }
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n) { perror("write"); exit(2); }
    close(fd);
}

// Loads text as a tokenizer file; NULL and the message in e when refused.
static tokenizer *load_text(const char *text, rl_err *e, char path[64]) {
    temp_json(path, text);
    tokenizer *t = tok_load(path, e);
    unlink(path);
    return t;
}

// Encodes a C string; returns the number of ids (or -1) and the ids in *ids.
static long encode(const tokenizer *t, const char *text, uint32_t **ids, rl_err *e) {
    size_t n = 0, cap = 0;
    *ids = NULL;
    if (tok_encode(t, text, strlen(text), ids, &n, &cap, e)) return -1;
    return (long)n;
}

static int same_ids(const uint32_t *a, long n, const uint32_t *b, long m) {
    return n == m && (n == 0 || !memcmp(a, b, (size_t)n * sizeof *a));
}

// A byte-level BPE file: the 256 byte tokens of the GPT-2 alphabet (byte id =
// byte value) minus `missing`, plus extra vocabulary, merges, added tokens.
static char *byte_level_file(int missing, const char *extra_vocab, const char *merges, const char *added,
                             const char *pre_tokenizer) {
    sbuf b = {0};
    sbuf_printf(&b, "{\"version\": \"1.0\", \"normalizer\": null, \"pre_tokenizer\": %s,\n"
                    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true},\n"
                    " \"added_tokens\": [%s],\n \"model\": {\"type\": \"BPE\", \"vocab\": {",
                pre_tokenizer, added);
    uint32_t n = 0;
    int first = 1;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        uint32_t cp = printable ? (uint32_t)c : 256 + n++;
        if (c == missing) continue;
        uint8_t u[2];
        size_t len = cp < 0x80 ? (u[0] = (uint8_t)cp, 1)
                               : (u[0] = (uint8_t)(0xC0 | (cp >> 6)), u[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2);
        sbuf_put(&b, first ? "\"" : ", \"", first ? 1 : 3);
        first = 0;
        if (cp == '"' || cp == '\\') sbuf_putc(&b, '\\');
        sbuf_put(&b, u, len);
        sbuf_printf(&b, "\": %d", c);
    }
    sbuf_printf(&b, "%s}, \"merges\": [%s]}}", extra_vocab, merges);
    sbuf_putc(&b, 0);
    return (char *)b.data;
}

#define BYTE_LEVEL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}"

// ---- the tiny model's tokenizer ------------------------------------------------

static void tiny_has_448_ids_with_bos_eos_pad_at_445_to_447(void) {
    tokenizer *t = tiny();
    CHECK(tok_vocab_size(t) == 448, "vocab size %zu", tok_vocab_size(t));
    CHECK(tok_id(t, "<|bos|>") == 445 && tok_id(t, "<|eos|>") == 446 && tok_id(t, "<|pad|>") == 447,
          "specials at %lld %lld %lld", (long long)tok_id(t, "<|bos|>"), (long long)tok_id(t, "<|eos|>"),
          (long long)tok_id(t, "<|pad|>"));
    CHECK(tok_id(t, "a") == 'a' && tok_id(t, "\xc4\xa0") == ' ' && tok_id(t, "\xc4\x8a") == '\n',
          "byte tokens are not id = byte value");
    CHECK(tok_id(t, "nope") == -1, "unknown token has id %lld", (long long)tok_id(t, "nope"));
    CHECK(tok_is_special(t, 445) && tok_is_special(t, 447) && !tok_is_special(t, 444) && !tok_is_special(t, 9999),
          "special flags");
    size_t len;
    const char *s = tok_token(t, 446, &len);
    CHECK(s && len == 7 && !memcmp(s, "<|eos|>", 7), "tok_token(446)");
    CHECK(!tok_token(t, 448, &len), "tok_token(448) is not NULL");
    tok_free(t);
}

static void tiny_encodes_like_hugging_face_tokenizers(void) {
    static const struct {
        const char *text;
        uint32_t ids[12];
        long n;
    } cases[] = {
        {"What is 37 + 58?", {264, 406, 277, 394, 63}, 5},
        {"Compute 12*7.", {285, 340, 42, 55, 46}, 5},
        {"Answer: 95", {270, 425}, 2},
        {"<|bos|>What is 1 + 2?<|eos|>", {445, 264, 444, 50, 63, 446}, 6},
        {"The answer is 1234.\n", {315, 340, 350, 46, 10}, 5},
        {"caf\xc3\xa9 \xf0\x9f\x98\x80", {99, 97, 102, 195, 169, 32, 240, 159, 152, 128}, 10},
        {"<|bos", {60, 124, 98, 111, 115}, 5},
        {"<|pad|><|pad|>", {447, 447}, 2},
        {"  ", {32, 32}, 2},
        {"", {0}, 0},
    };
    tokenizer *t = tiny();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t *ids;
        rl_err e;
        long n = encode(t, cases[i].text, &ids, &e);
        int ok = same_ids(ids, n, cases[i].ids, cases[i].n);
        free(ids);
        CHECK(ok, "\"%s\": %ld ids, not the %ld expected", cases[i].text, n, cases[i].n);
    }
    tok_free(t);
}

static void encode_appends_to_the_ids_already_there(void) {
    tokenizer *t = tiny();
    uint32_t *ids = xmalloc(2 * sizeof *ids);
    size_t n = 1, cap = 2;
    ids[0] = 445;
    rl_err e;
    CHECK(!tok_encode(t, "Answer: 95", 10, &ids, &n, &cap, &e), "%s", e.msg);
    CHECK(n == 3 && ids[0] == 445 && ids[1] == 270 && ids[2] == 425 && cap >= 3, "got %zu ids", n);
    free(ids);
    tok_free(t);
}

static void every_byte_string_round_trips(void) {
    tokenizer *t = tiny();
    uint8_t text[4096];
    uint64_t s = 88172645463325252ull;
    for (int round = 0; round < 200; round++) {
        size_t len = round == 0 ? 256 : (size_t)(s % sizeof text);
        for (size_t i = 0; i < len; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;  // xorshift64
            static const char alphabet[] = "0123456789 +-*=?\n<|bos>";
            uint8_t pick = (uint8_t)alphabet[s % (sizeof alphabet - 1)];
            text[i] = round == 0 ? (uint8_t)i : round % 2 ? (uint8_t)s : pick;
        }
        uint32_t *ids = NULL;
        size_t n = 0, cap = 0;
        rl_err e;
        CHECK(!tok_encode(t, (const char *)text, len, &ids, &n, &cap, &e), "round %d: %s", round, e.msg);
        sbuf out = {0};
        int rc = tok_decode(t, ids, n, 0, &out, &e);
        int same = rc == 0 && out.len == len && (len == 0 || !memcmp(out.data, text, len));
        free(ids);
        sbuf_free(&out);
        CHECK(same, "round %d: %zu bytes did not decode back (rc %d)", round, len, rc);
    }
    tok_free(t);
}

static void decode_gives_special_contents_unless_skipped(void) {
    tokenizer *t = tiny();
    const uint32_t ids[] = {445, 264, 406, 446, 447};
    sbuf out = {0};
    rl_err e;
    CHECK(!tok_decode(t, ids, 5, 0, &out, &e), "%s", e.msg);
    const char *want = "<|bos|>What is 37<|eos|><|pad|>";
    CHECK(out.len == strlen(want) && !memcmp(out.data, want, out.len), "got %.*s", (int)out.len,
          (const char *)out.data);
    out.len = 0;
    CHECK(!tok_decode(t, ids, 5, 1, &out, &e), "%s", e.msg);
    CHECK(out.len == 10 && !memcmp(out.data, "What is 37", 10), "got %.*s", (int)out.len, (const char *)out.data);
    sbuf_free(&out);
    tok_free(t);
}

static void decode_of_an_unknown_id_names_it_and_appends_nothing(void) {
    tokenizer *t = tiny();
    const uint32_t ids[] = {264, 448};
    sbuf out = {0};
    sbuf_put(&out, "kept", 4);
    rl_err e;
    CHECK(tok_decode(t, ids, 2, 0, &out, &e) == -1, "id 448 decoded");
    CHECK(strstr(e.msg, "token id 448 (position 1) is not in the vocabulary"), "message: %s", e.msg);
    CHECK(out.len == 4, "%zu bytes left in the buffer, expected 4", out.len);
    sbuf_free(&out);
    tok_free(t);
}

// ---- encoding rules on small files ------------------------------------------------

static void a_byte_with_no_token_names_the_byte_and_its_offset(void) {
    char path[64], *text = byte_level_file('z', "", "", "", BYTE_LEVEL);
    rl_err e;
    tokenizer *t = load_text(text, &e, path);
    free(text);
    CHECK(t, "%s", e.msg);
    uint32_t *ids = xmalloc(sizeof *ids);
    size_t n = 1, cap = 1;
    ids[0] = 7;
    int rc = tok_encode(t, "abzb", 4, &ids, &n, &cap, &e);
    free(ids);
    tok_free(t);
    CHECK(rc == -1, "encoded a byte with no token");
    CHECK(strstr(e.msg, "byte 0x7a at offset 2 has no token in") && strstr(e.msg, path), "message: %s", e.msg);
    CHECK(n == 1, "%zu ids after a failed encode, expected the 1 there before", n);
}

static void merges_apply_by_rank_lowest_first_and_leftmost_among_equals(void) {
    // ranks: "b c" 0, "a b" 1, "a a" 2. "abc": bc first, then no (a, bc) merge.
    // "aaa": the leftmost pair merges: aa + a.
    char path[64], *text = byte_level_file(-1, ", \"bc\": 256, \"ab\": 257, \"aa\": 258",
                                           "[\"b\", \"c\"], \"a b\", [\"a\", \"a\"]", "", BYTE_LEVEL);
    rl_err e;
    tokenizer *t = load_text(text, &e, path);
    free(text);
    CHECK(t, "%s", e.msg);
    uint32_t *ids;
    long n = encode(t, "abc", &ids, &e);
    int ok = same_ids(ids, n, (const uint32_t[]){'a', 256}, 2);
    free(ids);
    n = encode(t, "aaa", &ids, &e);
    ok = ok && same_ids(ids, n, (const uint32_t[]){258, 'a'}, 2);
    free(ids);
    tok_free(t);
    CHECK(ok, "merge order differs from rank order");
}

static void added_tokens_match_longest_first_and_break_merges(void) {
    char path[64], *text = byte_level_file(
        -1, ", \"ab\": 256", "[\"a\", \"b\"]",
        "{\"id\": 257, \"content\": \"<x>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 258, \"content\": \"<x>y\", \"special\": false, \"normalized\": false}",
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": false}");
    rl_err e;
    tokenizer *t = load_text(text, &e, path);
    free(text);
    CHECK(t, "%s", e.msg);
    uint32_t *ids;
    // add_prefix_space puts a space before each piece not starting with one
    long n = encode(t, "a<x>yb<x>ab", &ids, &e);
    int ok = same_ids(ids, n, (const uint32_t[]){' ', 'a', 258, ' ', 'b', 257, ' ', 256}, 8);
    free(ids);
    tok_free(t);
    CHECK(ok, "got %ld ids", n);
}

static void legacy_merges_with_spaces_in_tokens_split_where_the_vocabulary_says(void) {
    // No pre-tokenizer: BPE on characters. Each legacy merge has one split into
    // two vocabulary tokens whose concatenation is one: "b" + " ", "b " + "c",
    // "a" + "b c". (tokenizers 0.23.3 refuses such lines; later versions resolve
    // them this way.)
    char path[64];
    rl_err e;
    tokenizer *t = load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \" \": 2, \"c\": 3, "
                             "\"b c\": 4, \"ab c\": 5, \"b \": 6}, \"merges\": [\"b  \", \"b  c\", \"a b c\"]}}",
                             &e, path);
    CHECK(t, "%s", e.msg);
    uint32_t *ids;
    long n = encode(t, "ab c", &ids, &e);
    int ok = same_ids(ids, n, (const uint32_t[]){5}, 1);
    free(ids);
    tok_free(t);
    CHECK(ok, "got %ld ids", n);
}

// ---- refusals and malformed files ----------------------------------------------------

static void refuses_with_a_message(const char *json, const char *want, const char *label) {
    char path[64];
    rl_err e;
    tokenizer *t = load_text(json, &e, path);
    tok_free(t);
    CHECK(!t, "%s: loaded", label);
    CHECK(strstr(e.msg, want), "%s: message \"%s\" lacks \"%s\"", label, e.msg, want);
    CHECK(!strncmp(e.msg, path, strlen(path)), "%s: message \"%s\" does not start with the file", label, e.msg);
}

static void unsupported_components_are_refused_by_name(void) {
    char *ok = byte_level_file(-1, "", "", "", BYTE_LEVEL);
    CHECK(strstr(ok, BYTE_LEVEL), "test file");
    const char *const swaps[][3] = {
        {"\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
                                    "\"behavior\": \"Isolated\", \"invert\": false}",
         "pre_tokenizer Split (regex pre-tokenization) is not supported yet"},
        {"\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}",
         "pre_tokenizer ByteLevel with use_regex true (regex pre-tokenization) is not supported yet"},
        {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", "normalizer NFC is not supported yet"},
        {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model type WordPiece is not supported (only BPE)"},
        {"\"type\": \"BPE\"", "\"type\": \"BPE\", \"byte_fallback\": true", "byte_fallback true is not supported"},
    };
    for (size_t i = 0; i < sizeof swaps / sizeof *swaps; i++) {
        // Start from a file with no pre_tokenizer, then swap one component in.
        sbuf b = {0};
        const char *src = ok;
        const char *from = swaps[i][0];
        char *base = NULL;
        if (!strcmp(from, "\"pre_tokenizer\": null")) {
            sbuf nb = {0};
            const char *at = strstr(ok, BYTE_LEVEL);
            sbuf_put(&nb, ok, (size_t)(at - ok));
            sbuf_put(&nb, "null", 4);
            sbuf_put(&nb, at + strlen(BYTE_LEVEL), strlen(at + strlen(BYTE_LEVEL)) + 1);
            base = (char *)nb.data;
            src = base;
        }
        const char *at = strstr(src, from);
        CHECK(at, "swap %zu: no %s in the test file", i, from);
        sbuf_put(&b, src, (size_t)(at - src));
        sbuf_put(&b, swaps[i][1], strlen(swaps[i][1]));
        sbuf_put(&b, at + strlen(from), strlen(at + strlen(from)) + 1);
        free(base);
        refuses_with_a_message((const char *)b.data, swaps[i][2], swaps[i][1]);
        sbuf_free(&b);
        if (check_case_failed) break;
    }
    free(ok);
}

static void malformed_files_name_the_file_and_the_key(void) {
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\",\n \"vocab\": {\"a\": 0},\n \"merges\": [}}",
                           "not valid JSON (line 3, column 13)", "cut JSON");
    refuses_with_a_message("[]", "the top level must be a JSON object", "array");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}",
                           "model.vocab must be an object", "vocab list");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1.5}, \"merges\": []}}",
                           "model.vocab[\"a\"] must be an integer id", "fractional id");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\", \"q\"]]}}",
                           "model.merges[0]: \"q\" is not in model.vocab", "merge of unknown token");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a a\"]}}",
                           "model.merges[0]: \"aa\" is not in model.vocab", "merge result unknown");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}",
                           "model.merges[0] must be a pair of strings", "merge of wrong type");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
                           "model.vocab", "two tokens, one id");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                           "\"added_tokens\": [{\"id\": 1, \"content\": 5}]}",
                           "added_tokens[0].content must be a string", "added content");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                           "\"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", \"special\": true}]}",
                           "added token \"<s>\" has id 3, but Hugging Face tokenizers would give it id 1",
                           "added id");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                           "\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"lstrip\": true}]}",
                           "added token \"<s>\": lstrip true is not supported yet", "lstrip");
}

static void a_missing_file_names_it_and_the_system_error(void) {
    rl_err e;
    tokenizer *t = tok_load("models/no-such-model/tokenizer.json", &e);
    CHECK(!t, "loaded a missing file");
    CHECK(strstr(e.msg, "models/no-such-model/tokenizer.json: No such file or directory"), "message: %s", e.msg);
}

int main(void) {
    RUN(tiny_has_448_ids_with_bos_eos_pad_at_445_to_447);
    RUN(tiny_encodes_like_hugging_face_tokenizers);
    RUN(encode_appends_to_the_ids_already_there);
    RUN(every_byte_string_round_trips);
    RUN(decode_gives_special_contents_unless_skipped);
    RUN(decode_of_an_unknown_id_names_it_and_appends_nothing);
    RUN(a_byte_with_no_token_names_the_byte_and_its_offset);
    RUN(merges_apply_by_rank_lowest_first_and_leftmost_among_equals);
    RUN(added_tokens_match_longest_first_and_break_merges);
    RUN(legacy_merges_with_spaces_in_tokens_split_where_the_vocabulary_says);
    RUN(unsupported_components_are_refused_by_name);
    RUN(malformed_files_name_the_file_and_the_key);
    RUN(a_missing_file_names_it_and_the_system_error);
    CHECK_DONE();
}
