// toolcall.c — tool calls parsed from an assistant's text (toolcall.h).
#include "template/toolcall.h"

#include <msgpack.h>
#include <string.h>

#include "records/json.h"
#include "records/mparray.h"

#define LIT(s) s, sizeof s - 1

static const char HERMES_OPEN[] = "<tool_call>", HERMES_CLOSE[] = "</tool_call>";
static const char PYTHON_TAG[] = "<|python_tag|>";
static const char MISTRAL_CALLS[] = "[TOOL_CALLS]", MISTRAL_ARGS[] = "[ARGS]", MISTRAL_ID[] = "[CALL_ID]";

// Parsing state: the JSON value read last (valid until the next is read)
// and the calls packed so far.
typedef struct {
    rec_t *wrap;
    msgpack_zone zone;
    sbuf calls;
    msgpack_packer pk;
} parser;

static int append(void *data, const char *buf, size_t len) {
    sbuf_put(data, buf, len);
    return 0;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *skip_space(const char *p, const char *end) {
    while (p < end && is_space(*p)) p++;
    return p;
}

static int starts_with(const char *p, const char *end, const char *s, size_t n) {
    return (size_t)(end - p) >= n && !memcmp(p, s, n);
}

// The JSON value s[0..n) (white space around it allowed) decoded into *o.
// json_to_rec reads objects only and types the fields of records at their
// top, so the value is read as the one member of {"v": ...}: a text that
// would add members there is refused by the count. 0, or -1.
static int json_value(parser *ps, const char *s, size_t n, msgpack_object *o) {
    sbuf w = {0};
    rl_err e;
    sbuf_put(&w, LIT("{\"v\": "));
    sbuf_put(&w, s, n);
    sbuf_putc(&w, '}');
    int rc = json_to_rec((const char *)w.data, w.len, ps->wrap, &e) || rec_nfields(ps->wrap) != 1 ? -1 : 0;
    sbuf_free(&w);
    if (rc) return -1;
    size_t len, off = 0;
    const uint8_t *v = rec_value(ps->wrap, 0, &len);
    msgpack_zone_clear(&ps->zone);
    return msgpack_unpack((const char *)v, len, &off, &ps->zone, o) == MSGPACK_UNPACK_SUCCESS ? 0 : -1;
}

// Where the JSON object or list that starts at p ends (past its closing
// bracket), strings skipped; NULL when it does not close.
static const char *json_end(const char *p, const char *end) {
    size_t depth = 0;
    for (int in_str = 0; p < end; p++) {
        if (in_str) {
            if (*p == '\\') p++;
            else if (*p == '"') in_str = 0;
        } else if (*p == '"') in_str = 1;
        else if (*p == '{' || *p == '[') depth++;
        else if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
    }
    return NULL;
}

// The value of key in the map o, or NULL.
static const msgpack_object *member(const msgpack_object *o, const char *key) {
    size_t n = strlen(key);
    for (uint32_t k = 0; k < o->via.map.size; k++) {
        const msgpack_object *x = &o->via.map.ptr[k].key;
        if (x->type == MSGPACK_OBJECT_STR && x->via.str.size == n && !memcmp(x->via.str.ptr, key, n))
            return &o->via.map.ptr[k].val;
    }
    return NULL;
}

static void pack_cstr(msgpack_packer *pk, const char *s) {
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

// One call packed: {["id": id,] "type": "function", "function": {"name": name,
// "arguments": args}}; name and id strings (id may be NULL), args a map or
// NULL (none: {}). 0, or -1 when they are not.
static int put_call(parser *ps, const msgpack_object *name, const msgpack_object *args, const msgpack_object *id) {
    if (!name || name->type != MSGPACK_OBJECT_STR || !name->via.str.size) return -1;
    if ((args && args->type != MSGPACK_OBJECT_MAP) || (id && id->type != MSGPACK_OBJECT_STR)) return -1;
    msgpack_packer *pk = &ps->pk;
    msgpack_pack_map(pk, id ? 3 : 2);
    if (id) {
        pack_cstr(pk, "id");
        msgpack_pack_object(pk, *id);
    }
    pack_cstr(pk, "type");
    pack_cstr(pk, "function");
    pack_cstr(pk, "function");
    msgpack_pack_map(pk, 2);
    pack_cstr(pk, "name");
    msgpack_pack_object(pk, *name);
    pack_cstr(pk, "arguments");
    if (args) msgpack_pack_object(pk, *args);
    else msgpack_pack_map(pk, 0);
    return 0;
}

// A call object {"name", "arguments" or "parameters"[, "id"]} packed. 0 or -1.
static int call_of(parser *ps, const msgpack_object *o) {
    if (o->type != MSGPACK_OBJECT_MAP) return -1;
    const msgpack_object *args = member(o, "arguments");
    if (!args) args = member(o, "parameters");   // Llama's word for them
    return put_call(ps, member(o, "name"), args, member(o, "id"));
}

static int object_call(parser *ps, const char *s, size_t n) {
    msgpack_object o;
    return json_value(ps, s, n, &o) || call_of(ps, &o) ? -1 : 0;
}

// A JSON list of call objects: their count, or -1.
static int list_calls(parser *ps, const char *s, size_t n) {
    msgpack_object o;
    if (json_value(ps, s, n, &o) || o.type != MSGPACK_OBJECT_ARRAY) return -1;
    for (uint32_t i = 0; i < o.via.array.size; i++)
        if (call_of(ps, &o.via.array.ptr[i])) return -1;
    return (int)o.via.array.size;
}

// The formats: the number of calls in p[0..end), or -1 when a call does not parse.

static int hermes(parser *ps, const char *p, const char *end) {
    int count = 0;
    for (;;) {
        const char *o = memmem(p, (size_t)(end - p), LIT(HERMES_OPEN));
        if (!o) return count;
        o += sizeof HERMES_OPEN - 1;
        const char *c = memmem(o, (size_t)(end - o), LIT(HERMES_CLOSE));
        if (!c || object_call(ps, o, (size_t)(c - o))) return -1;
        count++;
        p = c + sizeof HERMES_CLOSE - 1;
    }
}

static int llama(parser *ps, const char *p, const char *end) {
    p = skip_space(p, end);
    if (starts_with(p, end, LIT(PYTHON_TAG))) p += sizeof PYTHON_TAG - 1;
    int count = 0;
    for (;;) {
        while (p < end && (is_space(*p) || (count && *p == ';'))) p++;
        if (p == end) return count;
        const char *e = *p == '{' ? json_end(p, end) : NULL;
        if (!e || object_call(ps, p, (size_t)(e - p))) return -1;
        count++;
        p = e;
    }
}

static int mistral(parser *ps, const char *p, const char *end) {
    const char *m = memmem(p, (size_t)(end - p), LIT(MISTRAL_CALLS));
    if (!m) {   // the list without its special token
        p = skip_space(p, end);
        return p < end && *p == '[' ? list_calls(ps, p, (size_t)(end - p)) : 0;
    }
    p = skip_space(m + sizeof MISTRAL_CALLS - 1, end);
    if (p < end && *p == '[') return list_calls(ps, p, (size_t)(end - p));
    int count = 0;
    for (; m; count++) {   // [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}, the id optional
        const char *s = m + sizeof MISTRAL_CALLS - 1;
        m = memmem(s, (size_t)(end - s), LIT(MISTRAL_CALLS));
        const char *stop = m ? m : end;
        const char *a = memmem(s, (size_t)(stop - s), LIT(MISTRAL_ARGS));
        if (!a) return -1;
        const char *id = memmem(s, (size_t)(a - s), LIT(MISTRAL_ID));
        msgpack_object name = {.type = MSGPACK_OBJECT_STR}, call_id = {.type = MSGPACK_OBJECT_STR}, args;
        name.via.str.ptr = s;
        name.via.str.size = (uint32_t)((id ? id : a) - s);
        if (id) {
            call_id.via.str.ptr = id + sizeof MISTRAL_ID - 1;
            call_id.via.str.size = (uint32_t)(a - call_id.via.str.ptr);
        }
        const char *json = a + sizeof MISTRAL_ARGS - 1;
        if (json_value(ps, json, (size_t)(stop - json), &args) || put_call(ps, &name, &args, id ? &call_id : NULL))
            return -1;
    }
    return count;
}

tc_format tc_format_of(const char *tpl, size_t n) {
    if (memmem(tpl, n, LIT(MISTRAL_CALLS))) return TC_MISTRAL;
    if (memmem(tpl, n, LIT(HERMES_OPEN))) return TC_HERMES;
    if (memmem(tpl, n, LIT(PYTHON_TAG)) || memmem(tpl, n, LIT("\"parameters\""))) return TC_LLAMA;
    return TC_HERMES;
}

const char *tc_format_name(tc_format f) {
    return f == TC_LLAMA ? "llama" : f == TC_MISTRAL ? "mistral" : "hermes";
}

int tc_parse(tc_format f, const char *text, size_t n, sbuf *out) {
    parser ps = {.wrap = rec_new()};
    msgpack_zone_init(&ps.zone, 2048);
    msgpack_packer_init(&ps.pk, &ps.calls, append);
    const char *end = text + n;
    int count = f == TC_LLAMA ? llama(&ps, text, end) : f == TC_MISTRAL ? mistral(&ps, text, end) : hermes(&ps, text, end);
    if (count > 0) {
        mpa_put_header(out, (uint32_t)count);
        sbuf_put(out, ps.calls.data, ps.calls.len);
    }
    rec_free(ps.wrap);
    msgpack_zone_destroy(&ps.zone);
    sbuf_free(&ps.calls);
    return count > 0 ? count : 0;
}
