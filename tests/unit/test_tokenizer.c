// Unit tests of lib/tokenizer/tokenizer.c and lib/tokenizer/tok_regex.c on
// models/tiny/tokenizer.json (run from the repository root) and on small
// tokenizer files written here. The expected ids are those of Hugging Face
// tokenizers 0.20.3, encode(text, add_special_tokens=False) unless said;
// tests/py/test_tokenizer.py and test_tokenizers_hf.py compare the two at
// scale. This file is also built with AddressSanitizer + UBSan.
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tokenizer/tok_regex.h"
#include "tokenizer/tokenizer.h"

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
    // one special token alone, as each is decoded while it streams out (fuzz_tokenizer
    // found the empty piece this leaves after skipping: no text at all, no crash)
    for (unsigned flags = 0; flags < 2; flags++) {
        sbuf one = {0};
        CHECK(!tok_decode(t, ids, 1, flags | TOK_CONTINUE, &one, &e), "%s", e.msg);
        CHECK(flags ? one.len == 0 : one.len == 7 && !memcmp(one.data, "<|bos|>", 7), "flags %u: got %.*s", flags,
              (int)one.len, (const char *)one.data);
        sbuf_free(&one);
    }
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

static void a_byte_with_no_token_gives_no_id_as_tokenizers_does(void) {
    // SmolLM2's vocabulary lacks 21 bytes; tokenizers drops them.
    char path[64], *text = byte_level_file('z', "", "", "", BYTE_LEVEL);
    rl_err e;
    tokenizer *t = load_text(text, &e, path);
    free(text);
    CHECK(t, "%s", e.msg);
    uint32_t *ids;
    long n = encode(t, "abzb", &ids, &e);
    int ok = same_ids(ids, n, (const uint32_t[]){'a', 'b', 'b'}, 3);
    free(ids);
    tok_free(t);
    CHECK(ok, "got %ld ids, expected a b b", n);
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
    // "a" + "b c". (tokenizers 0.20.3 refuses such lines; later versions resolve
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

static void encode_special_puts_the_post_processors_bos_first(void) {
    tokenizer *t = tiny();   // its TemplateProcessing: <|bos|> $A
    uint32_t *ids = NULL;
    size_t n = 0, cap = 0;
    rl_err e;
    CHECK(!tok_encode_special(t, "Answer: 95", 10, &ids, &n, &cap, &e), "%s", e.msg);
    int ok = n == 3 && ids[0] == 445 && ids[1] == 270 && ids[2] == 425;
    n = 0;
    CHECK(!tok_encode_special(t, "", 0, &ids, &n, &cap, &e), "%s", e.msg);
    ok = ok && n == 1 && ids[0] == 445;
    free(ids);
    tok_free(t);
    CHECK(ok, "expected <|bos|> (445) before the text's ids");
}

// ---- regular expressions: Oniguruma's meaning on PCRE2 ------------------------------------

static int re_whole(const char *pattern, const char *text) {
    char why[300];
    tok_re *re = tok_re_onig(pattern, strlen(pattern), why, sizeof why);
    if (!re) {
        printf("cannot compile %s: %s\n", pattern, why);
        return -1;
    }
    tok_re_scratch *sc = tok_re_scratch_new();
    int m = tok_re_whole(re, sc, (const uint8_t *)text, strlen(text));
    tok_re_scratch_free(sc);
    tok_re_free(re);
    return m;
}

static void oniguruma_escapes_and_options_keep_their_meaning(void) {
    CHECK(re_whole("\\s", "\xe3\x80\x80") == 1 && re_whole("\\s", "\xe1\xa0\x8e") == 0,
          "\\s: U+3000 is white space, U+180E is not (as Oniguruma)");
    CHECK(re_whole("\\w", "\xc2\xb2") == 1 && re_whole("[\\w]", "\xc2\xb2") == 0 && re_whole("\\w", "\xcc\x81") == 1,
          "\\w: U+00B2 alone but not in a class, U+0301 always (as Oniguruma)");
    CHECK(re_whole("\\h+", "09afAF") == 1 && re_whole("\\h", " ") == 0, "\\h is a hex digit");
    CHECK(re_whole("(?i:'s)", "'\xc5\xbf") == 1 && re_whole("(?i:'s)", "'S") == 1 && re_whole("(?i:k)", "\xe2\x84\xaa") == 1,
          "(?i): long s and the Kelvin sign fold");
    CHECK(re_whole("(?m:a.b)", "a\nb") == 1 && re_whole("a.b", "a\nb") == 0, "(?m) lets . match a newline");
    CHECK(re_whole("a{,2}", "aa") == 1 && re_whole("a{,2}", "aaa") == 0, "{,n} is {0,n}");
    CHECK(re_whole("\\u0041\\x{42}", "AB") == 1, "\\uHHHH");
    CHECK(re_whole("\\p{Han}", "\xe3\x80\x81") == 0 && re_whole("\\p{Han}", "\xe4\xb8\xad") == 1,
          "\\p{Han} is the script, not its extensions (U+3001 is Common)");
}

static void empty_matches_follow_oniguruma_find_iter(void) {
    // x* on "axxbx": (0,0) (1,3) (4,5), the empty matches after a match skipped.
    char why[300];
    tok_re *re = tok_re_onig("x*", 2, why, sizeof why);
    CHECK(re, "%s", why);
    tok_re_scratch *sc = tok_re_scratch_new();
    tok_matches m = {0};
    rl_err e;
    int rc = tok_re_find_all(re, sc, (const uint8_t *)"axxbx", 5, &m, &e);
    static const size_t want[] = {0, 0, 1, 3, 4, 5};
    int ok = rc == 0 && m.n == 6 && !memcmp(m.at, want, sizeof want);
    free(m.at);
    tok_re_scratch_free(sc);
    tok_re_free(re);
    CHECK(ok, "got %zu offsets", m.n);
}

static void regex_constructs_that_would_change_meaning_are_refused(void) {
    static const char *const cases[][2] = {
        {"(?i:ss)", "the letters \"ss\" in a case-insensitive group"}, {"(?i:\xc3\xa9)", "non-ASCII character"},
        {"(?i)[a-z]", "character class in a case-insensitive group"}, {"[[:alpha:]]", "POSIX brackets"},
        {"\\X", "the escape \\X"}, {"(?x)a", "group option (?x"}, {"[^\\W]", "\\W inside a character class"},
        {"\\p{NoSuchScript}", "PCRE2 cannot compile it"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[300];
        tok_re *re = tok_re_onig(cases[i][0], strlen(cases[i][0]), why, sizeof why);
        tok_re_free(re);
        CHECK(!re, "%s compiled", cases[i][0]);
        CHECK(strstr(why, cases[i][1]), "%s: \"%s\" lacks \"%s\"", cases[i][0], why, cases[i][1]);
    }
}

// ---- decoding a continued text -----------------------------------------------------------

static void continued_decoding_skips_the_start_of_text_rules(void) {
    // Metaspace (prepend_scheme first) drops the replacement of the first
    // token only; a continued token keeps its space. Byte tokens come out raw.
    char path[64];
    rl_err e;
    tokenizer *t = load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\xe2\x96\x81Hello\": 0, \"\xe2\x96\x81world\": 1, "
                             "\"<0xE4>\": 2, \"<0xB8>\": 3, \"<0xAD>\": 4}, \"merges\": [], \"byte_fallback\": true}, "
                             "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, "
                             "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"first\"}]}}",
                             &e, path);
    CHECK(t, "%s", e.msg);
    sbuf out = {0};
    const uint32_t ids[] = {0, 1, 2, 3, 4};
    int rc = tok_decode(t, ids, 2, 0, &out, &e);
    int whole = rc == 0 && out.len == 11 && !memcmp(out.data, "Hello world", 11);
    out.len = 0;
    rc = tok_decode(t, ids, 1, 0, &out, &e);
    for (size_t i = 1; i < 5 && !rc; i++) rc = tok_decode(t, ids + i, 1, TOK_CONTINUE, &out, &e);
    int streamed = rc == 0 && out.len == 14 && !memcmp(out.data, "Hello world\xe4\xb8\xad", 14);
    out.len = 0;
    rc = tok_decode(t, ids + 2, 2, 0, &out, &e);   // an incomplete character decoded whole: U+FFFD per byte
    int lossy = rc == 0 && out.len == 6 && !memcmp(out.data, "\xef\xbf\xbd\xef\xbf\xbd", 6);
    out.len = 0;
    rc = tok_decode(t, ids + 2, 2, TOK_RAW_BYTES, &out, &e);   // ... or its bytes
    int raw = rc == 0 && out.len == 2 && !memcmp(out.data, "\xe4\xb8", 2);
    sbuf_free(&out);
    tok_free(t);
    CHECK(whole, "whole decoding is not \"Hello world\"");
    CHECK(streamed, "streamed decoding is not \"Hello world\" and the raw bytes of U+4E2D");
    CHECK(lossy, "two byte tokens of an incomplete character are not two U+FFFD");
    CHECK(raw, "with TOK_RAW_BYTES, two byte tokens are not their two bytes");
}

static void text_that_is_not_utf8_is_refused_where_characters_are_read(void) {
    char path[64];
    rl_err e;
    tokenizer *t = load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": "
                             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Removed\", "
                             "\"invert\": false}}", &e, path);
    CHECK(t, "%s", e.msg);
    uint32_t *ids = NULL;
    size_t n = 0, cap = 0;
    int rc = tok_encode(t, "aa \xff", 4, &ids, &n, &cap, &e);
    free(ids);
    tok_free(t);
    CHECK(rc == -1 && n == 0, "encoded invalid UTF-8");
    CHECK(strstr(e.msg, "not valid UTF-8 (at byte offset 3)"), "message: %s", e.msg);
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
        {"\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:ss)\"}, "
                                    "\"behavior\": \"Isolated\", \"invert\": false}",
         "pre_tokenizer: the Regex pattern \"(?i:ss)\": the letters \"ss\" in a case-insensitive group are not "
         "supported"},
        {"\"pre_tokenizer\": null", "\"pre_tokenizer\": {\"type\": \"UnicodeScripts\"}",
         "pre_tokenizer: pre_tokenizer UnicodeScripts is not supported"},
        {"\"normalizer\": null", "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, "
                                 "{\"type\": \"Nmt\"}]}",
         "normalizer.normalizers[1]: normalizer Nmt is not supported"},
        {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model type WordPiece is not supported (only BPE)"},
        {"\"type\": \"BPE\"", "\"type\": \"BPE\", \"dropout\": 0.5", "BPE dropout is not supported"},
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
                           "\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"lstrip\": 1}]}",
                           "added_tokens[0].lstrip must be true or false", "lstrip");
    refuses_with_a_message("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                           "\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"sometimes\"}}",
                           "decoder.prepend_scheme must be \"first\", \"always\" or \"never\"", "prepend_scheme");
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
    RUN(a_byte_with_no_token_gives_no_id_as_tokenizers_does);
    RUN(merges_apply_by_rank_lowest_first_and_leftmost_among_equals);
    RUN(added_tokens_match_longest_first_and_break_merges);
    RUN(legacy_merges_with_spaces_in_tokens_split_where_the_vocabulary_says);
    RUN(encode_special_puts_the_post_processors_bos_first);
    RUN(oniguruma_escapes_and_options_keep_their_meaning);
    RUN(empty_matches_follow_oniguruma_find_iter);
    RUN(regex_constructs_that_would_change_meaning_are_refused);
    RUN(continued_decoding_skips_the_start_of_text_rules);
    RUN(text_that_is_not_utf8_is_refused_where_characters_are_read);
    RUN(unsupported_components_are_refused_by_name);
    RUN(malformed_files_name_the_file_and_the_key);
    RUN(a_missing_file_names_it_and_the_system_error);
    CHECK_DONE();
}
