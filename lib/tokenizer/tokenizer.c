// tokenizer.c — Hugging Face tokenizer.json: loading, and the encode and
// decode pipelines, matching the `tokenizers` library 0.20.3 (the reference
// the tests compare against) on every file it accepts. The stages live in
// their own files:
//
//   encode: text -> added tokens with normalized false cut out (tok_added.c)
//           -> each piece between them normalized (tok_normalize.c)
//           -> added tokens with normalized true cut out of that
//           -> pre-tokenized into pieces (tok_pretok.c)
//           -> each piece through the BPE model (tok_bpe.c)
//           [-> the post-processor's special tokens (tok_post.c)]
//   decode: ids -> token strings (added tokens: their content; special ones
//           dropped on request) -> the decoder (tok_decode.c), or, with no
//           decoder, the strings joined by " " (tokenizers' behaviour).
//
// Regular expressions are PCRE2 with Oniguruma's meaning (tok_regex.c); UTF-8
// and the Unicode predicates the stages share are tok_unicode.c.
//
// As in tokenizers, a character (a byte under ByteLevel) with no token, no
// byte_fallback token and no unk_token gives no id (SmolLM2's vocabulary
// lacks 21 bytes, 0xF1 among them, so U+40000 loses a byte there too).
//
// Deliberate differences, all refusals rather than different ids: a text
// that is not UTF-8 is an error unless the pipeline works on bytes (ByteLevel
// without its regex and no normalizer), where tokenizers only takes strings;
// an id outside the vocabulary is an error where tokenizers skips it; an
// added token whose id disagrees with the id tokenizers would assign it is
// an error where tokenizers warns and re-numbers; so is a content listed
// twice. Accepted where tokenizers 0.20.3 fails: legacy "a b c" merges
// (resolved where only one split gives vocabulary tokens, as later versions
// do), and a Strip decoder asked to cut more than a token holds (empty here,
// a panic there). Decoded bytes are not made valid UTF-8 (tokenizers
// replaces ill-formed sequences by U+FFFD; see tok_decode.h for byte-fallback
// runs). truncation and padding are ignored, as transformers' fast
// tokenizers ignore the file's and apply their call arguments.
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_added.h"
#include "tokenizer/tok_bpe.h"
#include "tokenizer/tok_decode.h"
#include "tokenizer/tok_json.h"
#include "tokenizer/tok_normalize.h"
#include "tokenizer/tok_post.h"
#include "tokenizer/tok_pretok.h"
#include "tokenizer/tok_regex.h"
#include "tokenizer/tok_unicode.h"

// The largest tokenizer.json read: real ones are 2 to 35 MB. Parsed, a file
// takes about 15 times its size in memory.
#define TOK_MAX_FILE ((size_t)128 << 20)
#define TOK_MAX_TEXT ((size_t)1 << 30)   // the longest text encoded in one call

struct tokenizer {
    char *path;
    tok_bpe *model;
    tok_normalizer *norm;   // NULL: none
    tok_pretok *pre;        // NULL: none
    tok_decoder *dec;       // NULL: join with spaces
    tok_post *post;         // NULL: none
    tok_added *added;
    size_t n_ids;           // 1 + the largest id, added tokens included
    int bytes_to_model;     // the pre-tokenizer leaves raw bytes for the model to map
    int needs_utf8;         // some stage reads characters
};

void tok_free(tokenizer *t) {
    if (!t) return;
    tok_bpe_free(t->model);
    tok_norm_free(t->norm);
    tok_pretok_free(t->pre);
    tok_dec_free(t->dec);
    tok_post_free(t->post);
    tok_added_free(t->added);
    free(t->path);
    free(t);
}

size_t tok_vocab_size(const tokenizer *t) { return t->n_ids; }

int64_t tok_id(const tokenizer *t, const char *token) {
    size_t n = strlen(token);
    uint32_t id = tok_map_get(tok_added_contents(t->added), token, n);
    if (id == TOK_NO_ID) id = tok_map_get(tok_bpe_vocab(t->model), token, n);
    return id == TOK_NO_ID ? -1 : (int64_t)id;
}

const char *tok_token(const tokenizer *t, uint32_t id, size_t *len) {
    const char *s = tok_added_content(t->added, id, len);  // an added token overrides the vocabulary
    return s ? s : tok_bpe_token(t->model, id, len);
}

int tok_is_special(const tokenizer *t, uint32_t id) { return tok_added_is_special(t->added, id); }

size_t tok_longest_token(const tokenizer *t) {
    size_t most = 1, len;
    for (uint32_t id = 0; id < t->n_ids; id++)
        if (tok_token(t, id, &len) && len > most) most = len;
    return most;
}

// ---- loading -------------------------------------------------------------------------------

// Why cJSON failed: the text, or (errno ENOMEM from its malloc) the memory.
static int json_error(const char *path, const sbuf *text, const char *at, rl_err *err) {
    if (errno == ENOMEM)
        return err_set(err, "%s: out of memory parsing %zu bytes of JSON", path, text->len);
    size_t line = 1, col = 1;
    const char *s = (const char *)text->data, *end = s + text->len;
    if (!at || at < s || at > end) at = end;
    for (const char *c = s; c < at; c++) {
        if (*c == '\n') line++, col = 1;
        else col++;
    }
    return err_set(err, "%s: not valid JSON (line %zu, column %zu)", path, line, col);
}

static int load(tokenizer *t, const cJSON *root, rl_err *err) {
    const char *p = t->path;
    if (!cJSON_IsObject(root)) return err_set(err, "%s: the top level must be a JSON object", p);
    if (!(t->model = tok_bpe_load(cJSON_GetObjectItemCaseSensitive(root, "model"), p, err))) return -1;
    if (tok_norm_load(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), p, &t->norm, err) ||
        tok_pretok_load(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), p, &t->pre, err) ||
        tok_dec_load(cJSON_GetObjectItemCaseSensitive(root, "decoder"), p, &t->dec, err) ||
        tok_post_load(cJSON_GetObjectItemCaseSensitive(root, "post_processor"), p, &t->post, err))
        return -1;
    const tok_map *vocab = tok_bpe_vocab(t->model);
    t->added = tok_added_load(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), p, vocab, vocab->n, t->norm, err);
    if (!t->added) return -1;
    t->n_ids = tok_bpe_n_ids(t->model);
    if (tok_added_n_ids(t->added) > t->n_ids) t->n_ids = tok_added_n_ids(t->added);
    t->bytes_to_model = tok_pretok_bytes_out(t->pre);
    t->needs_utf8 = t->norm || !t->pre || !tok_pretok_byte_safe(t->pre);
    return 0;
}

tokenizer *tok_load(const char *path, rl_err *err) {
    sbuf text = {0};
    if (read_whole_file(path, TOK_MAX_FILE, &text, err)) {
        sbuf_free(&text);
        return NULL;
    }
    const char *end = NULL;
    errno = 0;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)text.data, text.len, &end, 0);
    if (!root) {
        json_error(path, &text, end ? end : cJSON_GetErrorPtr(), err);
        sbuf_free(&text);
        return NULL;
    }
    tokenizer *t = xmalloc(sizeof *t);
    memset(t, 0, sizeof *t);
    t->path = xstrdup(path);
    int rc = load(t, root, err);
    cJSON_Delete(root);
    sbuf_free(&text);
    if (rc) {
        tok_free(t);
        return NULL;
    }
    return t;
}

// ---- encoding --------------------------------------------------------------------------------

// Per-call working memory (the tokenizer itself stays read-only and shared).
typedef struct {
    tok_re_scratch *re;
    tok_norm_work norm;
    sbuf normed;
    tok_pretok_work pre;
    tok_bpe_work bpe;
    tok_cuts raw_cuts, norm_cuts;
    sbuf *pieces;  // tok_pieces: record the pieces instead of encoding them
} scratch;

static void scratch_free(scratch *s) {
    tok_re_scratch_free(s->re);
    tok_norm_work_free(&s->norm);
    sbuf_free(&s->normed);
    tok_pretok_work_free(&s->pre);
    tok_bpe_work_free(&s->bpe);
    free(s->raw_cuts.cut);
    free(s->norm_cuts.cut);
}

// tok_pieces' record of one piece (bytes: raw bytes still to be mapped to the byte alphabet).
static void record_piece(sbuf *out, const uint8_t *s, size_t n, int bytes) {
    sbuf text = {0};
    if (bytes) {
        uint8_t u[4];
        for (size_t i = 0; i < n; i++) sbuf_put(&text, u, tok_utf8_put(tok_byte_char(s[i]), u));
        s = text.data, n = text.len;
    }
    sbuf_printf(out, "P %zu\n", n);
    sbuf_put(out, s, n);
    sbuf_putc(out, '\n');
    sbuf_free(&text);
}

// Pre-tokenizer and model on s[0..n), text between added tokens, normalized.
static int encode_pieces(const tokenizer *t, scratch *sc, const uint8_t *s, size_t n, int first, uint32_t **ids,
                         size_t *n_ids, size_t *cap, rl_err *err) {
    if (!t->pre) {
        if (sc->pieces) return record_piece(sc->pieces, s, n, 0), 0;
        return tok_bpe_encode(t->model, &sc->bpe, s, n, 0, ids, n_ids, cap, err);
    }
    tok_pretok_start(&sc->pre, s, n, first);
    if (tok_pretok_apply(t->pre, &sc->pre, sc->re, err)) return -1;
    for (size_t i = 0; i < sc->pre.n; i++) {
        const uint8_t *p = sc->pre.text.data + sc->pre.p[i].off;
        size_t len = sc->pre.p[i].len;
        if (sc->pieces) record_piece(sc->pieces, p, len, t->bytes_to_model);
        else if (tok_bpe_encode(t->model, &sc->bpe, p, len, t->bytes_to_model, ids, n_ids, cap, err)) return -1;
    }
    return 0;
}

static void emit_added(scratch *sc, uint32_t id, uint32_t **ids, size_t *n_ids, size_t *cap) {
    if (sc->pieces) sbuf_printf(sc->pieces, "A %u\n", id);
    else tok_ids_push(ids, n_ids, cap, id);
}

// A piece of the raw text between added tokens: normalized, then cut by the
// normalized added tokens. first: it starts the text.
static int encode_segment(const tokenizer *t, scratch *sc, const uint8_t *s, size_t n, int first, uint32_t **ids,
                          size_t *n_ids, size_t *cap, rl_err *err) {
    int moved = 0;
    if (t->norm) {
        sc->normed.len = 0;
        if (tok_norm_apply(t->norm, &sc->norm, sc->re, s, n, &sc->normed, &moved, err)) return -1;
        s = sc->normed.data, n = sc->normed.len;
        if (!n) return 0;
    }
    sc->norm_cuts.n = 0;
    tok_added_cut(t->added, 1, sc->re, s, n, &sc->norm_cuts);
    for (size_t i = 0; i < sc->norm_cuts.n; i++) {
        tok_cut c = sc->norm_cuts.cut[i];
        if (c.id != TOK_NO_ID) emit_added(sc, c.id, ids, n_ids, cap);
        else if (encode_pieces(t, sc, s + c.a, c.b - c.a, first && c.a == 0 && !moved, ids, n_ids, cap, err))
            return -1;
    }
    return 0;
}

static int encode_text(const tokenizer *t, scratch *sc, const char *text, size_t n, uint32_t **ids, size_t *n_ids,
                       size_t *cap, rl_err *err) {
    const uint8_t *s = (const uint8_t *)text;
    if (n > TOK_MAX_TEXT) return err_set(err, "a text of %zu bytes is too long to encode (at most %zu)", n, TOK_MAX_TEXT);
    if (t->needs_utf8 && !utf8_valid(s, n)) {
        size_t good = 0;  // the first ill-formed character, to name its offset
        utf8proc_int32_t cp;
        utf8proc_ssize_t len;
        while (good < n && (len = utf8proc_iterate(s + good, (utf8proc_ssize_t)(n - good), &cp)) > 0) good += (size_t)len;
        return err_set(err, "the text is not valid UTF-8 (at byte offset %zu), which %s needs", good, t->path);
    }
    sc->re = tok_re_scratch_new();
    sc->raw_cuts.n = 0;
    tok_added_cut(t->added, 0, sc->re, s, n, &sc->raw_cuts);
    for (size_t i = 0; i < sc->raw_cuts.n; i++) {
        tok_cut c = sc->raw_cuts.cut[i];
        if (c.id != TOK_NO_ID) emit_added(sc, c.id, ids, n_ids, cap);
        else if (encode_segment(t, sc, s + c.a, c.b - c.a, c.a == 0, ids, n_ids, cap, err)) return -1;
    }
    return 0;
}

int tok_encode_ex(const tokenizer *t, const char *text, size_t n, int add_special, uint32_t **ids, size_t *n_ids,
                  size_t *cap, tok_report *rep, rl_err *err) {
    scratch sc = {0};
    size_t start = *n_ids;
    int rc = encode_text(t, &sc, text, n, ids, n_ids, cap, err);
    if (rc) *n_ids = start;  // nothing appended on failure
    else if (add_special) tok_post_apply(t->post, ids, start, n_ids, cap);
    if (rep) *rep = (tok_report){sc.bpe.dropped, sc.bpe.first_dropped, t->bytes_to_model};
    scratch_free(&sc);
    return rc;
}

void tok_report_text(const tok_report *rep, char *buf, size_t size) {
    if (!rep->dropped) {
        if (size) buf[0] = 0;
        return;
    }
    char first[32];
    if (rep->byte_level) snprintf(first, sizeof first, "byte 0x%02X", (unsigned)rep->first_dropped);
    else snprintf(first, sizeof first, "U+%04X", (unsigned)rep->first_dropped);
    snprintf(buf, size, "%zu %s with no token (the first %s) %s dropped, as Hugging Face's tokenizers drops them",
             rep->dropped, rep->byte_level ? (rep->dropped > 1 ? "bytes" : "byte") : (rep->dropped > 1 ? "characters" : "character"),
             first, rep->dropped > 1 ? "were" : "was");
}

int tok_encode(const tokenizer *t, const char *text, size_t n, uint32_t **ids, size_t *n_ids, size_t *cap,
               rl_err *err) {
    return tok_encode_ex(t, text, n, 0, ids, n_ids, cap, NULL, err);
}

int tok_encode_special(const tokenizer *t, const char *text, size_t n, uint32_t **ids, size_t *n_ids,
                       size_t *cap, rl_err *err) {
    return tok_encode_ex(t, text, n, 1, ids, n_ids, cap, NULL, err);
}

int tok_pieces(const tokenizer *t, const char *text, size_t n, sbuf *out, rl_err *err) {
    scratch sc = {.pieces = out};
    size_t start = out->len, cap = 0, n_ids = 0;
    uint32_t *ids = NULL;
    int rc = encode_text(t, &sc, text, n, &ids, &n_ids, &cap, err);
    if (rc) out->len = start;
    scratch_free(&sc);
    free(ids);
    return rc;
}

// ---- decoding --------------------------------------------------------------------------------

int tok_decode(const tokenizer *t, const uint32_t *ids, size_t n, unsigned flags, sbuf *out, rl_err *err) {
    tok_dec_work w = {0};
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = tok_token(t, ids[i], &len);
        if (!s) {
            tok_dec_work_free(&w);
            return err_set(err, "token id %u (position %zu) is not in the vocabulary of %s (size %zu)", ids[i], i,
                           t->path, t->n_ids);
        }
        if ((flags & TOK_SKIP_SPECIAL) && tok_is_special(t, ids[i])) continue;
        tok_dec_push(&w, s, len);
    }
    tok_re_scratch *sc = tok_re_scratch_new();
    size_t start = out->len;
    int rc = tok_dec_run(t->dec, &w, sc, (flags & TOK_CONTINUE) != 0, (flags & (TOK_CONTINUE | TOK_RAW_BYTES)) != 0,
                         out, err);
    if (rc) out->len = start;
    tok_re_scratch_free(sc);
    tok_dec_work_free(&w);
    return rc;
}
