#include "records/json.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/fields.h"

// ---- JSON text -> msgpack --------------------------------------------------

typedef struct {
    const char *s, *end, *p;
    const char *field;        // top-level key being parsed, for messages
    size_t field_len;
    sbuf tmp;                 // decoded strings
    rl_err *err;
    int depth;
} jp;

static int jfail(jp *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jfail(jp *j, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (j->field)
        return err_set(j->err, "column %zu: field \"%.*s\": %s", (size_t)(j->p - j->s) + 1,
                       (int)j->field_len, j->field, what);
    return err_set(j->err, "column %zu: %s", (size_t)(j->p - j->s) + 1, what);
}

static void skip_ws(jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        *v <<= 4;
        if (c >= '0' && c <= '9') *v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') *v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') *v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    return 0;
}

static void put_utf8(sbuf *b, unsigned cp) {
    if (cp < 0x80) sbuf_putc(b, (uint8_t)cp);
    else if (cp < 0x800) { sbuf_putc(b, (uint8_t)(0xc0 | cp >> 6)); sbuf_putc(b, (uint8_t)(0x80 | (cp & 0x3f))); }
    else if (cp < 0x10000) {
        sbuf_putc(b, (uint8_t)(0xe0 | cp >> 12));
        sbuf_putc(b, (uint8_t)(0x80 | ((cp >> 6) & 0x3f)));
        sbuf_putc(b, (uint8_t)(0x80 | (cp & 0x3f)));
    } else {
        sbuf_putc(b, (uint8_t)(0xf0 | cp >> 18));
        sbuf_putc(b, (uint8_t)(0x80 | ((cp >> 12) & 0x3f)));
        sbuf_putc(b, (uint8_t)(0x80 | ((cp >> 6) & 0x3f)));
        sbuf_putc(b, (uint8_t)(0x80 | (cp & 0x3f)));
    }
}

// Parses a string at j->p (the opening quote) into j->tmp (replacing it).
static int parse_string(jp *j) {
    j->tmp.len = 0;
    j->p++;
    for (;;) {
        const char *run = j->p;
        while (j->p < j->end && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20) j->p++;
        if (!utf8_valid((const uint8_t *)run, (size_t)(j->p - run))) {
            j->p = run;
            return jfail(j, "string is not valid UTF-8");
        }
        sbuf_put(&j->tmp, run, (size_t)(j->p - run));
        if (j->p >= j->end) return jfail(j, "unterminated string");
        char c = *j->p;
        if (c == '"') { j->p++; return 0; }
        if (c != '\\') return jfail(j, "control character 0x%02x in a string (must be escaped)", (unsigned char)c);
        if (j->end - j->p < 2) return jfail(j, "unterminated string");
        char e = j->p[1];
        j->p += 2;
        switch (e) {
        case '"': sbuf_putc(&j->tmp, '"'); break;
        case '\\': sbuf_putc(&j->tmp, '\\'); break;
        case '/': sbuf_putc(&j->tmp, '/'); break;
        case 'b': sbuf_putc(&j->tmp, '\b'); break;
        case 'f': sbuf_putc(&j->tmp, '\f'); break;
        case 'n': sbuf_putc(&j->tmp, '\n'); break;
        case 'r': sbuf_putc(&j->tmp, '\r'); break;
        case 't': sbuf_putc(&j->tmp, '\t'); break;
        case 'u': {
            unsigned cp, lo;
            if (j->end - j->p < 4 || hex4(j->p, &cp)) return jfail(j, "bad \\u escape");
            j->p += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff) return jfail(j, "lone low surrogate \\u%04x", cp);
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) ||
                    lo < 0xdc00 || lo > 0xdfff)
                    return jfail(j, "high surrogate \\u%04x without its low surrogate", cp);
                j->p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            put_utf8(&j->tmp, cp);
            break;
        }
        default: return jfail(j, "bad escape \\%c", e);
        }
    }
}

static int append_cb(void *data, const char *buf, size_t len) {
    sbuf_put(data, buf, len);
    return 0;
}

// Element type expected inside a known array field.
static fld_type element_type(fld_type t) {
    return t == FLD_U32S || t == FLD_MASK ? FLD_UINT : t == FLD_F32S ? FLD_F64 : FLD_ANY;
}

// Parses a number or NaN/Infinity/-Infinity at j->p and packs it as `t` wants:
// FLD_UINT (an integer within max), float32 (as_f32), FLD_F64, or by its literal.
static int parse_number(jp *j, msgpack_packer *pk, fld_type t, int as_f32, uint64_t max) {
    const char *start = j->p;
    double special = 0;
    int is_special = 0;
    static const struct { const char *text; double v; } SPECIAL[] = {
        {"NaN", NAN}, {"Infinity", INFINITY}, {"-Infinity", -INFINITY}};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(SPECIAL[i].text);
        if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, SPECIAL[i].text, n)) {
            j->p += n;
            special = SPECIAL[i].v;
            is_special = 1;
            break;
        }
    }
    int is_int = 1;
    if (!is_special) {
        const char *p = j->p;
        if (p < j->end && *p == '-') p++;
        if (p >= j->end || *p < '0' || *p > '9') return jfail(j, "expected a value");
        if (*p == '0') p++;
        else while (p < j->end && *p >= '0' && *p <= '9') p++;
        if (p < j->end && *p == '.') {
            is_int = 0;
            p++;
            if (p >= j->end || *p < '0' || *p > '9') return jfail(j, "bad number");
            while (p < j->end && *p >= '0' && *p <= '9') p++;
        }
        if (p < j->end && (*p == 'e' || *p == 'E')) {
            is_int = 0;
            p++;
            if (p < j->end && (*p == '+' || *p == '-')) p++;
            if (p >= j->end || *p < '0' || *p > '9') return jfail(j, "bad number");
            while (p < j->end && *p >= '0' && *p <= '9') p++;
        }
        j->p = p;
    } else {
        is_int = 0;
    }
    char text[400];
    size_t len = (size_t)(j->p - start);
    if (len >= sizeof text) { j->p = start; return jfail(j, "number literal longer than %zu characters", sizeof text - 1); }
    memcpy(text, start, len);
    text[len] = 0;

    if (t == FLD_UINT) {
        if (!is_int || text[0] == '-') { j->p = start; return jfail(j, "expected an unsigned integer, found %s", text); }
        errno = 0;
        unsigned long long v = strtoull(text, NULL, 10);
        if (errno || v > max) { j->p = start; return jfail(j, "integer %s out of range (at most %llu)", text, (unsigned long long)max); }
        return msgpack_pack_uint64(pk, v), 0;
    }
    if (as_f32) return msgpack_pack_float(pk, is_special ? (float)special : strtof(text, NULL)), 0;
    if (t == FLD_F64 || !is_int) return msgpack_pack_double(pk, is_special ? special : strtod(text, NULL)), 0;
    errno = 0;
    if (text[0] == '-') {
        long long v = strtoll(text, NULL, 10);
        if (errno) { j->p = start; return jfail(j, "integer %s out of the 64-bit range", text); }
        return msgpack_pack_int64(pk, v), 0;
    }
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno) { j->p = start; return jfail(j, "integer %s out of the 64-bit range", text); }
    return msgpack_pack_uint64(pk, v), 0;
}

static int parse_value(jp *j, msgpack_packer *pk, fld_type t, int as_f32);

static int expect_type(jp *j, fld_type t, const char *found) {
    return jfail(j, "expected %s, found %s", fld_type_name(t), found);
}

static int parse_array(jp *j, msgpack_packer *pk, fld_type t) {
    if (t != FLD_ANY && t != FLD_U32S && t != FLD_F32S && t != FLD_MASK) return expect_type(j, t, "an array");
    fld_type et = element_type(t);
    int f32 = t == FLD_F32S;
    uint64_t max = t == FLD_MASK ? 1 : UINT32_MAX;
    // Elements go to a buffer of their own: the count is known only at the end.
    sbuf elems = {0};
    msgpack_packer ep;
    msgpack_packer_init(&ep, &elems, append_cb);
    size_t n = 0;
    j->p++;
    skip_ws(j);
    int rc = 0;
    if (j->p < j->end && *j->p == ']') j->p++;
    else for (;;) {
        skip_ws(j);
        if (et == FLD_UINT && j->p < j->end && (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')))
            rc = parse_number(j, &ep, FLD_UINT, 0, max);
        else rc = parse_value(j, &ep, et, f32);
        if (rc) break;
        n++;
        skip_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == ']') { j->p++; break; }
        rc = jfail(j, "expected ',' or ']' in an array");
        break;
    }
    if (!rc) {
        msgpack_pack_array(pk, n);
        sbuf_put(pk->data, elems.data, elems.len);
    }
    sbuf_free(&elems);
    return rc;
}

// Walks the members of an object at j->p (the opening brace): for each key
// (decoded into j->tmp), after its ':', calls on_member to parse the value.
// *count receives the number of members.
static int parse_members(jp *j, int (*on_member)(jp *, void *), void *ctx, size_t *count) {
    size_t n = 0;
    j->p++;
    skip_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        *count = 0;
        return 0;
    }
    for (;;) {
        skip_ws(j);
        if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string key");
        if (parse_string(j)) return -1;
        skip_ws(j);
        if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':' after a key");
        j->p++;
        skip_ws(j);
        if (on_member(j, ctx)) return -1;
        n++;
        skip_ws(j);
        if (j->p < j->end && *j->p == ',') { j->p++; continue; }
        if (j->p < j->end && *j->p == '}') { j->p++; break; }
        return jfail(j, "expected ',' or '}' in an object");
    }
    *count = n;
    return 0;
}

// A nested object's body and the type of its values (FLD_ANY, or FLD_F64
// in a map of numbers).
typedef struct {
    msgpack_packer pk;
    fld_type values;
} nested_ctx;

// A member of a nested object: key and value go to the object's body.
static int nested_member(jp *j, void *ctx) {
    nested_ctx *c = ctx;
    msgpack_pack_str(&c->pk, j->tmp.len);
    msgpack_pack_str_body(&c->pk, j->tmp.data, j->tmp.len);
    return parse_value(j, &c->pk, c->values, 0);
}

static int parse_object(jp *j, msgpack_packer *pk, fld_type values) {
    // Members go to a buffer of their own: the count is known only at the end.
    sbuf body = {0};
    nested_ctx c = {.values = values};
    msgpack_packer_init(&c.pk, &body, append_cb);
    size_t n;
    int rc = parse_members(j, nested_member, &c, &n);
    if (!rc) {
        msgpack_pack_map(pk, n);
        sbuf_put(pk->data, body.data, body.len);
    }
    sbuf_free(&body);
    return rc;
}

static int literal(jp *j, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n)) return 0;
    j->p += n;
    return 1;
}

static int parse_value(jp *j, msgpack_packer *pk, fld_type t, int as_f32) {
    if (++j->depth > MPS_MAX_DEPTH / 2) return jfail(j, "nesting deeper than %d levels", MPS_MAX_DEPTH / 2);
    int rc = 0;
    skip_ws(j);
    if (j->p >= j->end) rc = jfail(j, "expected a value, found the end of the line");
    else if (*j->p == '{')
        rc = t == FLD_ANY || t == FLD_F64MAP ? parse_object(j, pk, t == FLD_F64MAP ? FLD_F64 : FLD_ANY)
                                             : expect_type(j, t, "an object");
    else if (*j->p == '[') rc = parse_array(j, pk, t);
    else if (*j->p == '"') {
        if (t != FLD_ANY && t != FLD_STR) rc = expect_type(j, t, "a string");
        else if (!(rc = parse_string(j))) {
            msgpack_pack_str(pk, j->tmp.len);
            msgpack_pack_str_body(pk, j->tmp.data, j->tmp.len);
        }
    } else if (literal(j, "true") || literal(j, "false")) {
        if (t != FLD_ANY) rc = expect_type(j, t, "a boolean");
        else if (j->p[-1] == 'e' && j->p[-2] == 'u') msgpack_pack_true(pk);
        else msgpack_pack_false(pk);
    } else if (literal(j, "null")) {
        if (t != FLD_ANY) rc = expect_type(j, t, "null");
        else msgpack_pack_nil(pk);
    } else if (t == FLD_STR || t == FLD_U32S || t == FLD_F32S || t == FLD_MASK || t == FLD_F64MAP) {
        rc = expect_type(j, t, "a number");
    } else {
        rc = parse_number(j, pk, t, as_f32, UINT64_MAX);
    }
    j->depth--;
    return rc;
}

// A field of the record: typed by its key (fields.h), set on the record.
typedef struct {
    rec_t *out;
    sbuf key, val;
} top_ctx;

static int record_field(jp *j, void *ctx) {
    top_ctx *c = ctx;
    c->key.len = 0;
    sbuf_put(&c->key, j->tmp.data, j->tmp.len);
    sbuf_putc(&c->key, 0);
    const char *key = (const char *)c->key.data;
    size_t klen = c->key.len - 1;
    if (strlen(key) != klen) return jfail(j, "a key contains a NUL character");
    if (rec_find(c->out, key) >= 0) return jfail(j, "duplicate key \"%s\"", key);
    j->field = key;
    j->field_len = klen;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &c->val, append_cb);
    c->val.len = 0;
    if (parse_value(j, &pk, fld_type_of(key, klen), 0)) return -1;
    j->field = NULL;
    rec_set_raw(c->out, key, klen, c->val.data, c->val.len);
    return 0;
}

int json_to_rec(const char *s, size_t n, rec_t *out, rl_err *err) {
    jp j = {.s = s, .end = s + n, .p = s, .err = err};
    top_ctx c = {.out = out};
    size_t count;
    rec_clear(out);
    skip_ws(&j);
    int rc;
    if (j.p >= j.end || *j.p != '{') rc = jfail(&j, "expected a JSON object");
    else rc = parse_members(&j, record_field, &c, &count);
    if (!rc) {
        skip_ws(&j);
        if (j.p != j.end) rc = jfail(&j, "text after the JSON object");
    }
    sbuf_free(&c.key);
    sbuf_free(&c.val);
    sbuf_free(&j.tmp);
    return rc ? -1 : 0;
}

// ---- msgpack -> JSON text --------------------------------------------------

void json_put_str(sbuf *out, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    sbuf_reserve(out, n + 2);
    sbuf_putc(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        sbuf_put(out, s + run, i - run);
        run = i + 1;
        sbuf_putc(out, '\\');
        switch (c) {
        case '"': sbuf_putc(out, '"'); break;
        case '\\': sbuf_putc(out, '\\'); break;
        case '\n': sbuf_putc(out, 'n'); break;
        case '\r': sbuf_putc(out, 'r'); break;
        case '\t': sbuf_putc(out, 't'); break;
        case '\b': sbuf_putc(out, 'b'); break;
        case '\f': sbuf_putc(out, 'f'); break;
        default:
            sbuf_put(out, "u00", 3);
            sbuf_putc(out, (uint8_t)hex[c >> 4]);
            sbuf_putc(out, (uint8_t)hex[c & 15]);
        }
    }
    // msgpack-c gives an empty str a NULL pointer: no arithmetic on it.
    if (run < n) sbuf_put(out, s + run, n - run);
    sbuf_putc(out, '"');
}

// Shortest decimal text of v that reads back to v (as float32 if f32).
static void put_float(sbuf *out, double v, int f32) {
    if (isnan(v)) { sbuf_put(out, "NaN", 3); return; }
    if (isinf(v)) { if (v < 0) sbuf_put(out, "-Infinity", 9); else sbuf_put(out, "Infinity", 8); return; }
    char text[40];
    // A float32 needs at most 9 significant digits and a double 17. A normal
    // value's neighbours are closer than 1e-6 (resp. 1e-15) relative, so any
    // shorter text that reads back is what %g prints at 6 (resp. 15) digits,
    // trailing zeros dropped: the search starts there. Subnormals, with
    // fewer digits of precision, search from 1.
    int normal = fabs(v) >= (f32 ? FLT_MIN : DBL_MIN);
    for (int prec = !normal ? 1 : f32 ? 6 : 15; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, v);
        if (f32 ? strtof(text, NULL) == (float)v : strtod(text, NULL) == v) break;
    }
    size_t n = strlen(text);
    sbuf_put(out, text, n);
    if (!strpbrk(text, ".eEn")) sbuf_put(out, ".0", 2);  // keep it a float for JSON readers
}

void json_put_f64(sbuf *out, double v) { put_float(out, v, 0); }

static int put_object(sbuf *out, const msgpack_object *o, int f32_field, rl_err *err) {
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: sbuf_put(out, "null", 4); return 0;
    case MSGPACK_OBJECT_BOOLEAN: o->via.boolean ? sbuf_put(out, "true", 4) : sbuf_put(out, "false", 5); return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: sbuf_printf(out, "%llu", (unsigned long long)o->via.u64); return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: sbuf_printf(out, "%lld", (long long)o->via.i64); return 0;
    case MSGPACK_OBJECT_FLOAT32: put_float(out, o->via.f64, f32_field); return 0;
    case MSGPACK_OBJECT_FLOAT64: put_float(out, o->via.f64, 0); return 0;
    case MSGPACK_OBJECT_STR: json_put_str(out, o->via.str.ptr, o->via.str.size); return 0;
    case MSGPACK_OBJECT_ARRAY:
        sbuf_putc(out, '[');
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i) sbuf_putc(out, ',');
            if (put_object(out, &o->via.array.ptr[i], f32_field, err)) return -1;
        }
        sbuf_putc(out, ']');
        return 0;
    case MSGPACK_OBJECT_MAP:
        sbuf_putc(out, '{');
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR)
                return err_set(err, "a nested map has a non-string key, which JSON cannot hold");
            if (i) sbuf_putc(out, ',');
            json_put_str(out, kv->key.via.str.ptr, kv->key.via.str.size);
            sbuf_putc(out, ':');
            if (put_object(out, &kv->val, 0, err)) return -1;
        }
        sbuf_putc(out, '}');
        return 0;
    default:
        return err_set(err, "a %s value cannot be written as JSON",
                       o->type == MSGPACK_OBJECT_BIN ? "bin" : "ext");
    }
}

int json_from_rec(const rec_t *r, sbuf *out, rl_err *err) {
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, 4096)) return err_set(err, "out of memory");
    int rc = 0;
    sbuf_putc(out, '{');
    for (size_t i = 0; i < rec_nfields(r) && !rc; i++) {
        size_t klen, vlen, off = 0;
        const char *key = rec_key(r, i, &klen);
        const uint8_t *val = rec_value(r, i, &vlen);
        msgpack_object o;
        msgpack_zone_clear(&zone);
        if (msgpack_unpack((const char *)val, vlen, &off, &zone, &o) != MSGPACK_UNPACK_SUCCESS) {
            rc = err_set(err, "field \"%.*s\": undecodable value", (int)klen, key);
            break;
        }
        if (i) sbuf_putc(out, ',');
        json_put_str(out, key, klen);
        sbuf_putc(out, ':');
        rl_err e;
        if (put_object(out, &o, fld_type_of(key, klen) == FLD_F32S, &e))
            rc = err_set(err, "field \"%.*s\": %s", (int)klen, key, e.msg);
    }
    sbuf_putc(out, '}');
    msgpack_zone_destroy(&zone);
    return rc;
}
