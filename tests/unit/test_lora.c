// Unit tests of LoRA adapters in PEFT's layout (checkpoint/lora.c): tensor
// names, target lists, the scale, the shapes of a base's matrices, the merge
// against a double-precision loop, adapter_config.json read and written
// (every option rlpipe does not compute refused, naming the file and the
// key), and adapter directories written, read back and refused (this file is
// also built with ASan + UBSan). tests/py/test_lora_files.py checks the files
// against PEFT itself.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "checkpoint/lora.h"
#include "checkpoint/safetensors.h"
#include "rng.h"
#include "tmpdir.h"

static char tmp_dir[256];

static const char *tmp_path(const char *name) { return tmpdir_file(tmp_dir, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        perror(path);
        exit(2);
    }
}

// A small grouped-query base: C 32, F 48, L 3, NH 4, NKV 2, HS 8.
static model_config small_base(void) {
    model_config mc;
    memset(&mc, 0, sizeof mc);
    strcpy(mc.model_type, "llama");
    mc.hidden = 32, mc.inter = 48, mc.layers = 3, mc.heads = 4, mc.kv_heads = 2, mc.head_dim = 8;
    mc.vocab = 64, mc.max_pos = 128, mc.rms_eps = 1e-6, mc.rope_theta = 10000;
    mc.bos_id = mc.eos_id = -1;
    return mc;
}

static void fill_random(float *p, size_t n, rl_rng *r) {
    for (size_t i = 0; i < n; i++) p[i] = (float)rng_normal(r);
}

// ---- names, targets, scale, shapes ----------------------------------------------

static void tensor_names_are_peft_s_and_parse_back_to_layer_target_and_matrix(void) {
    char name[160];
    lora_tensor_name(name, sizeof name, 3, LORA_Q, 0);
    CHECK(strcmp(name, "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight") == 0, "%s", name);
    lora_tensor_name(name, sizeof name, 27, LORA_DOWN, 1);
    CHECK(strcmp(name, "base_model.model.model.layers.27.mlp.down_proj.lora_B.weight") == 0, "%s", name);
    for (int l = 0; l < 120; l++)
        for (int t = 0; t < LORA_NT; t++)
            for (int ab = 0; ab < 2; ab++) {
                int l2 = -1, t2 = -1, ab2 = -1;
                lora_tensor_name(name, sizeof name, l, t, ab);
                CHECK(lora_tensor_parse(name, &l2, &t2, &ab2) == 0 && l2 == l && t2 == t && ab2 == ab,
                      "%s parsed as layer %d target %d ab %d", name, l2, t2, ab2);
            }
}

static void names_of_other_tensors_do_not_parse(void) {
    const char *other[] = {
        "base_model.model.model.layers.03.self_attn.q_proj.lora_A.weight",     // a leading zero
        "base_model.model.model.layers.-1.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers..self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.0.mlp.q_proj.lora_A.weight",            // q_proj is attention's
        "base_model.model.model.layers.0.self_attn.gate_proj.lora_B.weight",   // gate_proj is the MLP's
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_C.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight.x",
        "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight",
        "base_model.model.model.layers.99999999999.self_attn.q_proj.lora_A.weight",
        "base_model.model.lm_head.lora_A.weight",
        "model.layers.0.self_attn.q_proj.lora_A.weight",
        "",
    };
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        int l, t, ab;
        CHECK(lora_tensor_parse(other[i], &l, &t, &ab) == -1, "'%s' parsed", other[i]);
    }
}

static void all_linear_targets_every_module_and_lists_name_subsets_in_any_order(void) {
    unsigned t = 0;
    rl_err e;
    char s[128];
    CHECK(lora_parse_targets("all-linear", &t, &e) == 0 && t == LORA_ALL, "0x%x", t);
    CHECK(LORA_ALL == 0x7f, "0x%x", LORA_ALL);
    lora_targets_str(t, s, sizeof s);
    CHECK(strcmp(s, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj") == 0, "%s", s);
    CHECK(lora_parse_targets("v_proj,q_proj", &t, &e) == 0 && t == ((1u << LORA_Q) | (1u << LORA_V)), "0x%x", t);
    lora_targets_str(t, s, sizeof s);
    CHECK(strcmp(s, "q_proj,v_proj") == 0, "%s", s);
    CHECK(lora_parse_targets("down_proj", &t, &e) == 0 && t == 1u << LORA_DOWN, "0x%x", t);
    lora_targets_str(t, s, 5);   // cut to the buffer, terminated
    CHECK(strcmp(s, "down") == 0, "%s", s);
}

static void target_lists_refuse_unknown_names_repeats_and_empty_items(void) {
    const struct {
        const char *s, *msg;
    } bad[] = {
        {"q_proj,lm_head", "\"lm_head\""},
        {"q_proj,v_proj,q_proj", "q_proj is named twice"},
        {"", "\"\""},
        {"q_proj,", "\"\""},
        {"q_proj, v_proj", "\" v_proj\""},
        {"Q_PROJ", "\"Q_PROJ\""},
        {"all-linear,q_proj", "\"all-linear\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unsigned t = 0x55;
        rl_err e;
        e.msg[0] = 0;
        CHECK(lora_parse_targets(bad[i].s, &t, &e) == -1, "'%s' accepted", bad[i].s);
        CHECK(strstr(e.msg, bad[i].msg) && t == 0x55, "'%s': %s", bad[i].s, e.msg);
    }
}

static void scale_is_alpha_over_r_or_over_its_square_root_with_rslora(void) {
    lora_config c = {.rank = 16, .alpha = 32, .targets = LORA_ALL};
    CHECK(lora_scale(&c) == 2.0f, "%.9g", (double)lora_scale(&c));
    c.rslora = 1;
    CHECK(lora_scale(&c) == 8.0f, "%.9g", (double)lora_scale(&c));
    c = (lora_config){.rank = 3, .alpha = 1, .targets = 1};
    CHECK(lora_scale(&c) == (float)(1.0 / 3.0), "%.9g", (double)lora_scale(&c));
}

static void module_shapes_follow_the_base_config_with_grouped_query_attention(void) {
    model_config mc = small_base();
    const int want[LORA_NT][2] = {{32, 32}, {16, 32}, {16, 32}, {32, 32}, {48, 32}, {48, 32}, {32, 48}};
    for (int t = 0; t < LORA_NT; t++) {
        int out, in;
        lora_dims(&mc, t, &out, &in);
        CHECK(out == want[t][0] && in == want[t][1], "%s: (%d, %d)", lora_target_names[t], out, in);
    }
    mc.head_dim = 16;   // heads · head_dim need not be hidden (qwen3)
    int out, in;
    lora_dims(&mc, LORA_O, &out, &in);
    CHECK(out == 32 && in == 64, "o_proj (%d, %d)", out, in);
}

// ---- merge ------------------------------------------------------------------------

// W + scale · B A in double, against lora_merge's f32. The f32 steps are a
// dot product of r terms (error at most r·u·Σ|b a|, u = 2^-24, first order),
// a product by scale and a sum (u of each result): every element within
// u·((r + 2)·scale·Σ_k |B[i,k] A[k,j]| + |W[i,j]|), times 1.01 for the
// second-order terms.
static void merge_adds_scaled_b_times_a_within_the_f32_rounding_bound(void) {
    enum { OUT = 37, IN = 53, R = 5 };
    const float scale = 2.5f;
    static float W[OUT * IN], W0[OUT * IN], B[OUT * R], A[R * IN];
    rl_rng rng;
    rng_seed(&rng, 11);
    fill_random(W0, OUT * IN, &rng);
    fill_random(B, OUT * R, &rng);
    fill_random(A, R * IN, &rng);
    memcpy(W, W0, sizeof W);
    lora_merge(W, OUT, IN, B, A, R, scale);
    double worst = 0, u = ldexp(1, -24);
    int changed = 0;
    for (int i = 0; i < OUT; i++)
        for (int j = 0; j < IN; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < R; k++) {
                s += (double)B[i * R + k] * A[k * IN + j];
                mag += fabs((double)B[i * R + k] * A[k * IN + j]);
            }
            double want = W0[i * IN + j] + scale * s, got = W[i * IN + j];
            double tol = 1.01 * u * ((R + 2) * scale * mag + fabs(W0[i * IN + j]));
            CHECK(fabs(got - want) <= tol, "W[%d,%d] %.9g, double %.17g, tolerance %.3g", i, j, got, want, tol);
            if (tol > 0 && fabs(got - want) / tol > worst) worst = fabs(got - want) / tol;
            changed += got != W0[i * IN + j];
        }
    CHECK(changed > OUT * IN * 9 / 10, "only %d of %d elements changed", changed, OUT * IN);
    printf("# merge: worst error %.3f of the bound\n", worst);
}

static void merging_a_zero_b_leaves_w_bit_for_bit(void) {
    enum { OUT = 9, IN = 17, R = 3 };
    float W[OUT * IN], W0[OUT * IN], B[OUT * R] = {0}, A[R * IN];
    rl_rng rng;
    rng_seed(&rng, 5);
    fill_random(W0, OUT * IN, &rng);
    fill_random(A, R * IN, &rng);
    memcpy(W, W0, sizeof W);
    lora_merge(W, OUT, IN, B, A, R, 4.0f);
    CHECK(memcmp(W, W0, sizeof W) == 0, "W changed");
}

// ---- adapter_config.json ------------------------------------------------------------

static void a_written_config_reads_back_with_the_same_values(void) {
    lora_config c = {.rank = 7, .alpha = 3.5, .rslora = 1, .targets = (1u << LORA_Q) | (1u << LORA_O) | (1u << LORA_DOWN)};
    strcpy(c.base, "org/Model \"quoted\" \\ \xc3\xa9");
    rl_err e;
    CHECK(lora_config_write(tmp_dir, &c, &e) == 0, "%s", e.msg);   // a directory: its adapter_config.json
    lora_config back;
    double dropout = -1;
    CHECK(lora_config_read(tmp_path(LORA_CONFIG), &back, &dropout, &e) == 0, "%s", e.msg);
    CHECK(back.rank == 7 && back.alpha == 3.5 && back.rslora == 1 && back.targets == c.targets && dropout == 0,
          "r %d alpha %g rslora %d targets 0x%x dropout %g", back.rank, back.alpha, back.rslora, back.targets, dropout);
    CHECK(strcmp(back.base, c.base) == 0, "base '%s'", back.base);
    c = (lora_config){.rank = 1, .alpha = 0.1, .targets = LORA_ALL};
    CHECK(lora_config_write(tmp_path("c2.json"), &c, &e) == 0, "%s", e.msg);
    CHECK(lora_config_read(tmp_path("c2.json"), &back, NULL, &e) == 0, "%s", e.msg);
    CHECK(back.rank == 1 && back.alpha == 0.1 && !back.rslora && back.targets == LORA_ALL && !back.base[0],
          "r %d alpha %.17g targets 0x%x base '%s'", back.rank, back.alpha, back.targets, back.base);
    c.rank = 0;
    CHECK(lora_config_write(tmp_path("c3.json"), &c, &e) == -1 && strstr(e.msg, "c3.json"), "%s", e.msg);
}

// PEFT's defaults around the keys each case sets (later keys win: none is repeated).
static const char *with_defaults(const char *keys) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "{%s%s\"peft_type\": \"LORA\"}", keys, *keys ? ", " : "");
    return buf;
}

static void peft_s_defaults_unknown_keys_repeats_and_all_linear_are_accepted(void) {
    const struct {
        const char *keys;
        unsigned targets;
        double dropout;
    } good[] = {
        {"\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"v_proj\"], \"use_dora\": false, "
         "\"bias\": \"none\", \"modules_to_save\": null, \"layers_to_transform\": null, \"layers_pattern\": null, "
         "\"layer_replication\": null, \"rank_pattern\": {}, \"alpha_pattern\": {}, \"fan_in_fan_out\": false, "
         "\"lora_dropout\": 0.05, \"task_type\": \"CAUSAL_LM\", \"inference_mode\": true, "
         "\"init_lora_weights\": \"gaussian\", \"loftq_config\": {}, \"megatron_core\": \"megatron.core\", "
         "\"revision\": null, \"auto_mapping\": null, \"base_model_name_or_path\": null",
         (1u << LORA_Q) | (1u << LORA_V), 0.05},
        {"\"r\": 4, \"lora_alpha\": 8.0, \"target_modules\": \"all-linear\", \"a_key_of_a_later_peft\": {\"x\": [1]}, "
         "\"lora_bias\": false, \"exclude_modules\": null, \"modules_to_save\": []",
         LORA_ALL, 0},
        {"\"r\": 2, \"lora_alpha\": 1, \"target_modules\": [\"up_proj\", \"up_proj\", \"gate_proj\"]",
         (1u << LORA_UP) | (1u << LORA_GATE), 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        write_text(tmp_path("good.json"), with_defaults(good[i].keys));
        lora_config c;
        double dropout = -1;
        rl_err e;
        CHECK(lora_config_read(tmp_path("good.json"), &c, &dropout, &e) == 0, "case %zu: %s", i, e.msg);
        CHECK(c.targets == good[i].targets && dropout == good[i].dropout, "case %zu: targets 0x%x dropout %g", i,
              c.targets, dropout);
    }
}

static void options_rlpipe_does_not_compute_are_refused_naming_the_file_and_key(void) {
#define BASE "\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], "
    const struct {
        const char *keys, *msg;   // keys around PEFT's defaults, or a whole file when it starts with [ or {
    } bad[] = {
        {BASE "\"use_dora\": true", "use_dora"},
        {BASE "\"bias\": \"all\"", "bias \"all\""},
        {BASE "\"bias\": \"lora_only\"", "bias \"lora_only\""},
        {BASE "\"modules_to_save\": [\"lm_head\"]", "modules_to_save"},
        {BASE "\"layers_to_transform\": [0, 1]", "layers_to_transform"},
        {BASE "\"layers_to_transform\": []", "layers_to_transform"},
        {BASE "\"layers_pattern\": \"layers\"", "layers_pattern"},
        {BASE "\"layer_replication\": [[0, 2]]", "layer_replication"},
        {BASE "\"rank_pattern\": {\"q_proj\": 8}", "rank_pattern"},
        {BASE "\"alpha_pattern\": {\"q_proj\": 8}", "alpha_pattern"},
        {BASE "\"fan_in_fan_out\": true", "fan_in_fan_out"},
        {BASE "\"lora_bias\": true", "lora_bias"},
        {BASE "\"init_lora_weights\": \"pissa_niter_4\"", "init_lora_weights \"pissa_niter_4\""},
        {BASE "\"use_rslora\": \"yes\"", "use_rslora"},
        {BASE "\"lora_dropout\": 1.5", "lora_dropout"},
        {"\"r\": 4, \"lora_alpha\": 8, \"target_modules\": \".*\\\\.q_proj\"", "target_modules \".*\\.q_proj\""},
        {"\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", \"lm_head\"]", "\"lm_head\""},
        {"\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"embed_tokens\"]", "\"embed_tokens\""},
        {"\"r\": 4, \"lora_alpha\": 8, \"target_modules\": []", "target_modules is empty"},
        {"\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [4]", "target_modules"},
        {"\"r\": 4, \"lora_alpha\": 8", "target_modules is missing"},
        {"\"r\": 4, \"lora_alpha\": 8, \"target_modules\": null", "target_modules is missing"},
        {"\"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "r is missing"},
        {"\"r\": 0, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "r 0"},
        {"\"r\": -3, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "r -3"},
        {"\"r\": 2.5, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "r 2.5"},
        {"\"r\": \"4\", \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]", "r is not a number"},
        {"\"r\": 4, \"target_modules\": [\"q_proj\"]", "lora_alpha is missing"},
        {"\"r\": 4, \"lora_alpha\": 0, \"target_modules\": [\"q_proj\"]", "lora_alpha 0"},
        {"\"r\": 4, \"lora_alpha\": -2, \"target_modules\": [\"q_proj\"]", "lora_alpha -2"},
        {"{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", "peft_type is missing"},
        {"{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"peft_type\": \"PREFIX_TUNING\"}",
         "peft_type \"PREFIX_TUNING\""},
        {"[1, 2]", "not a JSON object"},
        {"{\"r\": 4, \"r\": 5}", "twice"},
        {"{\"r\": 4,", "adapter_config.json"},
    };
#undef BASE
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *json = strchr("[{", bad[i].keys[0]) ? bad[i].keys : with_defaults(bad[i].keys);
        write_text(tmp_path(LORA_CONFIG), json);
        lora_config c;
        rl_err e;
        e.msg[0] = 0;
        CHECK(lora_config_read(tmp_dir, &c, NULL, &e) == -1, "accepted: %s", json);
        CHECK(strstr(e.msg, tmp_path(LORA_CONFIG)) && strstr(e.msg, bad[i].msg), "%s: message '%s' lacks '%s'", json,
              e.msg, bad[i].msg);
    }
}

// ---- adapter directories -------------------------------------------------------------

static const lora_config two_targets = {.rank = 3, .alpha = 6, .targets = (1u << LORA_K) | (1u << LORA_DOWN)};

static lora_adapter *random_adapter(const model_config *mc, uint64_t seed) {
    lora_adapter *a = lora_new(&two_targets, mc);
    rl_rng rng;
    rng_seed(&rng, seed);
    for (int l = 0; l < a->layers; l++)
        for (int t = 0; t < LORA_NT; t++) {
            size_t i = (size_t)l * LORA_NT + t;
            if (!(two_targets.targets & (1u << t))) continue;
            fill_random(a->a[i], (size_t)a->c.rank * a->in[t], &rng);
            fill_random(a->b[i], (size_t)a->out[t] * a->c.rank, &rng);
        }
    return a;
}

static void a_written_adapter_reads_back_bit_for_bit(void) {
    model_config mc = small_base();
    lora_adapter *a = random_adapter(&mc, 3);
    rl_err e;
    CHECK(a->a[LORA_Q] == NULL && a->b[LORA_Q] == NULL && a->a[LORA_K] && a->b[2 * LORA_NT + LORA_DOWN], "allocation");
    CHECK(lora_write(tmp_dir, a, &e) == 0, "%s", e.msg);
    double dropout = -1;
    lora_adapter *b = lora_read(tmp_dir, &mc, &dropout, &e);
    CHECK(b, "%s", e.msg);
    CHECK(b->layers == 3 && b->c.rank == 3 && b->c.alpha == 6 && b->c.targets == two_targets.targets && dropout == 0,
          "read back as r %d alpha %g targets 0x%x", b->c.rank, b->c.alpha, b->c.targets);
    for (int l = 0; l < 3; l++)
        for (int t = 0; t < LORA_NT; t++) {
            size_t i = (size_t)l * LORA_NT + t;
            if (!(two_targets.targets & (1u << t))) {
                CHECK(!b->a[i] && !b->b[i], "layer %d %s allocated", l, lora_target_names[t]);
                continue;
            }
            CHECK(memcmp(a->a[i], b->a[i], (size_t)3 * a->in[t] * sizeof(float)) == 0 &&
                  memcmp(a->b[i], b->b[i], (size_t)a->out[t] * 3 * sizeof(float)) == 0,
                  "layer %d %s differs", l, lora_target_names[t]);
        }
    lora_free(a);
    lora_free(b);
}

static void bf16_and_f16_tensors_are_widened_to_f32(void) {
    model_config mc = small_base();
    lora_adapter *a = random_adapter(&mc, 4);
    rl_err e;
    CHECK(lora_write(tmp_dir, a, &e) == 0, "%s", e.msg);
    const rl_dtype types[2] = {DT_BF16, DT_F16};
    for (int d = 0; d < 2; d++) {
        // the same tensors stored at d's precision, and read back with the conversions of safetensors.c
        st_file *f = st_open(tmp_path(LORA_WEIGHTS), &e);
        CHECK(f, "%s", e.msg);
        st_out out[64];
        float *v[64];
        for (size_t k = 0; k < f->n; k++) {
            v[k] = xmalloc(f->t[k].nelem * sizeof(float));
            st_read_f32(&f->t[k], v[k]);
            out[k] = (st_out){.name = f->t[k].name, .ndim = 2, .data = v[k]};
            memcpy(out[k].shape, f->t[k].shape, sizeof out[k].shape);
        }
        char low[512];
        snprintf(low, sizeof low, "%s/low.safetensors", tmp_dir);
        CHECK(st_write(low, out, f->n, types[d], &e) == 0, "%s", e.msg);
        st_file *g = st_open(low, &e);
        CHECK(g && g->t[0].dtype == types[d], "%s", e.msg);
        CHECK(rename(low, tmp_path(LORA_WEIGHTS)) == 0, "rename");
        lora_adapter *b = lora_read(tmp_dir, &mc, NULL, &e);
        CHECK(b, "%s", e.msg);
        int diff = 0;
        for (size_t k = 0; k < g->n; k++) {
            int l, t, ab;
            CHECK(lora_tensor_parse(g->t[k].name, &l, &t, &ab) == 0, "%s", g->t[k].name);
            float *want = xmalloc(g->t[k].nelem * sizeof(float));
            st_read_f32(&g->t[k], want);
            const float *got = ab ? b->b[l * LORA_NT + t] : b->a[l * LORA_NT + t];
            diff += memcmp(want, got, g->t[k].nelem * sizeof(float)) != 0;
            free(want);
        }
        CHECK(diff == 0, "%d tensors differ", diff);
        for (size_t k = 0; k < f->n; k++) free(v[k]);
        lora_free(b);
        st_close(g);
        st_close(f);
    }
    lora_free(a);
}

// Writes the adapter's files with the tensors of a changed by `edit`: 0 keep
// all; 1 drop layer 1's k_proj B; 2 add an extra tensor; 3 give layer 2's
// down_proj A the wrong shape; 4 add layer 3 (the base has 3); 5 add a q_proj
// the config does not target.
static void write_edited(const lora_adapter *a, int edit) {
    st_out t[64];
    char names[64][160];
    size_t n = 0;
    static float spare[64 * 64];
    for (int l = 0; l < a->layers; l++)
        for (int tg = 0; tg < LORA_NT; tg++)
            for (int ab = 0; ab < 2 && (a->c.targets & (1u << tg)); ab++) {
                if (edit == 1 && l == 1 && tg == LORA_K && ab == 1) continue;
                lora_tensor_name(names[n], sizeof names[n], l, tg, ab);
                size_t i = (size_t)l * LORA_NT + tg;
                t[n] = (st_out){.name = names[n], .ndim = 2, .data = ab ? a->b[i] : a->a[i],
                                .shape = {ab ? a->out[tg] : a->c.rank, ab ? a->c.rank : a->in[tg]}};
                if (edit == 3 && l == 2 && tg == LORA_DOWN && ab == 0) t[n].shape[0] = 1, t[n].shape[1] = 48;
                n++;
            }
    if (edit == 2) t[n++] = (st_out){.name = "base_model.model.lm_head.weight", .ndim = 2, .data = spare, .shape = {2, 2}};
    if (edit == 4) {
        lora_tensor_name(names[n], sizeof names[n], 3, LORA_K, 0);
        t[n] = (st_out){.name = names[n], .ndim = 2, .data = spare, .shape = {3, 32}};
        n++;
    }
    if (edit == 5) {
        lora_tensor_name(names[n], sizeof names[n], 0, LORA_Q, 1);
        t[n] = (st_out){.name = names[n], .ndim = 2, .data = spare, .shape = {32, 3}};
        n++;
    }
    rl_err e;
    if (st_write_f32(tmp_path(LORA_WEIGHTS), t, n, &e) || lora_config_write(tmp_dir, &a->c, &e)) {
        printf("# %s\n", e.msg);
        exit(2);
    }
}

static void adapters_that_do_not_fit_the_base_are_refused_naming_the_file_and_tensor(void) {
    model_config mc = small_base();
    lora_adapter *a = random_adapter(&mc, 5);
    const struct {
        int edit;
        const char *tensor, *msg;
    } bad[] = {
        {1, "'base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight'", "is missing"},
        {2, "'base_model.model.lm_head.weight'", "not a LoRA tensor"},
        {3, "'base_model.model.model.layers.2.mlp.down_proj.lora_A.weight'", "shape [1, 48], expected [3, 48]"},
        {4, "'base_model.model.model.layers.3.self_attn.k_proj.lora_A.weight'", "beyond the base model's 3 layers"},
        {5, "'base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight'", "target_modules (k_proj,down_proj)"},
    };
    rl_err e;
    write_edited(a, 0);
    lora_adapter *b = lora_read(tmp_dir, &mc, NULL, &e);
    CHECK(b, "the unedited adapter: %s", e.msg);
    lora_free(b);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_edited(a, bad[i].edit);
        e.msg[0] = 0;
        CHECK(lora_read(tmp_dir, &mc, NULL, &e) == NULL, "edit %d accepted", bad[i].edit);
        CHECK(strstr(e.msg, tmp_path(LORA_WEIGHTS)) && strstr(e.msg, bad[i].tensor) && strstr(e.msg, bad[i].msg),
              "edit %d: message '%s'", bad[i].edit, e.msg);
    }
    // a base with other sizes: every tensor's shape differs
    mc.inter = 40;
    write_edited(a, 0);
    CHECK(lora_read(tmp_dir, &mc, NULL, &e) == NULL && strstr(e.msg, "down_proj") && strstr(e.msg, "(32, 40)"),
          "%s", e.msg);
    lora_free(a);
}

static void a_directory_without_safetensors_weights_is_refused_saying_why(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/bin", tmp_dir);
    CHECK(mkdir(dir, 0700) == 0, "mkdir");
    model_config mc = small_base();
    rl_err e;
    CHECK(lora_config_write(dir, &two_targets, &e) == 0, "%s", e.msg);
    char bin[600];
    snprintf(bin, sizeof bin, "%s/adapter_model.bin", dir);
    write_text(bin, "PK");
    CHECK(lora_read(dir, &mc, NULL, &e) == NULL && strstr(e.msg, LORA_WEIGHTS) && strstr(e.msg, "adapter_model.bin"),
          "%s", e.msg);
    CHECK(lora_read(tmp_path("nowhere"), &mc, NULL, &e) == NULL && strstr(e.msg, "nowhere/" LORA_CONFIG), "%s", e.msg);
}

int main(void) {
    if (!tmpdir_named(tmp_dir, sizeof tmp_dir, "rlpipe-lora")) {
        perror(tmp_dir);
        return 2;
    }
    RUN(tensor_names_are_peft_s_and_parse_back_to_layer_target_and_matrix);
    RUN(names_of_other_tensors_do_not_parse);
    RUN(all_linear_targets_every_module_and_lists_name_subsets_in_any_order);
    RUN(target_lists_refuse_unknown_names_repeats_and_empty_items);
    RUN(scale_is_alpha_over_r_or_over_its_square_root_with_rslora);
    RUN(module_shapes_follow_the_base_config_with_grouped_query_attention);
    RUN(merge_adds_scaled_b_times_a_within_the_f32_rounding_bound);
    RUN(merging_a_zero_b_leaves_w_bit_for_bit);
    RUN(a_written_config_reads_back_with_the_same_values);
    RUN(peft_s_defaults_unknown_keys_repeats_and_all_linear_are_accepted);
    RUN(options_rlpipe_does_not_compute_are_refused_naming_the_file_and_key);
    RUN(a_written_adapter_reads_back_bit_for_bit);
    RUN(bf16_and_f16_tensors_are_widened_to_f32);
    RUN(adapters_that_do_not_fit_the_base_are_refused_naming_the_file_and_tensor);
    RUN(a_directory_without_safetensors_weights_is_refused_saying_why);
    rm_rf(tmp_dir);
    CHECK_DONE();
}
