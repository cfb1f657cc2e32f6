// checkpoint.c — checkpoint roots and version directories (checkpoint.h):
// resolving them, publishing a version atomically, removing old ones.
#include "checkpoint/checkpoint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_PATH 4096

int ckpt_state_uint(const char *dir, const char *key, uint64_t *value, rl_err *err) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/state.json", dir) >= sizeof path)
        return err_set(err, "path too long: %s/state.json", dir);
    sbuf text = {0};
    if (read_whole_file(path, (size_t)1 << 20, &text, err)) {
        sbuf_free(&text);
        return errno == ENOENT ? 0 : -1;
    }
    cJSON *j = cJSON_Parse((const char *)text.data);
    sbuf_free(&text);
    if (!j) return err_set(err, "%s: not valid JSON", path);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    int rc = 0;
    if (v) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d <= 9007199254740992.0 && d == (double)(uint64_t)d))
            rc = err_set(err, "%s: \"%s\" is not a non-negative integer", path, key);
        else {
            *value = (uint64_t)d;
            rc = 1;
        }
    }
    cJSON_Delete(j);
    return rc;
}

// The version directory that dir/<file> (a pointer: "latest" or "published")
// names, into path, and its version as ckpt_resolve says: 1, 0 when there is
// no such file, -1 with err.
static int resolve_pointer(const char *dir, const char *file, char *path, size_t size, uint64_t *version,
                           rl_err *err) {
    char pointer[4096];
    if ((size_t)snprintf(pointer, sizeof pointer, "%s/%s", dir, file) >= sizeof pointer)
        return err_set(err, "path too long: %s", dir);
    sbuf text = {0};
    if (read_whole_file(pointer, 4096, &text, err)) {
        sbuf_free(&text);
        return errno == ENOENT ? 0 : -1;
    }
    char *name = (char *)text.data;
    size_t n = strlen(name);
    while (n && isspace((unsigned char)name[n - 1])) name[--n] = 0;
    int bad = !n || strchr(name, '/') || strchr(name, '\n') || !strcmp(name, ".") || !strcmp(name, "..");
    if (bad || (size_t)snprintf(path, size, "%s/%s", dir, name) >= size) {
        err_set(err, "%s does not name a version directory ('%.100s')", pointer, name);
        sbuf_free(&text);
        return -1;
    }
    *version = 0;
    int rc = ckpt_state_uint(path, "version", version, err);
    if (rc == 0 && name[0] == 'v' && name[1] && strspn(name + 1, "0123456789") == strlen(name + 1))
        *version = strtoull(name + 1, NULL, 10);
    sbuf_free(&text);
    return rc < 0 ? -1 : 1;
}

int ckpt_resolve(const char *dir, char *path, size_t size, uint64_t *version, rl_err *err) {
    int rc = resolve_pointer(dir, "latest", path, size, version, err);
    if (rc) return rc < 0 ? -1 : 0;
    // A model directory.
    if ((size_t)snprintf(path, size, "%s", dir) >= size) return err_set(err, "path too long: %s", dir);
    *version = 0;
    return ckpt_state_uint(path, "version", version, err) < 0 ? -1 : 0;
}

int ckpt_resolve_published(const char *root, char *path, size_t size, uint64_t *version, rl_err *err) {
    char newer[4096];
    uint64_t v = 0;
    int published = resolve_pointer(root, "published", newer, sizeof newer, &v, err);
    if (published < 0) return -1;
    int latest = resolve_pointer(root, "latest", path, size, version, err);
    if (latest < 0) return -1;
    if (!published && !latest) return ckpt_resolve(root, path, size, version, err);
    if (published && (!latest || v > *version)) {
        if ((size_t)snprintf(path, size, "%s", newer) >= size) return err_set(err, "path too long: %s", newer);
        *version = v;
    }
    return 0;
}

// ---- Writing versions ---------------------------------------------------------

// Formats a path into buf (4096 bytes); -1 with err when it does not fit.
static int pathf(char *buf, rl_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int pathf(char *buf, rl_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, CKPT_PATH, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= CKPT_PATH) return err_set(err, "path too long: %.200s...", buf);
    return 0;
}

static void version_name(char *buf, size_t size, uint64_t v) {
    snprintf(buf, size, "v%06llu", (unsigned long long)v);
}

// v<digits> (at most 20, no overflow): 1 and *v, else 0. canonical: only the
// name version_name gives (no extra leading zeros).
static int parse_version_name(const char *name, int canonical, uint64_t *v) {
    size_t nd = strlen(name) - 1;
    if (name[0] != 'v' || nd < 1 || nd > 20 || strspn(name + 1, "0123456789") != nd) return 0;
    errno = 0;
    unsigned long long x = strtoull(name + 1, NULL, 10);
    if (errno == ERANGE) return 0;
    if (canonical) {
        char back[32];
        version_name(back, sizeof back, x);
        if (strcmp(back, name)) return 0;
    }
    *v = x;
    return 1;
}

// Opens path (a directory when dir) and fsyncs it.
static int fsync_path(const char *path, int dir, rl_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
    if (fd < 0) return err_set(err, "cannot open: %s: %s", path, strerror(errno));
    if (fsync(fd)) {
        int e = errno;
        close(fd);
        return err_set(err, "cannot fsync: %s: %s", path, strerror(e));
    }
    if (close(fd)) return err_set(err, "cannot close: %s: %s", path, strerror(errno));
    return 0;
}

// Copies src to dst (created, fsynced). 1 copied, 0 src absent and optional, -1 error.
static int copy_file(const char *src, const char *dst, int optional, rl_err *err) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0 && errno == ENOENT && optional) return 0;
    if (in < 0) return err_set(err, "cannot open: %s: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        return err_set(err, "cannot create: %s: %s", dst, strerror(e));
    }
    const char *what = NULL, *where = dst;
    char buf[65536];
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            what = "read";
            where = src;
            break;
        }
        if (r == 0) break;
        if (fd_write_all(out, buf, (size_t)r)) {
            what = "write";
            break;
        }
    }
    if (!what && fsync(out)) what = "fsync";
    int e = errno;
    close(in);
    if (close(out) && !what) {
        what = "close";
        e = errno;
    }
    if (!what) return 1;
    unlink(dst);
    return err_set(err, "cannot %s: %s: %s", what, where, strerror(e));
}

// Removes path and, if it is a directory, everything under it (symbolic links
// are removed, not followed).
static int rm_tree(const char *path, rl_err *err) {
    struct stat st;
    if (lstat(path, &st)) {
        if (errno == ENOENT) return 0;
        return err_set(err, "cannot stat: %s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path)) return err_set(err, "cannot remove: %s: %s", path, strerror(errno));
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return err_set(err, "cannot open: %s: %s", path, strerror(errno));
    int rc = 0;
    struct dirent *e;
    char sub[CKPT_PATH];
    while (rc == 0 && (errno = 0, e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        rc = pathf(sub, err, "%s/%s", path, e->d_name);
        if (rc == 0) rc = rm_tree(sub, err);
    }
    if (rc == 0 && errno) rc = err_set(err, "cannot read directory: %s: %s", path, strerror(errno));
    closedir(d);
    if (rc == 0 && rmdir(path)) rc = err_set(err, "cannot remove: %s: %s", path, strerror(errno));
    return rc;
}

// The names in dir for which keep(name) is true, as a NULL-terminated array
// (each entry and the array malloc'd).
static char **list_dir(const char *dir, int (*keep)(const char *name), rl_err *err) {
    DIR *d = opendir(dir);
    if (!d) {
        err_set(err, "cannot open: %s: %s", dir, strerror(errno));
        return NULL;
    }
    size_t n = 0;
    char **names = xmalloc(sizeof *names);
    struct dirent *e;
    while ((errno = 0, e = readdir(d))) {
        if (!keep(e->d_name)) continue;
        names = xrealloc(names, (n + 2) * sizeof *names);
        names[n++] = xstrdup(e->d_name);
    }
    names[n] = NULL;
    int e2 = errno;
    closedir(d);
    if (e2) {
        for (size_t i = 0; i < n; i++) free(names[i]);
        free(names);
        err_set(err, "cannot read directory: %s: %s", dir, strerror(e2));
        return NULL;
    }
    return names;
}

static void free_names(char **names) {
    for (size_t i = 0; names && names[i]; i++) free(names[i]);
    free(names);
}

static int is_version_name(const char *name) {
    uint64_t v;
    return parse_version_name(name, 1, &v);
}

static int is_file_name(const char *name) {
    return strcmp(name, ".") && strcmp(name, "..");
}

static int is_temporary(const char *name) {
    return !strncmp(name, ".tmp-", 5) || !strncmp(name, ".latest.tmp-", 12) || !strncmp(name, ".published.tmp-", 15);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int ckpt_versions(const char *root, uint64_t **versions, size_t *n, rl_err *err) {
    *versions = NULL;
    *n = 0;
    char **names = list_dir(root, is_version_name, err);
    if (!names) return -1;
    size_t k = 0;
    while (names[k]) k++;
    uint64_t *v = k ? xmalloc(k * sizeof *v) : NULL;
    char path[CKPT_PATH];
    int rc = 0;
    for (size_t i = 0; names[i] && rc == 0; i++) {
        struct stat st;
        rc = pathf(path, err, "%s/%s", root, names[i]);
        if (rc == 0 && stat(path, &st)) {
            if (errno == ENOENT) continue;   // removed meanwhile
            rc = err_set(err, "cannot stat: %s: %s", path, strerror(errno));
        }
        if (rc == 0 && S_ISDIR(st.st_mode)) parse_version_name(names[i], 1, &v[(*n)++]);
    }
    free_names(names);
    if (rc) {
        free(v);
        *n = 0;
        return -1;
    }
    if (*n) qsort(v, *n, sizeof *v, cmp_u64);
    else {
        free(v);
        v = NULL;
    }
    *versions = v;
    return 0;
}

// The version root/latest names: 1 and *v, 0 when there is no latest, -1 error.
static int latest_version(const char *root, uint64_t *v, rl_err *err) {
    char path[CKPT_PATH];
    if (pathf(path, err, "%s/latest", root)) return -1;
    sbuf text = {0};
    if (read_whole_file(path, 4096, &text, err)) {
        int absent = errno == ENOENT;
        sbuf_free(&text);
        return absent ? 0 : -1;
    }
    char *name = (char *)text.data;
    size_t n = strlen(name);
    while (n && isspace((unsigned char)name[n - 1])) name[--n] = 0;
    int rc = parse_version_name(name, 0, v);
    if (!rc) err_set(err, "%s does not name a version directory v<digits> ('%.100s')", path, name);
    sbuf_free(&text);
    return rc ? 1 : -1;
}

// state_json must be a JSON object whose "version" is the version written.
static int check_state(const ckpt_write_opts *o, rl_err *err) {
    cJSON *j = cJSON_Parse(o->state_json);
    int rc = 0;
    if (!cJSON_IsObject(j)) rc = err_set(err, "state.json of version %llu: not a JSON object",
                                         (unsigned long long)o->version);
    else {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "version");
        if (!cJSON_IsNumber(v) || v->valuedouble != (double)o->version)
            rc = err_set(err, "state.json of version %llu: \"version\" is not %llu", (unsigned long long)o->version,
                         (unsigned long long)o->version);
    }
    cJSON_Delete(j);
    return rc;
}

// Creates root if missing (not its parents; the parent is fsynced so that the
// new entry lasts); it must be a directory.
static int make_root(const char *root, rl_err *err) {
    if (mkdir(root, 0755) == 0) {
        char parent[CKPT_PATH];
        if (path_parent(root, parent, sizeof parent)) return err_set(err, "path too long: %s", root);
        if (fsync_path(parent, 1, err)) return -1;
    } else if (errno != EEXIST)
        return err_set(err, "cannot create checkpoint directory: %s: %s", root, strerror(errno));
    struct stat st;
    if (stat(root, &st)) return err_set(err, "cannot stat: %s: %s", root, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return err_set(err, "checkpoint directory %s: %s", root, strerror(ENOTDIR));
    return 0;
}

// Holds root/.lock (flock, released when the descriptor closes or the process
// dies): the descriptor, or -1 with err. A file system without locks is not refused.
static int lock_root(const char *root, rl_err *err) {
    char path[CKPT_PATH];
    if (pathf(path, err, "%s/.lock", root)) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(err, "cannot open: %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 || errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS) return fd;
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK)
        return err_set(err, "%s is being written by another process (it holds %s)", root, path);
    return err_set(err, "cannot lock: %s: %s", path, strerror(e));
}

static const struct {
    const char *name;
    int required;
} tokenizer_files[] = {
    {"tokenizer.json", 1},
    {"tokenizer_config.json", 0},
    {"special_tokens_map.json", 0},
    {"generation_config.json", 0},
    {"chat_template.jinja", 0},
};

// Everything of a version into the empty directory dir, fsynced.
static int fill_version(const char *dir, const ckpt_write_opts *o, ckpt_fill_fn fill, void *ctx, rl_err *err) {
    char path[CKPT_PATH], src[CKPT_PATH];
    if (fill(dir, ctx, err)) return -1;
    if (pathf(path, err, "%s/state.json", dir) || write_file_sync(path, o->state_json, strlen(o->state_json), err))
        return -1;
    for (size_t i = 0; o->copy_from && i < sizeof tokenizer_files / sizeof *tokenizer_files; i++) {
        if (pathf(src, err, "%s/%s", o->copy_from, tokenizer_files[i].name) ||
            pathf(path, err, "%s/%s", dir, tokenizer_files[i].name) ||
            copy_file(src, path, !tokenizer_files[i].required, err) < 0)
            return -1;
    }
    // Every file above was fsynced by its writer; the directory's entries now.
    return fsync_path(dir, 1, err);
}

// Moves root/name out of the way (to a .tmp- name, so that it stops being a
// version at once) and deletes it.
static int discard(const char *root, const char *name, rl_err *err) {
    char from[CKPT_PATH], to[CKPT_PATH];
    if (pathf(from, err, "%s/%s", root, name) || pathf(to, err, "%s/.tmp-old-%s-%ld", root, name, (long)getpid()))
        return -1;
    if (rename(from, to)) return err_set(err, "cannot rename %s to %s: %s", from, to, strerror(errno));
    return rm_tree(to, err);
}

// Of the versions up to newest, removes all but the newest keep, the
// multiples of every (> 0) and *latest (NULL: none), the newest complete one.
static int remove_old(const char *root, uint64_t newest, int keep, uint64_t every, const uint64_t *latest,
                      rl_err *err) {
    uint64_t *v;
    size_t n;
    if (ckpt_versions(root, &v, &n, err)) return -1;
    while (n && v[n - 1] > newest) n--;   // leftovers newer than latest: replaced when written
    int rc = 0;
    for (size_t i = 0; i + (size_t)keep < n && rc == 0; i++) {
        if ((every && v[i] % every == 0) || (latest && v[i] == *latest)) continue;
        char name[32];
        version_name(name, sizeof name, v[i]);
        rc = discard(root, name, err);
    }
    free(v);
    return rc;
}

// Removes the .tmp-* and .latest.tmp-* entries a killed writer left (the
// caller holds the lock, so no write is under way).
static int remove_stale(const char *root, rl_err *err) {
    char **stale = list_dir(root, is_temporary, err);
    if (!stale) return -1;
    char path[CKPT_PATH];
    int rc = 0;
    for (size_t i = 0; stale[i] && rc == 0; i++)
        if ((rc = pathf(path, err, "%s/%s", root, stale[i])) == 0) rc = rm_tree(path, err);
    free_names(stale);
    return rc;
}

// Points root/<file> ("latest" or "published") at the version directory
// name: written as root/.<file>.tmp-<pid>, fsynced, renamed, root fsynced.
static int point(const char *root, const char *file, const char *name, rl_err *err) {
    char line[40], tmp[CKPT_PATH], path[CKPT_PATH];
    snprintf(line, sizeof line, "%s\n", name);
    if (pathf(tmp, err, "%s/.%s.tmp-%ld", root, file, (long)getpid()) || pathf(path, err, "%s/%s", root, file) ||
        write_file_sync(tmp, line, strlen(line), err))
        return -1;
    if (rename(tmp, path)) {
        int rc = err_set(err, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return rc;
    }
    return fsync_path(root, 1, err);
}

// The second step of a version: what late writes, under root/.tmp-NAME-late-<pid>,
// moved file by file into root/NAME (published already), which is fsynced.
static int fill_late(const char *root, const char *name, ckpt_fill_fn late, void *ctx, rl_err *err) {
    char tmp[CKPT_PATH], from[CKPT_PATH], to[CKPT_PATH];
    if (pathf(tmp, err, "%s/.tmp-%s-late-%ld", root, name, (long)getpid())) return -1;
    if (mkdir(tmp, 0755)) return err_set(err, "cannot create: %s: %s", tmp, strerror(errno));
    char **files = NULL;
    int rc = late(tmp, ctx, err);
    if (rc == 0 && !(files = list_dir(tmp, is_file_name, err))) rc = -1;
    for (size_t i = 0; rc == 0 && files[i]; i++) {
        rc = pathf(from, err, "%s/%s", tmp, files[i]) || pathf(to, err, "%s/%s/%s", root, name, files[i]) ? -1 : 0;
        if (rc == 0 && rename(from, to)) rc = err_set(err, "cannot rename %s to %s: %s", from, to, strerror(errno));
    }
    free_names(files);
    rl_err ignored;
    if (rc) rm_tree(tmp, &ignored);
    else if (rmdir(tmp)) rc = err_set(err, "cannot remove: %s: %s", tmp, strerror(errno));
    return rc || pathf(to, err, "%s/%s", root, name) || fsync_path(to, 1, err) ? -1 : 0;
}

// Removes root/name, a version newer than latest (*latest, or NULL when there
// is none): published is first pointed back at latest (removed when there is
// none), so that it never names a missing version.
static int withdraw(const char *root, const char *name, const uint64_t *latest, rl_err *err) {
    char path[CKPT_PATH], back[32];
    if (latest) {
        version_name(back, sizeof back, *latest);
        if (point(root, "published", back, err)) return -1;
    } else {
        if (pathf(path, err, "%s/published", root)) return -1;
        if (unlink(path) && errno != ENOENT) return err_set(err, "cannot remove: %s: %s", path, strerror(errno));
        if (fsync_path(root, 1, err)) return -1;
    }
    return discard(root, name, err);
}

// The old versions removed as o->keep says, after root/path was written
// (latest: the newest complete version, which stays).
static int keep_rule(const ckpt_write_opts *o, const char *path, const uint64_t *latest, rl_err *err) {
    if (o->keep > 0 && remove_old(o->root, o->version, o->keep, o->keep_every, latest, err)) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return err_set(err, "%s written, but removing the old versions failed: %s", path, why);
    }
    return 0;
}

// Step 2 of a version (root/name, at path, published already): what late
// writes, then latest names it. On failure it is withdrawn (*latest: the
// version latest names, NULL: none).
static int complete_locked(const ckpt_write_opts *o, const char *name, const char *path, const uint64_t *latest,
                           ckpt_fill_fn late, void *ctx, rl_err *err) {
    if (late && fill_late(o->root, name, late, ctx, err)) {
        rl_err ignored;   // as far as that goes: a resume tidies the rest
        withdraw(o->root, name, latest, &ignored);
        return -1;
    }
    if (point(o->root, "latest", name, err)) return -1;
    uint64_t now = o->version;
    return keep_rule(o, path, &now, err);
}

static int write_locked(const ckpt_write_opts *o, ckpt_fill_fn fill, ckpt_fill_fn late, void *ctx, rl_err *err) {
    const char *root = o->root;
    char path[CKPT_PATH], tmp[CKPT_PATH], name[32];
    int rc = 0;
    if (remove_stale(root, err)) return -1;

    uint64_t latest = 0;
    int has_latest = latest_version(root, &latest, err);
    if (has_latest < 0) return -1;
    version_name(name, sizeof name, o->version);
    if (pathf(path, err, "%s/%s", root, name) || pathf(tmp, err, "%s/.tmp-%s-%ld", root, name, (long)getpid()))
        return -1;
    if (has_latest && o->version <= latest)
        return err_set(err, "%s: version %llu is not newer than the v%06llu that %s/latest names; a written "
                       "version is never replaced (write to a new directory, or remove the newer versions "
                       "and latest)", path, (unsigned long long)o->version, (unsigned long long)latest, root);

    // 1. The weights, published.
    if (mkdir(tmp, 0755)) return err_set(err, "cannot create: %s: %s", tmp, strerror(errno));
    if (fill_version(tmp, o, fill, ctx, err)) {
        rl_err ignored;
        rm_tree(tmp, &ignored);
        return -1;
    }
    // A vNNNNNN newer than latest was renamed in by a writer killed before it
    // updated latest: never complete, so replaced.
    struct stat st;
    if (lstat(path, &st) == 0) rc = withdraw(root, name, has_latest ? &latest : NULL, err);
    else if (errno != ENOENT) rc = err_set(err, "cannot stat: %s: %s", path, strerror(errno));
    if (rc == 0 && rename(tmp, path)) rc = err_set(err, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc) {
        rl_err ignored;
        rm_tree(tmp, &ignored);
        return -1;
    }
    if (fsync_path(root, 1, err) || point(root, "published", name, err)) return -1;
    if (o->weights_only) return keep_rule(o, path, has_latest ? &latest : NULL, err);
    return complete_locked(o, name, path, has_latest ? &latest : NULL, late, ctx, err);
}

int ckpt_publish(const ckpt_write_opts *o, ckpt_fill_fn fill, ckpt_fill_fn late, void *ctx, rl_err *err) {
    if (!o->root || !o->root[0]) return err_set(err, "checkpoint directory not given");
    if (!o->state_json) return err_set(err, "state.json of version %llu not given", (unsigned long long)o->version);
    if (o->keep < 0) return err_set(err, "keep %d: must be 0 (all) or positive", o->keep);
    if (check_state(o, err) || make_root(o->root, err)) return -1;
    int lock = lock_root(o->root, err);
    if (lock < 0) return -1;
    int rc = write_locked(o, fill, late, ctx, err);
    close(lock);
    return rc;
}

static int complete_checked(const ckpt_write_opts *o, ckpt_fill_fn late, void *ctx, rl_err *err) {
    const char *root = o->root;
    char path[CKPT_PATH], name[32];
    if (remove_stale(root, err)) return -1;
    uint64_t latest = 0, published = 0;
    int has_latest = latest_version(root, &latest, err);
    if (has_latest < 0) return -1;
    version_name(name, sizeof name, o->version);
    if (pathf(path, err, "%s/%s", root, name)) return -1;
    if (has_latest && o->version <= latest)
        return err_set(err, "%s: version %llu is complete already (%s/latest names v%06llu)", path,
                       (unsigned long long)o->version, root, (unsigned long long)latest);
    char pub[CKPT_PATH];
    if (ckpt_resolve_published(root, pub, sizeof pub, &published, err)) return -1;
    if (published != o->version || access(path, F_OK) != 0)
        return err_set(err, "%s: not the version %s/published names (v%06llu): nothing to complete", path, root,
                       (unsigned long long)published);
    return complete_locked(o, name, path, has_latest ? &latest : NULL, late, ctx, err);
}

int ckpt_complete(const ckpt_write_opts *o, ckpt_fill_fn late, void *ctx, rl_err *err) {
    if (!o->root || !o->root[0]) return err_set(err, "checkpoint directory not given");
    if (o->keep < 0) return err_set(err, "keep %d: must be 0 (all) or positive", o->keep);
    int lock = lock_root(o->root, err);
    if (lock < 0) return -1;
    int rc = complete_checked(o, late, ctx, err);
    close(lock);
    return rc;
}

// Points published at latest, then removes the versions newer than latest
// (their optimizer state was never written), as withdraw does one.
static int remove_newer(const char *root, uint64_t latest, rl_err *err) {
    uint64_t *v;
    size_t n;
    char name[32];
    version_name(name, sizeof name, latest);
    if (point(root, "published", name, err) || ckpt_versions(root, &v, &n, err)) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (v[i] > latest) {
            version_name(name, sizeof name, v[i]);
            rc = discard(root, name, err);
        }
    free(v);
    return rc;
}

int ckpt_tidy(const char *root, int keep, uint64_t keep_every, rl_err *err) {
    if (keep < 0) return err_set(err, "keep %d: must be 0 (all) or positive", keep);
    int lock = lock_root(root, err);
    if (lock < 0) return -1;
    uint64_t latest = 0;
    int rc = remove_stale(root, err), has_latest = 0;
    if (rc == 0 && (has_latest = latest_version(root, &latest, err)) < 0) rc = -1;
    if (rc == 0 && has_latest) rc = remove_newer(root, latest, err);
    if (rc == 0 && has_latest && keep > 0) rc = remove_old(root, latest, keep, keep_every, &latest, err);
    close(lock);
    return rc;
}
