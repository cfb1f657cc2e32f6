// hfweights.h — a model's weights as Hugging Face keeps them in a directory:
// one file DIR/model.safetensors, or shards DIR/model-00001-of-00003.safetensors
// ... named by DIR/model.safetensors.index.json
//   {"metadata": {"total_size": <bytes of tensor data>}, "weight_map": {tensor: shard file}}.
// Read as transformers reads them (the single file first when both exist),
// and written as its save_pretrained writes them (max_shard_size: shards
// filled in tensor order, a tensor never split, the index's weight_map sorted).
#ifndef RLPIPE_HFWEIGHTS_H
#define RLPIPE_HFWEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/config.h"
#include "checkpoint/safetensors.h"
#include "dtype.h"
#include "util.h"

#define HFW_SINGLE "model.safetensors"
#define HFW_INDEX "model.safetensors.index.json"
#define HFW_DEFAULT_SHARD 5000000000ull   // transformers' default max_shard_size, "5GB"

typedef struct {
    char *where;             // the file the tensors were read from, or the index: for messages
    st_file **files;         // the one file, or each shard once
    size_t nfiles;
    const st_tensor **t;     // every tensor of every file, files in order
    size_t n;
    size_t *file_of;         // t[i] lies in files[file_of[i]]
} hfw_set;

// Opens DIR's weights, either form. An index is checked whole: a JSON object
// whose weight_map maps every tensor to a shard file name (no directories),
// each shard holding exactly the tensors mapped to it, none twice. Errors name
// the file and the tensor or key.
hfw_set *hfw_open(const char *dir, rl_err *err);
void hfw_close(hfw_set *s);
const st_tensor *hfw_find(const hfw_set *s, const char *name);
// The path of the file tensor t[i] lies in.
const char *hfw_file(const hfw_set *s, size_t i);
// 1 when DIR has weights in either form (a file of either name exists).
int hfw_exists(const char *dir);

typedef struct {
    rl_dtype dtype;              // DT_F32 (0), DT_BF16 or DT_F16
    uint64_t max_shard_bytes;    // 0: HFW_DEFAULT_SHARD; weights larger than this are sharded
} hfw_write_opts;

// Writes tensors (f32 in memory) into DIR at o->dtype: model.safetensors when
// their data fit in one shard, else shards and the index. Each file is
// fsynced; the other form's file, if DIR has one, is removed so that only
// what was written is read back. 0, or -1 with err.
int hfw_write(const char *dir, const st_out *t, size_t n, const hfw_write_opts *o, rl_err *err);
// A model directory's config.json (c, its torch_dtype saying o->dtype) and
// weights (hfw_write). 0, or -1 with err.
int hfw_save_model(const char *dir, const model_config *c, const st_out *t, size_t n, const hfw_write_opts *o,
                   rl_err *err);

#endif
