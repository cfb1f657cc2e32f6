// checkpoint.h — checkpoint directories (doc/design.md §3): a root DIR holding
// version directories DIR/v000017/, a file DIR/latest naming the newest
// complete one and a file DIR/published naming the newest whose weights are
// written (latest, or a newer one: while its optimizer state is written, or
// written without it). Every tool that takes "a model directory or a
// checkpoint" resolves it here. How a version is published is here too; what
// goes into it (a model, its optimizer state) is the learner's
// (learn/ckpt_model.h).
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
// The same for the newest version whose weights are written: the version
// root/published names when it is newer than latest's, else as ckpt_resolve
// (what a sampler follows: rl-sync --watch). 0, or -1 with err.
int ckpt_resolve_published(const char *root, char *path, size_t size, uint64_t *version, rl_err *err);

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
    int weights_only;          // 1: step 1 of ckpt_publish alone (the weights published, latest
                               // left at the newest complete version; ckpt_complete may finish it)
    int lora;                  // the model trains LoRA adapters: a version holds the adapter's files
                               // (learn/ckpt_model.h), F32 whatever save.dtype says ...
    int merged;                // ... and with merged the merged model's config.json and weights too
} ckpt_write_opts;

// Writes files of one version into the empty directory dir, each fsynced: 0, or -1 with err.
typedef int (*ckpt_fill_fn)(const char *dir, void *ctx, rl_err *err);

// Publishes the version directory root/vNNNNNN in two steps, so that a sampler
// can take the weights while the rest of the version is still being written:
//
// 1. What fill(dir, ctx) writes (the model: what a sampler loads), then
//    state.json and the copied files, under root/.tmp-vNNNNNN-<pid>, each file
//    and the directory fsynced; renamed to root/vNNNNNN, root fsynced; then
//    root/published names it ("vNNNNNN\n", written as root/.published.tmp-<pid>,
//    fsynced, renamed, root fsynced).
// 2. What late(dir, ctx) writes (the optimizer state: what only a resume
//    needs; NULL: nothing), under root/.tmp-vNNNNNN-late-<pid>, each file moved
//    into root/vNNNNNN, which is fsynced; then root/latest names the version
//    the same way as published. The version is complete: it resumes. When
//    this step fails, the version is removed again and published points back
//    at latest.
//
// With o->weights_only, step 2 is left out: root/published names the version,
// root/latest still names the newest complete one, and the version holds the
// weights only until ckpt_complete writes the rest (a run that saves its
// optimizer state only now and then: a sampler follows every version, a
// resume continues from the newest complete one).
//
// A kill at any moment leaves the complete versions intact. Old versions are
// renamed to a .tmp- name before they are deleted, so a directory named
// v<digits> that latest names, or an older one, is always complete (or
// weights-only: then it holds every file but the optimizer state); one newer
// than latest holds at least the weights (a weights-only version, or the one
// published names while its optimizer state is written), or is a writer's
// leftover (a resume removes them all: ckpt_tidy).
//
// One writer per root: root/.lock is held (flock) during the call, and a
// second writer fails. Entries root/.tmp-*, root/.latest.tmp-* and
// root/.published.tmp-* that a killed writer left are removed first. The
// version must be newer than the one root/latest names: a complete version is
// never replaced. A vNNNNNN newer than latest is a leftover of a writer killed
// before it finished, or a weights-only version, and is replaced. Afterwards
// (o->keep > 0), of the versions up to this one the newest keep stay, the
// multiples of keep_every, and the one latest names; the others go. 0, or -1
// with err naming the path and the reason.
int ckpt_publish(const ckpt_write_opts *o, ckpt_fill_fn fill, ckpt_fill_fn late, void *ctx, rl_err *err);
// Step 2 of ckpt_publish for version o->version, which a weights_only write
// published (root/published names it, and it is newer than latest): what
// late writes is moved in, root/latest names it, and old versions go as
// o->keep says. Its other files stay as they are (o->state_json and
// copy_from are not used). 0, or -1 with err.
int ckpt_complete(const ckpt_write_opts *o, ckpt_fill_fn late, void *ctx, rl_err *err);

// Finishes what a killed writer left undone, for a run that resumes from
// latest: the temporaries removed; the versions newer than latest (a version
// whose optimizer state was never written, or weights-only ones) removed and
// published set back to latest, so that no sampler is given weights the
// resumed run did not make; and of the versions up to latest the newest keep (and the multiples of
// keep_every) kept, as ckpt_write would have (keep 0: all). Holds root/.lock
// meanwhile. 0, or -1 with err.
int ckpt_tidy(const char *root, int keep, uint64_t keep_every, rl_err *err);

// The versions in root: the numbers of the directories named as ckpt_write
// names them (v%06llu), ascending, in *versions (malloc'd, *n entries; NULL
// when none). Other names are ignored. 0, or -1 with err.
int ckpt_versions(const char *root, uint64_t **versions, size_t *n, rl_err *err);

#endif
