// tokenize — drives lib/tokenizer/tokenizer.c for tests/py/test_tokenizer.py and
// tests/py/test_tokenizers_hf.py, which compare it with Hugging Face's
// tokenizers library.
//
//   tokenize encode [--special] TOKENIZER.json
//       stdin: texts, each "<byte count>\n" followed by that many bytes (any
//       bytes: newlines, NULs, invalid UTF-8); stdout: one line per text, the
//       ids separated by spaces (an empty line for no ids). --special: with
//       the post-processor's special tokens (tok_encode_special, HF's
//       add_special_tokens=True).
//   tokenize decode [--skip-special] [--continue] TOKENIZER.json
//       stdin: lines of space-separated ids; stdout: per line "<byte count>\n"
//       followed by the decoded bytes. --continue: each id decoded alone,
//       with TOK_RAW_BYTES, and TOK_CONTINUE after the first that is not a
//       skipped special token, the outputs concatenated (as
//       lib/sample/generate.c streams).
//   tokenize pieces TOKENIZER.json
//       stdin: texts as for encode; stdout: per text, tok_pieces' records
//       ("P <byte count>\n<bytes>\n" per piece, "A <id>\n" per added token),
//       then "E\n".
//   tokenize info TOKENIZER.json [TOKEN]...
//       stdout: "vocab_size N", then the id of each TOKEN (-1 if none), one a line.
//
// Errors go to stderr as "tokenize: error: ..." with exit status 1; usage
// errors exit 2.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static const char USAGE[] =
    "Usage: tokenize encode [--special] TOKENIZER.json < texts\n"
    "       tokenize decode [--skip-special] [--continue] TOKENIZER.json < id-lines\n"
    "       tokenize pieces TOKENIZER.json < texts\n"
    "       tokenize info TOKENIZER.json [TOKEN]...\n"
    "Texts are \"<byte count>\\n<bytes>\" records; id lines are space-separated ids.\n";

static void die(const char *msg) {
    fprintf(stderr, "tokenize: error: %s\n", msg);
    exit(1);
}

static void read_stdin(sbuf *in) {
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) sbuf_put(in, buf, n);
    if (ferror(stdin)) {
        fprintf(stderr, "tokenize: error: reading standard input: %s\n", strerror(errno));
        exit(1);
    }
}

// Reads the next "<byte count>\n<bytes>" text of in at *pos: its bytes, or
// NULL at the end; exits on a malformed header.
static const char *next_text(const sbuf *in, size_t *pos, size_t text_no, size_t *len) {
    if (*pos >= in->len) return NULL;
    char *end;
    errno = 0;
    unsigned long long n = strtoull((const char *)in->data + *pos, &end, 10);
    size_t header = (size_t)((uint8_t *)end - (in->data + *pos));
    if (errno || !header || *pos + header >= in->len || *end != '\n' || n > in->len - *pos - header - 1) {
        fprintf(stderr, "tokenize: error: text %zu: expected \"<byte count>\\n\" and that many bytes\n", text_no);
        exit(1);
    }
    const char *text = (const char *)in->data + *pos + header + 1;
    *pos += header + 1 + (size_t)n;
    *len = (size_t)n;
    return text;
}

static int do_encode(const tokenizer *t, int special) {
    sbuf in = {0}, line = {0};
    read_stdin(&in);
    uint32_t *ids = NULL;
    size_t cap = 0, pos = 0, text_no = 0, len;
    const char *text;
    while ((text = next_text(&in, &pos, text_no, &len))) {
        size_t n_ids = 0;
        rl_err err;
        int rc = special ? tok_encode_special(t, text, len, &ids, &n_ids, &cap, &err)
                         : tok_encode(t, text, len, &ids, &n_ids, &cap, &err);
        if (rc) {
            fprintf(stderr, "tokenize: error: text %zu: %s\n", text_no, err.msg);
            exit(1);
        }
        line.len = 0;
        for (size_t i = 0; i < n_ids; i++) sbuf_printf(&line, i ? " %u" : "%u", ids[i]);
        sbuf_putc(&line, '\n');
        if (fwrite(line.data, 1, line.len, stdout) != line.len) die("writing standard output");
        text_no++;
    }
    free(ids);
    sbuf_free(&in);
    sbuf_free(&line);
    return 0;
}

static int do_pieces(const tokenizer *t) {
    sbuf in = {0}, out = {0};
    read_stdin(&in);
    size_t pos = 0, text_no = 0, len;
    const char *text;
    while ((text = next_text(&in, &pos, text_no, &len))) {
        rl_err err;
        out.len = 0;
        if (tok_pieces(t, text, len, &out, &err)) {
            fprintf(stderr, "tokenize: error: text %zu: %s\n", text_no, err.msg);
            exit(1);
        }
        sbuf_put(&out, "E\n", 2);
        if (fwrite(out.data, 1, out.len, stdout) != out.len) die("writing standard output");
        text_no++;
    }
    sbuf_free(&in);
    sbuf_free(&out);
    return 0;
}

static int do_decode(const tokenizer *t, unsigned flags, int streamed) {
    sbuf in = {0}, out = {0};
    read_stdin(&in);
    sbuf_putc(&in, 0);  // strtoul stops at the terminator
    size_t cap = 64, line_no = 0;
    uint32_t *ids = xmalloc(cap * sizeof *ids);   // never NULL: an empty line decodes ids + 0
    char *p = (char *)in.data, *stop = p + in.len - 1;
    while (p < stop) {
        char *eol = memchr(p, '\n', (size_t)(stop - p));
        if (!eol) eol = stop;
        *eol = 0;
        size_t n = 0;
        for (char *q = p;;) {
            while (*q == ' ') q++;
            if (!*q) break;
            char *end;
            errno = 0;
            unsigned long v = strtoul(q, &end, 10);
            if (errno || end == q || v > UINT32_MAX || (*end && *end != ' ')) {
                fprintf(stderr, "tokenize: error: line %zu: not a list of ids\n", line_no + 1);
                exit(1);
            }
            if (n == cap) {
                cap *= 2;
                ids = xrealloc(ids, cap * sizeof *ids);
            }
            ids[n++] = (uint32_t)v;
            q = end;
        }
        out.len = 0;
        rl_err err;
        // Streamed: each id alone, raw bytes, continuing the text once an
        // id has given some (a skipped special token gives none).
        int started = 0;
        for (size_t i = 0; i < (streamed ? n : 1); i++) {
            size_t count = streamed ? 1 : n;
            unsigned f = flags | (!streamed ? 0 : started ? TOK_CONTINUE : TOK_RAW_BYTES);
            if (tok_decode(t, ids + i, count, f, &out, &err)) {
                fprintf(stderr, "tokenize: error: line %zu: %s\n", line_no + 1, err.msg);
                exit(1);
            }
            if (streamed) started |= !((flags & TOK_SKIP_SPECIAL) && tok_is_special(t, ids[i]));
        }
        printf("%zu\n", out.len);
        if (out.len && fwrite(out.data, 1, out.len, stdout) != out.len) die("writing standard output");
        p = eol + 1;
        line_no++;
    }
    free(ids);
    sbuf_free(&in);
    sbuf_free(&out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc < 3) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    int special = 0, streamed = 0, arg = 2;
    unsigned flags = 0;
    for (; arg < argc && !strncmp(argv[arg], "--", 2); arg++) {
        if (!strcmp(cmd, "encode") && !strcmp(argv[arg], "--special")) special = 1;
        else if (!strcmp(cmd, "decode") && !strcmp(argv[arg], "--skip-special")) flags |= TOK_SKIP_SPECIAL;
        else if (!strcmp(cmd, "decode") && !strcmp(argv[arg], "--continue")) streamed = 1;
        else {
            fprintf(stderr, "tokenize: unknown option %s for %s\n%s", argv[arg], cmd, USAGE);
            return 2;
        }
    }
    int known = !strcmp(cmd, "encode") || !strcmp(cmd, "decode") || !strcmp(cmd, "pieces") || !strcmp(cmd, "info");
    if (!known || arg >= argc || (strcmp(cmd, "info") && argc != arg + 1)) {
        fputs(USAGE, stderr);
        return 2;
    }
    rl_err err;
    tokenizer *t = tok_load(argv[arg], &err);
    if (!t) die(err.msg);
    int rc;
    if (!strcmp(cmd, "encode")) {
        rc = do_encode(t, special);
    } else if (!strcmp(cmd, "decode")) {
        rc = do_decode(t, flags, streamed);
    } else if (!strcmp(cmd, "pieces")) {
        rc = do_pieces(t);
    } else {
        printf("vocab_size %zu\n", tok_vocab_size(t));
        for (int i = arg + 1; i < argc; i++) printf("%lld\n", (long long)tok_id(t, argv[i]));
        rc = 0;
    }
    tok_free(t);
    if (fflush(stdout)) die("writing standard output");
    return rc;
}
