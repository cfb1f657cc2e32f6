// tokenize — the timing driver of bench/tokenize.sh: encode throughput of
// lib/tokenizer/tokenizer.c on a file of texts. Loads the tokenizer (not timed),
// encodes every text once untimed (warm-up), then REPS times timed, and prints
//   RESULT what=ours texts=N bytes=B tokens=T median_s=S mb_s=M tok_s=K times=t1,t2,...
// where B is the texts' UTF-8 bytes, T the ids of one pass, M = B / S / 1e6
// (decimal MB/s) and K = T / S over the median pass. One thread.
//
//   tokenize --tokenizer TOKENIZER.json --texts FILE [--reps R (default 5)] [--special]
//
// FILE holds texts as tests/tools/tokenize reads them: "<byte count>\n"
// followed by that many bytes, repeated. --special encodes as
// encode(text, add_special_tokens=True) (tok_encode_special).
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tokenizer/tokenizer.h"

#define MAX_REPS 64   // bench_median takes at most 64

static void die(const char *msg) {
    fprintf(stderr, "tokenize: error: %s\n", msg);
    exit(1);
}

typedef struct {
    char *data;       // the whole file
    size_t *start;    // text i is data[start[i] .. start[i] + len[i])
    size_t *len;
    size_t n, bytes;
} texts;

// Reads FILE's "<byte count>\n<bytes>" records; exits naming the file and
// the record that is cut or malformed.
static texts read_texts(const char *path) {
    texts t = {0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tokenize: error: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    sbuf buf = {0};
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) sbuf_put(&buf, chunk, got);
    if (ferror(f)) {
        fprintf(stderr, "tokenize: error: reading %s: %s\n", path, strerror(errno));
        exit(1);
    }
    fclose(f);
    sbuf_putc(&buf, 0);   // strtoull stops at the terminator
    t.data = (char *)buf.data;
    size_t total = buf.len - 1, pos = 0, cap = 0;
    while (pos < total) {
        char *end;
        errno = 0;
        unsigned long long len = strtoull(t.data + pos, &end, 10);
        size_t header = (size_t)(end - (t.data + pos));
        if (errno || !header || *end != '\n' || len > total - pos - header - 1) {
            fprintf(stderr, "tokenize: error: %s: text %zu (byte %zu): expected \"<byte count>\\n\" and that many bytes\n",
                    path, t.n, pos);
            exit(1);
        }
        if (t.n == cap) {
            cap = cap ? 2 * cap : 1024;
            t.start = xrealloc(t.start, cap * sizeof *t.start);
            t.len = xrealloc(t.len, cap * sizeof *t.len);
        }
        t.start[t.n] = pos + header + 1;
        t.len[t.n] = (size_t)len;
        t.bytes += (size_t)len;
        t.n++;
        pos += header + 1 + (size_t)len;
    }
    return t;
}

// One pass over every text; returns the number of ids.
static size_t encode_all(const tokenizer *tok, const texts *t, int special, uint32_t **ids, size_t *cap) {
    size_t total = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t n_ids = 0;
        rl_err err;
        int rc = special ? tok_encode_special(tok, t->data + t->start[i], t->len[i], ids, &n_ids, cap, &err)
                         : tok_encode(tok, t->data + t->start[i], t->len[i], ids, &n_ids, cap, &err);
        if (rc) {
            fprintf(stderr, "tokenize: error: text %zu: %s\n", i, err.msg);
            exit(1);
        }
        total += n_ids;
    }
    return total;
}

int main(int argc, char **argv) {
    static const struct option longopts[] = {{"tokenizer", required_argument, 0, 'k'},
                                             {"texts", required_argument, 0, 't'},
                                             {"reps", required_argument, 0, 'r'},
                                             {"special", no_argument, 0, 's'},
                                             {0, 0, 0, 0}};
    const char *tok_path = NULL, *texts_path = NULL;
    int reps = 5, special = 0, c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'k': tok_path = optarg; break;
        case 't': texts_path = optarg; break;
        case 'r': reps = bench_int_arg("tokenize", optarg, "reps", 1, MAX_REPS); break;
        case 's': special = 1; break;
        default: goto usage;
        }
    }
    if (!tok_path || !texts_path || optind != argc) goto usage;

    rl_err err;
    tokenizer *tok = tok_load(tok_path, &err);
    if (!tok) die(err.msg);
    texts t = read_texts(texts_path);
    uint32_t *ids = NULL;
    size_t cap = 0;
    size_t n_tokens = encode_all(tok, &t, special, &ids, &cap);   // warm-up: caches, ids grown
    double times[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        size_t n = encode_all(tok, &t, special, &ids, &cap);
        times[r] = bench_now() - t0;
        if (n != n_tokens) die("a pass gave another number of ids than the first");
    }
    double med = bench_median(times, reps);
    printf("RESULT what=ours texts=%zu bytes=%zu tokens=%zu median_s=%.6f mb_s=%.3f tok_s=%.0f ", t.n, t.bytes,
           n_tokens, med, (double)t.bytes / med / 1e6, (double)n_tokens / med);
    bench_print_times(times, reps);
    free(ids);
    free(t.data);
    free(t.start);
    free(t.len);
    tok_free(tok);
    return 0;

usage:
    fputs("Usage: tokenize --tokenizer TOKENIZER.json --texts FILE [--reps R] [--special]\n", stderr);
    return 2;
}
