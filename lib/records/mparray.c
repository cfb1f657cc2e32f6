// mparray.c — msgpack arrays handled as bytes (mparray.h).
#include "records/mparray.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>

void mpa_put_header(sbuf *out, uint32_t n) {
    uint8_t h[5];
    if (n < 16) {
        h[0] = (uint8_t)(0x90 | n);
        sbuf_put(out, h, 1);
    } else if (n < 65536) {
        h[0] = 0xdc, h[1] = (uint8_t)(n >> 8), h[2] = (uint8_t)n;
        sbuf_put(out, h, 3);
    } else {
        h[0] = 0xdd, h[1] = (uint8_t)(n >> 24), h[2] = (uint8_t)(n >> 16), h[3] = (uint8_t)(n >> 8), h[4] = (uint8_t)n;
        sbuf_put(out, h, 5);
    }
}

int mpa_header(const uint8_t *p, size_t n, uint32_t *count, size_t *hdr) {
    if (n >= 1 && p[0] >= 0x90 && p[0] <= 0x9f) {
        *count = p[0] & 0x0f, *hdr = 1;
    } else if (n >= 3 && p[0] == 0xdc) {
        *count = (uint32_t)p[1] << 8 | p[2], *hdr = 3;
    } else if (n >= 5 && p[0] == 0xdd) {
        *count = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4], *hdr = 5;
    } else {
        return -1;
    }
    return 0;
}

int mpa_split(const uint8_t *p, size_t n, mpa_elems *e) {
    uint32_t count;
    size_t at;
    e->n = 0;
    // Every element takes a byte at least: a count past the bytes cannot be
    // right, and must not size the offsets.
    if (mpa_header(p, n, &count, &at) || count > n - at) return -1;
    GROW(e->off, e->cap, (size_t)count + 1, 16);
    // An element ends where msgpack-c's decoding of it ends: it accepts what
    // msgpack-c accepts.
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, 2048)) {
        fprintf(stderr, "rlpipe: fatal: out of memory creating a msgpack zone\n");
        abort();
    }
    int rc = 0;
    e->off[0] = at;
    for (uint32_t i = 0; i < count && !rc; i++) {
        msgpack_object o;
        msgpack_zone_clear(&zone);
        if (msgpack_unpack((const char *)p, n, &at, &zone, &o) <= MSGPACK_UNPACK_CONTINUE) rc = -1;
        e->off[i + 1] = at;
    }
    msgpack_zone_destroy(&zone);
    if (rc || at != n) return -1;
    e->n = count;
    return 0;
}

void mpa_elems_free(mpa_elems *e) {
    free(e->off);
    e->off = NULL;
    e->n = e->cap = 0;
}
