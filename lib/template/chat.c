// chat.c — chat templates: loading, rendering, tokens and assistant masks (chat.h).
#include "template/chat.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "jsonfile.h"
#include "records/json.h"
#include "records/mparray.h"

#define CHAT_MAX_FILE (16u << 20)   // tokenizer_config.json or chat_template.jinja: templates are kilobytes
#define CHAT_MAX_ARGS 64

// The special tokens transformers passes to every template (special_tokens_map).
static const char *const SPECIAL_KEYS[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};

struct chat {
    jinja_tpl *tpl;
    const tokenizer *tok;
    char *source;                 // where the template came from, for messages
    int has_generation;           // the template marks assistant text with {% generation %}
    tc_format tool_format;        // the format it renders tool calls in
    // special tokens and user arguments: "name" then the JSON of its value (strings kept as given)
    struct {
        char *name, *json;
    } vars[CHAT_MAX_ARGS + 16];
    size_t n_vars;
    int64_t eos, end_of_turn;
    // What the template writes after an assistant's content ("<|im_end|>\n"),
    // the bytes of its first token when that is a special one (the model's
    // own stop token stands for it), and the probe conversation that showed it.
    sbuf tail;
    size_t tail_token;
    int probe;
};

// ---- loading ---------------------------------------------------------------

static void add_var(chat_t *c, const char *name, const char *json) {
    for (size_t i = 0; i < c->n_vars; i++)
        if (!strcmp(c->vars[i].name, name)) {
            free(c->vars[i].json);
            c->vars[i].json = xstrdup(json);
            return;
        }
    c->vars[c->n_vars].name = xstrdup(name);
    c->vars[c->n_vars].json = xstrdup(json);
    c->n_vars++;
}

// A special token of tokenizer_config.json: a string or an AddedToken {"content": ...};
// NULL when absent or null; NULL with err for anything else (transformers refuses it too).
static const char *token_string(const cJSON *v, const char *path, const char *key, rl_err *err) {
    if (!v || cJSON_IsNull(v)) return NULL;
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *s = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : NULL;
    if (cJSON_IsString(s)) return s->valuestring;
    char *shown = cJSON_PrintUnformatted(v);
    err_set(err, "%s: \"%s\" is %.60s%s, neither a string nor an AddedToken {\"content\": \"...\"}", path, key,
            shown ? shown : "?", shown && strlen(shown) > 60 ? "..." : "");
    cJSON_free(shown);
    return NULL;
}

static void add_string_var(chat_t *c, const char *name, const char *s) {
    cJSON *j = cJSON_CreateString(s);
    char *text = cJSON_PrintUnformatted(j);
    if (!text) {
        fprintf(stderr, "rlpipe: out of memory\n");
        abort();
    }
    add_var(c, name, text);
    cJSON_free(text);
    cJSON_Delete(j);
}

static int read_special_tokens(chat_t *c, const cJSON *root, const char *path, rl_err *err) {
    err->msg[0] = 0;
    for (size_t k = 0; k < sizeof SPECIAL_KEYS / sizeof *SPECIAL_KEYS; k++) {
        const char *s = token_string(cJSON_GetObjectItemCaseSensitive(root, SPECIAL_KEYS[k]), path, SPECIAL_KEYS[k], err);
        if (s) add_string_var(c, SPECIAL_KEYS[k], s);
        else if (err->msg[0]) return -1;
    }
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(root, "additional_special_tokens"), *x;
    if (!extra || cJSON_IsNull(extra)) return 0;
    if (!cJSON_IsArray(extra)) return err_set(err, "%s: \"additional_special_tokens\" is not a list", path);
    cJSON *list = cJSON_CreateArray();
    cJSON_ArrayForEach(x, extra) {
        const char *s = token_string(x, path, "additional_special_tokens", err);
        if (!s) {
            cJSON_Delete(list);
            return err->msg[0] ? -1 : err_set(err, "%s: \"additional_special_tokens\" holds a null", path);
        }
        cJSON_AddItemToArray(list, cJSON_CreateString(s));
    }
    char *text = cJSON_PrintUnformatted(list);
    if (text) add_var(c, "additional_special_tokens", text);
    cJSON_free(text);
    cJSON_Delete(list);
    return 0;
}

// The template text of tokenizer_config.json's "chat_template" into out; 1 if
// found, 0 if absent, -1 with err.
static int config_template(const cJSON *root, const char *path, sbuf *out, rl_err *err) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template"), *x;
    if (!t || cJSON_IsNull(t)) return 0;
    if (cJSON_IsString(t)) {
        sbuf_put(out, t->valuestring, strlen(t->valuestring));
        return 1;
    }
    if (!cJSON_IsArray(t)) return err_set(err, "%s: \"chat_template\" is neither a string nor a list of templates", path);
    // Of several named "default", the last, as transformers' dict of them keeps it.
    const char *chosen = NULL;
    cJSON_ArrayForEach(x, t) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(x, "template");
        if (!cJSON_IsString(name) || !cJSON_IsString(text))
            return err_set(err, "%s: \"chat_template\": each entry of the list needs a \"name\" and a \"template\"", path);
        if (!strcmp(name->valuestring, "default")) chosen = text->valuestring;
    }
    if (chosen) {
        sbuf_put(out, chosen, strlen(chosen));
        return 1;
    }
    return err_set(err, "%s: \"chat_template\" lists templates but none named \"default\"", path);
}

static int probe_end_of_turn(chat_t *c);

chat_t *chat_load(const char *dir, const tokenizer *tok, rl_err *err) {
    chat_t *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->tok = tok;
    c->eos = c->end_of_turn = -1;
    sbuf text = {0}, tpl = {0};
    cJSON *root = NULL;
    char *cfg_path = path_join(dir, "tokenizer_config.json");
    char *jinja_path = path_join(dir, "chat_template.jinja");
    int found = 0;
    rl_err e;
    err->msg[0] = 0;
    if ((root = jsonfile_load(cfg_path, CHAT_MAX_FILE, &e))) {
        if (!cJSON_IsObject(root)) {
            err_set(err, "%s: not a JSON object", cfg_path);
            goto fail;
        }
        if (read_special_tokens(c, root, cfg_path, err)) goto fail;
        if ((found = config_template(root, cfg_path, &tpl, err)) < 0) goto fail;
        if (found) c->source = xstrdup(cfg_path);
        const char *eos = token_string(cJSON_GetObjectItemCaseSensitive(root, "eos_token"), cfg_path, "eos_token", err);
        if (eos) c->eos = tok_id(tok, eos);
    } else if (errno != ENOENT) {
        err_set(err, "%s", e.msg);
        goto fail;
    }
    if (read_whole_file(jinja_path, CHAT_MAX_FILE, &text, &e) == 0) {
        size_t ok = utf8_valid_len(text.data, text.len);
        if (ok < text.len) {   // transformers reads the file as UTF-8 and fails so
            err_set(err, "%s: not UTF-8 at byte %zu (0x%02x)", jinja_path, ok, text.data[ok]);
            goto fail;
        }
        tpl.len = 0;
        sbuf_put(&tpl, text.data, text.len);
        free(c->source);
        c->source = xstrdup(jinja_path);
        found = 1;
    } else if (errno != ENOENT) {
        err_set(err, "%s", e.msg);
        goto fail;
    }
    if (!found) goto fail;   // no template: err->msg stays ""
    if (!(c->tpl = jinja_parse((const char *)tpl.data, tpl.len, c->source, err))) goto fail;
    c->has_generation = jinja_has_generation(c->tpl);
    c->tool_format = tc_format_of((const char *)tpl.data, tpl.len);
    if (probe_end_of_turn(c) < 0) c->end_of_turn = -1;
    cJSON_Delete(root);
    sbuf_free(&text);
    sbuf_free(&tpl);
    free(cfg_path);
    free(jinja_path);
    return c;
fail:
    cJSON_Delete(root);
    sbuf_free(&text);
    sbuf_free(&tpl);
    free(cfg_path);
    free(jinja_path);
    chat_free(c);
    return NULL;
}

void chat_free(chat_t *c) {
    if (!c) return;
    jinja_free(c->tpl);
    for (size_t i = 0; i < c->n_vars; i++) {
        free(c->vars[i].name);
        free(c->vars[i].json);
    }
    free(c->source);
    sbuf_free(&c->tail);
    free(c);
}

// NAME=@FILE: the JSON value FILE holds, kept as written (1.0 stays a float
// for the template's tojson), checked as Python's json would read it.
static int file_arg(chat_t *c, const char *name, const char *path, rl_err *err) {
    if (!*path) return err_set(err, "'%s=@': name the file after '@'", name);
    rl_err e;
    cJSON *root = jsonfile_load(path, CHAT_MAX_FILE, &e);
    if (!root) return err_set(err, "'%s=@%s': %s", name, path, e.msg);
    cJSON_Delete(root);
    sbuf text = {0};
    jinja_arena *a = jinja_arena_new();
    jinja_val *parsed;
    int rc = 0;
    if (read_whole_file(path, CHAT_MAX_FILE, &text, &e)) rc = err_set(err, "'%s=@%s': %s", name, path, e.msg);
    else if (jinja_from_json(a, (const char *)text.data, text.len, &parsed, &e))   // an integer beyond 64 bits
        rc = err_set(err, "'%s=@%s': %s: %s", name, path, path, e.msg);
    else add_var(c, name, (const char *)text.data);
    jinja_arena_free(a);
    sbuf_free(&text);
    return rc;
}

int chat_set_arg(chat_t *c, const char *arg, rl_err *err) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) return err_set(err, "'%s': write NAME=VALUE (enable_thinking=false)", arg);
    size_t nl = (size_t)(eq - arg);
    char name[256];
    if (nl >= sizeof name) return err_set(err, "'%s': the name is too long", arg);
    memcpy(name, arg, nl);
    name[nl] = 0;
    for (size_t i = 0; i < nl; i++)
        if (!(name[i] == '_' || (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
              (i && name[i] >= '0' && name[i] <= '9')))
            return err_set(err, "'%s': \"%s\" is not a template variable's name", arg, name);
    if (!strcmp(name, "messages") || !strcmp(name, "add_generation_prompt"))
        return err_set(err, "'%s': rlpipe sets \"%s\" itself", arg, name);
    if (c->n_vars >= CHAT_MAX_ARGS) return err_set(err, "more than %d template arguments", CHAT_MAX_ARGS);
    const char *v = eq + 1;
    if (*v == '@') return file_arg(c, name, v + 1, err);
    jinja_arena *a = jinja_arena_new();
    jinja_val *parsed;
    rl_err e;
    int is_json = jinja_from_json(a, v, strlen(v), &parsed, &e) == 0;
    jinja_arena_free(a);
    if (is_json) add_var(c, name, v);
    else add_string_var(c, name, v);
    return 0;
}

tc_format chat_tool_format(const chat_t *c) { return c->tool_format; }

// ---- conversations as template values -------------------------------------

// What from_msgpack refuses, for messages.
static const char UNSEEN[] = "a template cannot see (not UTF-8, binary, an integer outside the signed 64-bit range, or nested deeper "
                             "than 64)";

static jinja_val *from_msgpack(jinja_arena *a, const msgpack_object *o, int depth) {
    if (depth > 64) return NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return jinja_none(a);
    case MSGPACK_OBJECT_BOOLEAN: return jinja_bool(a, o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return o->via.u64 > INT64_MAX ? NULL : jinja_int(a, (int64_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return jinja_int(a, o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return jinja_float(a, o->via.f64);
    case MSGPACK_OBJECT_STR:
        if (!utf8_valid((const uint8_t *)o->via.str.ptr, o->via.str.size)) return NULL;
        return jinja_str(a, o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY: {
        jinja_val *l = jinja_list(a);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            jinja_val *v = from_msgpack(a, &o->via.array.ptr[i], depth + 1);
            if (!v) return NULL;
            jinja_list_push(l, v);
        }
        return l;
    }
    case MSGPACK_OBJECT_MAP: {
        jinja_val *d = jinja_dict(a);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type != MSGPACK_OBJECT_STR) return NULL;
            jinja_val *v = from_msgpack(a, &o->via.map.ptr[i].val, depth + 1);
            if (!v) return NULL;
            jinja_dict_set(d, k->via.str.ptr, k->via.str.size, v);
        }
        return d;
    }
    default: return NULL;   // bin, ext
    }
}

// The value of a message's "role" (m a map), or NULL.
static const msgpack_object *role_of(const msgpack_object *m) {
    for (uint32_t k = 0; k < m->via.map.size; k++) {
        const msgpack_object *key = &m->via.map.ptr[k].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == 4 && !memcmp(key->via.str.ptr, "role", 4))
            return &m->via.map.ptr[k].val;
    }
    return NULL;
}

// Checks msgs[0..n) (a msgpack array of maps with a string "role") and makes
// the list of its first `count` messages (all: SIZE_MAX). NULL with err.
static jinja_val *messages_value(jinja_arena *a, const uint8_t *msgs, size_t n, size_t count, rl_err *err) {
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    msgpack_object o;
    size_t off = 0;
    jinja_val *list = NULL;
    if (msgpack_unpack((const char *)msgs, n, &off, &zone, &o) != MSGPACK_UNPACK_SUCCESS || off != n) {
        err_set(err, "\"messages\" is not a complete value");
        goto out;
    }
    if (o.type != MSGPACK_OBJECT_ARRAY) {
        err_set(err, "\"messages\" is not a list of messages (maps with \"role\" and \"content\")");
        goto out;
    }
    if (o.via.array.size == 0) {   // transformers' apply_chat_template fails on [] too (IndexError)
        err_set(err, "\"messages\" is an empty list: a conversation needs at least one message");
        goto out;
    }
    for (uint32_t i = 0; i < o.via.array.size; i++) {
        const msgpack_object *m = &o.via.array.ptr[i];
        const msgpack_object *role = m->type == MSGPACK_OBJECT_MAP ? role_of(m) : NULL;
        if (!role || role->type != MSGPACK_OBJECT_STR) {
            err_set(err, "\"messages\"[%u] is not a map with a string \"role\"", i);
            goto out;
        }
    }
    list = jinja_list(a);
    for (uint32_t i = 0; i < o.via.array.size && i < count; i++) {
        jinja_val *v = from_msgpack(a, &o.via.array.ptr[i], 0);
        if (!v) {
            err_set(err, "\"messages\"[%u] holds a value %s", i, UNSEEN);
            list = NULL;
            goto out;
        }
        jinja_list_push(list, v);
    }
out:
    msgpack_zone_destroy(&zone);
    return list;
}

// The "tools" of the conversation's record conv (when it has them: a list,
// or null for none) set in vars. 0, or -1 with err.
static int conv_tools(jinja_arena *a, const rec_t *conv, jinja_val *vars, rl_err *err) {
    long k = conv ? rec_find(conv, "tools") : -1;
    if (k < 0) return 0;
    size_t n, off = 0;
    const uint8_t *p = rec_value(conv, (size_t)k, &n);
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    msgpack_object o;
    jinja_val *v = NULL;
    if (msgpack_unpack((const char *)p, n, &off, &zone, &o) != MSGPACK_UNPACK_SUCCESS ||
        (o.type != MSGPACK_OBJECT_ARRAY && o.type != MSGPACK_OBJECT_NIL))
        err_set(err, "\"tools\" is not a list (of the tools' descriptions, as apply_chat_template(tools=...) takes "
                "them) nor null");
    else if (!(v = from_msgpack(a, &o, 0)))
        err_set(err, "\"tools\" holds a value %s", UNSEEN);
    else jinja_dict_set(vars, "tools", 5, v);
    msgpack_zone_destroy(&zone);
    return v ? 0 : -1;
}

// Renders the first `count` messages of msgs (SIZE_MAX: all), with the tools
// of conv, into out; spans (when not NULL) gets the {% generation %} spans.
static int render(const chat_t *c, const uint8_t *msgs, size_t n, const rec_t *conv, size_t count,
                  int add_generation_prompt, sbuf *out, jinja_spans *spans, rl_err *err) {
    jinja_arena *a = jinja_arena_new();
    int rc = -1;
    jinja_val *vars = jinja_dict(a), *list = messages_value(a, msgs, n, count, err);
    if (!list) goto out;
    jinja_dict_set(vars, "tools", 5, jinja_none(a));       // unless --chat-arg or the conversation gives them
    jinja_dict_set(vars, "documents", 9, jinja_none(a));
    for (size_t i = 0; i < c->n_vars; i++) {   // special tokens first: arguments replace them, as in transformers
        jinja_val *v;
        if (jinja_from_json(a, c->vars[i].json, strlen(c->vars[i].json), &v, err)) goto out;
        jinja_dict_set(vars, c->vars[i].name, strlen(c->vars[i].name), v);
    }
    if (conv_tools(a, conv, vars, err)) goto out;
    jinja_dict_set(vars, "messages", 8, list);
    jinja_dict_set(vars, "add_generation_prompt", 21, jinja_bool(a, add_generation_prompt));
    rc = jinja_render(c->tpl, a, vars, out, spans, err);
out:
    jinja_arena_free(a);
    return rc;
}

// ---- the end of a turn ------------------------------------------------------

// A user message and an assistant reply; some templates insist on a system message first.
static const char PROBE_REPLY[] = "rlpipe probes the end of a turn";
static const char *const PROBE_CONVERSATIONS[] = {
        "{\"m\": [{\"role\": \"user\", \"content\": \"rlpipe\"}, "
        "{\"role\": \"assistant\", \"content\": \"rlpipe probes the end of a turn\"}]}",
        "{\"m\": [{\"role\": \"system\", \"content\": \"rlpipe\"}, {\"role\": \"user\", \"content\": \"rlpipe\"}, "
        "{\"role\": \"assistant\", \"content\": \"rlpipe probes the end of a turn\"}]}"};
#define N_PROBES (sizeof PROBE_CONVERSATIONS / sizeof *PROBE_CONVERSATIONS)

// Renders a probe conversation and takes what follows the reply: the end of
// a turn, and the special token it starts with.
static int probe_end_of_turn(chat_t *c) {
    static const char *const REPLY = PROBE_REPLY;
    int found = -1;
    rec_t *r = rec_new();
    for (size_t k = 0; k < N_PROBES && found < 0; k++) {
        rl_err e;
        sbuf out = {0};
        size_t n;
        if (json_to_rec(PROBE_CONVERSATIONS[k], strlen(PROBE_CONVERSATIONS[k]), r, &e)) continue;
        const uint8_t *msgs = rec_value(r, 0, &n);
        const uint8_t *hit = render(c, msgs, n, NULL, SIZE_MAX, 0, &out, NULL, &e)
                                 ? NULL : memmem(out.data, out.len, REPLY, sizeof PROBE_REPLY - 1);
        if (hit) {
            size_t at = (size_t)(hit - out.data) + sizeof PROBE_REPLY - 1;
            uint32_t *ids = NULL;
            size_t nids = 0, cap = 0;
            c->tail.len = 0;
            sbuf_put(&c->tail, out.data + at, out.len - at);
            c->probe = (int)k;
            if (tok_encode(c->tok, (const char *)out.data + at, out.len - at, &ids, &nids, &cap, &e) == 0 && nids &&
                tok_is_special(c->tok, ids[0])) {
                c->end_of_turn = ids[0];
                tok_token(c->tok, ids[0], &c->tail_token);
            }
            free(ids);
            found = 0;
        }
        sbuf_free(&out);
    }
    rec_free(r);
    return found;
}

int64_t chat_end_of_turn(const chat_t *c) { return c->end_of_turn; }
int64_t chat_eos(const chat_t *c) { return c->eos; }

// ---- the environment's messages after the turns generated ------------------

// render(msgs, generation prompt) less render(msgs[0..keep)) into out, when
// the one is a prefix of the other. 1 appended, 0 not a prefix, -1 with err.
static int rendered_suffix(const chat_t *c, const uint8_t *msgs, size_t n, const rec_t *conv, size_t keep, sbuf *out,
                           rl_err *err) {
    sbuf a = {0}, b = {0};
    int rc = -1;
    if (render(c, msgs, n, conv, keep, 0, &a, NULL, err) || render(c, msgs, n, conv, SIZE_MAX, 1, &b, NULL, err))
        goto out;
    rc = b.len >= a.len && !memcmp(a.data, b.data, a.len);
    if (rc) sbuf_put(out, b.data + a.len, b.len - a.len);
out:
    sbuf_free(&a);
    sbuf_free(&b);
    return rc;
}

// The probe conversation that showed the end of a turn (without its
// assistant's reply: reply = 0), with the messages elements[from..] of the
// array `all` after it, as one msgpack array; *keep: the probe's messages.
static int probe_with(const chat_t *c, int reply, const uint8_t *all, size_t n, size_t from, sbuf *out, size_t *keep,
                      rl_err *err) {
    mpa_elems msgs = {0}, pmsgs = {0};
    rec_t *r = rec_new();
    int rc = -1;
    rl_err e;
    const char *probe = PROBE_CONVERSATIONS[c->probe];
    size_t pn;
    if (json_to_rec(probe, strlen(probe), r, &e)) goto out;
    const uint8_t *pm = rec_value(r, 0, &pn);
    if (mpa_split(all, n, &msgs) || mpa_split(pm, pn, &pmsgs)) {
        err_set(err, "\"messages\" is not a list of messages");
        goto out;
    }
    if (from > msgs.n) {
        err_set(err, "\"messages\" holds %zu messages, fewer than the %zu before the new ones", msgs.n, from);
        goto out;
    }
    *keep = pmsgs.n - (reply ? 0 : 1);
    mpa_put_header(out, (uint32_t)(*keep + msgs.n - from));
    // The probe's messages, its reply the last, then the added ones.
    sbuf_put(out, pm + pmsgs.off[0], pmsgs.off[*keep] - pmsgs.off[0]);
    sbuf_put(out, all + msgs.off[from], msgs.off[msgs.n] - msgs.off[from]);
    rc = 0;
out:
    mpa_elems_free(&msgs);
    mpa_elems_free(&pmsgs);
    rec_free(r);
    return rc;
}

int chat_continue(const chat_t *c, const uint8_t *msgs, size_t n, const rec_t *conv, size_t n_conv, int ended_by_token,
                  sbuf *text, int *rewrote, rl_err *err) {
    *rewrote = 0;
    if (!c->tail.len) return err_set(err, "the chat template shows no end of an assistant's turn");
    size_t skip = ended_by_token ? c->tail_token : 0;
    size_t at = text->len;
    sbuf_put(text, c->tail.data + skip, c->tail.len - skip);
    int rc = rendered_suffix(c, msgs, n, conv, n_conv, text, err);
    if (rc < 0) text->len = at;
    if (rc) return rc < 0 ? -1 : 0;
    // The template rewrites the earlier turns once these messages follow:
    // the new messages as it renders them after its probe conversation, or
    // after the probe's first messages (Qwen3 renders the reply itself
    // differently once a user's message follows).
    sbuf probe = {0};
    size_t keep;
    *rewrote = 1;
    for (int reply = 1; reply >= 0 && rc == 0; reply--) {
        probe.len = 0;
        rc = probe_with(c, reply, msgs, n, n_conv, &probe, &keep, err)
                 ? -1 : rendered_suffix(c, probe.data, probe.len, conv, keep, text, err);
    }
    sbuf_free(&probe);
    if (rc <= 0) text->len = at;
    if (rc == 0) {
        return err_set(err, "the chat template renders the conversation before these messages differently once they "
                       "follow, and renders a short conversation differently too: the messages cannot be appended "
                       "to the tokens generated");
    }
    return rc < 0 ? -1 : 0;
}

// ---- tokens and the assistant mask -------------------------------------------

static int span_cmp(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static int span_start_cmp(const void *a, const void *b) {
    size_t x = ((const jinja_span *)a)->start, y = ((const jinja_span *)b)->start;
    return x < y ? -1 : x > y;
}

// The union of the spans as disjoint spans in order, empty ones left out
// (the bytes they cover, which is all the mask asks of them), into u.
static void span_union(const jinja_spans *spans, jinja_spans *u) {
    u->n = 0;
    GROW(u->v, u->cap, spans->n + 1, 8);
    for (size_t s = 0; s < spans->n; s++)
        if (spans->v[s].start < spans->v[s].end) u->v[u->n++] = spans->v[s];
    qsort(u->v, u->n, sizeof *u->v, span_start_cmp);
    size_t k = 0;
    for (size_t s = 0; s < u->n; s++) {
        if (k && u->v[s].start <= u->v[k - 1].end) {
            if (u->v[s].end > u->v[k - 1].end) u->v[k - 1].end = u->v[s].end;
        } else u->v[k++] = u->v[s];
    }
    u->n = k;
}

// 1 if byte p of the text is inside one of the disjoint, ordered spans u.
static int in_spans(const jinja_spans *u, size_t p) {
    size_t lo = 0, hi = u->n;   // the first span that ends after p
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (u->v[mid].end <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo < u->n && u->v[lo].start <= p;
}

// The mask when every span boundary is a token boundary: the text encoded
// piece by piece, cut at the boundaries, gives the ids of the whole text.
// Then a token is the assistant's when its piece is inside a span (the
// tokenizer's own view of the text: normalizers, dropped characters). 1 if
// it applies, 0 if a boundary falls inside a token, -1 with err. u: the
// spans' union (span_union).
static int mask_by_pieces(const tokenizer *tok, const sbuf *text, const jinja_spans *spans, const jinja_spans *u,
                          const u32_vec *ids, u8_vec *mask, rl_err *err) {
    size_t *cut = xmalloc((2 * spans->n + 2) * sizeof *cut), n_cut = 0;
    cut[n_cut++] = 0;
    for (size_t s = 0; s < spans->n; s++) {
        cut[n_cut++] = spans->v[s].start;
        cut[n_cut++] = spans->v[s].end;
    }
    cut[n_cut++] = text->len;
    qsort(cut, n_cut, sizeof *cut, span_cmp);
    uint32_t *piece = NULL;
    size_t n_piece = 0, cap = 0, at = 0;
    int rc = 1;
    for (size_t k = 0; k + 1 < n_cut && rc == 1; k++) {
        if (cut[k] == cut[k + 1]) continue;
        n_piece = 0;
        if (tok_encode(tok, (const char *)text->data + cut[k], cut[k + 1] - cut[k], &piece, &n_piece, &cap, err)) {
            rc = -1;
            break;
        }
        if (at + n_piece > ids->n || (n_piece && memcmp(piece, ids->v + at, n_piece * sizeof *piece))) rc = 0;
        else memset(mask->v + at, in_spans(u, cut[k]), n_piece);
        at += n_piece;
    }
    if (rc == 1 && at != ids->n) rc = 0;
    free(piece);
    free(cut);
    return rc;
}

// The mask from the tokens' byte offsets in the text, where a span boundary
// falls inside a token: a token overlapping a span is the assistant's
// (transformers' char_to_token of the span's first and last characters, and
// every token between). The offsets come from decoding each token, so the
// tokens must spell the text: -1 with err when they do not (a normalizer
// changed it, or characters with no token were dropped). u: the spans'
// union (span_union), walked once beside the tokens.
static int mask_by_offsets(const tokenizer *tok, const sbuf *text, const jinja_spans *u, const u32_vec *ids,
                           u8_vec *mask, rl_err *err) {
    size_t *off = xmalloc((ids->n + 1) * sizeof *off);
    sbuf b = {0};
    int rc = 0;
    for (size_t t = 0; t < ids->n && !rc; t++) {
        off[t] = b.len;
        rc = tok_decode(tok, &ids->v[t], 1, t ? TOK_CONTINUE : TOK_RAW_BYTES, &b, err);
    }
    off[ids->n] = b.len;
    if (!rc && (b.len != text->len || (b.len && memcmp(b.data, text->data, b.len))))
        rc = err_set(err, "an assistant turn begins or ends inside a token, and the tokens do not spell the text "
                     "(the tokenizer normalizes it or drops characters): the turn cannot be placed in tokens");
    for (size_t t = 0, s = 0; !rc && t < ids->n; t++) {
        while (s < u->n && u->v[s].end <= off[t]) s++;
        if (s < u->n && u->v[s].start < off[t + 1]) mask->v[t] = 1;
    }
    sbuf_free(&b);
    free(off);
    return rc;
}

// The assistant spans of the conversation without {% generation %} blocks:
// for each assistant message i, what rendering messages[0..i] adds to
// messages[0..i) with the generation prompt, cut after the end-of-turn token.
static int turn_spans(const chat_t *c, const uint8_t *msgs, size_t n, const rec_t *conv, const sbuf *full,
                      jinja_spans *spans, rl_err *err) {
    msgpack_zone zone;
    msgpack_zone_init(&zone, 2048);
    msgpack_object o;
    size_t off = 0;
    msgpack_unpack((const char *)msgs, n, &off, &zone, &o);   // checked when the whole was rendered
    const char *eot = NULL;
    size_t eot_len = 0;
    if (c->end_of_turn >= 0) eot = tok_token(c->tok, (uint32_t)c->end_of_turn, &eot_len);
    int rc = 0;
    for (size_t i = 0; i < o.via.array.size && !rc; i++) {
        const msgpack_object *role = role_of(&o.via.array.ptr[i]);
        if (role->via.str.size != 9 || memcmp(role->via.str.ptr, "assistant", 9)) continue;
        sbuf before = {0}, upto = {0};
        if (i == 0) {
            rc = err_set(err, "\"messages\"[0] is the assistant's: nothing precedes it to render with the generation prompt");
        } else if (render(c, msgs, n, conv, i, 1, &before, NULL, err) ||
                   render(c, msgs, n, conv, i + 1, 0, &upto, NULL, err)) {
            rc = -1;
        } else if (upto.len < before.len || memcmp(upto.data, before.data, before.len) || full->len < upto.len ||
                   memcmp(full->data, upto.data, upto.len)) {
            rc = err_set(err, "the template renders the conversation before \"messages\"[%zu] differently once it "
                         "goes on, so the assistant's turns cannot be told apart from the rest; mark them in the "
                         "template with {%% generation %%}...{%% endgeneration %%}", i);
        } else {
            size_t end = upto.len;
            if (eot) {   // the end-of-turn token's last place in the turn
                for (size_t p = upto.len; p >= before.len + eot_len; p--)
                    if (!memcmp(upto.data + p - eot_len, eot, eot_len)) {
                        end = p;
                        break;
                    }
            }
            GROW(spans->v, spans->cap, spans->n + 1, 8);
            spans->v[spans->n++] = (jinja_span){before.len, end};
        }
        sbuf_free(&before);
        sbuf_free(&upto);
    }
    msgpack_zone_destroy(&zone);
    return rc;
}

int chat_encode(const chat_t *c, const uint8_t *msgs, size_t n, const rec_t *conv, int add_generation_prompt,
                size_t max_ids, sbuf *rendered, u32_vec *ids, u8_vec *mask, tok_report *rep, rl_err *err) {
    sbuf text = {0};
    jinja_spans spans = {0}, u = {0};
    int rc = -1;
    if (render(c, msgs, n, conv, SIZE_MAX, add_generation_prompt, &text, mask && c->has_generation ? &spans : NULL, err))
        goto out;
    ids->n = 0;
    if (tok_encode_ex(c->tok, (const char *)text.data, text.len, 0, &ids->v, &ids->n, &ids->cap, rep, err)) goto out;
    if (max_ids && ids->n > max_ids) {
        err_set(err, "\"messages\" render to %zu tokens, more than the %zu the model's context takes: refused before "
                "the assistant's turns are located", ids->n, max_ids);
        goto out;
    }
    if (mask) {
        if (!c->has_generation && turn_spans(c, msgs, n, conv, &text, &spans, err)) goto out;
        span_union(&spans, &u);
        GROW(mask->v, mask->cap, ids->n, ids->n);
        mask->n = ids->n;
        memset(mask->v, 0, ids->n);
        int by_pieces = mask_by_pieces(c->tok, &text, &spans, &u, ids, mask, err);
        if (by_pieces < 0) goto out;
        if (!by_pieces) {
            memset(mask->v, 0, ids->n);
            if (mask_by_offsets(c->tok, &text, &u, ids, mask, err)) goto out;
        }
    }
    if (rendered) {
        sbuf_put(rendered, text.data, text.len);
        sbuf_putc(rendered, 0);
        rendered->len--;
    }
    rc = 0;
out:
    sbuf_free(&text);
    free(spans.v);
    free(u.v);
    return rc;
}
