// fuzz_util.h — what the harnesses need around the library: the input as a
// file (the library's parsers take paths) without disk I/O, a scratch
// directory for parsers that read a directory, and the repository's files.
#ifndef RLPIPE_FUZZ_UTIL_H
#define RLPIPE_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

// An anonymous in-memory file (memfd); aborts if none can be made.
int fz_memfd(const char *name);
// Replaces fd's contents by p[0..n) and returns a path that opens them anew
// ("/proc/self/fd/N", valid until the next call for the same fd).
const char *fz_fill(int fd, const uint8_t *p, size_t n);

// A directory of this process's own, made on first use and removed with its
// files at exit (a crash leaves it in $TMPDIR: rlpipe-fuzz.XXXXXX).
const char *fz_dir(void);
// Writes dir/name holding p[0..n) (dir is fz_dir() or below it); aborts on failure.
void fz_write(const char *dir, const char *name, const void *p, size_t n);
// Removes dir/name if it is there.
void fz_remove(const char *dir, const char *name);

// The repository's root: $RLPIPE_ROOT, else the tree the harness was built from.
const char *fz_root(void);

// Where p[0..n) holds the byte sep: splits it there (*a before, *b after).
// 1 when found; 0 (all of it in *a, *b empty) when not.
int fz_split(const uint8_t *p, size_t n, uint8_t sep, const uint8_t **a, size_t *na, const uint8_t **b,
             size_t *nb);

#endif
