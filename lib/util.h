// util.h — allocation that cannot fail silently, a growable byte buffer, and
// the error-message carrier that library functions fill instead of printing.
#ifndef RLPIPE_UTIL_H
#define RLPIPE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

#define RLPIPE_VERSION "0.1.0"

// Out of memory is not a data error: report where and abort.
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

// Arrays that grow: the capacity doubles (from first when it is 0) until it
// holds need elements, so that n pushes cost O(n) copies.
// grow_cap: the capacity an array of cap elements of elem bytes grows to so as
// to hold need (cap itself when it holds them already, first for an empty
// one); 0 only when that many elements of elem bytes would not fit in a size_t.
size_t grow_cap(size_t cap, size_t need, size_t first, size_t elem);
// grow_array: array is the address of a T * (elem = sizeof (T)) holding *cap
// elements, reallocated to grow_cap's capacity; the elements it held stay. 0,
// or -1 when the size would overflow (then nothing is changed). Out of memory
// aborts, as xrealloc does.
int grow_array(void *array, size_t *cap, size_t need, size_t first, size_t elem);
// Ends the process for a size that grow_cap refused, naming the call site.
_Noreturn void grow_refused(const char *file, int line, size_t need, size_t elem);
// GROW(a, cap, need, first): grow_array on the typed array a (cap a size_t);
// a size that would overflow is refused at the call site (file:line).
#define GROW(a, cap, need, first)                                                   \
    do {                                                                            \
        if (grow_array(&(a), &(cap), (need), (first), sizeof *(a)))                 \
            grow_refused(__FILE__, __LINE__, (need), sizeof *(a));                  \
    } while (0)
// GROW_CAP(cap, need, first, elem): grow_cap's capacity, for an array that
// another allocator holds (an arena); a size that would overflow is refused
// at the call site.
#define GROW_CAP(cap, need, first, elem)                                            \
    ({                                                                              \
        size_t grown_ = grow_cap((cap), (need), (first), (elem));                   \
        if (!grown_) grow_refused(__FILE__, __LINE__, (need), (elem));              \
        grown_;                                                                     \
    })

// A growable byte buffer: data[0..len) is valid, cap bytes are allocated.
typedef struct {
    uint8_t *data;
    size_t len, cap;
} sbuf;

void sbuf_reserve(sbuf *b, size_t extra);            // ensure cap >= len + extra
void sbuf_put(sbuf *b, const void *p, size_t n);
void sbuf_putc(sbuf *b, uint8_t c);
void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_free(sbuf *b);

// Library functions report failures by filling an rl_err and returning -1;
// tools print "<tool>: error: <msg>" and choose the exit status.
typedef struct {
    char msg[1024];
} rl_err;

int err_set(rl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));  // returns -1

// Reads the whole file at path into out (appended, followed by a NUL that len
// does not count); a file over max bytes is refused. 0, or -1 with err
// ("cannot open: PATH: why"), and errno as the failing call left it (ENOENT
// tells an absent file).
int read_whole_file(const char *path, size_t max, sbuf *out, rl_err *err);

// Writes all of p[0..n) to fd, retrying short writes and EINTR: 0, or -1 with errno.
int fd_write_all(int fd, const void *p, size_t n);
// Creates path (replacing a file there) holding p[0..n), fsynced and closed;
// a failed write leaves no file. 0, or -1 with err ("cannot write: PATH: why").
int write_file_sync(const char *path, const void *p, size_t n, rl_err *err);

// "1.2 MB", "345 kB": a size for messages and summaries (decimal units), into buf.
const char *fmt_bytes(uint64_t n, char *buf, size_t size);

// dir + "/" + name (one slash where dir ends with one), malloc'd.
char *path_join(const char *dir, const char *name);

// The directory that holds path, into out (size bytes): "a/b/c" and "a/b/c/"
// give "a/b", "c" gives ".", "/c" gives "/". -1 when it does not fit.
int path_parent(const char *path, char *out, size_t size);

// True if p[0..n) is well-formed UTF-8 (no overlongs, surrogates, or > U+10FFFF).
int utf8_valid(const uint8_t *p, size_t n);
// The length of the longest well-formed prefix of p[0..n): n when it all is,
// else the offset of the first byte that starts no well-formed sequence.
size_t utf8_valid_len(const uint8_t *p, size_t n);
// Appends p[0..n) to out with each maximal ill-formed subsequence replaced by
// U+FFFD, as Unicode recommends and Rust's String::from_utf8_lossy (hence
// Hugging Face's decode) does: "\xE2\x82" becomes one U+FFFD, "\xFF\xFF" two.
void utf8_lossy(const uint8_t *p, size_t n, sbuf *out);

#endif
