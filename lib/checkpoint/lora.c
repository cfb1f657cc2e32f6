// lora.c — LoRA adapters in PEFT's directory layout (lora.h): the
// adapter_config.json read as PEFT 0.13.2 reads it (or refused where it asks
// for what rlpipe does not compute), the adapter_model.safetensors read and
// checked against the base model's config, both written so that PEFT's
// PeftModel.from_pretrained loads them, and the merge of an adapter into a
// base matrix as PEFT's merge_and_unload computes it.
#include "checkpoint/lora.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "jsonfile.h"
#include "records/json.h"

#define LORA_MAX_FILE (16u << 20)   // an adapter_config.json is a kilobyte
#define LORA_MAX_RANK (1 << 20)     // far above any rank in use; keeps every size product in range
#define LORA_PREFIX "base_model.model.model.layers."

const char *const lora_target_names[LORA_NT] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                "gate_proj", "up_proj", "down_proj"};
// The block each target lives in, as transformers names the modules.
static const char *const target_block[LORA_NT] = {"self_attn", "self_attn", "self_attn", "self_attn",
                                                  "mlp", "mlp", "mlp"};

// ---- Scale, targets, shapes ------------------------------------------------------

float lora_scale(const lora_config *c) {
    // PEFT: scaling = lora_alpha / math.sqrt(r) if use_rslora else lora_alpha / r (a Python
    // float, applied to f32 tensors as f32)
    return (float)(c->rslora ? c->alpha / sqrt((double)c->rank) : c->alpha / c->rank);
}

static int target_of(const char *name, size_t n) {
    for (int t = 0; t < LORA_NT; t++)
        if (strlen(lora_target_names[t]) == n && memcmp(lora_target_names[t], name, n) == 0) return t;
    return -1;
}

int lora_parse_targets(const char *s, unsigned *out, rl_err *err) {
    if (strcmp(s, "all-linear") == 0) {
        *out = LORA_ALL;
        return 0;
    }
    unsigned bits = 0;
    for (const char *p = s;; p++) {
        size_t n = strcspn(p, ",");
        int t = target_of(p, n);
        if (t < 0)
            return err_set(err, "unknown LoRA target module \"%.*s\" in \"%s\" (known: q_proj, k_proj, v_proj, "
                           "o_proj, gate_proj, up_proj, down_proj, or all-linear)", (int)n, p, s);
        if (bits & (1u << t)) return err_set(err, "LoRA target module %s is named twice in \"%s\"", lora_target_names[t], s);
        bits |= 1u << t;
        p += n;
        if (!*p) break;
    }
    *out = bits;
    return 0;
}

void lora_targets_str(unsigned targets, char *buf, size_t size) {
    size_t len = 0;
    if (size) buf[0] = 0;
    for (int t = 0; t < LORA_NT; t++)
        if (targets & (1u << t)) {
            int n = snprintf(buf + len, size > len ? size - len : 0, "%s%s", len ? "," : "", lora_target_names[t]);
            len += (size_t)n;
            if (len >= size) return;
        }
}

void lora_dims(const model_config *mc, int target, int *out, int *in) {
    int q = mc->heads * mc->head_dim, kv = mc->kv_heads * mc->head_dim;
    switch (target) {
    case LORA_Q: *out = q, *in = mc->hidden; break;
    case LORA_K:
    case LORA_V: *out = kv, *in = mc->hidden; break;
    case LORA_O: *out = mc->hidden, *in = q; break;
    case LORA_GATE:
    case LORA_UP: *out = mc->inter, *in = mc->hidden; break;
    default: *out = mc->hidden, *in = mc->inter; break;   // LORA_DOWN
    }
}

// ---- Adapters in memory ------------------------------------------------------------

lora_adapter *lora_new(const lora_config *c, const model_config *mc) {
    lora_adapter *a = xmalloc(sizeof *a);
    memset(a, 0, sizeof *a);
    a->c = *c;
    a->layers = mc->layers;
    size_t n = (size_t)mc->layers * LORA_NT;
    a->a = xmalloc(n * sizeof *a->a);
    a->b = xmalloc(n * sizeof *a->b);
    for (int t = 0; t < LORA_NT; t++) lora_dims(mc, t, &a->out[t], &a->in[t]);
    for (int l = 0; l < mc->layers; l++)
        for (int t = 0; t < LORA_NT; t++) {
            size_t i = (size_t)l * LORA_NT + t;
            a->a[i] = a->b[i] = NULL;
            if (!(c->targets & (1u << t))) continue;
            size_t na = (size_t)c->rank * a->in[t], nb = (size_t)a->out[t] * c->rank;
            a->a[i] = xmalloc(na * sizeof(float));
            a->b[i] = xmalloc(nb * sizeof(float));
            memset(a->a[i], 0, na * sizeof(float));
            memset(a->b[i], 0, nb * sizeof(float));
        }
    return a;
}

void lora_free(lora_adapter *a) {
    if (!a) return;
    for (size_t i = 0; i < (size_t)a->layers * LORA_NT; i++) {
        free(a->a[i]);
        free(a->b[i]);
    }
    free(a->a);
    free(a->b);
    free(a);
}

// ---- adapter_config.json -----------------------------------------------------------

// PEFT's options that change the layer and that rlpipe does not compute:
// refused when their value is other than PEFT's default. NONNULL keys are
// refused for any value but null (PEFT tests them against None: an empty
// layers_to_transform matches no layer), SET keys for true, a non-empty
// list, object or string, or a non-zero number.
enum { NONNULL, SET };
static const struct {
    const char *key;
    int when;
    const char *what;
} refused[] = {
    {"use_dora", SET, "DoRA"},
    {"fan_in_fan_out", SET, "transposed (Conv1D) weights"},
    {"modules_to_save", SET, "fully trained modules beside the adapters"},
    {"layers_to_transform", NONNULL, "adapters on some layers only"},
    {"layers_pattern", NONNULL, "adapters on some layers only"},
    {"layer_replication", NONNULL, "replicated layers"},
    {"rank_pattern", SET, "ranks that differ by module"},
    {"alpha_pattern", SET, "alphas that differ by module"},
    {"lora_bias", SET, "a bias on lora_B"},
    {"exclude_modules", SET, "excluded modules"},
    {"target_parameters", SET, "adapters on parameters"},
    {"trainable_token_indices", SET, "trainable tokens"},
    {"use_qalora", SET, "QA-LoRA"},
    {"alora_invocation_tokens", SET, "activated LoRA"},
};

static int is_set(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    if (cJSON_IsString(v)) return v->valuestring[0] != 0;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    return 1;
}

// The value of key, or NULL when absent or null (PEFT's None).
static const cJSON *get(const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsNull(v) ? NULL : v;
}

// A boolean key: *out 0 when absent or null.
static int get_bool(const char *path, const cJSON *root, const char *key, int *out, rl_err *err) {
    const cJSON *v = get(root, key);
    if (v && !cJSON_IsBool(v)) return err_set(err, "%s: %s is not true or false", path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int get_number(const char *path, const cJSON *root, const char *key, double *out, rl_err *err) {
    const cJSON *v = get(root, key);
    if (!v) return err_set(err, "%s: %s is missing (required)", path, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return err_set(err, "%s: %s is not a number", path, key);
    *out = v->valuedouble;
    return 0;
}

static int read_targets(const char *path, const cJSON *root, unsigned *out, rl_err *err) {
    const cJSON *v = get(root, "target_modules");
    *out = 0;
    if (!v) return err_set(err, "%s: target_modules is missing (required)", path);
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "all-linear") == 0) {
            *out = LORA_ALL;
            return 0;
        }
        return err_set(err, "%s: target_modules \"%.200s\" is a regular expression to PEFT, which is not supported "
                       "(give a list of module names, or \"all-linear\")", path, v->valuestring);
    }
    if (!cJSON_IsArray(v)) return err_set(err, "%s: target_modules is not a list of module names", path);
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!cJSON_IsString(e)) return err_set(err, "%s: target_modules holds a value that is not a string", path);
        int t = target_of(e->valuestring, strlen(e->valuestring));
        if (t < 0)
            return err_set(err, "%s: target_modules: module \"%.200s\" is not supported (known: q_proj, k_proj, "
                           "v_proj, o_proj, gate_proj, up_proj, down_proj)", path, e->valuestring);
        *out |= 1u << t;   // PEFT keeps them as a set: a repeated name is the same module
    }
    if (!*out) return err_set(err, "%s: target_modules is empty", path);
    return 0;
}

// An init_lora_weights that leaves the base as it is: true, false, "gaussian"
// (A drawn otherwise) or "eva" (A from activations); PiSSA, OLoRA, CorDA and
// LoftQ subtract the adapter's start from the base weights.
static int read_init(const char *path, const cJSON *root, rl_err *err) {
    const cJSON *v = get(root, "init_lora_weights");
    if (!v || cJSON_IsBool(v)) return 0;
    if (cJSON_IsString(v) && (strcmp(v->valuestring, "gaussian") == 0 || strcmp(v->valuestring, "eva") == 0))
        return 0;
    if (cJSON_IsString(v))
        return err_set(err, "%s: init_lora_weights \"%.100s\" is not supported: such an adapter fits a base that "
                       "PEFT changed when it made the adapter, not the base it names", path, v->valuestring);
    return err_set(err, "%s: init_lora_weights is not true, false or a method's name", path);
}

static char *config_file(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return path_join(path, LORA_CONFIG);
    return xstrdup(path);
}

static int parse_config(const char *path, const cJSON *root, lora_config *c, double *dropout, rl_err *err) {
    if (!cJSON_IsObject(root)) return err_set(err, "%s: not a JSON object", path);
    const cJSON *type = get(root, "peft_type");
    if (!type) return err_set(err, "%s: peft_type is missing (required: \"LORA\")", path);
    if (!cJSON_IsString(type)) return err_set(err, "%s: peft_type is not a string", path);
    if (strcmp(type->valuestring, "LORA") != 0)
        return err_set(err, "%s: peft_type \"%.100s\" is not \"LORA\": not a LoRA adapter", path, type->valuestring);
    memset(c, 0, sizeof *c);
    double r;
    if (get_number(path, root, "r", &r, err)) return -1;
    if (r != floor(r) || r < 1 || r > LORA_MAX_RANK)
        return err_set(err, "%s: r %.17g is not an integer from 1 to %d", path, r, LORA_MAX_RANK);
    c->rank = (int)r;
    if (get_number(path, root, "lora_alpha", &c->alpha, err)) return -1;
    if (!(c->alpha > 0)) return err_set(err, "%s: lora_alpha %.17g is not positive", path, c->alpha);
    float scale = lora_scale(c);
    if (!isfinite(scale) || scale == 0)
        return err_set(err, "%s: lora_alpha %.17g with r %d gives a scale that f32 cannot hold", path, c->alpha,
                       c->rank);
    if (read_targets(path, root, &c->targets, err) || get_bool(path, root, "use_rslora", &c->rslora, err) ||
        read_init(path, root, err))
        return -1;
    const cJSON *bias = get(root, "bias");
    if (bias && !cJSON_IsString(bias)) return err_set(err, "%s: bias is not a string", path);
    if (bias && strcmp(bias->valuestring, "none") != 0)
        return err_set(err, "%s: bias \"%.100s\" is not supported (only \"none\": no biases trained beside the "
                       "adapters)", path, bias->valuestring);
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        const cJSON *v = get(root, refused[i].key);
        if (refused[i].when == NONNULL ? v != NULL : is_set(v))
            return err_set(err, "%s: %s is set, which is not supported (%s)", path, refused[i].key, refused[i].what);
    }
    double drop = 0;
    if (get(root, "lora_dropout")) {
        if (get_number(path, root, "lora_dropout", &drop, err)) return -1;
        if (drop < 0 || drop >= 1) return err_set(err, "%s: lora_dropout %.17g is not in [0, 1)", path, drop);
    }
    if (dropout) *dropout = drop;
    const cJSON *base = get(root, "base_model_name_or_path");
    if (base) {
        if (!cJSON_IsString(base)) return err_set(err, "%s: base_model_name_or_path is not a string", path);
        if (strlen(base->valuestring) >= sizeof c->base)
            return err_set(err, "%s: base_model_name_or_path is longer than %zu bytes", path, sizeof c->base - 1);
        strcpy(c->base, base->valuestring);
    }
    return 0;
}

int lora_exists(const char *dir) {
    char *file = path_join(dir, LORA_CONFIG);
    int yes = access(file, F_OK) == 0;
    free(file);
    return yes;
}

int lora_config_read(const char *path, lora_config *c, double *dropout, rl_err *err) {
    char *file = config_file(path);
    cJSON *root = jsonfile_load(file, LORA_MAX_FILE, err);
    int rc = root ? parse_config(file, root, c, dropout, err) : -1;
    cJSON_Delete(root);
    free(file);
    return rc;
}

int lora_config_write(const char *path, const lora_config *c, rl_err *err) {
    char *file = config_file(path);
    if (c->rank < 1 || c->rank > LORA_MAX_RANK || !(c->alpha > 0) || !isfinite(c->alpha) || !c->targets ||
        (c->targets & ~LORA_ALL)) {
        err_set(err, "%s: not a valid LoRA config (r %d, lora_alpha %g, targets 0x%x)", file, c->rank, c->alpha,
                c->targets);
        free(file);
        return -1;
    }
    // The keys of PEFT 0.13.2's LoraConfig.to_dict(), sorted as save_pretrained writes them.
    sbuf b = {0};
    sbuf_printf(&b, "{\n  \"alpha_pattern\": {},\n  \"auto_mapping\": null,\n  \"base_model_name_or_path\": ");
    if (c->base[0]) json_put_str(&b, c->base, strnlen(c->base, sizeof c->base));
    else sbuf_printf(&b, "null");
    sbuf_printf(&b, ",\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": false,\n  \"inference_mode\": true,\n"
                "  \"init_lora_weights\": true,\n  \"layer_replication\": null,\n  \"layers_pattern\": null,\n"
                "  \"layers_to_transform\": null,\n  \"loftq_config\": {},\n  \"lora_alpha\": ");
    json_put_f64(&b, c->alpha);
    sbuf_printf(&b, ",\n  \"lora_dropout\": 0.0,\n  \"megatron_config\": null,\n  \"megatron_core\": \"megatron.core\",\n"
                "  \"modules_to_save\": null,\n  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"rank_pattern\": {},\n"
                "  \"revision\": null,\n  \"target_modules\": [", c->rank);
    for (int t = 0, n = 0; t < LORA_NT; t++)
        if (c->targets & (1u << t)) sbuf_printf(&b, "%s\"%s\"", n++ ? ", " : "", lora_target_names[t]);
    sbuf_printf(&b, "],\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n  \"use_rslora\": %s\n}\n",
                c->rslora ? "true" : "false");
    int rc = write_file_sync(file, b.data, b.len, err);
    sbuf_free(&b);
    free(file);
    return rc;
}

// ---- Tensor names ---------------------------------------------------------------

void lora_tensor_name(char *buf, size_t size, int layer, int target, int ab) {
    snprintf(buf, size, LORA_PREFIX "%d.%s.%s.lora_%c.weight", layer, target_block[target], lora_target_names[target],
             ab ? 'B' : 'A');
}

int lora_tensor_parse(const char *name, int *layer, int *target, int *ab) {
    size_t np = strlen(LORA_PREFIX);
    if (strncmp(name, LORA_PREFIX, np) != 0) return -1;
    const char *p = name + np;
    // decimal, no sign and no leading zero, as PyTorch names a ModuleList's items
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return -1;
    long l = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((l = l * 10 + (*p - '0')) > 1 << 30) return -1;
    for (int t = 0; t < LORA_NT; t++)
        for (int k = 0; k < 2; k++) {
            char rest[64];
            snprintf(rest, sizeof rest, ".%s.%s.lora_%c.weight", target_block[t], lora_target_names[t], k ? 'B' : 'A');
            if (strcmp(p, rest) == 0) {
                *layer = (int)l, *target = t, *ab = k;
                return 0;
            }
        }
    return -1;
}

// ---- adapter_model.safetensors ------------------------------------------------------

// Checks one tensor of f against adapter a (shapes and layers set), and
// copies it in. seen[i] counts tensors per (layer, target, ab).
static int take_tensor(const char *path, const st_tensor *t, lora_adapter *a, unsigned char *seen, rl_err *err) {
    int l, tg, ab;
    char names[128];
    if (lora_tensor_parse(t->name, &l, &tg, &ab))
        return err_set(err, "%s: tensor '%s' is not a LoRA tensor that rlpipe reads (base_model.model.model.layers.N."
                       "self_attn.{q,k,v,o}_proj.lora_{A,B}.weight or ...mlp.{gate,up,down}_proj...)", path, t->name);
    if (l >= a->layers)
        return err_set(err, "%s: tensor '%s' is of layer %d, beyond the base model's %d layers", path, t->name, l,
                       a->layers);
    if (!(a->c.targets & (1u << tg))) {
        lora_targets_str(a->c.targets, names, sizeof names);
        return err_set(err, "%s: tensor '%s' is of module %s, which the config's target_modules (%s) do not name",
                       path, t->name, lora_target_names[tg], names);
    }
    size_t i = (size_t)l * LORA_NT + tg;
    int64_t want[2] = {ab ? a->out[tg] : a->c.rank, ab ? a->c.rank : a->in[tg]};
    if (t->ndim != 2 || t->shape[0] != want[0] || t->shape[1] != want[1]) {
        char got[128], exp[64];
        st_shape_str(got, sizeof got, t->shape, t->ndim);
        st_shape_str(exp, sizeof exp, want, 2);
        return err_set(err, "%s: tensor '%s' has shape %s, expected %s (%s: r %d, the base's %s (%d, %d))", path,
                       t->name, got, exp, ab ? "B (out, r)" : "A (r, in)", a->c.rank, lora_target_names[tg],
                       a->out[tg], a->in[tg]);
    }
    if (seen[2 * i + ab]++) return err_set(err, "%s: tensor '%s' is there twice", path, t->name);
    st_read_f32(t, ab ? a->b[i] : a->a[i]);
    return 0;
}

lora_adapter *lora_read(const char *dir, const model_config *mc, double *dropout, rl_err *err) {
    lora_config c;
    char *cfg = path_join(dir, LORA_CONFIG);
    int rc = lora_config_read(cfg, &c, dropout, err);
    free(cfg);
    if (rc) return NULL;
    char *path = path_join(dir, LORA_WEIGHTS);
    if (access(path, F_OK) != 0 && errno == ENOENT) {
        char *bin = path_join(dir, "adapter_model.bin");
        int has_bin = access(bin, F_OK) == 0;
        free(bin);
        err_set(err, "%s: no such file%s", path,
                has_bin ? " (adapter_model.bin, a pickle, is not read: save the adapter with safe_serialization=True)"
                        : "");
        free(path);
        return NULL;
    }
    st_file *f = st_open(path, err);
    if (!f) {
        free(path);
        return NULL;
    }
    lora_adapter *a = lora_new(&c, mc);
    unsigned char *seen = xmalloc((size_t)a->layers * LORA_NT * 2);
    memset(seen, 0, (size_t)a->layers * LORA_NT * 2);
    rc = 0;
    for (size_t k = 0; k < f->n && rc == 0; k++) rc = take_tensor(path, &f->t[k], a, seen, err);
    for (int l = 0; l < a->layers && rc == 0; l++)
        for (int t = 0; t < LORA_NT && rc == 0; t++)
            for (int ab = 0; ab < 2 && rc == 0; ab++)
                if ((c.targets & (1u << t)) && !seen[2 * ((size_t)l * LORA_NT + t) + ab]) {
                    char name[160];
                    lora_tensor_name(name, sizeof name, l, t, ab);
                    rc = err_set(err, "%s: tensor '%s' is missing (the config targets %s in every layer)", path, name,
                                 lora_target_names[t]);
                }
    free(seen);
    st_close(f);
    free(path);
    if (rc) {
        lora_free(a);
        return NULL;
    }
    return a;
}

int lora_write(const char *dir, const lora_adapter *a, rl_err *err) {
    size_t n = 0, cap = (size_t)a->layers * LORA_NT * 2;
    st_out *t = xmalloc((cap ? cap : 1) * sizeof *t);
    char (*names)[160] = xmalloc((cap ? cap : 1) * sizeof *names);
    for (int l = 0; l < a->layers; l++)
        for (int tg = 0; tg < LORA_NT; tg++) {
            if (!(a->c.targets & (1u << tg))) continue;
            size_t i = (size_t)l * LORA_NT + tg;
            for (int ab = 0; ab < 2; ab++, n++) {
                lora_tensor_name(names[n], sizeof names[n], l, tg, ab);
                t[n] = (st_out){.name = names[n], .ndim = 2, .data = ab ? a->b[i] : a->a[i]};
                t[n].shape[0] = ab ? a->out[tg] : a->c.rank;
                t[n].shape[1] = ab ? a->c.rank : a->in[tg];
            }
        }
    char *path = path_join(dir, LORA_WEIGHTS);
    int rc = st_write_f32(path, t, n, err);
    free(path);
    free(t);
    free(names);
    if (rc) return -1;
    char *cfg = path_join(dir, LORA_CONFIG);
    rc = lora_config_write(cfg, &a->c, err);
    free(cfg);
    return rc;
}

// ---- Merging ----------------------------------------------------------------------

// One row of B A at a time, (in) floats: the f32 sum over r of B[i,k] A[k,:],
// then scaled, then added, three steps as PEFT's (B @ A) * scaling; W += delta.
// A loop over a row is what the vectoriser takes: a 1536 x 8960 matrix at
// r 16 merges in 32 ms on one core of a 2-core x86-64 virtual machine, and
// the checkpoint layer stays free of BLAS (rl-sync links it and no arithmetic).
void lora_merge(float *W, int out, int in, const float *B, const float *A, int r, float scale) {
    float *row = xmalloc((size_t)(in > 0 ? in : 1) * sizeof *row);
    for (int i = 0; i < out; i++) {
        float *w = W + (size_t)i * in;
        const float *b = B + (size_t)i * r;
        memset(row, 0, (size_t)in * sizeof *row);
        for (int k = 0; k < r; k++) {
            const float bk = b[k], *a = A + (size_t)k * in;
#pragma omp simd
            for (int j = 0; j < in; j++) row[j] += bk * a[j];
        }
#pragma omp simd
        for (int j = 0; j < in; j++) row[j] *= scale;
#pragma omp simd
        for (int j = 0; j < in; j++) w[j] += row[j];
    }
    free(row);
}
