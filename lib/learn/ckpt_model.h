// ckpt_model.h — what rl-learn puts in a checkpoint version: the model's
// weights and config, its AdamW state, and state.json saying how far the run
// got and with which options. How a version is published (atomically, one
// writer per root) is checkpoint/checkpoint.h.
#ifndef RLPIPE_CKPT_MODEL_H
#define RLPIPE_CKPT_MODEL_H

#include <stdint.h>

#include "checkpoint/checkpoint.h"
#include "parallel/dist.h"
#include "learn/learner.h"
#include "model/model.h"
#include "util.h"

// Publishes the version directory root/vNNNNNN (ckpt_publish): first
// config.json and the weights (model_save_as at o->save: model.safetensors,
// or shards and their index), state.json and the copied files, which
// root/published then names; then optimizer.safetensors when the model has
// training state (tensors "<param>.exp_avg" and "<param>.exp_avg_sq", F32,
// the parameter's shape, and when the weights are saved at 16 bits the F32
// parameters "<param>" too, so that a resume continues from them exactly),
// and root/latest names the version. With o->weights_only, no
// optimizer.safetensors: the version is published, latest stays where it was
// (checkpoint.h), and ckpt_complete_state may finish it later. 0, or -1 with
// err naming the path and the reason.
int ckpt_write(const ckpt_write_opts *o, const model_t *m, rl_err *err);
// The same on rank 0 of a sharded optimizer (zero.h): the moments of every
// rank's part go into optimizer.safetensors, gathered while the others call
// zero_gather_moments.
int ckpt_write_zero(const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts, rl_err *err);

// The same in two halves, so that a version can be written while the model
// trains on (ckpt_writer.h): a snapshot holds host copies of what a version
// holds (the config, the parameters, AdamW's moments), up to 3 x 4 bytes a
// parameter, kept from one snapshot to the next; or it reads them where the
// model keeps them in host memory (model_host_params, model_host_moments).
typedef struct ckpt_snap ckpt_snap;
ckpt_snap *ckpt_snap_new(void);
void ckpt_snap_free(ckpt_snap *s);
// Takes m into s (d, parts: rank 0 of a sharded optimizer, gathering the
// other ranks' parts of the moments as ckpt_write_zero does; else NULL): the
// parameters, and AdamW's moments unless weights_only (then no rank gathers).
// They are copied, but with borrow where the model keeps them in host
// memory (the moments: all of them, and d NULL): then s reads them there,
// and they must not change until s is written (or until its release
// callback, below). The snapshot names m's tensors: m must outlive it. 0,
// or -1 with err.
int ckpt_snap_take(ckpt_snap *s, const model_t *m, dist_t *d, const size_t *parts, int weights_only, int borrow,
                   rl_err *err);
// 1 when a version written with o that holds AdamW's state holds the F32
// parameters a second time, in optimizer.safetensors: beside 16-bit weights
// (a LoRA version's adapter is F32 already).
int ckpt_params_again(const ckpt_write_opts *o);
// 1 when s reads the model's parameters or moments in place (ckpt_snap_take's borrow).
int ckpt_snap_borrowed(const ckpt_snap *s);
// fn(ctx) is called by ckpt_snap_write (on its thread) once the model's
// memory is read no more: after the weights are written, unless the
// optimizer file reads borrowed moments, or the parameters again beside
// 16-bit weights (then the end of the write releases them).
void ckpt_snap_on_release(ckpt_snap *s, void (*fn)(void *ctx), void *ctx);
// Publishes s as ckpt_write publishes a model. Touches no model but for the
// parameters s borrowed, which it only reads, so it may run on another
// thread than the one training. 0, or -1 with err.
int ckpt_snap_write(const ckpt_write_opts *o, const ckpt_snap *s, rl_err *err);

// Completes version o->version, published weights-only, with the optimizer
// state of s (ckpt_complete): then latest names it. 0, or -1 with err.
int ckpt_snap_complete(const ckpt_write_opts *o, const ckpt_snap *s, rl_err *err);
// The same from m (which has not changed since the version was written), in
// a snapshot of its own; d, parts as ckpt_write_zero (the other ranks call
// zero_gather_moments), or NULL. 0, or -1 with err.
int ckpt_complete_state(const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts, rl_err *err);

// Loads dir/optimizer.safetensors (in a version directory) into the model's
// AdamW moments, and its parameters when the file has them (model_train_init
// must have been called). Every tensor must be
// present with the parameter's shape, and no other; on error the moments are
// unchanged. 0, or -1 with err naming the file and the tensor.
int ckpt_read_optimizer(const char *dir, model_t *m, rl_err *err);

// The state.json of the version `version` (one JSON object and a newline,
// appended to out): the version, the optimizer steps taken since --init and
// the input records consumed (what --resume continues from), the producer,
// and the options of the loss and the optimizer.
void ckpt_state_json(sbuf *out, const lrn_opts *o, uint64_t version, uint64_t steps, uint64_t records, uint64_t seed);

#endif
