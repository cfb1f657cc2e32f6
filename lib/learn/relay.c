// relay.c — rank 0's input relayed to the other ranks as events (relay.h).
#include "learn/relay.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

void relay_init(relay_t *r, dist_t *d) {
    memset(r, 0, sizeof *r);
    r->d = d;
}

void relay_put(relay_t *r, relay_kind kind, const rec_t *rec, const char *where) {
    if (dist_size(r->d) == 1) return;
    sbuf *b = &r->buf;
    uint32_t wn = where ? (uint32_t)strlen(where) : 0;
    sbuf_putc(b, (uint8_t)kind);
    sbuf_put(b, &wn, sizeof wn);
    sbuf_put(b, where, wn);
    uint64_t n = 0;
    size_t at = b->len;
    sbuf_put(b, &n, sizeof n);
    if (rec) rec_encode(rec, b);
    n = b->len - at - sizeof n;
    memcpy(b->data + at, &n, sizeof n);
}

int relay_send(relay_t *r, rl_err *err) {
    if (!r->buf.len) return 0;
    if (dist_bcast(r->d, &r->buf, err)) return -1;
    r->buf.len = 0;
    return 0;
}

int relay_next(relay_t *r, rec_t *rec, char *where, size_t size, rl_err *err) {
    sbuf *in = &r->buf;
    if (r->at == in->len) {
        if (dist_bcast(r->d, in, err)) return -1;
        r->at = 0;
    }
    uint32_t wn;
    uint64_t n;
    int kind = in->data[r->at++];
    memcpy(&wn, in->data + r->at, sizeof wn);
    snprintf(where, size, "%.*s", (int)wn, (const char *)in->data + r->at + sizeof wn);
    r->at += sizeof wn + wn;
    memcpy(&n, in->data + r->at, sizeof n);
    r->at += sizeof n;
    if (kind == RELAY_END) return kind;
    if (rec_parse(rec, in->data + r->at, n, &rec_default_limits, err)) return -1;
    r->at += n;
    return kind;
}

void relay_free(relay_t *r) { sbuf_free(&r->buf); }
