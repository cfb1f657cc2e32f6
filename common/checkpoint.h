// checkpoint.h — checkpoint directories (DESIGN §3): a root DIR holding
// version directories DIR/v000017/ and a file DIR/latest naming the newest
// complete one. Every tool that takes "a model directory or a checkpoint"
// resolves it here.
#ifndef RLPIPE_CHECKPOINT_H
#define RLPIPE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

// Resolves dir, a model directory or a checkpoint root whose file "latest"
// names the version directory, into path (size bytes). *version is the
// integer "version" of the resolved directory's state.json, or else the
// number of a "latest" name v<digits>, or else 0. 0, or -1 with err.
int ckpt_resolve(const char *dir, char *path, size_t size, uint64_t *version, rl_err *err);

#endif
