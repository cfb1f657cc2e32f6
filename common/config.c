// config.c — the Hugging Face config.json of a Llama-family model: read with
// the defaults transformers applies, checked, and written back so that
// transformers builds the same model (LlamaForCausalLM or Qwen2ForCausalLM).
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG_MAX_SIZE (1 << 24)            // any size: hidden, intermediate, layers, heads, positions
#define CFG_MAX_VOCAB (1 << 22)
#define CFG_MAX_PARAMS (1ull << 40)       // parameters, so that every byte count fits comfortably
#define CFG_MAX_FILE (16u << 20)          // a config.json is a few kilobytes
#define CFG_SUPPORTED "supported: llama, qwen2"

// A config path may name the file or the model directory holding config.json.
static char *config_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path);
        char *p = xmalloc(n + sizeof "/config.json");
        memcpy(p, path, n);
        strcpy(p + n, n && path[n - 1] == '/' ? "config.json" : "/config.json");
        return p;
    }
    return xstrdup(path);
}

// A short text of a JSON value for messages: "\"gelu\"", "{\"type\":\"linear\"...".
static const char *repr(const cJSON *v, char *buf, size_t size) {
    char *s = cJSON_PrintUnformatted(v);
    if (!s) {
        snprintf(buf, size, "?");
        return buf;
    }
    if (strlen(s) > 60) snprintf(buf, size, "%.57s...", s);
    else snprintf(buf, size, "%s", s);
    free(s);
    return buf;
}

// The value of key, or NULL when it is absent or null (which transformers treats alike).
static const cJSON *get(const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsNull(v) ? NULL : v;
}

// An integral JSON number that fits an int; range checks are cfg_check's.
static int as_int(const char *path, const char *key, const cJSON *v, int *out, rl_err *err) {
    char b[80];
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return err_set(err, "%s: %s is not an integer (found %s)", path, key, repr(v, b, sizeof b));
    if (fabs(v->valuedouble) > 2147483647.0)
        return err_set(err, "%s: %s %s is out of range", path, key, repr(v, b, sizeof b));
    *out = (int)v->valuedouble;
    return 0;
}

// Reads an integer key: 1 when present, 0 when absent or null (and not required).
static int read_int(const char *path, const cJSON *root, const char *key, int required, int *out, rl_err *err) {
    const cJSON *v = get(root, key);
    if (!v) return required ? err_set(err, "%s: %s is missing (required)", path, key) : 0;
    return as_int(path, key, v, out, err) ? -1 : 1;
}

static int read_double(const char *path, const cJSON *root, const char *key, double *out, rl_err *err) {
    const cJSON *v = get(root, key);
    char b[80];
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return err_set(err, "%s: %s is not a number (found %s)", path, key, repr(v, b, sizeof b));
    *out = v->valuedouble;
    return 1;
}

static int read_bool(const char *path, const cJSON *root, const char *key, int *out, rl_err *err) {
    const cJSON *v = get(root, key);
    char b[80];
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return err_set(err, "%s: %s is not true or false (found %s)", path, key, repr(v, b, sizeof b));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 1;
}

// A token id: an integer >= 0 (the vocabulary bound is check_at's).
static int as_token(const char *path, const char *key, const cJSON *v, int *out, rl_err *err) {
    if (as_int(path, key, v, out, err)) return -1;
    if (*out < 0) return err_set(err, "%s: %s %d is negative", path, key, *out);
    return 0;
}

// bos_token_id: an integer, a list of them (the first is used), or absent or null (-1).
static int read_token(const char *path, const cJSON *root, const char *key, int *out, rl_err *err) {
    const cJSON *v = get(root, key);
    *out = -1;
    if (v && cJSON_IsArray(v)) v = v->child;
    if (!v) return 0;
    return as_token(path, key, v, out, err) ? -1 : 1;
}

// eos_token_id: an integer or a list of them (every one ends a completion),
// absent or null (none); c->eos_id is the first.
static int read_eos(const char *path, const cJSON *root, model_config *c, rl_err *err) {
    const cJSON *v = get(root, "eos_token_id"), *x;
    c->n_eos = 0;
    c->eos_id = -1;
    if (!v) return 0;
    if (!cJSON_IsArray(v)) {
        if (as_token(path, "eos_token_id", v, &c->eos_id, err)) return -1;
        c->eos_ids[c->n_eos++] = c->eos_id;
        return 0;
    }
    cJSON_ArrayForEach(x, v) {
        int id;
        if (as_token(path, "eos_token_id", x, &id, err)) return -1;
        if (c->n_eos == CFG_MAX_EOS) return err_set(err, "%s: eos_token_id lists more than %d ids", path, CFG_MAX_EOS);
        c->eos_ids[c->n_eos++] = id;
    }
    c->eos_id = c->n_eos ? c->eos_ids[0] : -1;
    return 0;
}

// Every invariant of a config; `where` starts the messages (the file, or "config").
static int check_at(const model_config *c, const char *where, rl_err *err) {
    int llama = strcmp(c->model_type, "llama") == 0, qwen2 = strcmp(c->model_type, "qwen2") == 0;
    if (!memchr(c->model_type, 0, sizeof c->model_type) || (!llama && !qwen2))
        return err_set(err, "%s: model_type \"%.*s\" is not supported (" CFG_SUPPORTED ")", where,
                       (int)sizeof c->model_type, c->model_type);
    const struct {
        const char *key;
        int value, max;
    } sizes[] = {
        {"hidden_size", c->hidden, CFG_MAX_SIZE},
        {"intermediate_size", c->inter, CFG_MAX_SIZE},
        {"num_hidden_layers", c->layers, CFG_MAX_SIZE},
        {"num_attention_heads", c->heads, CFG_MAX_SIZE},
        {"num_key_value_heads", c->kv_heads, CFG_MAX_SIZE},
        {"head_dim", c->head_dim, CFG_MAX_SIZE},
        {"vocab_size", c->vocab, CFG_MAX_VOCAB},
        {"max_position_embeddings", c->max_pos, CFG_MAX_SIZE},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i].value < 1 || sizes[i].value > sizes[i].max)
            return err_set(err, "%s: %s %d is out of range (1 to %d)", where, sizes[i].key, sizes[i].value,
                           sizes[i].max);
    if (c->heads % c->kv_heads)
        return err_set(err, "%s: num_key_value_heads %d does not divide num_attention_heads %d", where, c->kv_heads,
                       c->heads);
    if (c->head_dim % 2)
        return err_set(err, "%s: head_dim %d is odd (rotary embeddings turn pairs of dimensions)", where,
                       c->head_dim);
    if ((int64_t)c->heads * c->head_dim > CFG_MAX_SIZE)
        return err_set(err, "%s: num_attention_heads %d times head_dim %d is larger than %d", where, c->heads,
                       c->head_dim, CFG_MAX_SIZE);
    if (!(isfinite(c->rms_eps) && c->rms_eps > 0))
        return err_set(err, "%s: rms_norm_eps %g is not a positive number", where, c->rms_eps);
    if (!(isfinite(c->rope_theta) && c->rope_theta > 0))
        return err_set(err, "%s: rope_theta %g is not a positive number", where, c->rope_theta);
    if ((c->tie_embeddings | c->qkv_bias | c->o_bias) & ~1)
        return err_set(err, "%s: tie_word_embeddings, qkv_bias and o_bias must be 0 or 1", where);
    if (llama && c->qkv_bias != c->o_bias)
        return err_set(err, "%s: llama has attention_bias on q, k, v and o together (qkv_bias %d, o_bias %d)", where,
                       c->qkv_bias, c->o_bias);
    if (qwen2 && !(c->qkv_bias == 1 && c->o_bias == 0))
        return err_set(err, "%s: qwen2 has biases on q, k, v and none on o (qkv_bias %d, o_bias %d)", where,
                       c->qkv_bias, c->o_bias);
    if (c->bos_id < -1 || c->bos_id >= c->vocab)
        return err_set(err, "%s: bos_token_id %d is not a token id (0 to %d, or -1 for none)", where, c->bos_id,
                       c->vocab - 1);
    if (c->eos_id < -1 || c->eos_id >= c->vocab)
        return err_set(err, "%s: eos_token_id %d is not a token id (0 to %d, or -1 for none)", where, c->eos_id,
                       c->vocab - 1);
    if (c->n_eos < 0 || c->n_eos > CFG_MAX_EOS || (c->n_eos && c->eos_ids[0] != c->eos_id))
        return err_set(err, "%s: eos_token_id: %d ids in the list, the first %d", where, c->n_eos, c->eos_id);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab)
            return err_set(err, "%s: eos_token_id %d is not a token id (0 to %d)", where, c->eos_ids[i], c->vocab - 1);

    // Parameter count, overflow-checked: each factor is at most 2^24, a layer
    // fits in 64 bits, the product with the layer count may not.
    uint64_t C = (uint64_t)c->hidden, F = (uint64_t)c->inter, V = (uint64_t)c->vocab;
    uint64_t q = (uint64_t)c->heads * (uint64_t)c->head_dim, kv = (uint64_t)c->kv_heads * (uint64_t)c->head_dim;
    uint64_t layer = 2 * C + C * q + 2 * C * kv + q * C + 3 * C * F + (c->qkv_bias ? q + 2 * kv : 0) +
                     (c->o_bias ? C : 0);
    uint64_t total;
    if (__builtin_mul_overflow(layer, (uint64_t)c->layers, &total) ||
        __builtin_add_overflow(total, V * C * (c->tie_embeddings ? 1 : 2) + C, &total) || total > CFG_MAX_PARAMS)
        return err_set(err, "%s: hidden_size %d, intermediate_size %d, num_hidden_layers %d and vocab_size %d make "
                       "more than 2^40 parameters", where, c->hidden, c->inter, c->layers, c->vocab);
    return 0;
}

int cfg_check(const model_config *c, rl_err *err) { return check_at(c, "config", err); }

// transformers 5 writes {"rope_parameters": {"rope_type": "default", "rope_theta": ..}}
// instead of rope_theta and rope_scaling: only the default (unscaled) RoPE is supported.
static int read_rope_parameters(const char *path, const cJSON *root, model_config *c, rl_err *err) {
    const cJSON *rp = get(root, "rope_parameters");
    char b[80];
    if (!rp) return 0;
    if (!cJSON_IsObject(rp)) return err_set(err, "%s: rope_parameters is not an object (found %s)", path, repr(rp, b, sizeof b));
    const char *keys[] = {"rope_type", "type"};
    for (int i = 0; i < 2; i++) {
        const cJSON *t = get(rp, keys[i]);
        if (t && !(cJSON_IsString(t) && strcmp(t->valuestring, "default") == 0))
            return err_set(err, "%s: rope_parameters %s %s is not supported (only \"default\")", path, keys[i],
                           repr(t, b, sizeof b));
    }
    double theta, top = c->rope_theta;
    int has_top = get(root, "rope_theta") != NULL;
    int rc = read_double(path, rp, "rope_theta", &theta, err);
    if (rc < 0) return err_set(err, "%s: rope_parameters rope_theta is not a number", path);
    if (rc == 0) return 0;
    if (has_top && theta != top)
        return err_set(err, "%s: rope_theta %.17g and rope_parameters rope_theta %.17g disagree", path, top, theta);
    c->rope_theta = theta;
    return 0;
}

// Fills c from the parsed file; cross-key checks are left to check_at.
static int parse(const char *path, const cJSON *root, model_config *c, rl_err *err) {
    char b[80];
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(root)) return err_set(err, "%s: not a JSON object", path);

    const cJSON *mt = get(root, "model_type");
    if (!mt) return err_set(err, "%s: model_type is missing (" CFG_SUPPORTED ")", path);
    if (!cJSON_IsString(mt) || (strcmp(mt->valuestring, "llama") && strcmp(mt->valuestring, "qwen2")))
        return err_set(err, "%s: model_type %s is not supported (" CFG_SUPPORTED ")", path, repr(mt, b, sizeof b));
    snprintf(c->model_type, sizeof c->model_type, "%s", mt->valuestring);
    int qwen2 = strcmp(c->model_type, "qwen2") == 0;

    const cJSON *act = get(root, "hidden_act");
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
        return err_set(err, "%s: hidden_act %s is not supported (only \"silu\")", path, repr(act, b, sizeof b));
    const cJSON *rs = get(root, "rope_scaling");
    if (rs) return err_set(err, "%s: rope_scaling is not supported (found %s)", path, repr(rs, b, sizeof b));
    int flag = 0;
    if (read_bool(path, root, "mlp_bias", &flag, err) < 0) return -1;
    if (flag) return err_set(err, "%s: mlp_bias true is not supported", path);
    if (qwen2) {
        if (read_bool(path, root, "use_sliding_window", &flag, err) < 0) return -1;
        if (flag) return err_set(err, "%s: use_sliding_window true is not supported", path);
    }

    const struct {
        const char *key;
        int *out;
    } required[] = {
        {"hidden_size", &c->hidden},         {"intermediate_size", &c->inter}, {"num_hidden_layers", &c->layers},
        {"num_attention_heads", &c->heads}, {"vocab_size", &c->vocab},
    };
    for (size_t i = 0; i < sizeof required / sizeof *required; i++)
        if (read_int(path, root, required[i].key, 1, required[i].out, err) < 0) return -1;
    if (c->heads < 1)
        return err_set(err, "%s: num_attention_heads %d is out of range (1 to %d)", path, c->heads, CFG_MAX_SIZE);

    int rc;
    c->kv_heads = c->heads;
    if (read_int(path, root, "num_key_value_heads", 0, &c->kv_heads, err) < 0) return -1;
    if ((rc = read_int(path, root, "head_dim", 0, &c->head_dim, err)) < 0) return -1;
    if (rc == 0) {
        if (c->hidden % c->heads)
            return err_set(err, "%s: num_attention_heads %d does not divide hidden_size %d (and head_dim is not given)",
                           path, c->heads, c->hidden);
        c->head_dim = c->hidden / c->heads;
    }
    c->max_pos = qwen2 ? 32768 : 2048;
    if (read_int(path, root, "max_position_embeddings", 0, &c->max_pos, err) < 0) return -1;
    c->rms_eps = 1e-6;
    c->rope_theta = 10000;
    if (read_double(path, root, "rms_norm_eps", &c->rms_eps, err) < 0 ||
        read_double(path, root, "rope_theta", &c->rope_theta, err) < 0 || read_rope_parameters(path, root, c, err))
        return -1;
    if (read_bool(path, root, "tie_word_embeddings", &c->tie_embeddings, err) < 0) return -1;
    if (qwen2) {
        c->qkv_bias = 1;                     // Qwen2 ignores attention_bias
        c->o_bias = 0;
    } else {
        if (read_bool(path, root, "attention_bias", &c->qkv_bias, err) < 0) return -1;
        c->o_bias = c->qkv_bias;
    }
    if (read_token(path, root, "bos_token_id", &c->bos_id, err) < 0 || read_eos(path, root, c, err)) return -1;
    return 0;
}

int cfg_load(const char *path, model_config *c, rl_err *err) {
    char *file = config_path(path);
    sbuf text = {0};
    cJSON *root = NULL;
    int rc = -1;
    if (read_whole_file(file, CFG_MAX_FILE, &text, err)) goto out;
    root = cJSON_ParseWithLength((const char *)text.data, text.len);
    if (!root) {
        err_set(err, "%s: not valid JSON", file);
        goto out;
    }
    if (parse(file, root, c, err) == 0 && check_at(c, file, err) == 0) rc = 0;
out:
    cJSON_Delete(root);
    sbuf_free(&text);
    free(file);
    return rc;
}

// The shortest of %.15g, %.16g, %.17g that reads back as exactly d.
static void put_double(sbuf *b, double d) {
    char s[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, d);
        if (strtod(s, NULL) == d) break;
    }
    sbuf_printf(b, "%s", s);
}

static void put_token(sbuf *b, const char *key, int id) {
    if (id < 0) sbuf_printf(b, "  \"%s\": null,\n", key);
    else sbuf_printf(b, "  \"%s\": %d,\n", key, id);
}

int cfg_save(const char *path, const model_config *c, rl_err *err) {
    char *file = config_path(path);
    if (check_at(c, file, err)) {
        free(file);
        return -1;
    }
    int llama = strcmp(c->model_type, "llama") == 0;
    sbuf b = {0};
    sbuf_printf(&b, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n",
                llama ? "LlamaForCausalLM" : "Qwen2ForCausalLM", c->model_type);
    sbuf_printf(&b, "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
                "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n",
                c->hidden, c->inter, c->layers, c->heads, c->kv_heads, c->head_dim, c->vocab, c->max_pos);
    sbuf_printf(&b, "  \"rms_norm_eps\": ");
    put_double(&b, c->rms_eps);
    sbuf_printf(&b, ",\n  \"rope_theta\": ");
    put_double(&b, c->rope_theta);
    sbuf_printf(&b, ",\n  \"rope_scaling\": null,\n  \"tie_word_embeddings\": %s,\n  \"hidden_act\": \"silu\",\n",
                c->tie_embeddings ? "true" : "false");
    if (llama) sbuf_printf(&b, "  \"attention_bias\": %s,\n  \"mlp_bias\": false,\n", c->qkv_bias ? "true" : "false");
    else sbuf_printf(&b, "  \"use_sliding_window\": false,\n");
    put_token(&b, "bos_token_id", c->bos_id);
    if (c->n_eos > 1) {
        sbuf_printf(&b, "  \"eos_token_id\": [");
        for (int i = 0; i < c->n_eos; i++) sbuf_printf(&b, "%s%d", i ? ", " : "", c->eos_ids[i]);
        sbuf_printf(&b, "],\n");
    } else put_token(&b, "eos_token_id", c->eos_id);
    sbuf_printf(&b, "  \"torch_dtype\": \"float32\"\n}\n");

    // Written, flushed and fsynced; a failed write leaves no partial file.
    const char *what = NULL;
    FILE *fp = fopen(file, "w");
    if (!fp) what = "create";
    else if (fwrite(b.data, 1, b.len, fp) != b.len || fflush(fp)) what = "write";
    else if (fsync(fileno(fp))) what = "fsync";
    int e = errno;
    if (fp && fclose(fp) && !what) {
        what = "close";
        e = errno;
    }
    int rc = 0;
    if (what) {
        rc = err_set(err, "cannot %s: %s: %s", what, file, strerror(e));
        if (fp) unlink(file);
    }
    sbuf_free(&b);
    free(file);
    return rc;
}
