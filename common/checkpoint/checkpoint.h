// checkpoint.h — checkpoint directories (doc/design.md §3): a root DIR holding
// version directories DIR/v000017/ and a file DIR/latest naming the newest
// complete one. Every tool that takes "a model directory or a checkpoint"
// resolves it here. How a version is published is here too; what goes into
// it (a model, its optimizer state) is the learner's (learn/ckpt_model.h).
#ifndef RLPIPE_CHECKPOINT_H
#define RLPIPE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/hfweights.h"
#include "util.h"

// Resolves dir, a model directory or a checkpoint root whose file "latest"
// names the version directory, into path (size bytes). *version is the
// integer "version" of the resolved directory's state.json, or else the
// number of a "latest" name v<digits>, or else 0. 0, or -1 with err.
int ckpt_resolve(const char *dir, char *path, size_t size, uint64_t *version, rl_err *err);
// The non-negative integer `key` of dir/state.json: 1 found, 0 no state.json
// or no such key, -1 with err (not JSON, not such an integer).
int ckpt_state_uint(const char *dir, const char *key, uint64_t *value, rl_err *err);

typedef struct {
    const char *root;          // checkpoint root (created if missing; its parent must exist)
    uint64_t version;          // written as root/v%06llu (more digits when it needs them)
    const char *state_json;    // text of state.json: a JSON object whose "version" equals version
    const char *copy_from;     // a model directory, or NULL: its tokenizer.json (required), and
                               // tokenizer_config.json, special_tokens_map.json,
                               // generation_config.json, chat_template.jinja when
                               // present, are copied in
    int keep;                  // > 0: afterwards, of the versions up to this one keep the newest
                               // `keep` and remove the older; 0: keep all
    uint64_t keep_every;       // > 0: with keep > 0, versions that are multiples of it stay too
    hfw_write_opts save;       // the weights' dtype (f32 when zero) and shard size (hfweights.h),
                               // for the writer of the model (learn/ckpt_model.h)
} ckpt_write_opts;

// Writes the files of one version into the empty directory dir, each fsynced: 0, or -1 with err.
typedef int (*ckpt_fill_fn)(const char *dir, void *ctx, rl_err *err);

// Publishes the version directory root/vNNNNNN: what fill(dir, ctx) writes,
// then state.json and the copied files. Crash-safe against a kill at any
// moment: everything is written under root/.tmp-vNNNNNN-<pid>, each file and
// the directory fsynced, renamed to root/vNNNNNN, root fsynced; then
// root/latest is replaced by a rename of root/.latest.tmp-<pid> ("vNNNNNN\n",
// fsynced) and root fsynced again. Old versions are renamed to a .tmp- name
// before they are deleted, so a directory named v<digits> is always complete.
//
// One writer per root: root/.lock is held (flock) during the call, and a
// second writer fails. Entries root/.tmp-* and root/.latest.tmp-* that a
// killed writer left are removed first. The version must be newer than the one
// root/latest names: a written version is never replaced. A vNNNNNN newer than
// latest is a leftover of a writer killed between its two renames, and is
// replaced. 0, or -1 with err naming the path and the reason.
int ckpt_publish(const ckpt_write_opts *o, ckpt_fill_fn fill, void *ctx, rl_err *err);

// Finishes what a writer killed after publishing a version left undone: the
// temporaries removed, and of the versions up to latest the newest keep (and
// the multiples of keep_every) kept, as ckpt_write would have (keep 0: all).
// Holds root/.lock meanwhile. For a run that resumes. 0, or -1 with err.
int ckpt_tidy(const char *root, int keep, uint64_t keep_every, rl_err *err);

// The versions in root: the numbers of the directories named as ckpt_write
// names them (v%06llu), ascending, in *versions (malloc'd, *n entries; NULL
// when none). Other names are ignored. 0, or -1 with err.
int ckpt_versions(const char *root, uint64_t **versions, size_t *n, rl_err *err);

#endif
