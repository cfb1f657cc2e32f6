#include "fuzz_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef FUZZ_ROOT
#define FUZZ_ROOT "."
#endif

// A harness has no one to report a failing system call to: it stops at once.
#define fz_check(ok, what)                                                                       \
    do {                                                                                         \
        if (!(ok)) {                                                                             \
            fprintf(stderr, "fuzz: %s:%d: %s: %s\n", __FILE__, __LINE__, what, strerror(errno)); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

int fz_memfd(const char *name) {
    int fd = memfd_create(name, MFD_CLOEXEC);
    fz_check(fd >= 0, "memfd_create");
    return fd;
}

const char *fz_fill(int fd, const uint8_t *p, size_t n) {
    static __thread char path[64];
    fz_check(!ftruncate(fd, 0), "ftruncate");
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(fd, p + done, n - done, (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        fz_check(w > 0, "pwrite");
        done += (size_t)w;
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return path;
}

static char scratch[4096];

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_scratch(void) {
    if (scratch[0]) nftw(scratch, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

const char *fz_dir(void) {
    if (!scratch[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/rlpipe-fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        fz_check(mkdtemp(scratch), "mkdtemp");
        atexit(remove_scratch);
    }
    return scratch;
}

void fz_write(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    fz_check(fd >= 0, path);
    fz_check(fz_fill(fd, p, n) != NULL, path);
    fz_check(!close(fd), path);
}

void fz_remove(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fz_check(!unlink(path) || errno == ENOENT, path);
}

const char *fz_root(void) {
    const char *r = getenv("RLPIPE_ROOT");
    return r && *r ? r : FUZZ_ROOT;
}

int fz_split(const uint8_t *p, size_t n, uint8_t sep, const uint8_t **a, size_t *na, const uint8_t **b,
             size_t *nb) {
    const uint8_t *s = n ? memchr(p, sep, n) : NULL;
    *a = p;
    *na = s ? (size_t)(s - p) : n;
    *b = s ? s + 1 : p + n;
    *nb = s ? n - *na - 1 : 0;
    return s != NULL;
}
