#include "records/record.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/mparray.h"

struct rec {
    sbuf buf;              // key texts and encoded values; see orig_len
    mp_field *f;           // fields in order, as offsets into buf
    size_t n, cap;
    size_t orig_len;       // when !dirty, buf[0..orig_len) is the record's exact encoding
    int dirty;             // a field was set or deleted since the record was loaded
    msgpack_zone *zone;    // scratch for decoding one field at a time
};

void u32_vec_free(u32_vec *a) { free(a->v); a->v = NULL; a->n = a->cap = 0; }
void f32_vec_free(f32_vec *a) { free(a->v); a->v = NULL; a->n = a->cap = 0; }
void u8_vec_free(u8_vec *a) { free(a->v); a->v = NULL; a->n = a->cap = 0; }

rec_t *rec_new(void) {
    rec_t *r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->zone = msgpack_zone_new(4096);
    if (!r->zone) {
        fprintf(stderr, "rlpipe: fatal: out of memory creating a msgpack zone\n");
        abort();
    }
    r->dirty = 1;
    return r;
}

void rec_free(rec_t *r) {
    if (!r) return;
    sbuf_free(&r->buf);
    free(r->f);
    msgpack_zone_free(r->zone);
    free(r);
}

void rec_clear(rec_t *r) {
    r->buf.len = 0;
    r->n = 0;
    r->orig_len = 0;
    r->dirty = 1;
}

static void fields_reserve(rec_t *r, size_t n) { GROW(r->f, r->cap, n, 16); }

void rec_copy(rec_t *dst, const rec_t *src) {
    if (dst == src) return;
    dst->buf.len = 0;
    sbuf_put(&dst->buf, src->buf.data, src->buf.len);
    fields_reserve(dst, src->n);
    if (src->n) memcpy(dst->f, src->f, src->n * sizeof *src->f);
    dst->n = src->n;
    dst->orig_len = src->orig_len;
    dst->dirty = src->dirty;
}

void rec_load(rec_t *r, const uint8_t *p, size_t n, const mp_index *idx) {
    r->buf.len = 0;
    sbuf_put(&r->buf, p, n);
    fields_reserve(r, idx->n);
    if (idx->n) memcpy(r->f, idx->f, idx->n * sizeof *idx->f);
    r->n = idx->n;
    r->orig_len = n;
    r->dirty = 0;
}

int rec_parse(rec_t *r, const uint8_t *p, size_t n, const rec_limits *lim, rl_err *err) {
    mp_index idx = {0};
    size_t len;
    int rc = mps_scan(p, n, lim, &idx, &len, err);
    if (rc == MPS_NEED || (rc == MPS_OK && len != n))
        rc = err_set(err, rc == MPS_NEED ? "msgpack object cut short" : "bytes after the msgpack object");
    else if (rc == MPS_OK && !idx.is_map)
        rc = err_set(err, "not a map but a %s", mps_type_name(p[0]));
    if (rc == MPS_OK) rec_load(r, p, n, &idx);
    mps_index_free(&idx);
    return rc == MPS_OK ? 0 : -1;
}

size_t rec_nfields(const rec_t *r) { return r->n; }

const char *rec_key(const rec_t *r, size_t i, size_t *len) {
    *len = r->f[i].key_len;
    return (const char *)r->buf.data + r->f[i].key_off;
}

const uint8_t *rec_value(const rec_t *r, size_t i, size_t *len) {
    *len = r->f[i].val_len;
    return r->buf.data + r->f[i].val_off;
}

static long find_n(const rec_t *r, const char *key, size_t klen) {
    for (size_t i = 0; i < r->n; i++)
        if (r->f[i].key_len == klen && !memcmp(r->buf.data + r->f[i].key_off, key, klen))
            return (long)i;
    return -1;
}

long rec_find(const rec_t *r, const char *key) { return find_n(r, key, strlen(key)); }
int rec_has(const rec_t *r, const char *key) { return rec_find(r, key) >= 0; }

// Decodes field `key` with msgpack-c into r's scratch zone; the object's
// strings point into r->buf, valid until r changes.
static rec_status decode(const rec_t *r, const char *key, msgpack_object *obj) {
    long i = rec_find(r, key);
    if (i < 0) return REC_MISSING;
    msgpack_zone_clear(r->zone);
    size_t off = 0;
    msgpack_unpack_return ret = msgpack_unpack((const char *)r->buf.data + r->f[i].val_off,
                                               r->f[i].val_len, &off, r->zone, obj);
    // Values were validated by mpscan when read, or encoded by msgpack-c when
    // set: anything but a complete object is a value set with rec_set_raw wrongly.
    return ret == MSGPACK_UNPACK_SUCCESS ? REC_OK : REC_TYPE;
}

static int obj_uint(const msgpack_object *o, uint64_t *v) {
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return 0;
    *v = o->via.u64;
    return 1;
}

static int obj_int(const msgpack_object *o, int64_t *v) {
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) { *v = o->via.i64; return 1; }
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *v = (int64_t)o->via.u64;
        return 1;
    }
    return 0;
}

static int obj_f64(const msgpack_object *o, double *v) {
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *v = o->via.f64; return 1;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *v = (double)o->via.u64; return 1;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *v = (double)o->via.i64; return 1;
    default: return 0;
    }
}

rec_status rec_get_uint(const rec_t *r, const char *key, uint64_t *out) {
    msgpack_object o;
    rec_status s = decode(r, key, &o);
    if (s) return s;
    return obj_uint(&o, out) ? REC_OK : REC_TYPE;
}

rec_status rec_get_int(const rec_t *r, const char *key, int64_t *out) {
    msgpack_object o;
    rec_status s = decode(r, key, &o);
    if (s) return s;
    return obj_int(&o, out) ? REC_OK : REC_TYPE;
}

rec_status rec_get_f64(const rec_t *r, const char *key, double *out) {
    msgpack_object o;
    rec_status s = decode(r, key, &o);
    if (s) return s;
    return obj_f64(&o, out) ? REC_OK : REC_TYPE;
}

rec_status rec_get_str(const rec_t *r, const char *key, const char **str, size_t *len) {
    msgpack_object o;
    rec_status s = decode(r, key, &o);
    if (s) return s;
    if (o.type != MSGPACK_OBJECT_STR) return REC_TYPE;
    // msgpack-c gives an empty string a NULL pointer; callers get "" (they may copy from it).
    *str = o.via.str.size ? o.via.str.ptr : "";
    *len = o.via.str.size;
    return REC_OK;
}

rec_status rec_get_len(const rec_t *r, const char *key, size_t *n) {
    long i = rec_find(r, key);
    if (i < 0) return REC_MISSING;
    uint32_t count;
    size_t hdr;
    if (mpa_header(r->buf.data + r->f[i].val_off, r->f[i].val_len, &count, &hdr)) return REC_TYPE;
    *n = count;
    return REC_OK;
}

// Numeric arrays are decoded straight from their bytes: they are the bulk of
// a rollout (ids, logp, ver, ...), and going through msgpack_object costs a
// 24-byte object per element. One element: returns its size in bytes (0 if
// it is not a number or runs past end) and sets *u (unsigned), *i (signed)
// or *d (float), with *kind 'u', 'i' or 'f'.
static inline size_t read_number(const uint8_t *p, const uint8_t *end, char *kind, uint64_t *u, int64_t *i,
                                 double *d) {
    if (p >= end) return 0;
    uint8_t c = *p;
    if (c <= 0x7f) { *kind = 'u'; *u = c; return 1; }
    if (c == 0xcd && end - p >= 3) { *kind = 'u'; *u = (uint64_t)p[1] << 8 | p[2]; return 3; }  // token ids
    if (c == 0xca && end - p >= 5) {  // float32, the common case
        uint32_t b = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
        float f;
        memcpy(&f, &b, 4);
        *kind = 'f';
        *d = f;
        return 5;
    }
    if (c >= 0xe0) { *kind = 'i'; *i = (int8_t)c; return 1; }
    static const uint8_t SIZE[16] = {[0x0a] = 4, [0x0b] = 8, [0x0c] = 1, [0x0d] = 2, [0x0e] = 4, [0x0f] = 8};
    static const uint8_t SSIZE[4] = {1, 2, 4, 8};
    size_t n;
    if (c >= 0xca && c <= 0xcf) n = SIZE[c - 0xc0];
    else if (c >= 0xd0 && c <= 0xd3) n = SSIZE[c - 0xd0];
    else return 0;
    if ((size_t)(end - p) < 1 + n) return 0;
    uint64_t v = 0;
    for (size_t k = 1; k <= n; k++) v = v << 8 | p[k];
    if (c == 0xca) {
        uint32_t b = (uint32_t)v;
        float f;
        memcpy(&f, &b, 4);
        *kind = 'f';
        *d = f;
    } else if (c == 0xcb) {
        memcpy(d, &v, 8);
        *kind = 'f';
    } else if (c <= 0xcf) {
        *kind = 'u';
        *u = v;
    } else {
        *kind = 'i';
        *i = n == 1 ? (int8_t)v : n == 2 ? (int16_t)v : n == 4 ? (int32_t)v : (int64_t)v;
    }
    return 1 + n;
}

// The element count of the array at p, and where its elements start.
static const uint8_t *array_start(const uint8_t *p, const uint8_t *end, size_t *n) {
    uint32_t count;
    size_t hdr;
    if (mpa_header(p, (size_t)(end - p), &count, &hdr)) return NULL;
    *n = count;
    return p + hdr;
}

// Decodes a numeric array field into out->v (grown as needed), converting
// each element with `conv` (which rejects what is out of the type's range).
#define GET_ARRAY(r, key, out, T, conv)                                          \
    do {                                                                         \
        long f_ = rec_find(r, key);                                              \
        if (f_ < 0) return REC_MISSING;                                          \
        const uint8_t *p_ = r->buf.data + r->f[f_].val_off;                      \
        const uint8_t *end_ = p_ + r->f[f_].val_len;                             \
        size_t n_;                                                               \
        if (!(p_ = array_start(p_, end_, &n_)) || n_ > (size_t)(end_ - p_))      \
            return REC_TYPE;                                                     \
        if (out->cap < n_) {                                                     \
            out->cap = n_;                                                       \
            out->v = xrealloc(out->v, n_ * sizeof(T));                           \
        }                                                                        \
        for (size_t k_ = 0; k_ < n_; k_++) {                                     \
            char kind;                                                           \
            uint64_t u;                                                          \
            int64_t i;                                                           \
            double d;                                                            \
            size_t used = read_number(p_, end_, &kind, &u, &i, &d);              \
            if (!used || !conv(kind, u, i, d, &out->v[k_])) return REC_TYPE;     \
            p_ += used;                                                          \
        }                                                                        \
        out->n = n_;                                                             \
        return REC_OK;                                                           \
    } while (0)

static int conv_u32(char kind, uint64_t u, int64_t i, double d, uint32_t *v) {
    (void)d;
    if (kind == 'i' && i >= 0) u = (uint64_t)i, kind = 'u';
    if (kind != 'u' || u > UINT32_MAX) return 0;
    *v = (uint32_t)u;
    return 1;
}
static int conv_u8(char kind, uint64_t u, int64_t i, double d, uint8_t *v) {
    uint32_t w;
    if (!conv_u32(kind, u, i, d, &w) || w > UINT8_MAX) return 0;
    *v = (uint8_t)w;
    return 1;
}
static int conv_f32(char kind, uint64_t u, int64_t i, double d, float *v) {
    *v = kind == 'f' ? (float)d : kind == 'u' ? (float)u : (float)i;
    return 1;
}

rec_status rec_get_u32s(const rec_t *r, const char *key, u32_vec *out) { GET_ARRAY(r, key, out, uint32_t, conv_u32); }
rec_status rec_get_f32s(const rec_t *r, const char *key, f32_vec *out) { GET_ARRAY(r, key, out, float, conv_f32); }
rec_status rec_get_u8s(const rec_t *r, const char *key, u8_vec *out) { GET_ARRAY(r, key, out, uint8_t, conv_u8); }

// ---- setters ---------------------------------------------------------------

static int append_cb(void *data, const char *buf, size_t len) {
    sbuf_put(data, buf, len);
    return 0;
}

// Starts a field: appends the key text and returns a packer that appends the
// value to r->buf; finish_field records where the value went.
static size_t begin_field(rec_t *r, const char *key, size_t klen, msgpack_packer *pk) {
    long i = find_n(r, key, klen);
    if (i < 0) {
        fields_reserve(r, r->n + 1);
        i = (long)r->n++;
        r->f[i].key_off = (uint32_t)r->buf.len;
        r->f[i].key_len = (uint32_t)klen;
        sbuf_put(&r->buf, key, klen);
    }
    r->f[i].val_off = (uint32_t)r->buf.len;
    r->dirty = 1;
    msgpack_packer_init(pk, &r->buf, append_cb);
    return (size_t)i;
}

static void finish_field(rec_t *r, size_t i) {
    r->f[i].val_len = (uint32_t)(r->buf.len - r->f[i].val_off);
}

#define SET_FIELD(r, key, pk, pack_stmt)                                         \
    do {                                                                         \
        msgpack_packer pk;                                                       \
        size_t i_ = begin_field(r, key, strlen(key), &pk);                       \
        pack_stmt;                                                               \
        finish_field(r, i_);                                                     \
    } while (0)

void rec_set_nil(rec_t *r, const char *key) { SET_FIELD(r, key, pk, msgpack_pack_nil(&pk)); }
void rec_set_bool(rec_t *r, const char *key, int v) {
    SET_FIELD(r, key, pk, v ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk));
}
void rec_set_uint(rec_t *r, const char *key, uint64_t v) { SET_FIELD(r, key, pk, msgpack_pack_uint64(&pk, v)); }
void rec_set_int(rec_t *r, const char *key, int64_t v) { SET_FIELD(r, key, pk, msgpack_pack_int64(&pk, v)); }
void rec_set_f64(rec_t *r, const char *key, double v) { SET_FIELD(r, key, pk, msgpack_pack_double(&pk, v)); }
void rec_set_str(rec_t *r, const char *key, const char *s, size_t len) {
    SET_FIELD(r, key, pk, (msgpack_pack_str(&pk, len), msgpack_pack_str_body(&pk, s, len)));
}
void rec_set_cstr(rec_t *r, const char *key, const char *s) { rec_set_str(r, key, s, strlen(s)); }

void rec_set_u32s(rec_t *r, const char *key, const uint32_t *v, size_t n) {
    SET_FIELD(r, key, pk, {
        msgpack_pack_array(&pk, n);
        for (size_t k = 0; k < n; k++) msgpack_pack_uint32(&pk, v[k]);
    });
}
void rec_set_f32s(rec_t *r, const char *key, const float *v, size_t n) {
    SET_FIELD(r, key, pk, {
        msgpack_pack_array(&pk, n);
        for (size_t k = 0; k < n; k++) msgpack_pack_float(&pk, v[k]);
    });
}
void rec_set_u8s(rec_t *r, const char *key, const uint8_t *v, size_t n) {
    SET_FIELD(r, key, pk, {
        msgpack_pack_array(&pk, n);
        for (size_t k = 0; k < n; k++) msgpack_pack_uint8(&pk, v[k]);
    });
}
void rec_set_strs(rec_t *r, const char *key, char *const *v, size_t n) {
    SET_FIELD(r, key, pk, {
        msgpack_pack_array(&pk, n);
        for (size_t k = 0; k < n; k++) {
            size_t len = strlen(v[k]);
            msgpack_pack_str(&pk, len);
            msgpack_pack_str_body(&pk, v[k], len);
        }
    });
}

void rec_set_raw(rec_t *r, const char *key, size_t keylen, const uint8_t *val, size_t n) {
    msgpack_packer pk;
    size_t i = begin_field(r, key, keylen, &pk);
    sbuf_put(&r->buf, val, n);
    finish_field(r, i);
}

int rec_del(rec_t *r, const char *key) {
    long i = rec_find(r, key);
    if (i < 0) return 0;
    memmove(&r->f[i], &r->f[i + 1], (r->n - (size_t)i - 1) * sizeof *r->f);
    r->n--;
    r->dirty = 1;
    return 1;
}

void rec_encode(const rec_t *r, sbuf *out) {
    if (!r->dirty) {
        sbuf_put(out, r->buf.data, r->orig_len);
        return;
    }
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, append_cb);
    msgpack_pack_map(&pk, r->n);
    for (size_t i = 0; i < r->n; i++) {
        msgpack_pack_str(&pk, r->f[i].key_len);
        msgpack_pack_str_body(&pk, r->buf.data + r->f[i].key_off, r->f[i].key_len);
        sbuf_put(out, r->buf.data + r->f[i].val_off, r->f[i].val_len);
    }
}
