// tmpdir.h — temporary directories for unit tests: made under $TMPDIR (or
// /tmp) with a prefix, and removed with everything in them.
#ifndef RLPIPE_TEST_TMPDIR_H
#define RLPIPE_TEST_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static inline void rm_rf(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

// buf receives "$TMPDIR/<prefix>.XXXXXX" made by mkdtemp; NULL on failure (errno set).
static inline char *tmpdir_named(char *buf, size_t size, const char *prefix) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, size, "%s/%s.XXXXXX", t && *t ? t : "/tmp", prefix);
    return mkdtemp(buf);
}

// dir/name in one of 8 buffers used in turn: a few such paths may be held at once.
static inline const char *tmpdir_file(const char *dir, const char *name) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    return p;
}

#endif
