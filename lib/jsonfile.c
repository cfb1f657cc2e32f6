// jsonfile.c — a model directory's JSON files, parsed or refused with a position (jsonfile.h).
#include "jsonfile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

// "line L, column C" of offset `at` in s[0..n): columns count characters, as Python's.
static void position(const char *s, size_t n, size_t at, char *out, size_t size) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < n; i++) {
        if (s[i] == '\n') line++, col = 1;
        else if (((unsigned char)s[i] & 0xc0) != 0x80) col++;
    }
    snprintf(out, size, "line %zu, column %zu", line, col);
}

// How deep the brackets open at offset `at` are, strings skipped.
static size_t depth_at(const char *s, size_t at) {
    size_t depth = 0;
    int in_str = 0;
    for (size_t i = 0; i < at; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') in_str = 1;
        else if (c == '[' || c == '{') depth++;
        else if ((c == ']' || c == '}') && depth) depth--;
    }
    return depth;
}

static int syntax_error(const char *path, const sbuf *text, const char *at, rl_err *err) {
    const char *s = (const char *)text->data;
    size_t n = text->len, off = at && at >= s && at <= s + n ? (size_t)(at - s) : n;
    char where[64];
    position(s, n, off, where, sizeof where);
    const char *why = "";
    const char *p = s + off;
    size_t left = n - off;
    if ((left >= 3 && !memcmp(p, "NaN", 3)) || (left >= 8 && !memcmp(p, "Infinity", 8)) ||
        (left >= 9 && !memcmp(p, "-Infinity", 9)))
        why = ": NaN and Infinity are not JSON (Python's json reads them; rlpipe does not)";
    else if (depth_at(s, off) >= CJSON_NESTING_LIMIT)
        why = ": nested deeper than 1000 levels";
    return err_set(err, "%s: not valid JSON (%s)%s", path, where, why);
}

// A key twice in one object, at any depth (nesting is bounded by the parser's
// limit); `where` names the object ("" at the top, else its key).
static int check_unique(const char *path, const cJSON *obj, const char *where, rl_err *err) {
    for (const cJSON *x = obj->child; x; x = x->next) {
        if (cJSON_IsObject(obj) && x->string)
            for (const cJSON *y = obj->child; y != x; y = y->next)
                if (y->string && !strcmp(x->string, y->string))
                    return err_set(err, "%s: %.100s%s\"%.100s\" appears twice (transformers would take the last value; "
                                   "rlpipe does not guess)", path, where, *where ? " key " : "key ", x->string);
        if ((cJSON_IsObject(x) || cJSON_IsArray(x)) && check_unique(path, x, x->string ? x->string : where, err)) return -1;
    }
    return 0;
}

cJSON *jsonfile_load(const char *path, size_t max, rl_err *err) {
    sbuf text = {0};
    if (read_whole_file(path, max, &text, err)) {
        int e = errno;
        sbuf_free(&text);
        errno = e;
        return NULL;
    }
    cJSON *root = NULL;
    size_t ok = utf8_valid_len(text.data, text.len);
    if (ok < text.len) {
        char where[64];
        position((const char *)text.data, text.len, ok, where, sizeof where);
        err_set(err, "%s: not UTF-8 (%s, byte %zu: 0x%02x)", path, where, ok, text.data[ok]);
        goto out;
    }
    const char *end = NULL;
    errno = 0;
    root = cJSON_ParseWithLengthOpts((const char *)text.data, text.len, &end, 0);
    if (!root) {
        if (errno == ENOMEM) err_set(err, "%s: out of memory parsing %zu bytes of JSON", path, text.len);
        else syntax_error(path, &text, end, err);
        goto out;
    }
    // Whitespace may follow the value, nothing else (cJSON stops after it).
    for (const char *q = end; q && q < (const char *)text.data + text.len; q++)
        if (!strchr(" \t\r\n", *q)) {
            syntax_error(path, &text, q, err);
            cJSON_Delete(root);
            root = NULL;
            goto out;
        }
    if (check_unique(path, root, "", err)) {
        cJSON_Delete(root);
        root = NULL;
    }
out:
    sbuf_free(&text);
    if (!root) errno = EINVAL;   // not ENOENT: the file is there
    return root;
}
