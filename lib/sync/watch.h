// watch.h — following a checkpoint root (checkpoint.h) while its writer adds
// versions, for rl-sync --watch: the newest version whose weights are written
// (the root's `published`, or `latest` when that is newer or alone), so that
// the weights go out while the writer still writes the optimizer state. The
// two files are read again whenever inotify reports that one may have been
// replaced (renamed onto: IN_MOVED_TO; created or written in place:
// IN_CREATE, IN_CLOSE_WRITE), and in any case after every poll interval: a
// safety net for filesystems that report nothing (NFS, some container mounts)
// and for a root that does not exist yet, whose inotify watch is added once
// it does.
#ifndef RLPIPE_WATCH_H
#define RLPIPE_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct watch watch_t;

// Follows root, which may not exist yet. NULL with err when root is a model
// directory (model.safetensors and no `latest`) or an adapter's (push_lora.h):
// there is nothing to follow.
watch_t *watch_open(const char *root, rl_err *err);
void watch_close(watch_t *w);

// The newest version whose weights are written now: 1 with its directory in
// dir (size bytes) and *version (ckpt_resolve_published's); 0 when the root
// has neither `published` nor `latest` yet; -1 with err (one names no
// directory, its state.json is unreadable).
int watch_newest(watch_t *w, char *dir, size_t size, uint64_t *version, rl_err *err);

// Waits until root/published or root/latest may have changed or `timeout` seconds have passed
// (0), or until one of fds[0..nfds) is readable (1; the caller reads it).
int watch_wait(watch_t *w, double timeout, const int *fds, int nfds);

#endif
