#include "records/outstream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

struct outs {
    int fd;
    char *name;
    ZSTD_CCtx *z;            // NULL: raw output
    sbuf buf;                // bytes ready for the descriptor
    int in_frame;            // bytes went into a frame not yet ended
    uint64_t written;
};

outs_t *outs_fdopen(int fd, const char *name, int compress, int level) {
    outs_t *o = xmalloc(sizeof *o);
    memset(o, 0, sizeof *o);
    o->fd = fd;
    o->name = xstrdup(name);
    if (compress) {
        o->z = ZSTD_createCCtx();
        if (!o->z) { free(o->name); free(o); return NULL; }
        ZSTD_CCtx_setParameter(o->z, ZSTD_c_compressionLevel, level);
        ZSTD_CCtx_setParameter(o->z, ZSTD_c_checksumFlag, 1);
    }
    return o;
}

void outs_free(outs_t *o) {
    if (!o) return;
    ZSTD_freeCCtx(o->z);
    sbuf_free(&o->buf);
    free(o->name);
    free(o);
}

uint64_t outs_bytes_written(const outs_t *o) { return o->written; }

static int drain(outs_t *o, rl_err *err) {
    size_t off = 0;
    while (off < o->buf.len) {
        ssize_t w = write(o->fd, o->buf.data + off, o->buf.len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return err_set(err, "write error: %s: %s", o->name, strerror(errno));
        off += (size_t)w;
        o->written += (uint64_t)w;
    }
    o->buf.len = 0;
    return 0;
}

// Runs the compressor over p[0..n) with the given directive, collecting output.
static int compress(outs_t *o, const void *p, size_t n, ZSTD_EndDirective mode, rl_err *err) {
    ZSTD_inBuffer in = {p, n, 0};
    for (;;) {
        sbuf_reserve(&o->buf, ZSTD_CStreamOutSize());
        ZSTD_outBuffer out = {o->buf.data + o->buf.len, o->buf.cap - o->buf.len, 0};
        size_t left = ZSTD_compressStream2(o->z, &out, &in, mode);
        if (ZSTD_isError(left)) return err_set(err, "zstd compression failed: %s", ZSTD_getErrorName(left));
        o->buf.len += out.pos;
        if (mode == ZSTD_e_continue ? in.pos == in.size : left == 0) return 0;
    }
}

int outs_write(outs_t *o, const void *p, size_t n, rl_err *err) {
    if (!o->z) sbuf_put(&o->buf, p, n);
    else {
        if (compress(o, p, n, ZSTD_e_continue, err)) return -1;
        o->in_frame = 1;
    }
    return o->buf.len >= ((size_t)1 << 17) ? drain(o, err) : 0;
}

int outs_end_frame(outs_t *o, rl_err *err) {
    if (o->z && o->in_frame) {
        if (compress(o, NULL, 0, ZSTD_e_end, err)) return -1;
        o->in_frame = 0;
    }
    return drain(o, err);
}
