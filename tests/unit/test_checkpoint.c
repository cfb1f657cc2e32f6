// test_checkpoint.c — checkpoint versions (doc/design.md §3): a written version holds
// the model, the AdamW moments and state.json, and reloads bit for bit; latest
// names the newest; published names it as soon as its weights are written,
// before the optimizer state; --keep removes only the oldest; a written version
// is never replaced; errors name the path; and a writer killed (SIGKILL) at any
// moment leaves latest naming a complete version, from which the next writer
// goes on. A version written without its optimizer state is published while
// latest stays at the newest complete one, which --keep keeps.
// A version written in the background holds the model as it was when saved,
// whatever the model does meanwhile, and its failure is reported once.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "learn/ckpt_model.h"
#include "learn/ckpt_writer.h"
#include "model/model.h"
#include "rng.h"
#include "tmpdir.h"

// Untied output layer, grouped-query attention: every kind of tensor a checkpoint holds.
static model_config cfg_small(void) {
    return (model_config){.model_type = "llama", .hidden = 64, .inter = 96, .layers = 2, .heads = 4,
                          .kv_heads = 2, .head_dim = 16, .vocab = 128, .max_pos = 64, .rms_eps = 1e-5,
                          .rope_theta = 10000, .tie_embeddings = 0, .bos_id = -1, .eos_id = -1};
}

// ---- Helpers ------------------------------------------------------------------

static char *tmpdir(char *buf, size_t size) { return tmpdir_named(buf, size, "rlpipe-ckpt"); }

static int exists(const char *dir, const char *name) {
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static void put_file(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

// The text of dir/name ("" when absent), in buf.
static const char *file_text(const char *dir, const char *name, char *buf, size_t size) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    buf[0] = 0;
    FILE *f = fopen(p, "r");
    if (f) {
        size_t n = fread(buf, 1, size - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static const char *state_of(uint64_t v, char *buf, size_t size) {
    snprintf(buf, size, "{\"version\": %llu, \"step\": %llu}\n", (unsigned long long)v, (unsigned long long)v);
    return buf;
}

// A model with training state whose moments are distinct values drawn from seed.
static model_t *trained_model(uint64_t seed, rl_err *err) {
    model_config c = cfg_small();
    model_t *m = model_random(&c, seed, 0.1f, NULL, err);
    if (!m || model_train_init(m, err)) return m ? (model_free(m), NULL) : NULL;
    rl_rng r;
    rng_seed(&r, seed + 1000);
    for (size_t i = 0; i < model_ntensors(m); i++) {
        size_t n = model_tensor_at(m, i).n;
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        for (size_t j = 0; j < n; j++) {
            a[j] = (float)rng_normal(&r);
            b[j] = (float)rng_uniform(&r);
        }
        model_tensor_set(m, MODEL_EXP_AVG, i, a);
        model_tensor_set(m, MODEL_EXP_AVG_SQ, i, b);
        free(a);
        free(b);
    }
    return m;
}

// Whether tensors `which` of a and b are identical bit for bit.
static int same_bits(const model_t *a, const model_t *b, int which) {
    if (model_ntensors(a) != model_ntensors(b)) return 0;
    int same = 1;
    for (size_t i = 0; i < model_ntensors(a) && same; i++) {
        size_t n = model_tensor_at(a, i).n;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        same = model_tensor_at(b, i).n == n && model_tensor_get(a, which, i, x) == 0 &&
               model_tensor_get(b, which, i, y) == 0 && memcmp(x, y, n * sizeof *x) == 0;
        free(x);
        free(y);
    }
    return same;
}

static int write_version(const char *root, uint64_t v, const model_t *m, int keep, const char *copy_from,
                         rl_err *err) {
    char state[128];
    ckpt_write_opts o = {.root = root, .version = v, .state_json = state_of(v, state, sizeof state),
                         .copy_from = copy_from, .keep = keep};
    return ckpt_write(&o, m, err);
}

// ---- Cases --------------------------------------------------------------------

// The checkpoint root's parent (fsynced when the root is made) and the
// directory of --config's tokenizer come from path_parent.
static void path_parent_is_the_directory_holding_a_path(void) {
    const char *cases[][2] = {{"a/b/c", "a/b"}, {"a/b/c/", "a/b"}, {"a//c", "a"}, {"c", "."}, {"c/", "."},
                              {"/c", "/"}, {"/", "/"}, {"./c", "."}, {"models/tiny/config.json", "models/tiny"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[64];
        CHECK(path_parent(cases[i][0], out, sizeof out) == 0, "%s", cases[i][0]);
        CHECK(!strcmp(out, cases[i][1]), "parent of '%s': '%s', expected '%s'", cases[i][0], out, cases[i][1]);
    }
    char small[4];
    CHECK(path_parent("abcd/e", small, sizeof small) == -1, "a parent longer than the buffer fits");
}

static void writes_complete_version_and_latest(void) {
    char base[512], root[1024], text[256], path[4096];
    rl_err err;
    CHECK(tmpdir(base, sizeof base), "mkdtemp: %s", strerror(errno));
    snprintf(root, sizeof root, "%s/ckpt", base);   // created by the first write
    model_t *m = trained_model(1, &err);
    CHECK(m, "%s", err.msg);
    for (uint64_t v = 0; v < 3; v++) CHECK(write_version(root, v, m, 0, NULL, &err) == 0, "%s", err.msg);
    const char *names[] = {"v000000", "v000001", "v000002"};
    const char *files[] = {"config.json", "model.safetensors", "optimizer.safetensors", "state.json"};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) {
            char sub[2048];
            snprintf(sub, sizeof sub, "%s/%s", root, names[i]);
            CHECK(exists(sub, files[k]), "%s/%s missing", sub, files[k]);
        }
    CHECK(!strcmp(file_text(root, "latest", text, sizeof text), "v000002\n"), "latest holds '%s'", text);
    uint64_t version = 99;
    CHECK(ckpt_resolve(root, path, sizeof path, &version, &err) == 0, "%s", err.msg);
    char want[2048];
    snprintf(want, sizeof want, "%s/v000002", root);
    CHECK(!strcmp(path, want) && version == 2, "resolved %s version %llu", path, (unsigned long long)version);
    uint64_t *vs;
    size_t n;
    CHECK(ckpt_versions(root, &vs, &n, &err) == 0, "%s", err.msg);
    int listed = n == 3 && vs[0] == 0 && vs[1] == 1 && vs[2] == 2;
    free(vs);
    CHECK(listed, "ckpt_versions gave %zu versions, want 0 1 2", n);

    model_t *back = model_load(path, NULL, &err);
    CHECK(back, "%s", err.msg);
    int params = same_bits(m, back, MODEL_PARAM);
    int init = model_train_init(back, &err) == 0;
    int opt = init && ckpt_read_optimizer(path, back, &err) == 0;
    int avg = opt && same_bits(m, back, MODEL_EXP_AVG), sq = opt && same_bits(m, back, MODEL_EXP_AVG_SQ);
    model_free(back);
    model_free(m);
    rm_rf(base);
    CHECK(params, "reloaded parameters differ");
    CHECK(opt, "%s", err.msg);
    CHECK(avg && sq, "reloaded moments differ (exp_avg %d, exp_avg_sq %d)", avg, sq);
}

static void model_without_training_state_writes_no_optimizer(void) {
    char root[512];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    model_config c = cfg_small();
    model_t *m = model_random(&c, 2, 0.1f, NULL, &err);
    CHECK(m, "%s", err.msg);
    int rc = write_version(root, 0, m, 0, NULL, &err);
    model_free(m);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/v000000", root);
    int model = exists(dir, "model.safetensors"), opt = exists(dir, "optimizer.safetensors");
    rm_rf(root);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(model && !opt, "model.safetensors %d (want 1), optimizer.safetensors %d (want 0)", model, opt);
}

static void keep_removes_oldest_versions_only(void) {
    char root[512];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    model_t *m = trained_model(3, &err);
    CHECK(m, "%s", err.msg);
    int rc = 0;
    for (uint64_t v = 1; v <= 5 && rc == 0; v++) rc = write_version(root, v, m, 2, NULL, &err);
    model_free(m);
    CHECK(rc == 0, "%s", err.msg);
    uint64_t *vs;
    size_t n;
    CHECK(ckpt_versions(root, &vs, &n, &err) == 0, "%s", err.msg);
    int ok = n == 2 && vs[0] == 4 && vs[1] == 5;
    free(vs);
    int stray = exists(root, "v000003") || exists(root, "v000001");
    rm_rf(root);
    CHECK(ok && !stray, "after 5 writes with keep=2: %zu versions, want v000004 v000005 only", n);
}

static void copies_tokenizer_files_when_present(void) {
    char base[512], src[1024], root[1024], dir[2048], text[256];
    rl_err err;
    CHECK(tmpdir(base, sizeof base), "mkdtemp: %s", strerror(errno));
    snprintf(src, sizeof src, "%s/model", base);
    snprintf(root, sizeof root, "%s/ckpt", base);
    snprintf(dir, sizeof dir, "%s/v000007", root);
    mkdir(src, 0755);
    model_t *m = trained_model(4, &err);
    CHECK(m, "%s", err.msg);
    // Without tokenizer.json the copy is refused, naming the file.
    int rc_missing = write_version(root, 6, m, 0, src, &err);
    char why[1024];
    snprintf(why, sizeof why, "%s", err.msg);
    put_file(src, "tokenizer.json", "{\"model\": {}}\n");
    put_file(src, "generation_config.json", "{\"eos_token_id\": 2}\n");
    int rc = write_version(root, 7, m, 0, src, &err);
    model_free(m);
    int tok = !strcmp(file_text(dir, "tokenizer.json", text, sizeof text), "{\"model\": {}}\n");
    int gen = !strcmp(file_text(dir, "generation_config.json", text, sizeof text), "{\"eos_token_id\": 2}\n");
    int absent = !exists(dir, "tokenizer_config.json") && !exists(dir, "special_tokens_map.json");
    int v6 = exists(root, "v000006");
    rm_rf(base);
    CHECK(rc_missing < 0 && strstr(why, "/model/tokenizer.json") && strstr(why, "No such file"), "got '%s'",
          rc_missing < 0 ? why : "success");
    CHECK(!v6, "a failed write left v000006");
    CHECK(rc == 0, "%s", err.msg);
    CHECK(tok && gen, "copied files differ from the source");
    CHECK(absent, "files absent from the source appeared in the version");
}

static void refuses_to_overwrite_written_version(void) {
    char root[512], text[256];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    model_t *a = trained_model(5, &err), *b = trained_model(6, &err);
    CHECK(a && b, "%s", err.msg);
    int rc1 = write_version(root, 1, a, 0, NULL, &err);
    int rc2 = write_version(root, 2, a, 0, NULL, &err);
    int same = write_version(root, 2, b, 0, NULL, &err);
    char why_same[1024], why_older[1024];
    snprintf(why_same, sizeof why_same, "%s", err.msg);
    int older = write_version(root, 1, b, 0, NULL, &err);
    snprintf(why_older, sizeof why_older, "%s", err.msg);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/v000002", root);
    model_t *back = model_load(dir, NULL, &err);
    int kept = back && same_bits(a, back, MODEL_PARAM);
    file_text(root, "latest", text, sizeof text);
    model_free(back);
    model_free(a);
    model_free(b);
    char want[1024];
    snprintf(want, sizeof want, "%s/v000002", root);
    rm_rf(root);
    CHECK(rc1 == 0 && rc2 == 0, "%s", err.msg);
    CHECK(same < 0 && strstr(why_same, want) && strstr(why_same, "never replaced"), "rewriting v2: '%s'",
          same < 0 ? why_same : "succeeded");
    CHECK(older < 0 && strstr(why_older, "not newer"), "writing v1 after v2: '%s'", older < 0 ? why_older : "succeeded");
    CHECK(kept, "v000002 was changed");
    CHECK(!strcmp(text, "v000002\n"), "latest holds '%s'", text);
}

// A writer killed between renaming vN in and updating latest leaves a complete
// but unpublished vN; the next writer of version N replaces it.
static void replaces_unpublished_version_newer_than_latest(void) {
    char root[512], dir[1024], text[256];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    model_t *a = trained_model(7, &err), *b = trained_model(8, &err);
    CHECK(a && b, "%s", err.msg);
    int rc = write_version(root, 1, a, 0, NULL, &err);
    if (rc == 0) rc = write_version(root, 2, a, 0, NULL, &err);
    put_file(root, "latest", "v000001\n");     // as if killed before latest moved to v000002
    if (rc == 0) rc = write_version(root, 2, b, 0, NULL, &err);
    snprintf(dir, sizeof dir, "%s/v000002", root);
    model_t *back = rc == 0 ? model_load(dir, NULL, &err) : NULL;
    int replaced = back && same_bits(b, back, MODEL_PARAM);
    file_text(root, "latest", text, sizeof text);
    model_free(back);
    model_free(a);
    model_free(b);
    rm_rf(root);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(replaced, "v000002 still holds the unpublished weights");
    CHECK(!strcmp(text, "v000002\n"), "latest holds '%s'", text);
}

// ---- The two steps of a version: the weights published, then the rest ----------

typedef struct {
    const char *root;
    int fail;            // the late write fails
    char seen[512];      // what the late write saw of the root (published, latest, the version's files)
} two_step;

static int fill_weights(const char *dir, void *ctx, rl_err *err) {
    (void)ctx, (void)err;
    put_file(dir, "model.safetensors", "weights\n");
    return 0;
}

static int fill_rest(const char *dir, void *ctx, rl_err *err) {
    two_step *t = ctx;
    char pub[64], lat[64], vdir[1100];
    snprintf(vdir, sizeof vdir, "%s/v000002", t->root);
    snprintf(t->seen, sizeof t->seen, "published %s latest %s weights %d optimizer %d",
             file_text(t->root, "published", pub, sizeof pub), file_text(t->root, "latest", lat, sizeof lat),
             exists(vdir, "model.safetensors"), exists(vdir, "optimizer.safetensors"));
    if (t->fail) return err_set(err, "the disk is full");
    put_file(dir, "optimizer.safetensors", "moments\n");
    return 0;
}

static int publish_two_step(two_step *t, uint64_t v, rl_err *err) {
    char state[128];
    ckpt_write_opts o = {.root = t->root, .version = v, .state_json = state_of(v, state, sizeof state)};
    return ckpt_publish(&o, fill_weights, fill_rest, t, err);
}

static void the_weights_are_published_before_the_optimizer_state_is_written(void) {
    char root[512], vdir[1024], pub[64], lat[64], dir[4096];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    two_step t = {.root = root};
    int rc = publish_two_step(&t, 1, &err);
    if (rc == 0) rc = publish_two_step(&t, 2, &err);
    snprintf(vdir, sizeof vdir, "%s/v000002", root);
    int complete = exists(vdir, "model.safetensors") && exists(vdir, "optimizer.safetensors");
    file_text(root, "published", pub, sizeof pub);
    file_text(root, "latest", lat, sizeof lat);
    uint64_t v = 0;
    int resolved = rc == 0 && ckpt_resolve_published(root, dir, sizeof dir, &v, &err) == 0;
    rm_rf(root);
    CHECK(rc == 0, "%s", err.msg);
    // While the optimizer state was written, the sampler's file named the new
    // version and the resume's file the one before.
    CHECK(!strcmp(t.seen, "published v000002\n latest v000001\n weights 1 optimizer 0"), "the late write saw: %s",
          t.seen);
    CHECK(complete, "v000002 lacks a file once written");
    CHECK(!strcmp(pub, "v000002\n") && !strcmp(lat, "v000002\n"), "published '%s', latest '%s'", pub, lat);
    CHECK(resolved && v == 2 && strstr(dir, "/v000002"), "resolved v%llu at %s", (unsigned long long)v, dir);
}

// The name of a temporary left in root, or "".
static const char *temporary_in(const char *root, char *buf, size_t size) {
    buf[0] = 0;
    DIR *d = opendir(root);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] == '.' && strstr(e->d_name, "tmp-")) snprintf(buf, size, "%s", e->d_name);
    if (d) closedir(d);
    return buf;
}

static void a_failed_late_write_withdraws_the_published_weights(void) {
    char root[512], pub[64], lat[64], temp[300];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    two_step t = {.root = root};
    int rc = publish_two_step(&t, 1, &err);
    CHECK(rc == 0, "%s", err.msg);
    t.fail = 1;
    rc = publish_two_step(&t, 2, &err);
    int says = rc < 0 && strstr(err.msg, "the disk is full") != NULL;
    int gone = !exists(root, "v000002");
    file_text(root, "published", pub, sizeof pub);
    file_text(root, "latest", lat, sizeof lat);
    temporary_in(root, temp, sizeof temp);
    t.fail = 0;
    int again = publish_two_step(&t, 2, &err) == 0;
    rm_rf(root);
    CHECK(says, "the failed write said: %s", err.msg);
    CHECK(!strcmp(t.seen, "published v000002\n latest v000001\n weights 1 optimizer 0"), "the late write saw: %s",
          t.seen);
    CHECK(gone, "v000002 left after its optimizer state failed");
    CHECK(!strcmp(pub, "v000001\n") && !strcmp(lat, "v000001\n"),
          "published '%s', latest '%s'", pub, lat);
    CHECK(!temp[0], "a temporary left: %s", temp);
    CHECK(again, "writing v000002 again: %s", err.msg);
}

static void tidy_withdraws_the_weights_of_a_version_a_killed_writer_left_incomplete(void) {
    char root[512], vdir[1024], pub[64], lat[64], dir[4096];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    two_step t = {.root = root};
    int rc = publish_two_step(&t, 1, &err);
    CHECK(rc == 0, "%s", err.msg);
    // As a writer killed between publishing v000002's weights and writing the rest leaves it.
    snprintf(vdir, sizeof vdir, "%s/v000002", root);
    mkdir(vdir, 0755);
    put_file(vdir, "model.safetensors", "weights\n");
    put_file(root, "published", "v000002\n");
    uint64_t v = 0, vp = 0;
    int resolved = ckpt_resolve(root, dir, sizeof dir, &v, &err) == 0 &&
                   ckpt_resolve_published(root, dir, sizeof dir, &vp, &err) == 0;
    int tidied = ckpt_tidy(root, 0, 0, &err) == 0;
    int gone = !exists(root, "v000002");
    file_text(root, "published", pub, sizeof pub);
    file_text(root, "latest", lat, sizeof lat);
    rm_rf(root);
    CHECK(resolved && v == 1 && vp == 2, "before tidy latest resolves to v%llu, published to v%llu",
          (unsigned long long)v, (unsigned long long)vp);
    CHECK(tidied && gone, "tidy left v000002 (%s)", err.msg);
    CHECK(!strcmp(pub, "v000001\n") && !strcmp(lat, "v000001\n"), "after tidy published '%s', latest '%s'", pub,
          lat);
}

static void published_is_followed_only_when_newer_than_latest(void) {
    char root[512], dir[4096];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    mkdir(strcat(strcpy(dir, root), "/v000003"), 0755);
    mkdir(strcat(strcpy(dir, root), "/v000004"), 0755);
    uint64_t v[4] = {0};
    put_file(root, "published", "v000003\n");   // alone: the first version, its optimizer state on its way
    int rc = ckpt_resolve_published(root, dir, sizeof dir, &v[0], &err);
    put_file(root, "latest", "v000004\n");      // a root that an older writer went on with
    if (rc == 0) rc = ckpt_resolve_published(root, dir, sizeof dir, &v[1], &err);
    put_file(root, "published", "v000005\n");
    char v5[1100];
    snprintf(v5, sizeof v5, "%s/v000005", root);
    mkdir(v5, 0755);
    if (rc == 0) rc = ckpt_resolve_published(root, dir, sizeof dir, &v[2], &err);
    int five = strstr(dir, "/v000005") != NULL;
    if (rc == 0) rc = ckpt_resolve(root, dir, sizeof dir, &v[3], &err);
    rm_rf(root);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(v[0] == 3 && v[1] == 4 && v[2] == 5 && five && v[3] == 4,
          "published alone: v%llu, older than latest: v%llu, newer: v%llu; ckpt_resolve: v%llu",
          (unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)v[2], (unsigned long long)v[3]);
}

// The versions in root, as "1 3" ("" when none).
static const char *versions_in(const char *root, char *buf, size_t size) {
    uint64_t *vs;
    size_t n, at = 0;
    rl_err err;
    buf[0] = 0;
    if (ckpt_versions(root, &vs, &n, &err)) return buf;
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%llu", i ? " " : "", (unsigned long long)vs[i]);
    free(vs);
    return buf;
}

// A version written weights-only (rl-learn --state-every) is published for the
// samplers while latest stays at the newest complete version, which --keep
// never removes; ckpt_complete_state adds the optimizer state later (then it
// resumes, bit for bit); a resume's tidy removes the weights-only versions.
static void weights_only_versions_are_published_while_latest_stays_complete(void) {
    char root[512], state[128], pub[64], lat[64], vs[4][64], dir[1024];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    model_t *m = trained_model(7, &err);
    CHECK(m, "%s", err.msg);
    int rc = write_version(root, 1, m, 1, NULL, &err);
    for (uint64_t v = 2; v <= 3 && rc == 0; v++) {
        ckpt_write_opts o = {.root = root, .version = v, .state_json = state_of(v, state, sizeof state), .keep = 1,
                             .weights_only = 1};
        rc = ckpt_write(&o, m, &err);
    }
    CHECK(rc == 0, "%s", err.msg);
    versions_in(root, vs[0], sizeof vs[0]);
    file_text(root, "published", pub, sizeof pub);
    file_text(root, "latest", lat, sizeof lat);
    snprintf(dir, sizeof dir, "%s/v000003", root);
    int v3_weights =
        exists(dir, "model.safetensors") && exists(dir, "state.json") && !exists(dir, "optimizer.safetensors");
    CHECK(!strcmp(vs[0], "1 3"), "with keep 1: versions %s, want 1 (latest) and 3 (the newest)", vs[0]);
    CHECK(!strcmp(pub, "v000003\n") && !strcmp(lat, "v000001\n"), "published '%s', latest '%s'", pub, lat);
    CHECK(v3_weights, "v000003 should hold the weights and state.json, not optimizer.safetensors");

    // Completed with the model's state: latest names it, the version before goes (keep 1), and it resumes.
    ckpt_write_opts c = {.root = root, .version = 3, .keep = 1};
    rc = ckpt_complete_state(&c, m, NULL, NULL, &err);
    CHECK(rc == 0, "%s", err.msg);
    versions_in(root, vs[1], sizeof vs[1]);
    file_text(root, "latest", lat, sizeof lat);
    model_t *back = model_load(dir, NULL, &err);
    int resumes = back && model_train_init(back, &err) == 0 && ckpt_read_optimizer(dir, back, &err) == 0 &&
                  same_bits(m, back, MODEL_EXP_AVG) && same_bits(m, back, MODEL_EXP_AVG_SQ);
    model_free(back);
    int again = ckpt_complete_state(&c, m, NULL, NULL, &err);
    char again_msg[sizeof err.msg];
    snprintf(again_msg, sizeof again_msg, "%s", err.msg);

    // Two more weights-only versions: only the one published names can be completed; tidy removes both.
    for (uint64_t v = 4; v <= 5 && rc == 0; v++) {
        ckpt_write_opts o = {.root = root, .version = v, .state_json = state_of(v, state, sizeof state), .keep = 2,
                             .weights_only = 1};
        rc = ckpt_write(&o, m, &err);
    }
    versions_in(root, vs[2], sizeof vs[2]);
    c.version = 4;
    int older = rc == 0 ? ckpt_complete_state(&c, m, NULL, NULL, &err) : 0;
    int tidied = ckpt_tidy(root, 2, 0, &err);
    versions_in(root, vs[3], sizeof vs[3]);
    file_text(root, "published", pub, sizeof pub);
    file_text(root, "latest", lat, sizeof lat);
    model_free(m);
    rm_rf(root);
    CHECK(!strcmp(vs[1], "3") && !strcmp(lat, "v000003\n"), "completed: versions %s, latest '%s'", vs[1], lat);
    CHECK(resumes, "v000003's optimizer state does not reload as the model's: %s", err.msg);
    CHECK(again < 0 && strstr(again_msg, "complete already"), "completing v000003 twice: %s", again_msg);
    CHECK(rc == 0 && !strcmp(vs[2], "3 4 5"), "after v4, v5 weights-only with keep 2: versions %s (%s)", vs[2],
          err.msg);
    CHECK(older < 0, "v000004, older than the published v000005, was completed");
    CHECK(tidied == 0 && !strcmp(vs[3], "3") && !strcmp(pub, "v000003\n") && !strcmp(lat, "v000003\n"),
          "after tidy: versions %s, published '%s', latest '%s'", vs[3], pub, lat);
}

static void errors_name_the_path(void) {
    char base[512], file[1024], root[2048];
    rl_err err;
    CHECK(tmpdir(base, sizeof base), "mkdtemp: %s", strerror(errno));
    snprintf(file, sizeof file, "%s/plain", base);
    put_file(base, "plain", "not a directory\n");
    model_t *m = trained_model(9, &err);
    CHECK(m, "%s", err.msg);
    // Tests run as root, so no permission is refused: a path under a regular file gives ENOTDIR.
    snprintf(root, sizeof root, "%s/ckpt", file);
    int under = write_version(root, 0, m, 0, NULL, &err);
    char why_under[1024], why_file[1024], why_state[1024], why_json[1024], why_opt[1024];
    snprintf(why_under, sizeof why_under, "%s", err.msg);
    int is_file = write_version(file, 0, m, 0, NULL, &err);
    snprintf(why_file, sizeof why_file, "%s", err.msg);
    ckpt_write_opts o = {.root = base, .version = 3, .state_json = "{\"version\": 4}"};
    int state = ckpt_write(&o, m, &err);
    snprintf(why_state, sizeof why_state, "%s", err.msg);
    o.state_json = "{\"version\": 3";
    int json = ckpt_write(&o, m, &err);
    snprintf(why_json, sizeof why_json, "%s", err.msg);
    int opt = ckpt_read_optimizer(file, m, &err);
    snprintf(why_opt, sizeof why_opt, "%s", err.msg);
    model_free(m);
    rm_rf(base);
    CHECK(under < 0 && strstr(why_under, root) && strstr(why_under, "Not a directory"), "'%s'", why_under);
    CHECK(is_file < 0 && strstr(why_file, file) && strstr(why_file, "Not a directory"), "'%s'", why_file);
    CHECK(state < 0 && strstr(why_state, "\"version\" is not 3"), "'%s'", why_state);
    CHECK(json < 0 && strstr(why_json, "not a JSON object"), "'%s'", why_json);
    CHECK(opt < 0 && strstr(why_opt, "plain/optimizer.safetensors"), "'%s'", why_opt);
}

// Copies every parameter and moment of src into dst (the same config).
static void copy_state(model_t *dst, const model_t *src) {
    for (size_t i = 0; i < model_ntensors(src); i++) {
        size_t n = model_tensor_at(src, i).n;
        float *x = malloc(n * sizeof *x);
        for (int which = MODEL_PARAM; which <= MODEL_EXP_AVG_SQ; which++)
            if (which != MODEL_GRAD && model_tensor_get(src, which, i, x) == 0) model_tensor_set(dst, which, i, x);
        free(x);
    }
}

// Whether root/vNNNNNN reloads as m, parameters and moments bit for bit.
static int version_is(const char *root, uint64_t v, const model_t *m, rl_err *err) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/v%06llu", root, (unsigned long long)v);
    model_t *back = model_load(dir, NULL, err);
    int read = back && model_train_init(back, err) == 0 && ckpt_read_optimizer(dir, back, err) == 0;
    int same = read && same_bits(m, back, MODEL_PARAM) && same_bits(m, back, MODEL_EXP_AVG) &&
               same_bits(m, back, MODEL_EXP_AVG_SQ);
    if (read && !same) err_set(err, "%s: the parameters or the moments differ", dir);
    model_free(back);
    return same;
}

typedef struct {
    uint64_t versions[4];
    int n, on_caller, fail_at;   // fail_at: a version whose done callback fails
    pthread_t caller;
    char failed[1024];
} writer_log;

static int log_done(void *ctx, uint64_t version, rl_err *err) {
    writer_log *g = ctx;
    if (g->n < 4) g->versions[g->n++] = version;
    if (pthread_equal(pthread_self(), g->caller)) g->on_caller = 1;
    return version == (uint64_t)g->fail_at ? err_set(err, "done refused version %llu", (unsigned long long)version) : 0;
}

static void log_failed(void *ctx, const char *message) {
    writer_log *g = ctx;
    snprintf(g->failed, sizeof g->failed, "%s", message);
}

static void a_version_written_in_the_background_holds_the_model_as_it_was_when_saved(void) {
    char base[512], root[1024], state[128], tokdir[1024];
    rl_err err;
    CHECK(tmpdir(base, sizeof base), "mkdtemp: %s", strerror(errno));
    snprintf(root, sizeof root, "%s/ckpt", base);
    snprintf(tokdir, sizeof tokdir, "%s", base);
    put_file(base, "tokenizer.json", "{\"version\": \"1.0\"}\n");
    model_t *m = trained_model(1, &err), *first = trained_model(1, &err), *second = trained_model(2, &err);
    CHECK(m && first && second, "%s", err.msg);
    writer_log g = {.caller = pthread_self(), .fail_at = -1};
    ckpt_writer *w = ckpt_writer_new(log_done, NULL, &g);
    char copy_from[1024];
    snprintf(copy_from, sizeof copy_from, "%s", tokdir);
    ckpt_write_opts o = {.root = root, .version = 1, .state_json = state_of(1, state, sizeof state),
                         .copy_from = copy_from};
    int saved1 = ckpt_writer_save(w, &o, m, NULL, NULL, &err);
    // What the caller's strings and the model become while version 1 is
    // written does not reach it (the parameters changed once it has read them).
    ckpt_writer_wait_model(w);
    copy_state(m, second);
    state_of(2, state, sizeof state);
    snprintf(copy_from, sizeof copy_from, "%s/none", base);
    o.version = 2;
    o.copy_from = tokdir;
    int saved2 = saved1 == 0 ? ckpt_writer_save(w, &o, m, NULL, NULL, &err) : -1;
    ckpt_writer_wait_model(w);
    copy_state(m, first);
    int waited = saved2 == 0 ? ckpt_writer_wait(w, &err) : -1;
    char text[256], v1[2048];
    snprintf(v1, sizeof v1, "%s/v000001", root);
    int is1 = waited == 0 && version_is(root, 1, first, &err), is2 = is1 && version_is(root, 2, second, &err);
    int state1 = !strcmp(file_text(v1, "state.json", text, sizeof text), "{\"version\": 1, \"step\": 1}\n");
    int tok1 = exists(v1, "tokenizer.json"), busy = ckpt_writer_busy(w);
    ckpt_writer_free(w);
    model_free(m);
    model_free(first);
    model_free(second);
    rm_rf(base);
    CHECK(saved1 == 0 && saved2 == 0 && waited == 0, "%s", err.msg);
    CHECK(is1, "version 1 is not the model as saved: %s", err.msg);
    CHECK(is2, "version 2 is not the model as saved: %s", err.msg);
    CHECK(state1 && tok1, "version 1's state.json '%s', tokenizer.json %s", text, tok1 ? "copied" : "missing");
    CHECK(!busy, "the writer is busy after a wait");
    CHECK(g.n == 2 && g.versions[0] == 1 && g.versions[1] == 2, "done called %d times", g.n);
    CHECK(!g.on_caller, "done was called on the caller's thread");
}

// Whether the n floats at p are tensor 0's values of `which` in m.
static int tensor0_is(const model_t *m, int which, const float *p) {
    size_t n = model_tensor_at(m, 0).n;
    float *first = malloc(n * sizeof *first);
    int is = p && model_tensor_get(m, which, 0, first) == 0 && !memcmp(first, p, n * sizeof *first);
    free(first);
    return is;
}

// The parameters, and AdamW's moments with the state: no copy of either.
static void a_snapshot_reads_a_cpu_models_parameters_and_moments_in_place_when_allowed(void) {
    rl_err err;
    model_t *m = trained_model(1, &err);
    CHECK(m, "%s", err.msg);
    ckpt_snap *s = ckpt_snap_new();
    int took = ckpt_snap_take(s, m, NULL, NULL, 1, 1, &err) == 0, borrowed = ckpt_snap_borrowed(s);
    int took_copy = ckpt_snap_take(s, m, NULL, NULL, 1, 0, &err) == 0, copied = !ckpt_snap_borrowed(s);
    int took_state = ckpt_snap_take(s, m, NULL, NULL, 0, 1, &err) == 0, state_borrowed = ckpt_snap_borrowed(s);
    int took_state_copy = ckpt_snap_take(s, m, NULL, NULL, 0, 0, &err) == 0, state_copied = !ckpt_snap_borrowed(s);
    ckpt_snap_free(s);
    int params_are = tensor0_is(m, MODEL_PARAM, model_host_params(m));
    int avg_is = tensor0_is(m, MODEL_EXP_AVG, model_host_moments(m, MODEL_EXP_AVG));
    int sq_is = tensor0_is(m, MODEL_EXP_AVG_SQ, model_host_moments(m, MODEL_EXP_AVG_SQ));
    int not_grad = model_host_moments(m, MODEL_GRAD) == NULL;
    model_free(m);
    CHECK(took && took_copy && took_state && took_state_copy, "%s", err.msg);
    CHECK(borrowed && copied, "weights only: borrowed %d with borrow, copied %d without", borrowed, copied);
    CHECK(state_borrowed && state_copied, "with the state: borrowed %d with borrow, copied %d without",
          state_borrowed, state_copied);
    CHECK(params_are, "model_host_params is not the first tensor's parameters");
    CHECK(avg_is && sq_is, "model_host_moments is not the first tensor's moments (exp_avg %d, exp_avg_sq %d)", avg_is,
          sq_is);
    CHECK(not_grad, "model_host_moments gave the gradient");
}

// A done callback that holds the writer's thread until the caller opens the
// gate (or 20 s pass), and notes whether it was opened.
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int open, was_open;
} gate;

static int done_at_gate(void *ctx, uint64_t version, rl_err *err) {
    (void)version, (void)err;
    gate *g = ctx;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&g->lock);
    while (!g->open && pthread_cond_timedwait(&g->opened, &g->lock, &until) == 0) {}
    g->was_open = g->open;
    pthread_mutex_unlock(&g->lock);
    return 0;
}

static void open_gate(gate *g) {
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_cond_broadcast(&g->opened);
    pthread_mutex_unlock(&g->lock);
}

// F32 weights (the optimizer file then holds the moments alone), and 16-bit
// weights with the F32 parameters in the optimizer file: both read in place,
// with the moments, until the version's files are written, before it is
// reported (done).
static void the_model_is_free_to_change_once_the_version_is_written_before_it_is_reported(void) {
    for (int half = 0; half < 2; half++) {
        char base[512], root[1024], state[128];
        rl_err err;
        CHECK(tmpdir(base, sizeof base), "mkdtemp: %s", strerror(errno));
        snprintf(root, sizeof root, "%s/ckpt", base);
        model_t *m = trained_model(1, &err), *first = trained_model(1, &err), *second = trained_model(2, &err);
        CHECK(m && first && second, "%s", err.msg);
        gate g = {.lock = PTHREAD_MUTEX_INITIALIZER, .opened = PTHREAD_COND_INITIALIZER};
        ckpt_writer *w = ckpt_writer_new(done_at_gate, NULL, &g);
        ckpt_write_opts o = {.root = root, .version = 1, .state_json = state_of(1, state, sizeof state),
                             .save = {.dtype = half ? DT_BF16 : DT_F32}};
        int saved = ckpt_writer_save(w, &o, m, NULL, NULL, &err);
        // Returns while the version is not done: its done callback waits at the gate.
        ckpt_writer_wait_model(w);
        copy_state(m, second);
        open_gate(&g);
        int waited = saved == 0 ? ckpt_writer_wait(w, &err) : -1;
        int is_first = waited == 0 && version_is(root, 1, first, &err);
        ckpt_writer_free(w);
        model_free(m);
        model_free(first);
        model_free(second);
        rm_rf(base);
        CHECK(saved == 0 && waited == 0, "%s weights: %s", half ? "bf16" : "f32", err.msg);
        CHECK(g.was_open, "%s weights: the wait for the parameters lasted until the version was done",
              half ? "bf16" : "f32");
        CHECK(is_first, "%s weights: the version is not the model as saved: %s", half ? "bf16" : "f32", err.msg);
    }
}

static void a_failed_background_write_is_reported_once(void) {
    char base[512], file[1024], under[2048], root[2048], state[128];
    rl_err err;
    CHECK(tmpdir(base, sizeof base), "mkdtemp: %s", strerror(errno));
    put_file(base, "plain", "not a directory\n");
    snprintf(file, sizeof file, "%s/plain", base);
    snprintf(under, sizeof under, "%s/ckpt", file);   // under a regular file: ENOTDIR
    model_t *m = trained_model(3, &err);
    CHECK(m, "%s", err.msg);
    // Kept: the next save returns it (and writes nothing), once.
    writer_log g = {.caller = pthread_self(), .fail_at = -1};
    ckpt_writer *w = ckpt_writer_new(log_done, NULL, &g);
    ckpt_write_opts o = {.root = under, .version = 0, .state_json = state_of(0, state, sizeof state)};
    int saved = ckpt_writer_save(w, &o, m, NULL, NULL, &err);
    int again = ckpt_writer_save(w, &o, m, NULL, NULL, &err);
    char why_save[1024];
    snprintf(why_save, sizeof why_save, "%s", err.msg);
    int busy = ckpt_writer_busy(w), then = ckpt_writer_wait(w, &err);
    ckpt_writer_free(w);
    // Given to failed, on the writer's thread; a done callback's error counts too.
    writer_log h = {.caller = pthread_self(), .fail_at = 1};
    ckpt_writer *f = ckpt_writer_new(log_done, log_failed, &h);
    snprintf(root, sizeof root, "%s/ckpt", base);
    o.root = root;
    int bad = ckpt_writer_save(f, &o, m, NULL, NULL, &err) == 0 && ckpt_writer_wait(f, &err) < 0;
    char failed0[1024];
    snprintf(failed0, sizeof failed0, "%s", h.failed);
    o.version = 1;
    o.state_json = state_of(1, state, sizeof state);
    int refused = ckpt_writer_save(f, &o, m, NULL, NULL, &err) == 0 && ckpt_writer_wait(f, &err) < 0;
    ckpt_writer_free(f);
    model_free(m);
    rm_rf(base);
    CHECK(saved == 0, "the first save returned before its write: %s", err.msg);
    CHECK(again < 0 && strstr(why_save, under) && strstr(why_save, "Not a directory"), "'%s'", why_save);
    CHECK(!busy && then == 0, "the refused save started a write, or its error was returned twice");
    CHECK(g.n == 0, "done called for a version that failed");
    CHECK(!bad && failed0[0] == 0, "version 0 failed: '%s'", failed0);
    CHECK(refused && !strcmp(h.failed, "done refused version 1") && !strcmp(err.msg, h.failed),
          "failed got '%s', wait '%s'", h.failed, err.msg);
}

static void removes_stale_temporaries(void) {
    char root[512], tmp[1024];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    snprintf(tmp, sizeof tmp, "%s/.tmp-v000005-99999", root);
    mkdir(tmp, 0755);
    put_file(tmp, "model.safetensors", "partial");
    put_file(root, ".latest.tmp-99999", "v0000");
    put_file(root, "notes.txt", "mine\n");
    model_t *m = trained_model(10, &err);
    CHECK(m, "%s", err.msg);
    int rc = write_version(root, 5, m, 0, NULL, &err);
    model_free(m);
    int gone = !exists(root, ".tmp-v000005-99999") && !exists(root, ".latest.tmp-99999");
    int others = exists(root, "notes.txt") && exists(root, "v000005");
    rm_rf(root);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(gone, "stale temporaries remain");
    CHECK(others, "an entry that is not a temporary was removed, or v000005 is missing");
}

// A writer killed while removing old versions, after latest moved: tidy (on
// --resume) removes what it left and the versions keep no longer holds.
static void tidy_finishes_what_a_writer_killed_while_removing_left(void) {
    char root[512], tmp[1024];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    model_t *m = trained_model(12, &err);
    CHECK(m, "%s", err.msg);
    int rc = 0;
    for (uint64_t v = 1; v <= 4 && rc == 0; v++) rc = write_version(root, v, m, 0, NULL, &err);
    model_free(m);
    CHECK(rc == 0, "%s", err.msg);
    snprintf(tmp, sizeof tmp, "%s/.tmp-old-v000000-99999", root);   // v0, half removed
    mkdir(tmp, 0755);
    put_file(tmp, "config.json", "{}");
    put_file(root, "notes.txt", "mine\n");
    rc = ckpt_tidy(root, 2, 0, &err);
    uint64_t *vs = NULL;
    size_t n = 0;
    if (rc == 0) rc = ckpt_versions(root, &vs, &n, &err);
    int kept = n == 2 && vs[0] == 3 && vs[1] == 4;
    free(vs);
    int gone = !exists(root, ".tmp-old-v000000-99999"), others = exists(root, "notes.txt") && exists(root, "latest");
    // keep 0 keeps every version
    int all = rc == 0 && ckpt_tidy(root, 0, 0, &err) == 0 && exists(root, "v000003") && exists(root, "v000004");
    rm_rf(root);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(kept, "with keep 2 after tidy: %zu versions, want v000003 v000004", n);
    CHECK(gone && others, "the temporary remains, or another entry went");
    CHECK(all, "tidy with keep 0 removed a version: %s", err.msg);
}

static void second_writer_is_refused(void) {
    char root[512], lock[1024];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    snprintf(lock, sizeof lock, "%s/.lock", root);
    int fd = open(lock, O_RDWR | O_CREAT, 0644);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0, "%s: %s", lock, strerror(errno));
    model_t *m = trained_model(11, &err);
    CHECK(m, "%s", err.msg);
    int busy = write_version(root, 0, m, 0, NULL, &err);
    char why[1024];
    snprintf(why, sizeof why, "%s", err.msg);
    close(fd);
    int after = write_version(root, 0, m, 0, NULL, &err);
    model_free(m);
    rm_rf(root);
    CHECK(busy < 0 && strstr(why, "another process") && strstr(why, lock), "'%s'", busy < 0 ? why : "succeeded");
    CHECK(after == 0, "%s", err.msg);
}

static void versions_lists_only_version_directories(void) {
    char root[512], p[1024];
    rl_err err;
    CHECK(tmpdir(root, sizeof root), "mkdtemp: %s", strerror(errno));
    const char *dirs[] = {"v000003", "v1234567", "v1", "v0000002", "vx", "w000004", ".tmp-v000005-1"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(p, sizeof p, "%s/%s", root, dirs[i]);
        mkdir(p, 0755);
    }
    put_file(root, "v000004", "a file\n");
    uint64_t *vs;
    size_t n;
    int rc = ckpt_versions(root, &vs, &n, &err);
    int ok = rc == 0 && n == 2 && vs[0] == 3 && vs[1] == 1234567;
    free(vs);
    rm_rf(root);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(ok, "%zu versions, want 3 and 1234567", n);
}

// Writes dir/optimizer.safetensors with the moments of m, changed by `how`:
// 0 as is, 1 without the last tensor, 2 with one misshapen, 3 with one extra.
static int write_optimizer_file(const char *dir, const model_t *m, int how, rl_err *err) {
    size_t nt = model_ntensors(m), n = 0;
    st_out *out = calloc(2 * nt + 1, sizeof *out);
    char (*names)[128] = calloc(2 * nt + 1, sizeof *names);
    float *zeros = calloc(4096 * 4, sizeof *zeros);
    for (size_t i = 0; i < nt; i++) {
        model_tensor t = model_tensor_at(m, i);
        for (int k = 0; k < 2; k++, n++) {
            snprintf(names[n], sizeof names[n], "%s.%s", t.name, k ? "exp_avg_sq" : "exp_avg");
            out[n] = (st_out){.name = names[n], .ndim = t.ndim, .shape = {t.shape[0], t.shape[1]}, .data = zeros};
        }
    }
    if (how == 1) n--;
    if (how == 2) out[2].shape[0]--;
    if (how == 3) {
        snprintf(names[n], sizeof names[n], "model.norm.weight.momentum");
        out[n] = (st_out){.name = names[n], .ndim = 1, .shape = {3}, .data = zeros};
        n++;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    int rc = st_write_f32(path, out, n, err);
    free(zeros);
    free(names);
    free(out);
    return rc;
}

static void read_optimizer_rejects_missing_or_misshapen_tensor(void) {
    char dir[512];
    rl_err err;
    CHECK(tmpdir(dir, sizeof dir), "mkdtemp: %s", strerror(errno));
    model_t *m = trained_model(12, &err);
    CHECK(m, "%s", err.msg);
    CHECK(model_tensor_at(m, 0).n <= 4096 * 4, "test model too large for the zero buffer");
    char why[4][1024];
    int rc[4];
    for (int how = 0; how < 4; how++) {
        rc[how] = write_optimizer_file(dir, m, how, &err);
        if (rc[how] == 0 && how > 0) rc[how] = ckpt_read_optimizer(dir, m, &err);
        snprintf(why[how], sizeof why[how], "%s", err.msg);
    }
    model_t *fresh = trained_model(12, &err);
    int untouched = fresh && same_bits(m, fresh, MODEL_EXP_AVG) && same_bits(m, fresh, MODEL_EXP_AVG_SQ);
    model_free(fresh);
    // Without training state there is nothing to load into.
    model_config c = cfg_small();
    model_t *plain = model_random(&c, 12, 0.1f, NULL, &err);
    write_optimizer_file(dir, m, 0, &err);
    int none = plain ? ckpt_read_optimizer(dir, plain, &err) : 0;
    char why_none[1024];
    snprintf(why_none, sizeof why_none, "%s", err.msg);
    model_tensor t_last = model_tensor_at(m, model_ntensors(m) - 1), t1 = model_tensor_at(m, 1);
    char missing[160], misshapen[160];
    snprintf(missing, sizeof missing, "%s.exp_avg_sq", t_last.name);
    snprintf(misshapen, sizeof misshapen, "%s.exp_avg", t1.name);
    model_free(plain);
    model_free(m);
    rm_rf(dir);
    CHECK(rc[0] == 0, "%s", why[0]);
    CHECK(rc[1] < 0 && strstr(why[1], "optimizer.safetensors") && strstr(why[1], missing) && strstr(why[1], "missing"),
          "'%s'", why[1]);
    CHECK(rc[2] < 0 && strstr(why[2], "optimizer.safetensors") && strstr(why[2], misshapen) && strstr(why[2], "shape"),
          "'%s'", why[2]);
    CHECK(rc[3] < 0 && strstr(why[3], "model.norm.weight.momentum"), "'%s'", why[3]);
    CHECK(untouched, "a refused file changed the moments");
    CHECK(none < 0 && strstr(why_none, "model_train_init"), "'%s'", why_none);
}

// ---- Killed writers -----------------------------------------------------------

#define KILL_ROUNDS 24
#define KILL_KEEP 3

// The writer the kill test runs (this program, re-executed): writes versions
// start, start+1, ... forever, version v with parameter 0 and both moments of
// tensor 0, element 0, set to v so that a reader can tell that every file of a
// directory belongs to one version. Writes one byte to stdout once writing begins.
static int write_forever(const char *root, const char *src, uint64_t start) {
    rl_err err;
    model_t *m = trained_model(20, &err);
    if (!m) {
        fprintf(stderr, "writer: %s\n", err.msg);
        return 2;
    }
    size_t n0 = model_tensor_at(m, 0).n;
    float *t0 = malloc(n0 * sizeof *t0);
    if (write(1, "r", 1) != 1) return 2;
    for (uint64_t v = start;; v++) {
        for (int which = MODEL_PARAM; which <= MODEL_EXP_AVG_SQ; which++) {
            if (which == MODEL_GRAD) continue;
            model_tensor_get(m, which, 0, t0);
            t0[0] = (float)v;
            model_tensor_set(m, which, 0, t0);
        }
        if (write_version(root, v, m, KILL_KEEP, src, &err)) {
            fprintf(stderr, "writer: %s\n", err.msg);
            return 2;
        }
    }
}

// dir holds version v: its weights, and with optimizer its optimizer state,
// every tensor of v (write_version's values). 0, or -1 with why.
static int check_version(const char *dir, uint64_t v, int optimizer, char *why, size_t size) {
    rl_err err;
    char path[4096];
    uint64_t sv = ~0ull;
    model_t *m = model_load(dir, NULL, &err);
    int rc = -1;
    float *t0 = NULL;
    if (!m) snprintf(why, size, "%s", err.msg);
    else if (ckpt_resolve(dir, path, sizeof path, &sv, &err) || sv != v)
        snprintf(why, size, "%s: state.json version %llu, want %llu (%s)", dir, (unsigned long long)sv,
                 (unsigned long long)v, err.msg);
    else if (model_train_init(m, &err) || (optimizer && ckpt_read_optimizer(dir, m, &err)))
        snprintf(why, size, "%s", err.msg);
    else if (!exists(dir, "tokenizer.json"))
        snprintf(why, size, "%s: tokenizer.json missing", dir);
    else {
        t0 = malloc(model_tensor_at(m, 0).n * sizeof *t0);
        rc = 0;
        for (int which = MODEL_PARAM; which <= (optimizer ? MODEL_EXP_AVG_SQ : MODEL_PARAM) && rc == 0; which++) {
            if (which == MODEL_GRAD) continue;
            model_tensor_get(m, which, 0, t0);
            if (t0[0] != (float)v) {
                snprintf(why, size, "%s: state %d of tensor 0 is from version %g, not %llu", dir, which,
                         (double)t0[0], (unsigned long long)v);
                rc = -1;
            }
        }
    }
    free(t0);
    model_free(m);
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void kill9_never_leaves_latest_incomplete(void) {
    char base[512], root[1024], src[1024], cal[1024], why[2048] = "";
    rl_err err;
    CHECK(tmpdir(base, sizeof base), "mkdtemp: %s", strerror(errno));
    snprintf(root, sizeof root, "%s/ckpt", base);
    snprintf(src, sizeof src, "%s/model", base);
    snprintf(cal, sizeof cal, "%s/calibrate", base);
    mkdir(src, 0755);
    put_file(src, "tokenizer.json", "{\"model\": {}}\n");
    put_file(src, "tokenizer_config.json", "{}\n");

    // The time of one write here, so that the kills spread over a few of them.
    model_t *m = trained_model(20, &err);
    CHECK(m, "%s", err.msg);
    double t = now_s();
    int rc = 0;
    for (uint64_t v = 0; v < 4 && rc == 0; v++) rc = write_version(cal, v, m, KILL_KEEP, src, &err);
    double per_write = (now_s() - t) / 4;
    model_free(m);
    CHECK(rc == 0, "%s", err.msg);

    rl_rng r;
    rng_seed(&r, 2024);
    uint64_t next = 0;
    int killed_mid_write = 0, published = 0, failed = 0, round = 0;
    // A machine busy with other work writes slower than it was calibrated: then
    // the rounds go on (4 times as many at most), their kills spread twice as
    // wide, until enough of them published a version and one landed in a write.
    for (; !failed && (round < KILL_ROUNDS || ((published < KILL_ROUNDS / 4 || !killed_mid_write) &&
                                               round < 4 * KILL_ROUNDS));
         round++) {
        int fds[2];
        CHECK(pipe(fds) == 0, "pipe: %s", strerror(errno));
        pid_t pid = fork();
        CHECK(pid >= 0, "fork: %s", strerror(errno));
        if (pid == 0) {
            char start[32];
            snprintf(start, sizeof start, "%llu", (unsigned long long)next);
            dup2(fds[1], 1);
            close(fds[0]);
            close(fds[1]);
            execl("/proc/self/exe", "test_checkpoint", "--write-forever", root, src, start, (char *)NULL);
            _exit(127);
        }
        close(fds[1]);
        char ready;
        ssize_t got = read(fds[0], &ready, 1);
        close(fds[0]);
        // A new writer's first write is slower than the calibrated ones, about 3 times under
        // the sanitizers (make check-san): the kills spread over twice as many writes there.
        double spread = (getenv("RLPIPE_SANITIZED") ? 8 : 4) * (round < KILL_ROUNDS ? 1 : 2);
        double delay = rng_uniform(&r) * spread * per_write;
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        if (got == 1) nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
            snprintf(why, sizeof why, "round %d: the writer ended by itself (status %d) before the kill", round, status);
            failed = 1;
            break;
        }
        // latest, when present, names a complete version, and so does every
        // v<digits> up to it; a newer one holds the weights (published may name it).
        char path[4096];
        uint64_t v, latest = 0, pv = 0;
        int has_latest = exists(root, "latest");
        if (has_latest) {
            if (ckpt_resolve(root, path, sizeof path, &v, &err)) {
                snprintf(why, sizeof why, "round %d: %s", round, err.msg);
                failed = 1;
            } else if (check_version(path, v, 1, why, sizeof why)) {
                failed = 1;
            } else {
                if (v + 1 > next) published++;
                next = v + 1;
                latest = v;
            }
        }
        if (!failed && exists(root, "published")) {
            if (ckpt_resolve_published(root, path, sizeof path, &pv, &err)) {
                snprintf(why, sizeof why, "round %d: %s", round, err.msg);
                failed = 1;
            } else if (has_latest && pv < latest) {
                snprintf(why, sizeof why, "round %d: published names v%llu, older than latest's v%llu", round,
                         (unsigned long long)pv, (unsigned long long)latest);
                failed = 1;
            } else {
                failed = check_version(path, pv, pv == latest && has_latest, why, sizeof why) != 0;
            }
        }
        uint64_t *vs = NULL;
        size_t n = 0;
        if (!failed && exists(root, ".") && ckpt_versions(root, &vs, &n, &err)) {
            snprintf(why, sizeof why, "round %d: %s", round, err.msg);
            failed = 1;
        }
        for (size_t i = 0; i < n && !failed; i++) {
            snprintf(path, sizeof path, "%s/v%06llu", root, (unsigned long long)vs[i]);
            failed = check_version(path, vs[i], has_latest && vs[i] <= latest, why, sizeof why) != 0;
        }
        free(vs);
        // A temporary left behind means this kill landed inside a write.
        DIR *d = opendir(root);
        for (struct dirent *e; d && (e = readdir(d));) killed_mid_write += !strncmp(e->d_name, ".tmp-", 5);
        if (d) closedir(d);
    }
    rm_rf(base);
    CHECK(!failed, "%s", why);
    CHECK(published >= KILL_ROUNDS / 4, "only %d of %d rounds published a version (one write: %.1f ms)", published,
          round, per_write * 1e3);
    CHECK(killed_mid_write, "no kill landed inside a write; the test does not test");
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--write-forever"))
        return write_forever(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    RUN(writes_complete_version_and_latest);
    RUN(model_without_training_state_writes_no_optimizer);
    RUN(keep_removes_oldest_versions_only);
    RUN(copies_tokenizer_files_when_present);
    RUN(refuses_to_overwrite_written_version);
    RUN(replaces_unpublished_version_newer_than_latest);
    RUN(the_weights_are_published_before_the_optimizer_state_is_written);
    RUN(a_failed_late_write_withdraws_the_published_weights);
    RUN(tidy_withdraws_the_weights_of_a_version_a_killed_writer_left_incomplete);
    RUN(published_is_followed_only_when_newer_than_latest);
    RUN(weights_only_versions_are_published_while_latest_stays_complete);
    RUN(errors_name_the_path);
    RUN(a_version_written_in_the_background_holds_the_model_as_it_was_when_saved);
    RUN(a_snapshot_reads_a_cpu_models_parameters_and_moments_in_place_when_allowed);
    RUN(the_model_is_free_to_change_once_the_version_is_written_before_it_is_reported);
    RUN(a_failed_background_write_is_reported_once);
    RUN(removes_stale_temporaries);
    RUN(tidy_finishes_what_a_writer_killed_while_removing_left);
    RUN(second_writer_is_refused);
    RUN(versions_lists_only_version_directories);
    RUN(read_optimizer_rejects_missing_or_misshapen_tensor);
    RUN(kill9_never_leaves_latest_incomplete);
    RUN(path_parent_is_the_directory_holding_a_path);
    CHECK_DONE();
}
