// hfweights.c — one safetensors file or an index of shards (hfweights.h).
#include "checkpoint/hfweights.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records/json.h"

#define HFW_MAX_INDEX (64u << 20)   // an index is a few hundred kilobytes at most

int hfw_exists(const char *dir) {
    char *a = path_join(dir, HFW_SINGLE), *b = path_join(dir, HFW_INDEX);
    int yes = access(a, F_OK) == 0 || access(b, F_OK) == 0;
    free(a);
    free(b);
    return yes;
}

void hfw_close(hfw_set *s) {
    if (!s) return;
    for (size_t i = 0; i < s->nfiles; i++) st_close(s->files[i]);
    free(s->files);
    free(s->t);
    free(s->file_of);
    free(s->where);
    free(s);
}

const st_tensor *hfw_find(const hfw_set *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->t[i]->name, name)) return s->t[i];
    return NULL;
}

const char *hfw_file(const hfw_set *s, size_t i) { return s->files[s->file_of[i]]->path; }

// Adds every tensor of f (files[k]) to the set's list.
static void add_file(hfw_set *s, st_file *f) {
    size_t k = s->nfiles++;
    s->files = xrealloc(s->files, s->nfiles * sizeof *s->files);
    s->files[k] = f;
    s->t = xrealloc(s->t, (s->n + f->n + 1) * sizeof *s->t);
    s->file_of = xrealloc(s->file_of, (s->n + f->n + 1) * sizeof *s->file_of);
    for (size_t i = 0; i < f->n; i++) {
        s->t[s->n] = &f->t[i];
        s->file_of[s->n++] = k;
    }
}

// A shard's name in an index: a plain file name in the directory.
static int bad_shard_name(const char *name) {
    return !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..");
}

// The shards an index names, opened and checked against its weight_map.
static int open_index(hfw_set *s, const char *dir, rl_err *err) {
    const char *ip = s->where;
    sbuf text = {0};
    cJSON *root = NULL;
    int rc = -1;
    if (read_whole_file(ip, HFW_MAX_INDEX, &text, err)) goto out;
    root = cJSON_ParseWithLength((const char *)text.data, text.len);
    if (!root || !cJSON_IsObject(root)) {
        err_set(err, "%s: not a JSON object", ip);
        goto out;
    }
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
    if (!cJSON_IsObject(map) || !map->child) {
        err_set(err, "%s: weight_map is missing or empty (an object of tensor: shard file)", ip);
        goto out;
    }
    cJSON_ArrayForEach(e, map) {   // each shard once, in the order first named
        if (!cJSON_IsString(e) || bad_shard_name(e->valuestring)) {
            err_set(err, "%s: weight_map[\"%.200s\"] is not a file name in the directory", ip, e->string);
            goto out;
        }
        size_t k = 0;
        while (k < s->nfiles && strcmp(strrchr(s->files[k]->path, '/') + 1, e->valuestring)) k++;
        if (k < s->nfiles) continue;
        char *path = path_join(dir, e->valuestring);
        st_file *f = st_open(path, err);
        free(path);
        if (!f) {
            rl_err e2;
            err_set(&e2, "%s (a shard %s names): %s", e->valuestring, ip, err->msg);
            *err = e2;
            goto out;
        }
        add_file(s, f);
    }
    for (size_t i = 0; i < s->n; i++) {   // every tensor is where the map says, and only once
        const char *name = s->t[i]->name;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(map, name);
        const char *file = strrchr(hfw_file(s, i), '/') + 1;
        if (!m) {
            err_set(err, "%s: tensor '%s' is in shard %s but not in the weight_map of %s", hfw_file(s, i), name, file, ip);
            goto out;
        }
        if (strcmp(m->valuestring, file)) {
            err_set(err, "%s: tensor '%s' is in shard %s, but the weight_map says %s", ip, name, file, m->valuestring);
            goto out;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->t[j]->name, name)) {
                err_set(err, "%s: tensor '%s' is in two shards", ip, name);
                goto out;
            }
    }
    cJSON_ArrayForEach(e, map)
        if (!hfw_find(s, e->string)) {
            err_set(err, "%s: tensor '%s' is not in shard %s", ip, e->string, e->valuestring);
            goto out;
        }
    rc = 0;
out:
    cJSON_Delete(root);
    sbuf_free(&text);
    return rc;
}

hfw_set *hfw_open(const char *dir, rl_err *err) {
    hfw_set *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->where = path_join(dir, HFW_SINGLE);
    if (access(s->where, F_OK) == 0) {
        st_file *f = st_open(s->where, err);
        if (!f) {
            hfw_close(s);
            return NULL;
        }
        add_file(s, f);
        return s;
    }
    int e = errno;
    char *single = s->where;
    s->where = path_join(dir, HFW_INDEX);
    if (access(s->where, F_OK) != 0) {
        err_set(err, "cannot open: %s: %s (and there is no " HFW_INDEX " of shards)", single, strerror(e));
        free(single);
        hfw_close(s);
        return NULL;
    }
    free(single);
    if (open_index(s, dir, err)) {
        hfw_close(s);
        return NULL;
    }
    return s;
}

// ---- Writing ---------------------------------------------------------------------

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

// The index: total_size and the weight_map sorted by tensor name, as transformers writes it.
static int write_index(const char *dir, const st_out *t, size_t n, const size_t *shard, size_t nshards,
                       uint64_t total, rl_err *err) {
    const char **names = xmalloc((n ? n : 1) * sizeof *names);
    for (size_t i = 0; i < n; i++) names[i] = t[i].name;
    qsort(names, n, sizeof *names, cmp_str);
    sbuf b = {0};
    sbuf_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                (unsigned long long)total);
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (strcmp(t[k].name, names[i])) k++;
        sbuf_printf(&b, "    ");
        json_put_str(&b, names[i], strlen(names[i]));
        sbuf_printf(&b, ": \"model-%05zu-of-%05zu.safetensors\"%s\n", shard[k] + 1, nshards, i + 1 < n ? "," : "");
    }
    sbuf_printf(&b, "  }\n}\n");
    free(names);
    char *path = path_join(dir, HFW_INDEX);
    int rc = write_file_sync(path, b.data, b.len, err);
    free(path);
    sbuf_free(&b);
    return rc;
}

int hfw_write(const char *dir, const st_out *t, size_t n, const hfw_write_opts *o, rl_err *err) {
    uint64_t max = o->max_shard_bytes ? o->max_shard_bytes : HFW_DEFAULT_SHARD, total = 0, in_shard = 0;
    size_t *shard = xmalloc((n ? n : 1) * sizeof *shard), nshards = n ? 1 : 0;
    for (size_t i = 0; i < n; i++) {   // greedy, in order: a tensor that does not fit opens a shard
        uint64_t b = st_data_bytes(&t[i], o->dtype);
        if (b == UINT64_MAX) {
            free(shard);
            return err_set(err, "%s: tensor '%s' has an invalid shape", dir, t[i].name);
        }
        if (in_shard && in_shard + b > max) nshards++, in_shard = 0;
        shard[i] = nshards - 1;
        in_shard += b;
        total += b;
    }
    int rc = 0;
    char *single = path_join(dir, HFW_SINGLE), *index = path_join(dir, HFW_INDEX);
    if (nshards <= 1) {
        rc = st_write(single, t, n, o->dtype, err);
        if (rc == 0 && unlink(index) && errno != ENOENT) rc = err_set(err, "cannot remove %s: %s", index, strerror(errno));
    } else {
        for (size_t k = 0, i0 = 0; k < nshards && rc == 0; k++) {
            size_t i1 = i0;
            while (i1 < n && shard[i1] == k) i1++;
            char name[64];
            snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, nshards);
            char *path = path_join(dir, name);
            rc = st_write(path, t + i0, i1 - i0, o->dtype, err);
            free(path);
            i0 = i1;
        }
        if (rc == 0) rc = write_index(dir, t, n, shard, nshards, total, err);
        if (rc == 0 && unlink(single) && errno != ENOENT) rc = err_set(err, "cannot remove %s: %s", single, strerror(errno));
    }
    free(single);
    free(index);
    free(shard);
    return rc;
}

int hfw_save_model(const char *dir, const model_config *c, const st_out *t, size_t n, const hfw_write_opts *o,
                   rl_err *err) {
    model_config w = *c;   // torch_dtype says what is written, not what was read
    snprintf(w.torch_dtype, sizeof w.torch_dtype, "%s",
             o->dtype == DT_BF16 ? "bfloat16" : o->dtype == DT_F16 ? "float16" : "float32");
    char *path = path_join(dir, "config.json");
    int rc = cfg_save(path, &w, err) < 0 ? -1 : hfw_write(dir, t, n, o, err);
    free(path);
    return rc;
}
