// tokenize — drives common/tokenizer.c for tests/py/test_tokenizer.py, which
// compares it with Hugging Face's tokenizers library.
//
//   tokenize encode TOKENIZER.json
//       stdin: texts, each "<byte count>\n" followed by that many bytes (any
//       bytes: newlines, NULs, invalid UTF-8); stdout: one line per text, the
//       ids separated by spaces (an empty line for no ids).
//   tokenize decode [--skip-special] TOKENIZER.json
//       stdin: lines of space-separated ids; stdout: per line "<byte count>\n"
//       followed by the decoded bytes.
//   tokenize info TOKENIZER.json [TOKEN]...
//       stdout: "vocab_size N", then the id of each TOKEN (-1 if none), one a line.
//
// Errors go to stderr as "tokenize: error: ..." with exit status 1; usage
// errors exit 2.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static const char USAGE[] =
    "Usage: tokenize encode TOKENIZER.json < texts\n"
    "       tokenize decode [--skip-special] TOKENIZER.json < id-lines\n"
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

static int do_encode(const tokenizer *t) {
    sbuf in = {0}, line = {0};
    read_stdin(&in);
    uint32_t *ids = NULL;
    size_t cap = 0, pos = 0, text_no = 0;
    while (pos < in.len) {
        char *end;
        errno = 0;
        unsigned long long len = strtoull((const char *)in.data + pos, &end, 10);
        size_t header = (size_t)((uint8_t *)end - (in.data + pos));
        if (errno || !header || pos + header >= in.len || *end != '\n' || len > in.len - pos - header - 1) {
            fprintf(stderr, "tokenize: error: text %zu: expected \"<byte count>\\n\" and that many bytes\n",
                    text_no);
            exit(1);
        }
        pos += header + 1;
        size_t n_ids = 0;
        rl_err err;
        if (tok_encode(t, (const char *)in.data + pos, (size_t)len, &ids, &n_ids, &cap, &err)) {
            fprintf(stderr, "tokenize: error: text %zu: %s\n", text_no, err.msg);
            exit(1);
        }
        line.len = 0;
        for (size_t i = 0; i < n_ids; i++) sbuf_printf(&line, i ? " %u" : "%u", ids[i]);
        sbuf_putc(&line, '\n');
        if (fwrite(line.data, 1, line.len, stdout) != line.len) die("writing standard output");
        pos += (size_t)len;
        text_no++;
    }
    free(ids);
    sbuf_free(&in);
    sbuf_free(&line);
    return 0;
}

static int do_decode(const tokenizer *t, int skip_special) {
    sbuf in = {0}, out = {0};
    read_stdin(&in);
    sbuf_putc(&in, 0);  // strtoul stops at the terminator
    uint32_t *ids = NULL;
    size_t cap = 0, line_no = 0;
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
                cap = cap ? cap * 2 : 64;
                ids = xrealloc(ids, cap * sizeof *ids);
            }
            ids[n++] = (uint32_t)v;
            q = end;
        }
        out.len = 0;
        rl_err err;
        if (tok_decode(t, ids, n, skip_special, &out, &err)) {
            fprintf(stderr, "tokenize: error: line %zu: %s\n", line_no + 1, err.msg);
            exit(1);
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
    int skip_special = argc >= 3 && !strcmp(argv[1], "decode") && !strcmp(argv[2], "--skip-special");
    int file_arg = 2 + skip_special;
    if (argc <= file_arg || (strcmp(argv[1], "info") && argc != file_arg + 1) ||
        (strcmp(argv[1], "encode") && strcmp(argv[1], "decode") && strcmp(argv[1], "info"))) {
        fputs(USAGE, stderr);
        return 2;
    }
    rl_err err;
    tokenizer *t = tok_load(argv[file_arg], &err);
    if (!t) die(err.msg);
    int rc;
    if (!strcmp(argv[1], "encode")) {
        rc = do_encode(t);
    } else if (!strcmp(argv[1], "decode")) {
        rc = do_decode(t, skip_special);
    } else {
        printf("vocab_size %zu\n", tok_vocab_size(t));
        for (int i = file_arg + 1; i < argc; i++) printf("%lld\n", (long long)tok_id(t, argv[i]));
        rc = 0;
    }
    tok_free(t);
    if (fflush(stdout)) die("writing standard output");
    return rc;
}
