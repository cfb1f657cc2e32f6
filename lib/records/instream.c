#include "records/instream.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

enum { DETECT, ZSTD, RAW };

struct ins {
    int fd, own_fd;
    char *name;
    uint8_t *in;              // input bytes not yet decoded: in[in_pos..in_len)
    size_t in_pos, in_len, in_cap;
    int eof;                  // read() returned 0
    sbuf d;                   // decoded bytes: d[dpos..verified) released, [verified..len) pending
    size_t dpos, verified;
    ZSTD_DCtx *z;
    int mode;
    uint64_t in_off;          // input bytes consumed (decoded or passed through)
    uint64_t frame_start;     // input offset of the current zstd frame
    uint64_t released;        // decoded bytes released so far
    int is_regular;           // a regular file: reads never wait for a writer
    int pending_err;          // report err_msg on the next ins_more
    rl_err err_msg;
};

static const uint8_t ZSTD_MAGIC[4] = {0x28, 0xb5, 0x2f, 0xfd};

ins_t *ins_fdopen(int fd, const char *name) {
    ins_t *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->name = xstrdup(name);
    s->in_cap = ZSTD_DStreamInSize();
    s->in = xmalloc(s->in_cap);
    s->mode = DETECT;
    struct stat st;
    s->is_regular = !fstat(fd, &st) && S_ISREG(st.st_mode);
    return s;
}

ins_t *ins_open(const char *path, rl_err *err) {
    if (!strcmp(path, "-")) return ins_fdopen(0, "(stdin)");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err_set(err, "cannot open: %s: %s", path, strerror(errno));
        return NULL;
    }
    ins_t *s = ins_fdopen(fd, path);
    s->own_fd = 1;
    return s;
}

void ins_close(ins_t *s) {
    if (!s) return;
    if (s->own_fd) close(s->fd);
    ZSTD_freeDCtx(s->z);
    sbuf_free(&s->d);
    free(s->in);
    free(s->name);
    free(s);
}

const char *ins_name(const ins_t *s) { return s->name; }
uint64_t ins_offset(const ins_t *s) { return s->in_off; }
uint64_t ins_decoded(const ins_t *s) { return s->released; }
int ins_would_block(const ins_t *s) { return !s->is_regular && s->verified == s->dpos; }

const uint8_t *ins_data(const ins_t *s, size_t *n) {
    *n = s->verified - s->dpos;
    return s->d.data ? s->d.data + s->dpos : NULL;   // nothing read yet: no pointer arithmetic on NULL
}

void ins_consume(ins_t *s, size_t n) { s->dpos += n; }

// Moves unconsumed decoded bytes to the front of the buffer before appending.
static void compact(ins_t *s) {
    if (s->dpos == 0) return;
    memmove(s->d.data, s->d.data + s->dpos, s->d.len - s->dpos);
    s->d.len -= s->dpos;
    s->verified -= s->dpos;
    s->dpos = 0;
}

// Reads more input into s->in. Returns bytes read, 0 at end of input, -1 on error.
static ssize_t read_input(ins_t *s, rl_err *err) {
    if (s->in_pos == s->in_len) s->in_pos = s->in_len = 0;
    if (s->in_len == s->in_cap) {  // only while detecting: a few bytes are kept
        memmove(s->in, s->in + s->in_pos, s->in_len - s->in_pos);
        s->in_len -= s->in_pos;
        s->in_pos = 0;
    }
    ssize_t r;
    do r = read(s->fd, s->in + s->in_len, s->in_cap - s->in_len);
    while (r < 0 && errno == EINTR);
    if (r < 0) return err_set(err, "read error at byte %llu: %s: %s",
                              (unsigned long long)s->in_off, s->name, strerror(errno));
    if (r == 0) s->eof = 1;
    s->in_len += (size_t)r;
    return r;
}

static void release(ins_t *s) {
    s->released += s->d.len - s->verified;
    s->verified = s->d.len;
}

// At a frame or member boundary: decides what the next input bytes are.
// Returns 1 decided, 0 clean end of input, -1 error.
static int detect(ins_t *s, rl_err *err) {
    while (s->in_len - s->in_pos < 4 && !s->eof)
        if (read_input(s, err) < 0) return -1;
    size_t avail = s->in_len - s->in_pos;
    if (avail == 0) return 0;
    const uint8_t *p = s->in + s->in_pos;
    if (avail < 4 && !memcmp(p, ZSTD_MAGIC, avail))
        return err_set(err, "truncated stream: zstd frame cut in its magic number at byte %llu",
                       (unsigned long long)s->in_off);
    uint32_t le = avail >= 4 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24 : 0;
    if ((avail >= 4 && !memcmp(p, ZSTD_MAGIC, 4)) || (le & 0xfffffff0u) == 0x184d2a50u) {
        if (!s->z && !(s->z = ZSTD_createDCtx())) return err_set(err, "out of memory creating a zstd context");
        ZSTD_DCtx_reset(s->z, ZSTD_reset_session_only);
        s->mode = ZSTD;
        s->frame_start = s->in_off;
    } else {
        s->mode = RAW;
    }
    return 1;
}

// Decodes zstd input until the frame ends or `want` bytes are available.
static int more_zstd(ins_t *s, size_t want, rl_err *err) {
    size_t before = s->verified;
    for (;;) {
        if (s->in_pos == s->in_len) {
            ssize_t r = read_input(s, err);
            if (r < 0) return -1;
            if (r == 0) {  // input ended inside a frame: keep what decoded, then report
                err_set(&s->err_msg, "truncated stream: zstd frame starting at byte %llu cut mid-way at byte %llu",
                        (unsigned long long)s->frame_start, (unsigned long long)s->in_off);
                s->pending_err = 1;
                release(s);
                if (s->verified > before) return 1;
                s->pending_err = 0;
                return err_set(err, "%s", s->err_msg.msg);
            }
        }
        size_t outsz = ZSTD_DStreamOutSize();
        sbuf_reserve(&s->d, outsz);
        ZSTD_outBuffer out = {s->d.data + s->d.len, s->d.cap - s->d.len, 0};
        ZSTD_inBuffer in = {s->in + s->in_pos, s->in_len - s->in_pos, 0};
        size_t ret = ZSTD_decompressStream(s->z, &out, &in);
        s->in_pos += in.pos;
        s->in_off += in.pos;
        if (ZSTD_isError(ret)) {
            s->d.len = s->verified;  // nothing of a corrupt frame is released
            return err_set(err, "corrupt stream: zstd frame starting at byte %llu: %s (detected at byte %llu)",
                           (unsigned long long)s->frame_start, ZSTD_getErrorName(ret),
                           (unsigned long long)s->in_off);
        }
        s->d.len += out.pos;
        if (ret == 0) {  // frame complete, checksum verified
            release(s);
            s->mode = DETECT;
            return 1;
        }
        if (s->d.len - s->verified > INS_STREAM_THROUGH) release(s);
        if (s->verified > before && s->verified - s->dpos >= want) return 1;
    }
}

static int more_raw(ins_t *s, size_t want, rl_err *err) {
    size_t before = s->verified;
    // Bytes read ahead while detecting come first; then read straight into the buffer.
    size_t left = s->in_len - s->in_pos;
    if (left) {
        sbuf_put(&s->d, s->in + s->in_pos, left);
        s->in_pos = s->in_len;
        s->in_off += left;
        release(s);
    }
    while (s->verified - s->dpos < want && !s->eof) {
        size_t chunk = want - (s->verified - s->dpos);
        // Grow with the data that arrives, not with what a header declares.
        if (chunk < ((size_t)1 << 16)) chunk = (size_t)1 << 16;
        if (chunk > ((size_t)1 << 20)) chunk = (size_t)1 << 20;
        sbuf_reserve(&s->d, chunk);
        ssize_t r;
        do r = read(s->fd, s->d.data + s->d.len, chunk);
        while (r < 0 && errno == EINTR);
        if (r < 0) return err_set(err, "read error at byte %llu: %s: %s",
                                  (unsigned long long)s->in_off, s->name, strerror(errno));
        if (r == 0) { s->eof = 1; break; }
        s->d.len += (size_t)r;
        s->in_off += (uint64_t)r;
        release(s);
        if (s->verified - s->dpos >= want) break;
    }
    return s->verified > before ? 1 : 0;
}

int ins_more(ins_t *s, size_t want, rl_err *err) {
    if (s->pending_err) {
        s->pending_err = 0;
        return err_set(err, "%s", s->err_msg.msg);
    }
    compact(s);
    size_t before = s->verified;
    while (s->verified - s->dpos < want) {
        int rc;
        if (s->mode == DETECT) {
            rc = detect(s, err);
            if (rc <= 0) return rc < 0 ? -1 : (s->verified > before);
            continue;
        }
        rc = s->mode == ZSTD ? more_zstd(s, want, err) : more_raw(s, want, err);
        if (rc < 0) return -1;
        if (s->pending_err) return 1;
        if (rc == 0) break;  // raw input ended
        if (s->mode == DETECT && s->verified - s->dpos < want) continue;  // next frame
        break;
    }
    return s->verified > before;
}

void ins_member_end(ins_t *s) {
    if (s->mode != RAW) return;
    // Raw bytes read past the trailer go back to the input, to be detected again.
    size_t left = s->d.len - s->dpos;
    if (left) {
        size_t pending = s->in_len - s->in_pos;
        GROW(s->in, s->in_cap, left + pending, left + pending);
        memmove(s->in + left, s->in + s->in_pos, pending);
        memcpy(s->in, s->d.data + s->dpos, left);
        s->in_pos = 0;
        s->in_len = left + pending;
        s->in_off -= left;
        s->released -= left;
        s->d.len = s->verified = s->dpos;
    }
    s->mode = DETECT;
}
