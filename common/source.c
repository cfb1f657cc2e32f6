#include "source.h"

#include <stdio.h>
#include <stdlib.h>

#include "jsonl.h"

struct src {
    recr_t *r;
    jsonl_t *j;
};

src_t *src_open(const char *path, int jsonl, const rec_limits *lim, rl_err *err) {
    src_t *s = xmalloc(sizeof *s);
    s->r = NULL;
    s->j = NULL;
    if (jsonl) s->j = jsonl_open(path, err);
    else s->r = recr_open(path, lim, err);
    if (!s->r && !s->j) { free(s); return NULL; }
    return s;
}

void src_close(src_t *s) {
    if (!s) return;
    recr_close(s->r);
    jsonl_close(s->j);
    free(s);
}

recr_event src_next(src_t *s, rec_t *out) { return s->r ? recr_next(s->r, out) : jsonl_next(s->j, out); }
const char *src_error(const src_t *s) { return s->r ? recr_error(s->r) : jsonl_error(s->j); }
uint64_t src_bytes_in(const src_t *s) { return s->r ? recr_bytes_in(s->r) : jsonl_bytes_in(s->j); }
int src_would_block(const src_t *s) { return s->r ? recr_would_block(s->r) : jsonl_would_block(s->j); }

const char *src_where(const src_t *s, char *buf, size_t size) {
    if (s->r) snprintf(buf, size, "%s record %llu", recr_name(s->r), (unsigned long long)recr_records(s->r) - 1);
    else snprintf(buf, size, "%s line %llu", jsonl_name(s->j), (unsigned long long)jsonl_line(s->j));
    return buf;
}
