// tok_decode.c — decoders (see tok_decode.h).
//
// As in tokenizers, each step maps the list of token strings to a new list:
// ByteLevel maps each token whose every character is in the byte alphabet to
// those bytes (other tokens stay as they are) and joins them into one;
// Metaspace turns the replacement character into a space (in the first
// token, with a prepend scheme, it drops it); Replace rewrites the matches of
// its pattern in each token; ByteFallback turns each run of "<0xNN>" tokens
// into its bytes; Fuse joins all; Strip removes up to `start` leading and
// `stop` trailing copies of a character from each token. Without a decoder
// the tokens are joined with spaces.
#include "tokenizer/tok_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_bpe.h"
#include "tokenizer/tok_json.h"
#include "tokenizer/tok_unicode.h"

enum { D_BYTELEVEL, D_METASPACE, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP };

typedef struct {
    int kind;
    uint32_t cp;          // Metaspace: the replacement; Strip: the character
    int first_rule;       // Metaspace: prepend_scheme is not "never"
    uint32_t start, stop; // Strip
    tok_re *re;           // Replace
    char *content;        // Replace
    size_t content_len;
} dstep;

struct tok_decoder {
    dstep *step;
    size_t n;
};

// ---- the token lists -------------------------------------------------------------------

void tok_dec_push(tok_dec_work *w, const char *s, size_t n) {
    int c = w->cur;
    GROW(w->item[c], w->cap[c], w->n[c] + 1, 64);
    w->item[c][w->n[c]++] = (tok_dec_item){w->text[c].len, n, 0};
    sbuf_put(&w->text[c], s, n);
}

// Starts an item in the next list; its bytes are then appended to text[!cur].
static void next_begin(tok_dec_work *w, int fused) {
    int c = !w->cur;
    GROW(w->item[c], w->cap[c], w->n[c] + 1, 64);
    w->item[c][w->n[c]++] = (tok_dec_item){w->text[c].len, 0, fused};
}

static void next_put(tok_dec_work *w, const void *p, size_t n) {
    int c = !w->cur;
    sbuf_put(&w->text[c], p, n);
    w->item[c][w->n[c] - 1].len += n;
}

// The next list becomes the current one.
static void next_done(tok_dec_work *w) {
    w->text[w->cur].len = 0;
    w->n[w->cur] = 0;
    w->cur = !w->cur;
}

void tok_dec_work_free(tok_dec_work *w) {
    for (int i = 0; i < 2; i++) {
        sbuf_free(&w->text[i]);
        free(w->item[i]);
    }
    free(w->m.at);
    sbuf_free(&w->run);
    memset(w, 0, sizeof *w);
}

// ---- the steps ----------------------------------------------------------------------------

// Item i of the current list. Empty items may lie in a list with no text at all (data NULL).
static const uint8_t *item_at(const tok_dec_work *w, size_t i) {
    const uint8_t *text = w->text[w->cur].data;
    return text ? text + w->item[w->cur][i].off : (const uint8_t *)"";
}

static void bytelevel(tok_dec_work *w) {
    next_begin(w, 1);
    for (size_t i = 0; i < w->n[w->cur]; i++) {
        const uint8_t *s = item_at(w, i);
        size_t n = w->item[w->cur][i].len, k = 0, start = w->text[!w->cur].len;
        while (k < n) {
            uint32_t cp;
            size_t len = tok_utf8_next(s + k, n - k, &cp);
            int b = tok_char_byte(cp);
            if (b < 0) break;
            uint8_t byte = (uint8_t)b;
            next_put(w, &byte, 1);
            k += len;
        }
        if (k < n) {  // not all in the alphabet: the token as it is
            w->text[!w->cur].len = start;
            w->item[!w->cur][w->n[!w->cur] - 1].len = start - w->item[!w->cur][w->n[!w->cur] - 1].off;
            next_put(w, s, n);
        }
    }
    next_done(w);
}

static void metaspace(const dstep *st, tok_dec_work *w, int cont) {
    uint8_t repl[4];
    size_t repl_len = tok_utf8_put(st->cp, repl);
    for (size_t i = 0; i < w->n[w->cur]; i++) {
        const uint8_t *s = item_at(w, i);
        size_t n = w->item[w->cur][i].len;
        int drop = i == 0 && st->first_rule && !cont;
        next_begin(w, w->item[w->cur][i].fused);
        for (size_t k = 0; k < n;) {
            if (n - k >= repl_len && !memcmp(s + k, repl, repl_len)) {
                if (!drop) next_put(w, " ", 1);
                k += repl_len;
            } else {
                next_put(w, s + k, 1);
                k++;
            }
        }
    }
    next_done(w);
}

// The length of the run of valid UTF-8 at s[0..n) (0: s starts with an ill-formed byte).
static size_t valid_run(const uint8_t *s, size_t n) {
    size_t k = 0;
    while (k < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t len = utf8proc_iterate(s + k, (utf8proc_ssize_t)(n - k), &cp);
        if (len <= 0) break;
        k += (size_t)len;
    }
    return k;
}

static int replace(const dstep *st, tok_dec_work *w, tok_re_scratch *sc, rl_err *err) {
    for (size_t i = 0; i < w->n[w->cur]; i++) {
        const uint8_t *s = item_at(w, i);
        size_t n = w->item[w->cur][i].len;
        next_begin(w, w->item[w->cur][i].fused);
        // Bytes from ByteLevel need not be UTF-8 (tokenizers has U+FFFD there):
        // the pattern runs on each well-formed run, ill-formed bytes stay.
        for (size_t a = 0; a < n;) {
            size_t run = valid_run(s + a, n - a);
            if (!run) {
                next_put(w, s + a, 1);
                a++;
                continue;
            }
            w->m.n = 0;
            if (tok_re_find_all(st->re, sc, s + a, run, &w->m, err)) return -1;
            size_t prev = 0;
            for (size_t k = 0; k < w->m.n; k += 2) {
                next_put(w, s + a + prev, w->m.at[k] - prev);
                next_put(w, st->content, st->content_len);
                prev = w->m.at[k + 1];
            }
            next_put(w, s + a + prev, run - prev);
            a += run;
        }
    }
    next_done(w);
    return 0;
}

static int hex_digit(uint8_t c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

// The byte of a "<0xNN>" token (Rust's u8::from_str_radix: NN may also be "+N"), or -1.
static int fallback_byte(const uint8_t *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    if (s[3] == '+' && lo >= 0) return lo;
    return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

// A run of byte tokens s[0..n) (its bytes) into the next list.
static void put_byte_run(tok_dec_work *w, const uint8_t *bytes, size_t n, int raw) {
    if (!n) return;
    next_begin(w, 0);
    if (raw || utf8_valid(bytes, n)) {
        next_put(w, bytes, n);
        return;
    }
    for (size_t k = 0; k < n; k++) {  // one replacement character per byte token
        if (k) next_begin(w, 0);
        next_put(w, "\xEF\xBF\xBD", 3);
    }
}

static void byte_fallback(tok_dec_work *w, int raw) {
    w->run.len = 0;
    for (size_t i = 0; i < w->n[w->cur]; i++) {
        const uint8_t *s = item_at(w, i);
        size_t n = w->item[w->cur][i].len;
        int b = fallback_byte(s, n);
        if (b >= 0) {
            sbuf_putc(&w->run, (uint8_t)b);
            continue;
        }
        put_byte_run(w, w->run.data, w->run.len, raw);
        w->run.len = 0;
        next_begin(w, w->item[w->cur][i].fused);
        next_put(w, s, n);
    }
    put_byte_run(w, w->run.data, w->run.len, raw);
    next_done(w);
}

static void fuse(tok_dec_work *w, const char *sep, size_t sep_len, int cont) {
    next_begin(w, 1);
    for (size_t i = 0; i < w->n[w->cur]; i++) {
        if (i || cont) next_put(w, sep, sep_len);
        next_put(w, item_at(w, i), w->item[w->cur][i].len);
    }
    next_done(w);
}

// Strip: per token, up to start leading and stop trailing copies of the character.
static void strip(const dstep *st, tok_dec_work *w, int cont) {
    uint8_t ch[4];
    size_t cl = tok_utf8_put(st->cp, ch);
    for (size_t i = 0; i < w->n[w->cur]; i++) {
        const uint8_t *s = item_at(w, i);
        size_t n = w->item[w->cur][i].len, a = 0, b = n;
        int fused = w->item[w->cur][i].fused;
        if (!(cont && fused)) {  // a joined token is the text so far: it has neither start nor end yet
            for (uint32_t k = 0; k < st->start && n - a >= cl && !memcmp(s + a, ch, cl); k++) a += cl;
            for (uint32_t k = 0; k < st->stop && b >= a + cl && !memcmp(s + b - cl, ch, cl); k++) b -= cl;
        }
        next_begin(w, fused);
        next_put(w, s + a, b - a);
    }
    next_done(w);
}

int tok_dec_run(const tok_decoder *d, tok_dec_work *w, tok_re_scratch *sc, int cont, int raw, sbuf *out,
                rl_err *err) {
    if (!d) {
        fuse(w, " ", 1, cont);
    } else {
        for (size_t i = 0; i < d->n; i++) {
            const dstep *st = &d->step[i];
            switch (st->kind) {
            case D_BYTELEVEL: bytelevel(w); break;
            case D_METASPACE: metaspace(st, w, cont); break;
            case D_REPLACE:
                if (replace(st, w, sc, err)) {
                    next_done(w);
                    next_done(w);  // both lists emptied
                    return -1;
                }
                break;
            case D_BYTEFALLBACK: byte_fallback(w, raw); break;
            case D_FUSE: fuse(w, "", 0, 0); break;
            case D_STRIP: strip(st, w, cont); break;
            }
        }
    }
    int c = w->cur;
    for (size_t i = 0; i < w->n[c]; i++) sbuf_put(out, item_at(w, i), w->item[c][i].len);
    w->text[c].len = 0;
    w->n[c] = 0;
    return 0;
}

// ---- loading ---------------------------------------------------------------------------------

void tok_dec_free(tok_decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) {
        tok_re_free(d->step[i].re);
        free(d->step[i].content);
    }
    free(d->step);
    free(d);
}

static int load_one(void *ctx, const cJSON *x, const char *ty, const char *path, const char *where, rl_err *err) {
    tok_decoder *d = ctx;
    dstep st = {0};
    const char *s;
    if (!strcmp(ty, "ByteLevel")) {
        st.kind = D_BYTELEVEL;
    } else if (!strcmp(ty, "ByteFallback")) {
        st.kind = D_BYTEFALLBACK;
    } else if (!strcmp(ty, "Fuse")) {
        st.kind = D_FUSE;
    } else if (!strcmp(ty, "Metaspace")) {
        st.kind = D_METASPACE;
        const char *scheme = "always";
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(x, "prepend_scheme");
        if (cJSON_IsString(ps)) scheme = ps->valuestring;
        else if (!tok_json_absent(ps)) return err_set(err, "%s: %s.prepend_scheme must be a string", path, where);
        int aps;
        if (tok_json_char(path, x, where, "replacement", &s, err) ||
            tok_json_bool(path, x, where, "add_prefix_space", 1, &aps, err))
            return -1;
        if (strcmp(scheme, "always") && strcmp(scheme, "first") && strcmp(scheme, "never"))
            return err_set(err, "%s: %s.prepend_scheme must be \"first\", \"always\" or \"never\"", path, where);
        if (!aps && strcmp(scheme, "never"))
            return err_set(err, "%s: %s: add_prefix_space false does not match prepend_scheme \"%s\"", path, where,
                           scheme);
        tok_utf8_next((const uint8_t *)s, strlen(s), &st.cp);
        st.first_rule = aps && strcmp(scheme, "never") != 0;
    } else if (!strcmp(ty, "Strip")) {
        st.kind = D_STRIP;
        if (tok_json_char(path, x, where, "content", &s, err) ||
            tok_json_uint(path, x, where, "start", UINT32_MAX, &st.start, err) ||
            tok_json_uint(path, x, where, "stop", UINT32_MAX, &st.stop, err))
            return -1;
        tok_utf8_next((const uint8_t *)s, strlen(s), &st.cp);
    } else if (!strcmp(ty, "Replace")) {
        st.kind = D_REPLACE;
        if (tok_json_replace(path, x, where, &st.re, &st.content, &st.content_len, err)) return -1;
    } else {
        return err_set(err, "%s: %s: decoder %s is not supported (supported: ByteLevel, Metaspace, Replace, "
                            "ByteFallback, Fuse, Strip, Sequence)", path, where, ty);
    }
    d->step = xrealloc(d->step, (d->n + 1) * sizeof *d->step);
    d->step[d->n++] = st;
    return 0;
}

int tok_dec_load(const cJSON *x, const char *path, tok_decoder **out, rl_err *err) {
    *out = NULL;
    if (tok_json_absent(x)) return 0;
    tok_decoder *d = xmalloc(sizeof *d);
    memset(d, 0, sizeof *d);
    if (tok_json_component(path, x, "decoder", "decoders", load_one, d, err)) {
        tok_dec_free(d);
        return -1;
    }
    *out = d;
    return 0;
}
