#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "rlpipe: fatal: out of memory allocating %zu bytes\n", n);
        abort();
    }
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "rlpipe: fatal: out of memory growing a buffer to %zu bytes\n", n);
        abort();
    }
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

size_t grow_cap(size_t cap, size_t need, size_t first, size_t elem) {
    if (need <= cap && cap) return cap;
    size_t c = cap ? cap : (first ? first : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2) return 0;
        c *= 2;
    }
    return elem && c > SIZE_MAX / elem ? 0 : c;
}

int grow_array(void *array, size_t *cap, size_t need, size_t first, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = grow_cap(*cap, need, first, elem);
    if (!c) return -1;
    void *p;   // (copied, not cast: array is a T **)
    memcpy(&p, array, sizeof p);
    p = xrealloc(p, c * elem);
    memcpy(array, &p, sizeof p);
    *cap = c;
    return 0;
}

void grow_refused(const char *file, int line, size_t need, size_t elem) {
    fprintf(stderr, "rlpipe: fatal: %s:%d: an array of %zu elements of %zu bytes is larger than memory can be\n", file,
            line, need, elem);
    abort();
}

void sbuf_reserve(sbuf *b, size_t extra) {
    // (need saturates: SIZE_MAX bytes are refused)
    GROW(b->data, b->cap, extra > SIZE_MAX - b->len ? SIZE_MAX : b->len + extra, 256);
}

void sbuf_put(sbuf *b, const void *p, size_t n) {
    sbuf_reserve(b, n);
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

void sbuf_putc(sbuf *b, uint8_t c) {
    sbuf_reserve(b, 1);
    b->data[b->len++] = c;
}

void sbuf_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sbuf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sbuf_free(sbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

int err_set(rl_err *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

size_t utf8_valid_len(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        // ASCII fast path: eight bytes at a time while no high bit is set.
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; min = 0x80; }
        else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; min = 0x800; }
        else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; min = 0x10000; }
        else return i;
        if (i + len > n) return i;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += len;
    }
    return n;
}

int utf8_valid(const uint8_t *p, size_t n) { return utf8_valid_len(p, n) == n; }

// The length of the well-formed prefix of a sequence starting at p[0] (at
// most n bytes): the sequence's length when complete, else the bytes that
// could still begin one (at least 1), with *ok saying which.
static size_t utf8_prefix(const uint8_t *p, size_t n, int *ok) {
    uint8_t c = p[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xbf;   // the range of the second byte
    if (c < 0x80) len = 1;
    else if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        *ok = 0;
        return 1;
    }
    size_t k = 1;
    for (; k < len && k < n; k++) {
        uint8_t b = p[k];
        if (k == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) break;
    }
    *ok = k == len;
    return k;
}

void utf8_lossy(const uint8_t *p, size_t n, sbuf *out) {
    size_t i = 0;
    while (i < n) {
        int ok;
        size_t k = utf8_prefix(p + i, n - i, &ok);
        if (ok) sbuf_put(out, p + i, k);
        else sbuf_put(out, "\xEF\xBF\xBD", 3);
        i += k;
    }
}

int read_whole_file(const char *path, size_t max, sbuf *out, rl_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC), saved;
    if (fd < 0) {
        saved = errno;
        err_set(err, "cannot open: %s: %s", path, strerror(saved));
        errno = saved;
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb)) {
        saved = errno;
        err_set(err, "cannot stat: %s: %s", path, strerror(saved));
        goto fail;
    }
    if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max) {
        saved = EFBIG;
        err_set(err, "%s: %lld bytes, more than the %zu allowed", path, (long long)sb.st_size, max);
        goto fail;
    }
    size_t start = out->len;
    for (;;) {                                   // not trusting st_size: the file may change
        sbuf_reserve(out, 65536);
        ssize_t r = read(fd, out->data + out->len, out->cap - out->len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            saved = errno;
            err_set(err, "cannot read: %s: %s", path, strerror(saved));
            goto fail;
        }
        if (r == 0) break;
        out->len += (size_t)r;
        if (out->len - start > max) {
            saved = EFBIG;
            err_set(err, "%s: more than the %zu bytes allowed", path, max);
            goto fail;
        }
    }
    close(fd);
    sbuf_reserve(out, 1);
    out->data[out->len] = 0;
    return 0;
fail:
    close(fd);
    errno = saved;
    return -1;
}

int path_parent(const char *path, char *out, size_t size) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;                  // "a/b/" is "a/b"
    while (n > 0 && path[n - 1] != '/') n--;                  // drop the last name
    while (n > 1 && path[n - 1] == '/') n--;                  // and the slashes before it
    const char *dir = n == 0 ? "." : path;
    if (n == 0) n = 1;
    if (n >= size) return -1;
    memcpy(out, dir, n);
    out[n] = 0;
    return 0;
}

int fd_write_all(int fd, const void *p, size_t n) {
    const uint8_t *c = p;
    while (n) {
        ssize_t w = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int write_file_sync(const char *path, const void *p, size_t n, rl_err *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(err, "cannot create: %s: %s", path, strerror(errno));
    const char *what = NULL;
    if (fd_write_all(fd, p, n)) what = "write";
    else if (fsync(fd)) what = "fsync";
    int e = errno;
    if (close(fd) && !what) {
        what = "close";
        e = errno;
    }
    if (!what) return 0;
    unlink(path);
    return err_set(err, "cannot %s: %s: %s", what, path, strerror(e));
}

char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir), k = strlen(name), at = n;
    char *p = xmalloc(n + k + 2);
    memcpy(p, dir, n);
    if (n && dir[n - 1] != '/') p[at++] = '/';
    memcpy(p + at, name, k + 1);
    return p;
}

const char *fmt_bytes(uint64_t n, char *buf, size_t size) {
    if (n < 1000) snprintf(buf, size, "%llu B", (unsigned long long)n);
    else if (n < 1000000) snprintf(buf, size, "%.1f kB", (double)n / 1e3);
    else if (n < 1000000000) snprintf(buf, size, "%.1f MB", (double)n / 1e6);
    else snprintf(buf, size, "%.2f GB", (double)n / 1e9);
    return buf;
}
