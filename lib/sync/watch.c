// watch.c — a checkpoint root's `published` and `latest`, re-read on inotify
// events and every poll interval (watch.h).
#include "sync/watch.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hfweights.h"
#include "clock.h"
#include "sync/push_lora.h"

#define WATCH_MAX_FDS 8

struct watch {
    char *root;
    int fd;    // inotify, or -1 (not available: polling only)
    int wd;    // the root's watch, or -1 (none yet, or the root was removed or moved)
};

// 1 when root holds `published` or `latest`: a checkpoint root with a version.
static int has_pointer(const char *root) {
    char path[4200];
    snprintf(path, sizeof path, "%s/published", root);
    if (access(path, F_OK) == 0) return 1;
    snprintf(path, sizeof path, "%s/latest", root);
    return access(path, F_OK) == 0;
}

watch_t *watch_open(const char *root, rl_err *err) {
    if (!has_pointer(root) && (hfw_exists(root) || push_lora_is_adapter(root))) {
        err_set(err, "%s is a %s directory, not a checkpoint root: --watch follows the versions that a root's "
                "'published' and 'latest' name", root, hfw_exists(root) ? "model" : "LoRA adapter");
        return NULL;
    }
    watch_t *w = xmalloc(sizeof *w);
    w->root = xstrdup(root);
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    w->wd = -1;
    return w;
}

void watch_close(watch_t *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    free(w->root);
    free(w);
}

int watch_newest(watch_t *w, char *dir, size_t size, uint64_t *version, rl_err *err) {
    if (w->fd >= 0 && w->wd < 0)   // (again) after the root appeared or was replaced
        w->wd = inotify_add_watch(w->fd, w->root, IN_MOVED_TO | IN_CREATE | IN_CLOSE_WRITE | IN_DELETE_SELF |
                                                      IN_MOVE_SELF | IN_ONLYDIR);
    if (!has_pointer(w->root)) return 0;
    return ckpt_resolve_published(w->root, dir, size, version, err) ? -1 : 1;
}

// Reads the pending events: 1 if one may concern `published` or `latest`.
static int drain(watch_t *w) {
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    int relevant = 0;
    for (;;) {
        ssize_t n = read(w->fd, buf, sizeof buf);
        if (n <= 0) return relevant;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            if (e->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_Q_OVERFLOW)) {
                if (e->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) w->wd = -1;
                relevant = 1;
            } else if (e->len && (!strcmp(e->name, "published") || !strcmp(e->name, "latest"))) {
                relevant = 1;
            }
            p += sizeof *e + e->len;
        }
    }
}

int watch_wait(watch_t *w, double timeout, const int *fds, int nfds) {
    struct pollfd p[WATCH_MAX_FDS + 1];
    if (nfds > WATCH_MAX_FDS) nfds = WATCH_MAX_FDS;
    for (int i = 0; i < nfds; i++) p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    p[nfds] = (struct pollfd){.fd = w->fd, .events = POLLIN};
    double deadline = clock_now() + timeout;
    for (;;) {
        double left = ceil((deadline - clock_now()) * 1000);
        int ms = left <= 0 ? 0 : left >= INT_MAX ? INT_MAX : (int)left;
        int r = poll(p, (nfds_t)nfds + (w->fd >= 0), ms);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;   // the interval is over (or poll failed: the caller polls again)
        for (int i = 0; i < nfds; i++)
            if (p[i].revents) return 1;
        if (drain(w)) return 0;
    }
}
