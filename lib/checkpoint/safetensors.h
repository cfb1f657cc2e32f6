// safetensors.h — Hugging Face safetensors files: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {..}},
// then the tensor bytes. Files are mapped read-only; every offset, shape and
// size is checked against the file before anything is trusted.
#ifndef RLPIPE_SAFETENSORS_H
#define RLPIPE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "util.h"

#define ST_MAX_HEADER (100u << 20)   // a header larger than 100 MiB is refused
#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    rl_dtype dtype;                  // F32, BF16, F16 (other file dtypes are refused)
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nelem;
    const void *data;                // into the mapping, nelem * dt_size(dtype) bytes; may be unaligned
} st_tensor;

typedef struct {
    char *path;
    void *map;
    size_t map_size;
    st_tensor *t;
    size_t n;
} st_file;

// Opens and validates the whole file: header size, JSON, dtypes, shapes,
// offsets inside the data area and not overlapping. Errors name the file and tensor.
st_file *st_open(const char *path, rl_err *err);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);

// "[2, 3]": a shape for messages.
void st_shape_str(char *buf, size_t size, const int64_t *shape, int ndim);

// Copies a tensor into f32 (converting BF16/F16): dst holds its nelem values.
void st_read_f32(const st_tensor *t, float *dst);
// The same for its elements [at, at + n) (within nelem), into dst (n).
void st_read_f32_part(const st_tensor *t, size_t at, size_t n, float *dst);
// Tells the system that t has been read and will not be read again soon:
// the pages of the mapping that hold it alone leave the process's memory
// (MADV_DONTNEED; read again from the file if t is read after all). A
// model's load reads tensor after tensor, so it holds one of them rather
// than the whole file beside the weights it fills.
void st_let_go(const st_tensor *t);

// Writes tensors given in f32, in the order given, stored at dtype (F32, or
// BF16/F16 rounded to nearest even), atomically enough for a caller that
// renames: the file is written, fsynced and closed; a failed write leaves no
// file. shape has ndim entries. The header starts with "__metadata__"
// {"format": "pt"}, as transformers' own files do.
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const float *data;
} st_out;
int st_write(const char *path, const st_out *t, size_t n, rl_dtype dtype, rl_err *err);
int st_write_f32(const char *path, const st_out *t, size_t n, rl_err *err);   // st_write at DT_F32
// st_write past the page cache (O_DIRECT, through an aligned staging buffer;
// the same bytes): for a file that is not read back soon, such as a
// checkpoint's optimizer state, whose pages would only push others out and,
// on a virtual machine, cost a fresh page of the host each. A file system
// that refuses O_DIRECT gets the file through the page cache.
int st_write_direct(const char *path, const st_out *t, size_t n, rl_dtype dtype, rl_err *err);
// Bytes of t's data at dtype (UINT64_MAX when the shape is not valid).
uint64_t st_data_bytes(const st_out *t, rl_dtype dtype);

#endif
