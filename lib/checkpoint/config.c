// config.c — the Hugging Face config.json of a Llama-family model: read with
// the defaults transformers 4.46 applies (its LlamaConfig, Qwen2Config and
// MistralConfig; Qwen3Config as Qwen3's published code defines it), checked,
// and written back so that transformers builds the same model; and the
// generation_config.json beside it.
//
// Every key of a config.json is either read, accepted only at the value that
// changes nothing (pretraining_tp 1, attention_dropout 0, rope_interleaved and
// use_mrope false, mlp_bias false outside llama, attention_bias false for
// mistral, rope_scaling null for mistral), or ignored on purpose because it
// does not change what the model computes (IGNORED below; man/rl-sample.1,
// "Model directories", says why). Any other key with a value is refused,
// naming the key, its value and the file: a config is never half understood.
#include "checkpoint/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jsonfile.h"

#define CFG_MAX_SIZE (1 << 24)            // any size: hidden, intermediate, layers, heads, positions
#define CFG_MAX_VOCAB (1 << 22)
#define CFG_MAX_PARAMS (1ull << 40)       // parameters, so that every byte count fits comfortably
#define CFG_MAX_FILE (16u << 20)          // a config.json is a few kilobytes
#define CFG_SUPPORTED "supported: llama, mistral, qwen2, qwen3"
#define CFG_GENERATION "generation_config.json"

// ---- Families ----------------------------------------------------------------

enum { F_LLAMA = 1, F_QWEN2 = 2, F_QWEN3 = 4, F_MISTRAL = 8, F_ALL = 15 };

// The defaults transformers gives absent keys, per family.
static const struct family {
    const char *type, *arch;
    int bit;
    int max_pos;              // max_position_embeddings
    int kv_heads;             // num_key_value_heads (0: num_attention_heads)
    int head_dim;             // head_dim (0: hidden_size / num_attention_heads)
    int window;               // sliding_window when the window is on
} families[] = {
    {"llama", "LlamaForCausalLM", F_LLAMA, 2048, 0, 0, 0},
    {"qwen2", "Qwen2ForCausalLM", F_QWEN2, 32768, 32, 0, 4096},
    {"qwen3", "Qwen3ForCausalLM", F_QWEN3, 32768, 32, 128, 4096},
    {"mistral", "MistralForCausalLM", F_MISTRAL, 131072, 8, 0, 4096},
};

static const struct family *family_of(const char *type) {
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (strcmp(families[i].type, type) == 0) return &families[i];
    return NULL;
}

// The keys a config.json may hold, by the families that accept them. Those
// parse() reads or checks come first; IGNORED ones change nothing that the
// model computes: the class name (model_type decides), transformers' version,
// bookkeeping and output switches, the std of a fresh initialisation
// (rl-learn --init-std decides), use_cache, Qwen's max_window_layers (which
// layers slide in transformers' flash-attention path: sequences longer than
// the window are refused, and within it every layer attends alike), Qwen2's
// attention_bias (its q/k/v biases are fixed by the family), and SmolLM2's
// markers of the tools that wrote it. Keys beginning with "_" are
// transformers' own bookkeeping, and are ignored too.
static const struct {
    const char *key;
    int families;
} known_keys[] = {
    {"model_type", F_ALL},          {"hidden_size", F_ALL},         {"intermediate_size", F_ALL},
    {"num_hidden_layers", F_ALL},   {"num_attention_heads", F_ALL}, {"num_key_value_heads", F_ALL},
    {"head_dim", F_ALL},            {"vocab_size", F_ALL},          {"max_position_embeddings", F_ALL},
    {"rms_norm_eps", F_ALL},        {"rope_theta", F_ALL},          {"rope_scaling", F_ALL},
    {"rope_parameters", F_ALL},     {"tie_word_embeddings", F_ALL}, {"hidden_act", F_ALL},
    {"bos_token_id", F_ALL},        {"eos_token_id", F_ALL},        {"pad_token_id", F_ALL},
    {"torch_dtype", F_ALL},         {"dtype", F_ALL},               {"attention_bias", F_ALL},
    {"mlp_bias", F_ALL},            {"use_sliding_window", F_QWEN2 | F_QWEN3},
    {"sliding_window", F_QWEN2 | F_QWEN3 | F_MISTRAL},
    {"pretraining_tp", F_ALL},      {"attention_dropout", F_ALL},   {"rope_interleaved", F_ALL},
    {"use_mrope", F_QWEN2},         {"layer_types", F_QWEN2 | F_QWEN3},
    // IGNORED
    {"architectures", F_ALL},       {"transformers_version", F_ALL}, {"initializer_range", F_ALL},
    {"use_cache", F_ALL},           {"output_attentions", F_ALL},    {"output_hidden_states", F_ALL},
    {"return_dict", F_ALL},         {"max_window_layers", F_QWEN2 | F_QWEN3},
    {"is_llama_config", F_LLAMA},   {"transformers.js_config", F_ALL},
    // IGNORED too: PretrainedConfig's generic attributes, which configs saved
    // whole (older transformers, some training tools) carry: generation
    // settings (generation_config.json's are the ones read; none is applied),
    // labels of classification heads, and bookkeeping.
    {"do_sample", F_ALL},           {"temperature", F_ALL},          {"top_k", F_ALL},
    {"top_p", F_ALL},               {"typical_p", F_ALL},            {"max_length", F_ALL},
    {"min_length", F_ALL},          {"num_beams", F_ALL},            {"num_beam_groups", F_ALL},
    {"diversity_penalty", F_ALL},   {"repetition_penalty", F_ALL},   {"length_penalty", F_ALL},
    {"no_repeat_ngram_size", F_ALL}, {"encoder_no_repeat_ngram_size", F_ALL}, {"bad_words_ids", F_ALL},
    {"num_return_sequences", F_ALL}, {"output_scores", F_ALL},       {"return_dict_in_generate", F_ALL},
    {"early_stopping", F_ALL},      {"forced_bos_token_id", F_ALL},  {"forced_eos_token_id", F_ALL},
    {"remove_invalid_values", F_ALL}, {"exponential_decay_length_penalty", F_ALL},
    {"suppress_tokens", F_ALL},     {"begin_suppress_tokens", F_ALL}, {"decoder_start_token_id", F_ALL},
    {"sep_token_id", F_ALL},        {"id2label", F_ALL},             {"label2id", F_ALL},
    {"finetuning_task", F_ALL},     {"problem_type", F_ALL},         {"task_specific_params", F_ALL},
    {"prefix", F_ALL},              {"tokenizer_class", F_ALL},      {"auto_map", F_ALL},
    {"torchscript", F_ALL},         {"tf_legacy_loss", F_ALL},       {"use_bfloat16", F_ALL},
    {"unsloth_version", F_ALL},     {"unsloth_fixed", F_ALL},
    // ... and those accepted at the value that changes nothing (parse_neutral).
    {"is_encoder_decoder", F_ALL},  {"is_decoder", F_ALL},           {"add_cross_attention", F_ALL},
    {"tie_encoder_decoder", F_ALL}, {"cross_attention_hidden_size", F_ALL}, {"pruned_heads", F_ALL},
    {"chunk_size_feed_forward", F_ALL},
};

// ---- Reading JSON values -----------------------------------------------------------

// A config path may name the file or the model directory holding config.json.
static char *config_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return path_join(path, "config.json");
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

// `what` names the key in messages ("rope_scaling factor"); 1 when present.
static int read_double(const char *path, const cJSON *root, const char *key, const char *what, double *out,
                       rl_err *err) {
    const cJSON *v = get(root, key);
    char b[80];
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return err_set(err, "%s: %s is not a number (found %s)", path, what, repr(v, b, sizeof b));
    *out = v->valuedouble;
    return 1;
}

static int read_bool(const char *path, const cJSON *root, const char *key, int *out, rl_err *err) {
    const cJSON *v = get(root, key);
    char b[80];
    if (!v) return 0;
    if (!cJSON_IsBool(v))
        return err_set(err, "%s: %s is not true or false (found %s)", path, key, repr(v, b, sizeof b));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 1;
}

// A key rlpipe accepts only at the value that changes nothing, `want` as JSON
// ("1", "false"); absent or null is fine. why ends the message.
static int read_neutral(const char *path, const cJSON *root, const char *key, const char *want, const char *why,
                        rl_err *err) {
    const cJSON *v = get(root, key);
    if (!v) return 0;
    cJSON *w = cJSON_Parse(want);
    int same = w && cJSON_Compare(v, w, 1);
    cJSON_Delete(w);
    char b[80];
    if (!same)
        return err_set(err, "%s: %s %s is not supported (only %s: %s)", path, key, repr(v, b, sizeof b), want, why);
    return 0;
}

// A token id: an integer >= 0 (the vocabulary bound is check_at's).
static int as_token(const char *path, const char *key, const cJSON *v, int *out, rl_err *err) {
    if (as_int(path, key, v, out, err)) return -1;
    if (*out < 0) return err_set(err, "%s: %s %d is negative", path, key, *out);
    return 0;
}

// bos_token_id, pad_token_id: an integer, a list of them (the first is used),
// or absent or null (*out unchanged). 1 when present.
static int read_token(const char *path, const cJSON *root, const char *key, int *out, rl_err *err) {
    const cJSON *v = get(root, key);
    if (v && cJSON_IsArray(v)) v = v->child;
    if (!v) return 0;
    return as_token(path, key, v, out, err) ? -1 : 1;
}

// eos_token_id: an integer or a list of them (every one ends a completion),
// absent or null (none). Ids not yet in c->eos_ids join them in order; the
// first of all is c->eos_id.
static int read_eos(const char *path, const cJSON *root, model_config *c, rl_err *err) {
    const cJSON *v = get(root, "eos_token_id"), *x;
    if (!v) return 0;
    const cJSON *one = cJSON_IsArray(v) ? v->child : v;
    for (x = one; x; x = cJSON_IsArray(v) ? x->next : NULL) {
        int id, seen = 0;
        if (as_token(path, "eos_token_id", x, &id, err)) return -1;
        for (int i = 0; i < c->n_eos; i++) seen |= c->eos_ids[i] == id;
        if (seen) continue;
        if (c->n_eos == CFG_MAX_EOS) return err_set(err, "%s: eos_token_id lists more than %d ids", path, CFG_MAX_EOS);
        c->eos_ids[c->n_eos++] = id;
    }
    c->eos_id = c->n_eos ? c->eos_ids[0] : -1;
    return 0;
}

// ---- RoPE scaling --------------------------------------------------------------------

// Each rope_type and the keys transformers 4.46 reads for it. yarn's
// original_max_position_embeddings is accepted only equal to
// max_position_embeddings: 4.46 computes yarn from max_position_embeddings.
static const struct {
    const char *name;
    cfg_rope_type type;
    const char *required, *optional;      // space-separated keys
} rope_types[] = {
    {"default", CFG_ROPE_DEFAULT, "", ""},
    {"linear", CFG_ROPE_LINEAR, "factor", ""},
    {"dynamic", CFG_ROPE_DYNAMIC, "factor", "original_max_position_embeddings"},
    {"yarn", CFG_ROPE_YARN, "factor", "attention_factor beta_fast beta_slow original_max_position_embeddings"},
    {"llama3", CFG_ROPE_LLAMA3, "factor low_freq_factor high_freq_factor original_max_position_embeddings", ""},
};

static const char *rope_name(cfg_rope_type t) {
    for (size_t i = 0; i < sizeof rope_types / sizeof *rope_types; i++)
        if (rope_types[i].type == t) return rope_types[i].name;
    return "?";
}

// Whether word is one of the space-separated words of list.
static int in_list(const char *list, const char *word) {
    size_t n = strlen(word);
    if (!n) return 0;   // "" is in no list (and strstr would find it everywhere, forever)
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    return 0;
}

// rope_scaling (what = "rope_scaling") or transformers 5's rope_parameters
// (which also holds rope_theta, read by the caller) into r.
static int read_rope(const char *path, const char *what, const cJSON *obj, const model_config *c, cfg_rope *r,
                     rl_err *err) {
    char b[80], key[96];
    memset(r, 0, sizeof *r);
    if (!cJSON_IsObject(obj))
        return err_set(err, "%s: %s is not an object (found %s)", path, what, repr(obj, b, sizeof b));
    const cJSON *t = get(obj, "rope_type"), *t2 = get(obj, "type");
    if (t && t2 && !cJSON_Compare(t, t2, 1))
        return err_set(err, "%s: %s rope_type and type disagree", path, what);
    if (!t) t = t2;
    size_t k = 0;
    if (t) {
        if (!cJSON_IsString(t))
            return err_set(err, "%s: %s rope_type is not a string (found %s)", path, what, repr(t, b, sizeof b));
        while (k < sizeof rope_types / sizeof *rope_types && strcmp(rope_types[k].name, t->valuestring)) k++;
        if (k == sizeof rope_types / sizeof *rope_types)
            return err_set(err, "%s: %s rope_type %s is not supported (supported: default, linear, dynamic, yarn, "
                           "llama3)", path, what, repr(t, b, sizeof b));
    } else if (strcmp(what, "rope_scaling") == 0) {
        return err_set(err, "%s: rope_scaling has no rope_type (found %s)", path, repr(obj, b, sizeof b));
    }
    r->type = rope_types[k].type;
    const char *req = rope_types[k].required, *opt = rope_types[k].optional, *name = rope_types[k].name;
    const cJSON *x;
    cJSON_ArrayForEach(x, obj) {
        const char *s = x->string;
        if (!strcmp(s, "rope_type") || !strcmp(s, "type") || cJSON_IsNull(x) || in_list(req, s) || in_list(opt, s) ||
            (strcmp(what, "rope_parameters") == 0 && strcmp(s, "rope_theta") == 0))
            continue;
        return err_set(err, "%s: %s %s %s is not supported with rope_type \"%s\" (it takes: %s%s%s)", path, what, s,
                       repr(x, b, sizeof b), name, *req ? req : "nothing more", *opt ? ", optional: " : "", opt);
    }
    for (const char *p = req; *p;) {
        size_t n = strcspn(p, " ");
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        if (!get(obj, key)) return err_set(err, "%s: %s with rope_type \"%s\" needs %s", path, what, name, key);
        p += n + (p[n] == ' ');
    }
    const struct {
        const char *key;
        double *out;
    } numbers[] = {{"factor", &r->factor}, {"low_freq_factor", &r->low_freq_factor},
                   {"high_freq_factor", &r->high_freq_factor}, {"attention_factor", &r->attention_factor},
                   {"beta_fast", &r->beta_fast}, {"beta_slow", &r->beta_slow}};
    for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++) {
        snprintf(key, sizeof key, "%s %s", what, numbers[i].key);
        if (read_double(path, obj, numbers[i].key, key, numbers[i].out, err) < 0) return -1;
    }
    const cJSON *orig = get(obj, "original_max_position_embeddings");
    snprintf(key, sizeof key, "%s original_max_position_embeddings", what);
    if (orig && as_int(path, key, orig, &r->original_max_pos, err)) return -1;
    if (r->type != CFG_ROPE_DEFAULT && !(r->factor >= 1))
        return err_set(err, "%s: %s factor %g is not supported (a number >= 1)", path, what, r->factor);
    if (orig && r->original_max_pos < 1)
        return err_set(err, "%s: %s original_max_position_embeddings %d is not positive", path, what,
                       r->original_max_pos);
    if (r->type == CFG_ROPE_YARN && r->original_max_pos && r->original_max_pos != c->max_pos)
        return err_set(err, "%s: %s original_max_position_embeddings %d with rope_type \"yarn\" is not supported "
                       "unless it equals max_position_embeddings %d (transformers 4.46 computes yarn from "
                       "max_position_embeddings)", path, what, r->original_max_pos, c->max_pos);
    for (size_t i = 1; i < sizeof numbers / sizeof *numbers; i++)
        if (get(obj, numbers[i].key) && !(*numbers[i].out > 0))
            return err_set(err, "%s: %s %s %g is not a positive number", path, what, numbers[i].key, *numbers[i].out);
    return 0;
}

static int same_rope(const cfg_rope *a, const cfg_rope *b) {
    return a->type == b->type && a->factor == b->factor && a->low_freq_factor == b->low_freq_factor &&
           a->high_freq_factor == b->high_freq_factor && a->original_max_pos == b->original_max_pos &&
           a->attention_factor == b->attention_factor && a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow;
}

// rope_scaling, and transformers 5's rope_parameters ({"rope_type": ..,
// "rope_theta": .., and rope_scaling's keys}); when both are given they must agree.
static int read_rope_keys(const char *path, const cJSON *root, model_config *c, rl_err *err) {
    const cJSON *rs = get(root, "rope_scaling"), *rp = get(root, "rope_parameters");
    cfg_rope from_rp;
    if (rs && read_rope(path, "rope_scaling", rs, c, &c->rope, err)) return -1;
    if (!rp) return 0;
    if (read_rope(path, "rope_parameters", rp, c, &from_rp, err)) return -1;
    if (rs && !same_rope(&c->rope, &from_rp))
        return err_set(err, "%s: rope_scaling and rope_parameters disagree", path);
    c->rope = from_rp;
    double theta, top = c->rope_theta;
    int rc = read_double(path, rp, "rope_theta", "rope_parameters rope_theta", &theta, err);
    if (rc <= 0) return rc;
    if (get(root, "rope_theta") && theta != top)
        return err_set(err, "%s: rope_theta %.17g and rope_parameters rope_theta %.17g disagree", path, top, theta);
    c->rope_theta = theta;
    return 0;
}

// ---- Invariants --------------------------------------------------------------------

// The biases, norms, window and RoPE each family has.
static int check_family(const model_config *c, const struct family *f, const char *where, rl_err *err) {
    const char *t = f->type;
    if ((c->tie_embeddings | c->qkv_bias | c->o_bias | c->mlp_bias | c->qk_norm | c->has_pad) & ~1)
        return err_set(err, "%s: tie_word_embeddings, qkv_bias, o_bias, mlp_bias, qk_norm and has_pad must be 0 or 1",
                       where);
    if ((f->bit & (F_LLAMA | F_QWEN3)) && c->qkv_bias != c->o_bias)
        return err_set(err, "%s: %s has attention_bias on q, k, v and o together (qkv_bias %d, o_bias %d)", where, t,
                       c->qkv_bias, c->o_bias);
    if (f->bit == F_QWEN2 && !(c->qkv_bias == 1 && c->o_bias == 0))
        return err_set(err, "%s: qwen2 has biases on q, k, v and none on o (qkv_bias %d, o_bias %d)", where,
                       c->qkv_bias, c->o_bias);
    if (f->bit == F_MISTRAL && (c->qkv_bias || c->o_bias))
        return err_set(err, "%s: mistral has no attention biases (qkv_bias %d, o_bias %d)", where, c->qkv_bias,
                       c->o_bias);
    if (f->bit != F_LLAMA && c->mlp_bias) return err_set(err, "%s: %s has no mlp_bias", where, t);
    if (c->qk_norm != (f->bit == F_QWEN3))
        return err_set(err, "%s: %s %s q_norm and k_norm (qk_norm %d)", where, t, f->bit == F_QWEN3 ? "has" : "has no",
                       c->qk_norm);
    if (f->bit == F_QWEN2 && c->heads * c->head_dim != c->hidden)
        return err_set(err, "%s: head_dim %d is not hidden_size %d / num_attention_heads %d (transformers 4.46's "
                       "Qwen2 takes its head size from those)", where, c->head_dim, c->hidden, c->heads);
    if (c->sliding_window < 0 || (c->sliding_window && f->bit == F_LLAMA))
        return err_set(err, "%s: sliding_window %d: %s", where, c->sliding_window,
                       f->bit == F_LLAMA ? "llama has none" : "must be positive, or 0 for none");
    if (f->bit == F_MISTRAL && c->rope.type != CFG_ROPE_DEFAULT)
        return err_set(err, "%s: mistral has no rope_scaling (transformers 4.46's Mistral does not read it)", where);
    return 0;
}

static int check_rope(const cfg_rope *r, const char *where, rl_err *err) {
    if (r->type < CFG_ROPE_DEFAULT || r->type > CFG_ROPE_LLAMA3)
        return err_set(err, "%s: rope_scaling type %d is not one of rlpipe's", where, (int)r->type);
    if (r->type == CFG_ROPE_DEFAULT) return 0;
    const char *t = rope_name(r->type);
    if (!(isfinite(r->factor) && r->factor >= 1))
        return err_set(err, "%s: rope_scaling %s factor %g is not a number >= 1", where, t, r->factor);
    if (r->original_max_pos < 0 || (r->type == CFG_ROPE_LLAMA3 && r->original_max_pos < 1))
        return err_set(err, "%s: rope_scaling %s original_max_position_embeddings %d is not positive", where, t,
                       r->original_max_pos);
    if (r->type == CFG_ROPE_LLAMA3 &&
        !(isfinite(r->high_freq_factor) && r->low_freq_factor > 0 && r->high_freq_factor > r->low_freq_factor))
        return err_set(err, "%s: rope_scaling llama3 needs 0 < low_freq_factor < high_freq_factor (found %g and %g)",
                       where, r->low_freq_factor, r->high_freq_factor);
    double fast = r->beta_fast ? r->beta_fast : 32, slow = r->beta_slow ? r->beta_slow : 1;
    if (r->type == CFG_ROPE_YARN && !(isfinite(r->attention_factor) && r->attention_factor >= 0 && isfinite(fast) &&
                                      isfinite(slow) && slow > 0 && fast >= slow))
        return err_set(err, "%s: rope_scaling yarn needs attention_factor >= 0 and beta_fast >= beta_slow > 0 (found "
                       "%g, %g and %g)", where, r->attention_factor, fast, slow);
    return 0;
}

// Every invariant of a config; `where` starts the messages (the file, or "config").
static int check_at(const model_config *c, const char *where, rl_err *err) {
    const struct family *f = memchr(c->model_type, 0, sizeof c->model_type) ? family_of(c->model_type) : NULL;
    if (!f)
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
    if (check_family(c, f, where, err) || check_rope(&c->rope, where, err)) return -1;
    const struct {
        const char *key;
        int id;
    } tokens[] = {{"bos_token_id", c->bos_id}, {"eos_token_id", c->eos_id},
                  {"pad_token_id", c->has_pad ? c->pad_id : -1}};
    for (size_t i = 0; i < sizeof tokens / sizeof *tokens; i++)
        if (tokens[i].id < -1 || tokens[i].id >= c->vocab)
            return err_set(err, "%s: %s %d is not a token id (0 to %d, or -1 for none)", where, tokens[i].key,
                           tokens[i].id, c->vocab - 1);
    if (c->n_eos < 0 || c->n_eos > CFG_MAX_EOS || (c->n_eos && c->eos_ids[0] != c->eos_id))
        return err_set(err, "%s: eos_token_id: %d ids in the list, the first %d", where, c->n_eos, c->eos_id);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab)
            return err_set(err, "%s: eos_token_id %d is not a token id (0 to %d)", where, c->eos_ids[i], c->vocab - 1);
    if (!memchr(c->torch_dtype, 0, sizeof c->torch_dtype) ||
        (c->torch_dtype[0] && strcmp(c->torch_dtype, "float32") && strcmp(c->torch_dtype, "bfloat16") &&
         strcmp(c->torch_dtype, "float16")))
        return err_set(err, "%s: torch_dtype is not float32, bfloat16 or float16", where);

    // Parameter count, overflow-checked: each factor is at most 2^24, a layer
    // fits in 64 bits, the product with the layer count may not.
    uint64_t C = (uint64_t)c->hidden, F = (uint64_t)c->inter, V = (uint64_t)c->vocab, HS = (uint64_t)c->head_dim;
    uint64_t q = (uint64_t)c->heads * HS, kv = (uint64_t)c->kv_heads * HS;
    uint64_t layer = 2 * C + C * q + 2 * C * kv + q * C + 3 * C * F + (c->qkv_bias ? q + 2 * kv : 0) +
                     (c->o_bias ? C : 0) + (c->mlp_bias ? 2 * F + C : 0) + (c->qk_norm ? 2 * HS : 0);
    uint64_t total;
    if (__builtin_mul_overflow(layer, (uint64_t)c->layers, &total) ||
        __builtin_add_overflow(total, V * C * (c->tie_embeddings ? 1 : 2) + C, &total) || total > CFG_MAX_PARAMS)
        return err_set(err, "%s: hidden_size %d, intermediate_size %d, num_hidden_layers %d and vocab_size %d make "
                       "more than 2^40 parameters", where, c->hidden, c->inter, c->layers, c->vocab);
    return 0;
}

int cfg_check(const model_config *c, rl_err *err) { return check_at(c, "config", err); }

// ---- Reading config.json -------------------------------------------------------------

// Refuses a key that no family reads or ignores on purpose (see known_keys),
// unless its value is null.
static int check_keys(const char *path, const cJSON *root, const struct family *f, rl_err *err) {
    const cJSON *x;
    char b[80];
    cJSON_ArrayForEach(x, root) {
        if (x->string[0] == '_' || cJSON_IsNull(x)) continue;
        size_t i = 0;
        while (i < sizeof known_keys / sizeof *known_keys &&
               !(strcmp(known_keys[i].key, x->string) == 0 && (known_keys[i].families & f->bit)))
            i++;
        if (i == sizeof known_keys / sizeof *known_keys)
            return err_set(err, "%s: %s %s is not supported for model_type %s (not a key rlpipe reads or knows to "
                           "change nothing)", path, x->string, repr(x, b, sizeof b), f->type);
    }
    return 0;
}

// torch_dtype (or transformers 5's dtype): the dtype the weights were saved at.
static int read_dtype(const char *path, const cJSON *root, model_config *c, rl_err *err) {
    const char *keys[] = {"torch_dtype", "dtype"};
    char b[80];
    for (int i = 0; i < 2; i++) {
        const cJSON *v = get(root, keys[i]);
        if (!v) continue;
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "float32") && strcmp(v->valuestring, "bfloat16") &&
                                   strcmp(v->valuestring, "float16")))
            return err_set(err, "%s: %s %s is not supported (float32, bfloat16 or float16)", path, keys[i],
                           repr(v, b, sizeof b));
        if (c->torch_dtype[0] && strcmp(c->torch_dtype, v->valuestring))
            return err_set(err, "%s: torch_dtype \"%s\" and dtype \"%s\" disagree", path, c->torch_dtype,
                           v->valuestring);
        snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", v->valuestring);
    }
    return 0;
}

// The attention window: Mistral's sliding_window (absent: 4096, null: none);
// Qwen's only with use_sliding_window true (absent: 4096, null: none).
static int read_window(const char *path, const cJSON *root, const struct family *f, model_config *c, rl_err *err) {
    int on = f->bit == F_MISTRAL;
    if (f->bit & (F_QWEN2 | F_QWEN3))
        if (read_bool(path, root, "use_sliding_window", &on, err) < 0) return -1;
    if (!on) return 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (cJSON_IsNull(v)) return 0;
    c->sliding_window = f->window;
    if (v && as_int(path, "sliding_window", v, &c->sliding_window, err)) return -1;
    if (c->sliding_window < 1) return err_set(err, "%s: sliding_window %d is not positive", path, c->sliding_window);
    return 0;
}

// Newer transformers' layer_types (Qwen): "full_attention" or "sliding_attention"
// per layer; sliding layers only with a window, whose longer sequences are refused.
static int read_layer_types(const char *path, const cJSON *root, model_config *c, rl_err *err) {
    const cJSON *v = get(root, "layer_types"), *x;
    char b[80];
    if (!v) return 0;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != c->layers)
        return err_set(err, "%s: layer_types is not a list of num_hidden_layers %d names (found %s)", path, c->layers,
                       repr(v, b, sizeof b));
    cJSON_ArrayForEach(x, v) {
        int sliding = cJSON_IsString(x) && strcmp(x->valuestring, "sliding_attention") == 0;
        if (!(cJSON_IsString(x) && (sliding || strcmp(x->valuestring, "full_attention") == 0)) ||
            (sliding && !c->sliding_window))
            return err_set(err, "%s: layer_types %s is not supported (full_attention, or sliding_attention with "
                           "use_sliding_window true)", path, repr(x, b, sizeof b));
    }
    return 0;
}

// The biases and norms each family has; the keys that only one value of is supported.
static int read_layout(const char *path, const cJSON *root, const struct family *f, model_config *c, rl_err *err) {
    int ab = 0;
    if (f->bit & (F_LLAMA | F_QWEN3))
        if (read_bool(path, root, "attention_bias", &ab, err) < 0) return -1;
    c->qkv_bias = f->bit == F_QWEN2 ? 1 : ab;         // Qwen2: q/k/v biases whatever attention_bias says
    c->o_bias = f->bit == F_QWEN2 ? 0 : ab;
    c->qk_norm = f->bit == F_QWEN3;
    if (f->bit == F_LLAMA && read_bool(path, root, "mlp_bias", &c->mlp_bias, err) < 0) return -1;
    if ((f->bit != F_LLAMA && read_neutral(path, root, "mlp_bias", "false", "only llama has MLP biases", err)) ||
        (f->bit == F_MISTRAL &&
         read_neutral(path, root, "attention_bias", "false", "transformers' Mistral has no attention biases", err)) ||
        (f->bit == F_MISTRAL &&
         read_neutral(path, root, "rope_scaling", "null", "transformers 4.46's Mistral does not read it", err)) ||
        read_neutral(path, root, "pretraining_tp", "1", "split products are not supported", err) ||
        read_neutral(path, root, "attention_dropout", "0", "rlpipe trains without dropout", err) ||
        read_neutral(path, root, "rope_interleaved", "false", "rotary pairs are (i, i + head_dim/2)", err) ||
        read_neutral(path, root, "use_mrope", "false", "multimodal RoPE is not supported", err) ||
        read_neutral(path, root, "is_encoder_decoder", "false", "a decoder-only model", err) ||
        read_neutral(path, root, "add_cross_attention", "false", "a decoder-only model", err) ||
        read_neutral(path, root, "tie_encoder_decoder", "false", "a decoder-only model", err) ||
        read_neutral(path, root, "pruned_heads", "{}", "pruned heads are not supported", err) ||
        read_neutral(path, root, "chunk_size_feed_forward", "0", "the MLP runs whole", err))
        return -1;
    return 0;
}

// Fills c from the parsed file; cross-key checks are left to check_at.
static int parse(const char *path, const cJSON *root, model_config *c, rl_err *err) {
    char b[80];
    memset(c, 0, sizeof *c);
    c->bos_id = c->eos_id = -1;
    if (!cJSON_IsObject(root)) return err_set(err, "%s: not a JSON object", path);

    const cJSON *mt = get(root, "model_type");
    if (!mt) return err_set(err, "%s: model_type is missing (" CFG_SUPPORTED ")", path);
    const struct family *f = cJSON_IsString(mt) ? family_of(mt->valuestring) : NULL;
    if (!f) return err_set(err, "%s: model_type %s is not supported (" CFG_SUPPORTED ")", path, repr(mt, b, sizeof b));
    snprintf(c->model_type, sizeof c->model_type, "%s", f->type);
    if (check_keys(path, root, f, err)) return -1;

    const cJSON *act = get(root, "hidden_act");
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
        return err_set(err, "%s: hidden_act %s is not supported (only \"silu\")", path, repr(act, b, sizeof b));

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
    // absent: the family's default; null: num_attention_heads (as transformers)
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
    c->kv_heads = kv || !f->kv_heads ? c->heads : f->kv_heads;
    if (read_int(path, root, "num_key_value_heads", 0, &c->kv_heads, err) < 0) return -1;
    if ((rc = read_int(path, root, "head_dim", 0, &c->head_dim, err)) < 0) return -1;
    if (rc == 0 && f->head_dim) c->head_dim = f->head_dim;
    else if (rc == 0 || f->bit == F_QWEN2) {   // transformers 4.46's Qwen2 does not read head_dim
        if (c->hidden % c->heads)
            return err_set(err, "%s: num_attention_heads %d does not divide hidden_size %d (and head_dim is not given)",
                           path, c->heads, c->hidden);
        if (rc && c->head_dim != c->hidden / c->heads)
            return err_set(err, "%s: head_dim %d is not supported for qwen2 unless it is hidden_size / "
                           "num_attention_heads = %d (transformers 4.46's Qwen2 does not read it)", path, c->head_dim,
                           c->hidden / c->heads);
        c->head_dim = c->hidden / c->heads;
    }
    c->max_pos = f->max_pos;
    if (read_int(path, root, "max_position_embeddings", 0, &c->max_pos, err) < 0) return -1;
    c->rms_eps = 1e-6;
    c->rope_theta = 10000;
    if (read_bool(path, root, "tie_word_embeddings", &c->tie_embeddings, err) < 0 ||
        read_layout(path, root, f, c, err) || read_window(path, root, f, c, err) ||
        read_layer_types(path, root, c, err) || read_dtype(path, root, c, err))
        return -1;
    if (read_double(path, root, "rms_norm_eps", "rms_norm_eps", &c->rms_eps, err) < 0 ||
        read_double(path, root, "rope_theta", "rope_theta", &c->rope_theta, err) < 0 ||
        read_rope_keys(path, root, c, err))
        return -1;
    if (read_token(path, root, "bos_token_id", &c->bos_id, err) < 0 ||
        (c->has_pad = read_token(path, root, "pad_token_id", &c->pad_id, err)) < 0 || read_eos(path, root, c, err))
        return -1;
    return 0;
}

// ---- generation_config.json ----------------------------------------------------------

// DIR/generation_config.json, when the directory of config file `file` has
// one: eos ids join c's, bos and pad fill c's absent ones, the sampling
// defaults go to c->gen (recorded, never applied). Other keys are not read.
static int read_generation(const char *file, model_config *c, rl_err *err) {
    char dir[4096], path[4200];
    cfg_generation *g = &c->gen;
    *g = (cfg_generation){.do_sample = -1, .top_k = -1, .max_new_tokens = -1, .temperature = NAN, .top_p = NAN,
                          .min_p = NAN, .repetition_penalty = NAN};
    if (path_parent(file, dir, sizeof dir)) return err_set(err, "%s: path too long", file);
    snprintf(path, sizeof path, "%s/" CFG_GENERATION, dir);
    cJSON *root = jsonfile_load(path, CFG_MAX_FILE, err);
    if (!root) return errno == ENOENT ? 0 : -1;
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        err_set(err, "%s: not a JSON object", path);
        goto out;
    }
    g->present = 1;
    int bos = -1, pad = -1;
    const struct {
        const char *key;
        double *out;
    } numbers[] = {{"temperature", &g->temperature}, {"top_p", &g->top_p}, {"min_p", &g->min_p},
                   {"repetition_penalty", &g->repetition_penalty}};
    for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++)
        if (read_double(path, root, numbers[i].key, numbers[i].key, numbers[i].out, err) < 0) goto out;
    if (read_int(path, root, "top_k", 0, &g->top_k, err) < 0 ||
        read_int(path, root, "max_new_tokens", 0, &g->max_new_tokens, err) < 0 ||
        read_bool(path, root, "do_sample", &g->do_sample, err) < 0 || read_eos(path, root, c, err) ||
        read_token(path, root, "bos_token_id", &bos, err) < 0 || read_token(path, root, "pad_token_id", &pad, err) < 0)
        goto out;
    if (c->bos_id < 0) c->bos_id = bos;
    if (!c->has_pad && pad >= 0) {
        c->has_pad = 1;
        c->pad_id = pad;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

int cfg_load(const char *path, model_config *c, rl_err *err) {
    char *file = config_path(path);
    int rc = -1;
    cJSON *root = jsonfile_load(file, CFG_MAX_FILE, err);
    if (!root) goto out;
    if (parse(file, root, c, err) == 0 && read_generation(file, c, err) == 0 && check_at(c, file, err) == 0) rc = 0;
out:
    cJSON_Delete(root);
    free(file);
    return rc;
}

// ---- Writing config.json -------------------------------------------------------------

// The shortest of %.15g, %.16g, %.17g that reads back as exactly d; with
// float_form, integral values get ".0", as Python writes floats (transformers
// warns about an int rope_scaling factor).
static void put_double(sbuf *b, double d, int float_form) {
    char s[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, d);
        if (strtod(s, NULL) == d) break;
    }
    sbuf_printf(b, "%s%s", s, float_form && !strpbrk(s, ".en") ? ".0" : "");
}

static void put_token(sbuf *b, const char *key, int id) {
    if (id < 0) sbuf_printf(b, "  \"%s\": null,\n", key);
    else sbuf_printf(b, "  \"%s\": %d,\n", key, id);
}

static void put_bool(sbuf *b, const char *key, int v) { sbuf_printf(b, "  \"%s\": %s,\n", key, v ? "true" : "false"); }

// rope_scaling as transformers 4.46 validates it without a warning: floats
// written as floats, only the keys the type takes.
static void put_rope(sbuf *b, const cfg_rope *r) {
    if (r->type == CFG_ROPE_DEFAULT) {
        sbuf_printf(b, "  \"rope_scaling\": null,\n");
        return;
    }
    sbuf_printf(b, "  \"rope_scaling\": {\"rope_type\": \"%s\", \"factor\": ", rope_name(r->type));
    put_double(b, r->factor, 1);
    const struct {
        const char *key;
        double v;
        int on;
    } extra[] = {{"low_freq_factor", r->low_freq_factor, r->type == CFG_ROPE_LLAMA3},
                 {"high_freq_factor", r->high_freq_factor, r->type == CFG_ROPE_LLAMA3},
                 {"attention_factor", r->attention_factor, r->type == CFG_ROPE_YARN && r->attention_factor > 0},
                 {"beta_fast", r->beta_fast, r->type == CFG_ROPE_YARN && r->beta_fast > 0},
                 {"beta_slow", r->beta_slow, r->type == CFG_ROPE_YARN && r->beta_slow > 0}};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
        if (extra[i].on) {
            sbuf_printf(b, ", \"%s\": ", extra[i].key);
            put_double(b, extra[i].v, 1);
        }
    // yarn's is max_position_embeddings (read_rope), which 4.46 uses and would warn about
    if (r->original_max_pos && r->type != CFG_ROPE_YARN)
        sbuf_printf(b, ", \"original_max_position_embeddings\": %d", r->original_max_pos);
    sbuf_printf(b, "},\n");
}

int cfg_save(const char *path, const model_config *c, rl_err *err) {
    char *file = config_path(path);
    if (check_at(c, file, err)) {
        free(file);
        return -1;
    }
    const struct family *f = family_of(c->model_type);
    sbuf b = {0};
    sbuf_printf(&b, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", f->arch, f->type);
    sbuf_printf(&b, "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
                "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n",
                c->hidden, c->inter, c->layers, c->heads, c->kv_heads, c->head_dim, c->vocab, c->max_pos);
    sbuf_printf(&b, "  \"rms_norm_eps\": ");
    put_double(&b, c->rms_eps, 0);
    sbuf_printf(&b, ",\n  \"rope_theta\": ");
    put_double(&b, c->rope_theta, 1);
    sbuf_printf(&b, ",\n");
    if (f->bit != F_MISTRAL) put_rope(&b, &c->rope);
    put_bool(&b, "tie_word_embeddings", c->tie_embeddings);
    sbuf_printf(&b, "  \"hidden_act\": \"silu\",\n");
    if (f->bit & (F_LLAMA | F_QWEN3)) put_bool(&b, "attention_bias", c->qkv_bias);
    if (f->bit == F_LLAMA) put_bool(&b, "mlp_bias", c->mlp_bias);
    if (f->bit & (F_QWEN2 | F_QWEN3)) put_bool(&b, "use_sliding_window", c->sliding_window > 0);
    if (f->bit != F_LLAMA) put_token(&b, "sliding_window", c->sliding_window > 0 ? c->sliding_window : -1);
    put_token(&b, "bos_token_id", c->bos_id);
    if (c->has_pad) put_token(&b, "pad_token_id", c->pad_id);
    if (c->n_eos > 1) {
        sbuf_printf(&b, "  \"eos_token_id\": [");
        for (int i = 0; i < c->n_eos; i++) sbuf_printf(&b, "%s%d", i ? ", " : "", c->eos_ids[i]);
        sbuf_printf(&b, "],\n");
    } else put_token(&b, "eos_token_id", c->eos_id);
    sbuf_printf(&b, "  \"torch_dtype\": \"%s\"\n}\n", c->torch_dtype[0] ? c->torch_dtype : "float32");
    int rc = write_file_sync(file, b.data, b.len, err);
    sbuf_free(&b);
    free(file);
    return rc;
}

// ---- What tools show -------------------------------------------------------------------

int cfg_max_seq(const model_config *c, const char **why) {
    int n = c->max_pos;
    const char *w = "max_position_embeddings";
    if (c->sliding_window > 0 && c->sliding_window < n) {
        n = c->sliding_window;
        w = "sliding_window";
    }
    // dynamic NTK scaling changes inv_freq for longer sequences (transformers
    // 4.46 past max_position_embeddings; others past the original length)
    if (c->rope.type == CFG_ROPE_DYNAMIC && c->rope.original_max_pos > 0 && c->rope.original_max_pos < n) {
        n = c->rope.original_max_pos;
        w = "rope_scaling dynamic original_max_position_embeddings";
    }
    if (why) *why = w;
    return n;
}

void cfg_generation_str(const model_config *c, char *buf, size_t size) {
    const cfg_generation *g = &c->gen;
    sbuf b = {0};
    if (g->present) {
        if (g->do_sample >= 0) sbuf_printf(&b, ", do_sample %s", g->do_sample ? "true" : "false");
        const struct {
            const char *key;
            double v;
        } numbers[] = {{"temperature", g->temperature}, {"top_p", g->top_p}, {"min_p", g->min_p},
                       {"repetition_penalty", g->repetition_penalty}};
        for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++)
            if (!isnan(numbers[i].v)) sbuf_printf(&b, ", %s %g", numbers[i].key, numbers[i].v);
        if (g->top_k >= 0) sbuf_printf(&b, ", top_k %d", g->top_k);
        if (g->max_new_tokens >= 0) sbuf_printf(&b, ", max_new_tokens %d", g->max_new_tokens);
    }
    snprintf(buf, size, "%.*s", b.len > 2 ? (int)(b.len - 2) : 0, b.len > 2 ? (const char *)b.data + 2 : "");
    sbuf_free(&b);
}
