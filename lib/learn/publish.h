// publish.h — the versions a training run publishes (rl-learn): the model it
// starts from (CKPT/latest with AdamW's state for --resume, else the initial
// model, written first as the version it has), a version after every step
// (written while the next step runs, unless data-parallel), each step's
// metrics line once its version is on the disk, and AdamW's state put into
// the last version at the end (--state-every). Rank 0 writes; the other
// ranks send it their parts of AdamW's moments.
#ifndef RLPIPE_PUBLISH_H
#define RLPIPE_PUBLISH_H

#include <stdint.h>

#include "checkpoint/hfweights.h"
#include "learn/ckpt_writer.h"
#include "learn/learner.h"
#include "model/backend.h"
#include "parallel/dist.h"

typedef struct {
    const char *out;              // CKPT, the checkpoint root
    const char *init, *config;    // the initial model (one of them), without resume
    uint64_t seed;                // config: the random weights' seed ...
    double init_std;              // ... and standard deviation
    int resume, no_skip;          // continue from CKPT/latest; then train on the records it consumed too
    int keep;                     // versions kept (0: all) ...
    uint64_t keep_every;          // ... and every multiple of this
    uint64_t state_every;         // AdamW's state in versions that are multiples of it (and the last)
    hfw_write_opts save;          // the weights' dtype and shard size
    // LoRA (lora not NULL): adapters of this config train on the frozen base
    // (--init) held at base_dtype (f32 or bf16), initialised from seed, or
    // from the PEFT adapter in directory `adapter` (whose config is then
    // lora's); each version holds the adapter (lora.h's files), and with
    // merged the merged model too. A --resume of a version holding an
    // adapter takes the base its adapter_config.json names.
    const lora_config *lora;
    const char *adapter;
    rl_dtype base_dtype;
    int merged;
    rl_device device;
    const char *metrics;          // the metrics file's name, for messages
    int quiet;                    // no line per step on standard error
    const char *tool;             // the name the line per step begins with
    // Hooks on rank 0: writing(ctx) before a version goes to the writer;
    // published(ctx, version, complete) once it is on the disk and its step
    // reported (complete: the newest version with AdamW's state), on the
    // writer's thread; failed(ctx, message) when a version written in the
    // background failed: it ends the process.
    void (*writing)(void *ctx);
    void (*published)(void *ctx, uint64_t version, uint64_t complete);
    void (*failed)(void *ctx, const char *message);
    void *ctx;
} pub_opts;

typedef struct {
    const pub_opts *o;
    const lrn_opts *lrn;     // what each version's state.json records
    model_t *m;
    uint64_t version, steps, skip;   // the model's version; steps taken since --init; records to skip
    uint64_t complete;       // the newest version written with AdamW's state
    int weights_only;        // the version being (or last) written has no AdamW state (--state-every)
    char from[4096];         // the model directory tokenizer files are copied from ("": none)
    double t0;               // when the run started (clock_now)
    dist_t *d;               // the ranks
    int dp, rank;            // data-parallel (dist_active); this rank (0 writes)
    size_t *parts;           // the optimizer's parts of the parameters over the ranks (dp)
    ckpt_writer *writer;     // rank 0: writes the versions
    int background;          // the writer works while the next step runs (not data-parallel)
    int metrics;             // the metrics file's descriptor, or -1
    lrn_metrics pending;     // the step the version being written ends (reported once it is out)
    int has_pending;
    double step_end;         // when that step ended
} publisher;

// Opens the publisher of rank dist_rank(d) (t0: when the run started); rank
// 0's has a writer. Its model comes with pub_start.
void pub_init(publisher *p, const pub_opts *o, const lrn_opts *lrn, dist_t *d, double t0);
// The model to train, with its training state: CKPT/latest's (--resume: p->skip
// records are then to be skipped), or the initial one, whose tokenizer (when
// its directory holds one) goes into *tok. 0, or -1 with err.
int pub_start(publisher *p, tokenizer **tok, rl_err *err);
// Writes version p->version, made by step m (NULL: the initial model): in the
// background unless data-parallel or the initial model, then done on return;
// without AdamW's state unless it is the initial model or a multiple of
// state_every (every rank decides alike). l (or NULL) counts the records
// consumed. Every rank calls it. 0, or -1 with err.
int pub_save(publisher *p, learner_t *l, const lrn_metrics *m, rl_err *err);
// --resume with a metrics file: the lines of the versions after p->version
// (weights-only versions, --state-every, whose steps are taken again) and a
// last line left unfinished are cut off, so that the file ends as an
// uninterrupted run's would at this version. A file that is not a regular
// one is left as it is. *dropped: the lines cut off. 0, or -1 with err.
int pub_trim_metrics(publisher *p, size_t *dropped, rl_err *err);
// Waits for the version being written: 0, or -1 with the error of a failed write.
int pub_wait(publisher *p, rl_err *err);
// At the end of a run whose last version was written without AdamW's state,
// the state goes into it (the model has not changed since), so that it is
// the one --resume continues from. Every rank calls it. 0, or -1 with err.
int pub_complete_last(publisher *p, rl_err *err);
// Waits for the writer, then frees it, the model and the parts.
void pub_free(publisher *p);

#endif
