// checkpoint.c — resolving checkpoint roots and version directories (checkpoint.h).
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The "version" of DIR/state.json: 1 found, 0 no state.json or no "version", -1 error.
static int state_version(const char *dir, uint64_t *version, rl_err *err) {
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
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "version");
    int rc = 0;
    if (v) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d <= 9007199254740992.0 && d == (double)(uint64_t)d))
            rc = err_set(err, "%s: \"version\" is not a non-negative integer", path);
        else {
            *version = (uint64_t)d;
            rc = 1;
        }
    }
    cJSON_Delete(j);
    return rc;
}

int ckpt_resolve(const char *dir, char *path, size_t size, uint64_t *version, rl_err *err) {
    char latest[4096];
    if ((size_t)snprintf(latest, sizeof latest, "%s/latest", dir) >= sizeof latest) {
        err_set(err, "path too long: %s", dir);
        return -1;
    }
    sbuf latest_text = {0};
    char *name = NULL;
    if (read_whole_file(latest, 4096, &latest_text, err) == 0) name = (char *)latest_text.data;
    else if (errno != ENOENT) return -1;
    if (name) {   // a checkpoint root: "latest" holds the name of the newest complete version
        size_t n = strlen(name);
        while (n && isspace((unsigned char)name[n - 1])) name[--n] = 0;
        int bad = !n || strchr(name, '/') || strchr(name, '\n') || !strcmp(name, ".") || !strcmp(name, "..");
        if (bad || (size_t)snprintf(path, size, "%s/%s", dir, name) >= size) {
            err_set(err, "%s does not name a version directory ('%.100s')", latest, name);
            sbuf_free(&latest_text);
            return -1;
        }
    } else if ((size_t)snprintf(path, size, "%s", dir) >= size) {
        err_set(err, "path too long: %s", dir);
        return -1;
    }
    *version = 0;
    int rc = state_version(path, version, err);
    if (rc == 0 && name && name[0] == 'v' && name[1] && strspn(name + 1, "0123456789") == strlen(name + 1))
        *version = strtoull(name + 1, NULL, 10);
    sbuf_free(&latest_text);
    return rc < 0 ? -1 : 0;
}
