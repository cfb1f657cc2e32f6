// fuzz_safetensors.c — safetensors files (safetensors.c: the 8-byte header
// length, the JSON header, dtypes, shapes, offsets) and the index of a
// sharded model (hfweights.c: model.safetensors.index.json).
// The first byte chooses: even, the rest is a .safetensors file, opened and
// each tensor read; odd, the rest is the index of a directory that holds two
// fixed shards (made once here with st_write), which hfw_open checks whole.
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/hfweights.h"
#include "checkpoint/safetensors.h"
#include "fuzz_util.h"

// The shards an index may name: model-0000{1,2}-of-00002.safetensors.
static void write_shards(const char *dir) {
    static const float v[6] = {1, -2, 3.5f, 0, 1e-3f, 65504};
    st_out one[2] = {{.name = "model.embed_tokens.weight", .ndim = 2, .shape = {2, 3}, .data = v},
                     {.name = "model.norm.weight", .ndim = 1, .shape = {4}, .data = v}};
    st_out two[1] = {{.name = "lm_head.weight", .ndim = 2, .shape = {3, 2}, .data = v}};
    rl_err err;
    char path[4096];
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    if (st_write(path, one, 2, DT_BF16, &err)) abort();
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    if (st_write(path, two, 1, DT_F32, &err)) abort();
}

static void read_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    if (fd < 0) fd = fz_memfd("fuzz_safetensors");
    rl_err err;
    st_file *f = st_open(fz_fill(fd, data, size), &err);
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        if (st_find(f, t->name) == NULL) __builtin_trap();   // every tensor listed is found by its name
        float *x = malloc((t->nelem ? t->nelem : 1) * sizeof *x);
        if (!x) abort();
        st_read_f32(t, x);
        free(x);
        char shape[256];
        st_shape_str(shape, sizeof shape, t->shape, t->ndim);
    }
    st_close(f);
}

static void read_index(const uint8_t *data, size_t size) {
    static char dir[4096];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/sharded", fz_dir());
        if (mkdir(dir, 0700)) abort();
        write_shards(dir);
    }
    fz_write(dir, HFW_INDEX, data, size);
    rl_err err;
    hfw_set *s = hfw_open(dir, &err);
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        if (hfw_find(s, s->t[i]->name) == NULL) __builtin_trap();
        (void)strlen(hfw_file(s, i));
    }
    hfw_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 1)
        read_index(data + 1, size - 1);
    else
        read_file(data + 1, size - 1);
    return 0;
}
