// st_tool — drives lib/checkpoint/safetensors.c and lib/checkpoint/config.c for the Python
// tests (tests/py/test_safetensors.py), which compare it with Hugging Face's
// own safetensors library.
//
//   st_tool dump FILE        per tensor, in file order, two lines:
//                              NAME DTYPE [d0,d1,...]
//                              the values as f32, %.9g, separated by spaces
//   st_tool write OUT SEED   writes the F32 tensors of st_tool_tensors (below)
//   st_tool cfg IN [OUT]     loads a config.json (or model directory), prints
//                            "key value" lines, and saves it to OUT if given
//
// Scalars (shape []) and empty tensors (a dimension 0) are read and written,
// as the Hugging Face library does. Exit 0 ok, 1 with the library's message
// on stderr, 2 usage.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/config.h"
#include "checkpoint/safetensors.h"

static const char *usage = "usage: st_tool dump FILE | st_tool write OUT SEED | st_tool cfg IN [OUT]\n";

static const char *file_dtype(rl_dtype t) { return t == DT_F32 ? "F32" : t == DT_BF16 ? "BF16" : "F16"; }

static int dump(const char *path) {
    rl_err e;
    st_file *f = st_open(path, &e);
    if (!f) {
        fprintf(stderr, "st_tool: error: %s\n", e.msg);
        return 1;
    }
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        printf("%s %s [", t->name, file_dtype(t->dtype));
        for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? "," : "", (long long)t->shape[d]);
        printf("]\n");
        float *v = xmalloc(t->nelem * sizeof *v);
        st_read_f32(t, v);
        for (size_t k = 0; k < t->nelem; k++) printf("%s%.9g", k ? " " : "", (double)v[k]);
        printf("\n");
        free(v);
    }
    st_close(f);
    return 0;
}

// The tensors `write` produces. Value k of tensor j (row-major) is
// ((k * 7919 + seed * 31 + j * 101) mod 2001 - 1000) / 3 in f32 arithmetic,
// except the tensor "special", which holds IEEE corner cases.
static const struct {
    const char *name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} st_tool_tensors[] = {
    {"model.embed_tokens.weight", 2, {7, 5}},
    {"model.layers.0.self_attn.q_proj.bias", 1, {5}},
    {"three_d", 3, {2, 3, 4}},
    {"scalar", 0, {0}},
    {"empty", 2, {0, 3}},
    {"eight_d", 8, {1, 2, 1, 1, 1, 1, 1, 2}},
    {"special", 1, {7}},
};

static int write_file(const char *out, const char *seed_text) {
    char *end;
    long long seed = strtoll(seed_text, &end, 10);
    if (*end || end == seed_text || seed < 0 || seed > 1000000) {
        fprintf(stderr, "st_tool: error: seed '%s' is not an integer from 0 to 1000000\n", seed_text);
        return 2;
    }
    enum { N = sizeof st_tool_tensors / sizeof *st_tool_tensors };
    st_out t[N];
    float *data[N];
    for (size_t j = 0; j < N; j++) {
        size_t nelem = 1;
        for (int d = 0; d < st_tool_tensors[j].ndim; d++) nelem *= (size_t)st_tool_tensors[j].shape[d];
        data[j] = xmalloc(nelem * sizeof(float));
        for (size_t k = 0; k < nelem; k++)
            data[j][k] = (float)(((long long)k * 7919 + seed * 31 + (long long)j * 101) % 2001 - 1000) / 3.0f;
        if (strcmp(st_tool_tensors[j].name, "special") == 0) {
            const float special[7] = {-0.0f, INFINITY, -INFINITY, NAN, 1e-45f, 3.40282347e38f, 1.17549435e-38f};
            memcpy(data[j], special, sizeof special);
        }
        t[j].name = st_tool_tensors[j].name;
        t[j].ndim = st_tool_tensors[j].ndim;
        memcpy(t[j].shape, st_tool_tensors[j].shape, sizeof t[j].shape);
        t[j].data = data[j];
    }
    rl_err e;
    int rc = st_write_f32(out, t, N, &e);
    if (rc) fprintf(stderr, "st_tool: error: %s\n", e.msg);
    for (size_t j = 0; j < N; j++) free(data[j]);
    return rc ? 1 : 0;
}

static int cfg(const char *in, const char *out) {
    model_config c;
    rl_err e;
    if (cfg_load(in, &c, &e) || (out && cfg_save(out, &c, &e))) {
        fprintf(stderr, "st_tool: error: %s\n", e.msg);
        return 1;
    }
    printf("model_type %s\nhidden_size %d\nintermediate_size %d\nnum_hidden_layers %d\n"
           "num_attention_heads %d\nnum_key_value_heads %d\nhead_dim %d\nvocab_size %d\n"
           "max_position_embeddings %d\nrms_norm_eps %.17g\nrope_theta %.17g\ntie_word_embeddings %d\n"
           "qkv_bias %d\no_bias %d\nbos_token_id %d\neos_token_id %d\n",
           c.model_type, c.hidden, c.inter, c.layers, c.heads, c.kv_heads, c.head_dim, c.vocab, c.max_pos,
           c.rms_eps, c.rope_theta, c.tie_embeddings, c.qkv_bias, c.o_bias, c.bos_id, c.eos_id);
    return 0;
}

int main(int argc, char **argv) {
    int rc = 2;
    if (argc == 3 && strcmp(argv[1], "dump") == 0) rc = dump(argv[2]);
    else if (argc == 4 && strcmp(argv[1], "write") == 0) rc = write_file(argv[2], argv[3]);
    else if ((argc == 3 || argc == 4) && strcmp(argv[1], "cfg") == 0) rc = cfg(argv[2], argc == 4 ? argv[3] : NULL);
    else fputs(usage, stderr);
    if (fflush(stdout) || ferror(stdout)) {
        perror("st_tool: error: stdout");
        return 1;
    }
    return rc;
}
