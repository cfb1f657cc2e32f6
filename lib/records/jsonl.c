#include "records/jsonl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/fields.h"
#include "records/json.h"

struct jsonl {
    FILE *f;
    int own;
    char *name;
    char *line;
    size_t cap;
    uint64_t lineno, since_header, bytes;
    int is_regular, failed;
    rl_err err;
};

jsonl_t *jsonl_open(const char *path, rl_err *err) {
    FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
    if (!f) {
        err_set(err, "cannot open: %s: %s", path, strerror(errno));
        return NULL;
    }
    jsonl_t *j = xmalloc(sizeof *j);
    memset(j, 0, sizeof *j);
    j->f = f;
    j->own = f != stdin;
    j->name = xstrdup(f == stdin ? "(stdin)" : path);
    struct stat st;
    j->is_regular = !fstat(fileno(f), &st) && S_ISREG(st.st_mode);
    return j;
}

void jsonl_close(jsonl_t *j) {
    if (!j) return;
    if (j->own) fclose(j->f);
    free(j->line);
    free(j->name);
    free(j);
}

const char *jsonl_error(const jsonl_t *j) { return j->err.msg; }
const char *jsonl_name(const jsonl_t *j) { return j->name; }
uint64_t jsonl_line(const jsonl_t *j) { return j->lineno; }
uint64_t jsonl_bytes_in(const jsonl_t *j) { return j->bytes; }

int jsonl_would_block(const jsonl_t *j) {
    // glibc's FILE buffer: _IO_read_ptr == _IO_read_end means the next read goes to the descriptor.
    return !j->is_regular && j->f->_IO_read_ptr >= j->f->_IO_read_end;
}

static recr_event fail(jsonl_t *j, const char *what) {
    err_set(&j->err, "%s: %s line %llu", what, j->name, (unsigned long long)j->lineno);
    j->failed = 1;
    return RECR_ERROR;
}

recr_event jsonl_next(jsonl_t *j, rec_t *out) {
    if (j->failed) return RECR_ERROR;
    for (;;) {
        errno = 0;
        ssize_t n = getline(&j->line, &j->cap, j->f);
        if (n < 0) {
            if (ferror(j->f)) {
                char what[300];
                snprintf(what, sizeof what, "read error: %s", strerror(errno));
                return fail(j, what);
            }
            return RECR_END;
        }
        j->lineno++;
        j->bytes += (uint64_t)n;
        size_t k = 0;
        while (k < (size_t)n && strchr(" \t\r\n", j->line[k])) k++;
        if (k == (size_t)n) continue;
        if (memchr(j->line, 0, (size_t)n)) return fail(j, "NUL byte in a JSON line");
        rl_err e;
        if (json_to_rec(j->line, (size_t)n, out, &e)) return fail(j, e.msg);
        if (rec_has(out, "rlpipe")) {
            uint64_t v;
            if (rec_get_uint(out, "rlpipe", &v) != REC_OK || v != 1)
                return fail(j, "header line: \"rlpipe\" must be 1 (stream version)");
            j->since_header = 0;
            return RECR_HEADER;
        }
        if (rec_has(out, "rlpipe_end")) {
            uint64_t count;
            if (rec_get_uint(out, "count", &count) != REC_OK)
                return fail(j, "trailer line: \"count\" missing or not an unsigned integer");
            if (count != j->since_header) {
                char what[200];
                snprintf(what, sizeof what, "trailer count mismatch: the trailer line says %llu records, %llu came before it",
                         (unsigned long long)count, (unsigned long long)j->since_header);
                return fail(j, what);
            }
            return RECR_TRAILER;
        }
        if (fld_check(out, &e)) return fail(j, e.msg);
        j->since_header++;
        return RECR_RECORD;
    }
}
