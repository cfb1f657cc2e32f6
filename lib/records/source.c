#include "records/source.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/jsonl.h"

struct src {
    recr_t *r;
    jsonl_t *j;
};

// Up to size bytes at the start of what fd will read next, left unread:
// the count, 0 at end of input, -1 if fd cannot be looked at (a terminal).
static ssize_t peek(int fd, uint8_t *buf, size_t size) {
    struct stat st;
    if (fstat(fd, &st)) return -1;
    if (S_ISREG(st.st_mode)) {
        off_t at = lseek(fd, 0, SEEK_CUR);
        return at < 0 ? -1 : pread(fd, buf, size, at);
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    while (poll(&pf, 1, -1) < 0)
        if (errno != EINTR) return -1;
    if (S_ISSOCK(st.st_mode)) return recv(fd, buf, size, MSG_PEEK);
    if (!S_ISFIFO(st.st_mode)) return -1;
    int p[2];   // tee copies what the pipe holds into p without consuming it
    if (pipe(p)) return -1;
    ssize_t n = tee(fd, p[1], size, SPLICE_F_NONBLOCK);
    if (n > 0) n = read(p[0], buf, (size_t)n);
    close(p[0]);
    close(p[1]);
    return n;
}

// 1 if path holds JSON lines: its first byte that is not white space is '{'.
static int looks_like_jsonl(const char *path) {
    int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
    if (fd < 0) return 0;   // the reader's open reports why
    uint8_t buf[256];
    ssize_t n = peek(fd, buf, sizeof buf);
    if (fd) close(fd);
    if (n <= 0) return 1;   // empty, or a terminal: someone typing JSON
    for (ssize_t i = 0; i < n; i++)
        if (!buf[i] || !strchr(" \t\r\n", buf[i])) return buf[i] == '{';
    return 1;
}

src_t *src_open(const char *path, int jsonl, const rec_limits *lim, rl_err *err) {
    if (jsonl == SRC_DETECT) jsonl = looks_like_jsonl(path);
    src_t *s = xmalloc(sizeof *s);
    s->r = NULL;
    s->j = NULL;
    if (jsonl) s->j = jsonl_open(path, err);
    else s->r = recr_open(path, lim, err);
    if (!s->r && !s->j) { free(s); return NULL; }
    return s;
}

void src_close(src_t *s) {
    if (!s) return;
    recr_close(s->r);
    jsonl_close(s->j);
    free(s);
}

recr_event src_next(src_t *s, rec_t *out) { return s->r ? recr_next(s->r, out) : jsonl_next(s->j, out); }
const char *src_error(const src_t *s) { return s->r ? recr_error(s->r) : jsonl_error(s->j); }
uint64_t src_bytes_in(const src_t *s) { return s->r ? recr_bytes_in(s->r) : jsonl_bytes_in(s->j); }
int src_would_block(const src_t *s) { return s->r ? recr_would_block(s->r) : jsonl_would_block(s->j); }

const char *src_where(const src_t *s, char *buf, size_t size) {
    if (s->r) snprintf(buf, size, "%s record %llu", recr_name(s->r), (unsigned long long)recr_records(s->r) - 1);
    else snprintf(buf, size, "%s line %llu", jsonl_name(s->j), (unsigned long long)jsonl_line(s->j));
    return buf;
}
