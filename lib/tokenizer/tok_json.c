// tok_json.c — member access for tokenizer.json components (see tok_json.h).
#include "tokenizer/tok_json.h"

#include <stdio.h>
#include <string.h>

#include "tokenizer/tok_unicode.h"

int tok_json_absent(const cJSON *x) { return !x || cJSON_IsNull(x); }

const char *tok_json_type(const cJSON *x) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(x, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

int tok_json_bool(const char *path, const cJSON *obj, const char *where, const char *key, int dflt, int *out,
                  rl_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (tok_json_absent(x)) {
        if (dflt < 0) return err_set(err, "%s: %s.%s is missing (true or false)", path, where, key);
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(x)) return err_set(err, "%s: %s.%s must be true or false", path, where, key);
    *out = cJSON_IsTrue(x);
    return 0;
}

int tok_json_string(const char *path, const cJSON *obj, const char *where, const char *key, const char **out,
                    rl_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(x)) return err_set(err, "%s: %s.%s must be a string", path, where, key);
    *out = x->valuestring;
    return 0;
}

int tok_json_char(const char *path, const cJSON *obj, const char *where, const char *key, const char **out,
                  rl_err *err) {
    if (tok_json_string(path, obj, where, key, out, err)) return -1;
    size_t n = strlen(*out);
    uint32_t cp;
    if (!n || !utf8_valid((const uint8_t *)*out, n) || tok_utf8_next((const uint8_t *)*out, n, &cp) != n)
        return err_set(err, "%s: %s.%s must be one character", path, where, key);
    return 0;
}

int tok_json_uint(const char *path, const cJSON *obj, const char *where, const char *key, uint32_t max,
                  uint32_t *out, rl_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
    if (!(v >= 0 && v <= max) || v != (double)(uint32_t)v)
        return err_set(err, "%s: %s.%s must be an integer in [0, %u]", path, where, key, max);
    *out = (uint32_t)v;
    return 0;
}

int tok_json_regex(const char *path, const cJSON *obj, const char *where, tok_re **out, rl_err *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String"), *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    if (!cJSON_IsObject(p) || cJSON_GetArraySize(p) != 1 || !(cJSON_IsString(s) || cJSON_IsString(r)))
        return err_set(err, "%s: %s.pattern must be {\"String\": ...} or {\"Regex\": ...}", path, where);
    if (cJSON_IsString(s)) {
        *out = tok_re_literal(s->valuestring, strlen(s->valuestring));
        return 0;
    }
    char why[300];
    *out = tok_re_onig(r->valuestring, strlen(r->valuestring), why, sizeof why);
    if (!*out) return err_set(err, "%s: %s: the Regex pattern \"%.200s\": %s", path, where, r->valuestring, why);
    return 0;
}

int tok_json_replace(const char *path, const cJSON *obj, const char *where, tok_re **re, char **content,
                     size_t *len, rl_err *err) {
    const char *s = NULL;
    if (tok_json_string(path, obj, where, "content", &s, err) || tok_json_regex(path, obj, where, re, err)) return -1;
    *content = xstrdup(s);
    *len = strlen(s);
    return 0;
}

int tok_json_id(const cJSON *x, uint32_t max, uint32_t *id) {
    if (!cJSON_IsNumber(x)) return -1;
    double v = x->valuedouble;
    if (!(v >= 0 && v < max) || v != (double)(uint32_t)v) return -1;
    *id = (uint32_t)v;
    return 0;
}

int tok_json_component(const char *path, const cJSON *x, const char *where, const char *list_key,
                       tok_json_load_fn fn, void *ctx, rl_err *err) {
    if (!cJSON_IsObject(x)) return err_set(err, "%s: %s must be an object", path, where);
    const char *ty = tok_json_type(x);
    if (!ty) return err_set(err, "%s: %s.type must be a string", path, where);
    if (strcmp(ty, "Sequence")) return fn(ctx, x, ty, path, where, err);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(x, list_key), *el;
    if (!cJSON_IsArray(list)) return err_set(err, "%s: %s.%s must be an array", path, where, list_key);
    int i = 0;
    cJSON_ArrayForEach(el, list) {
        char sub[256];
        snprintf(sub, sizeof sub, "%.200s.%s[%d]", where, list_key, i++);
        if (tok_json_component(path, el, sub, list_key, fn, ctx, err)) return -1;
    }
    return 0;
}
