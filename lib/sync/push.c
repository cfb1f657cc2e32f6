// push.c — the weight-push protocol's pieces both ends share (push.h): the
// token, message framing, the greeting and its HMAC, tensor lists.
#include "sync/push.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/mparray.h"
#include "sync/net.h"

// Each channel's greeting magic, HMAC label, and what answers on it (for messages).
static const struct {
    const char *magic, *label, *who;
} CHANNEL[] = {
    [PUSH_WEIGHTS] = {PUSH_MAGIC, "rlpipe push 1", "an rlpipe weight receiver"},
    [PUSH_RECORDS] = {PUSH_RECORDS_MAGIC, "rlpipe records 1", "an rlpipe record merge (rl-cat --merge)"},
};
#define PUSH_LABEL_MAX 32

// Messages are small maps: a tensor list is the largest part. The scan
// bounds what msgpack-c may later allocate for them.
static const rec_limits push_limits = {
    .max_record = PUSH_MSG_MAX,
    .max_array = PUSH_MAX_TENSORS,
    .max_string = 64 << 10,
    .max_depth = 8,
};

// One entry of a tensor list, [name, dtype, [d0...]], is a few hundred bytes
// at most; each is scanned against these before msgpack-c unpacks it.
static const rec_limits entry_limits = {
    .max_record = 4096,
    .max_array = 64,
    .max_string = 1024,
    .max_depth = 4,
};

static void put_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// ---- The token ----------------------------------------------------------------

int push_read_token(const char *path, sbuf *token, rl_err *err) {
    token->len = 0;
    if (read_whole_file(path, (size_t)1 << 20, token, err)) return -1;
    struct stat st;
    int rc = 0;
    if (stat(path, &st))
        rc = err_set(err, "cannot stat: %s: %s", path, strerror(errno));
    else if (st.st_mode & 077)
        rc = err_set(err, "token file %s is accessible to others (mode %04o): chmod 600 %s", path,
                     (unsigned)(st.st_mode & 07777), path);
    if (!rc) {
        size_t n = token->len;
        if (n >= 1 && token->data[n - 1] == '\n') n--;
        if (n >= 1 && n + 1 == token->len && token->data[n - 1] == '\r') n--;
        if (n < PUSH_TOKEN_MIN || n > PUSH_TOKEN_MAX)
            rc = err_set(err, "token file %s: a token of %zu bytes (%d to %d wanted)", path, n, PUSH_TOKEN_MIN,
                         PUSH_TOKEN_MAX);
        token->len = n;
    }
    if (rc) {                                    // a secret not to leave lying around
        OPENSSL_cleanse(token->data, token->cap);
        token->len = 0;
    } else {
        token->data[token->len] = 0;
    }
    return rc;
}

// ---- Messages -----------------------------------------------------------------

int push_send_msg(int fd, const rec_t *msg, int stop_fd, double timeout, rl_err *err) {
    sbuf b = {0};
    uint8_t len[4] = {0};
    sbuf_put(&b, len, 4);
    rec_encode(msg, &b);
    size_t n = b.len - 4;
    int rc;
    if (n < 1 || n > PUSH_MSG_MAX) {
        rc = err_set(err, "a message of %zu bytes, more than the %u allowed", n, PUSH_MSG_MAX);
    } else {
        put_u32le(b.data, (uint32_t)n);
        rc = net_send_all(fd, b.data, b.len, stop_fd, timeout, err);   // one send: no Nagle delay between the parts
    }
    sbuf_free(&b);
    return rc;
}

int push_recv_msg(int fd, rec_t *msg, int stop_fd, double timeout, rl_err *err) {
    uint8_t len[4];
    int rc = net_recv_all(fd, len, 4, stop_fd, timeout, err);
    if (rc) return rc;
    uint32_t n = get_u32le(len);
    if (n < 1 || n > PUSH_MSG_MAX)
        return err_set(err, "a message of %u bytes announced (1 to %u allowed)", n, PUSH_MSG_MAX);
    uint8_t *body = xmalloc(n);
    rc = net_recv_all(fd, body, n, stop_fd, timeout, err);
    if (rc == 1) rc = err_set(err, "connection closed by the peer after 0 of %u bytes", n);
    if (rc == 0) {
        rl_err e;
        if (rec_parse(msg, body, n, &push_limits, &e)) rc = err_set(err, "a malformed message: %s", e.msg);
    }
    free(body);
    return rc;
}

void push_send_error(int fd, const char *msg) {
    rec_t *r = rec_new();
    rec_set_bool(r, "ok", 0);
    rec_set_cstr(r, "error", msg);
    (void)push_send_msg(fd, r, -1, 1.0, NULL);
    rec_free(r);
}

// ---- Greeting and authentication ----------------------------------------------

// HMAC-SHA256(token, label || nonce)
static void push_mac(push_channel ch, const sbuf *token, const uint8_t *nonce, uint8_t *mac) {
    uint8_t data[PUSH_LABEL_MAX + PUSH_NONCE];
    size_t n = strlen(CHANNEL[ch].label);
    memcpy(data, CHANNEL[ch].label, n);
    memcpy(data + n, nonce, PUSH_NONCE);
    unsigned int len = PUSH_MAC;
    if (!HMAC(EVP_sha256(), token->data, (int)token->len, data, n + PUSH_NONCE, mac, &len) || len != PUSH_MAC) {
        fprintf(stderr, "rlpipe: fatal: HMAC-SHA256 failed\n");
        abort();
    }
}

int push_greet(int fd, push_channel ch, const sbuf *token, int stop_fd, double timeout, rl_err *err) {
    uint8_t g[PUSH_GREETING];
    memcpy(g, CHANNEL[ch].magic, 4);
    put_u32le(g + 4, PUSH_PROTOCOL);
    put_u32le(g + 8, token ? PUSH_AUTH_REQUIRED : 0);
    put_u32le(g + 12, 0);
    if (RAND_bytes(g + 16, PUSH_NONCE) != 1) return err_set(err, "cannot draw a random nonce (OpenSSL RAND_bytes)");
    if (net_send_all(fd, g, sizeof g, stop_fd, timeout, err))
        return errno == EPIPE || errno == ECONNRESET ? 1 : -1;   // a probe, gone already
    if (!token) return 0;
    uint8_t got[PUSH_MAC], want[PUSH_MAC];
    double deadline = timeout < PUSH_GREET_TIMEOUT ? timeout : PUSH_GREET_TIMEOUT;
    int rc = net_recv_all(fd, got, sizeof got, stop_fd, deadline, err);
    if (rc) return rc;
    push_mac(ch, token, g + 16, want);
    if (CRYPTO_memcmp(got, want, PUSH_MAC)) {
        push_send_error(fd, "authentication failed: wrong token");
        return err_set(err, "authentication failed (wrong token)");
    }
    return 0;
}

int push_answer(int fd, push_channel ch, const sbuf *token, double timeout, rl_err *err) {
    uint8_t g[PUSH_GREETING];
    int rc = net_recv_all(fd, g, sizeof g, -1, timeout, err);
    if (rc == 1) return err_set(err, "the receiver closed the connection before its greeting");
    if (rc) return -1;
    push_channel other = ch == PUSH_WEIGHTS ? PUSH_RECORDS : PUSH_WEIGHTS;
    if (!memcmp(g, CHANNEL[other].magic, 4))
        return err_set(err, "%s answered, not %s", CHANNEL[other].who, CHANNEL[ch].who);
    if (memcmp(g, CHANNEL[ch].magic, 4))
        return err_set(err, "not an rlpipe receiver (no \"%s\" greeting)", CHANNEL[ch].magic);
    uint32_t protocol = get_u32le(g + 4), flags = get_u32le(g + 8);
    if (protocol != PUSH_PROTOCOL)
        return err_set(err, "the receiver speaks push protocol %u, this sender protocol %u", protocol, PUSH_PROTOCOL);
    if (!(flags & PUSH_AUTH_REQUIRED)) return 0;
    if (!token) return err_set(err, "the receiver requires authentication: give its token with --token-file");
    uint8_t mac[PUSH_MAC];
    push_mac(ch, token, g + 16, mac);
    return net_send_all(fd, mac, sizeof mac, -1, timeout, err);
}

// ---- Tensor lists -------------------------------------------------------------

void push_set_tensors(rec_t *msg, const char *key, const push_tensor *t, size_t n) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n; i++) {
        size_t len = strnlen(t[i].name, sizeof t[i].name);
        const char *dt = dt_name(t[i].dtype);
        msgpack_pack_array(&pk, 3);
        msgpack_pack_str(&pk, len);
        msgpack_pack_str_body(&pk, t[i].name, len);
        msgpack_pack_str(&pk, strlen(dt));
        msgpack_pack_str_body(&pk, dt, strlen(dt));
        msgpack_pack_array(&pk, (size_t)t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++) msgpack_pack_int64(&pk, t[i].shape[d]);
    }
    rec_set_raw(msg, key, strlen(key), (const uint8_t *)sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

// Checks one unpacked [name, dtype, [d0...]] into *t: NULL, or what is wrong.
static const char *tensor_entry(const msgpack_object *o, push_tensor *t) {
    const char *triple = "not a [name, dtype, [dimensions...]] triple";
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3) return triple;
    const msgpack_object *name = &o->via.array.ptr[0], *dtype = &o->via.array.ptr[1], *shape = &o->via.array.ptr[2];
    if (name->type != MSGPACK_OBJECT_STR || dtype->type != MSGPACK_OBJECT_STR || shape->type != MSGPACK_OBJECT_ARRAY)
        return triple;
    memset(t, 0, sizeof *t);
    if (name->via.str.size == 0) return "an empty name";
    if (name->via.str.size >= sizeof t->name) return "a name longer than 127 bytes";
    if (memchr(name->via.str.ptr, 0, name->via.str.size)) return "a name with a NUL byte";
    memcpy(t->name, name->via.str.ptr, name->via.str.size);
    char dt[8] = "";
    if (dtype->via.str.size < sizeof dt) memcpy(dt, dtype->via.str.ptr, dtype->via.str.size);
    if (dtype->via.str.size >= sizeof dt || memchr(dt, 0, dtype->via.str.size) || dt_parse(dt, &t->dtype) ||
        dt_scaled(t->dtype))
        return "a dtype other than f32, bf16 or f16";
    if (shape->via.array.size > PUSH_MAX_DIMS) return "more than 4 dimensions";
    t->ndim = (int)shape->via.array.size;
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        const msgpack_object *x = &shape->via.array.ptr[d];
        if (x->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return "a negative dimension";
        if (x->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return "a dimension that is not an integer";
        // Elements and their bytes as f32 must fit an int64 (and a size_t).
        if (x->via.u64 > (uint64_t)INT64_MAX || (x->via.u64 && n > ((uint64_t)INT64_MAX / 4) / x->via.u64))
            return "an element count that overflows";
        n *= x->via.u64;
        t->shape[d] = (int64_t)x->via.u64;
    }
    if (n > SIZE_MAX / 4) return "an element count that overflows";
    t->n = (size_t)n;
    return NULL;
}

uint64_t push_tensors_bytes(const push_tensor *t, size_t n) {
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += (uint64_t)t[i].n * dt_size(t[i].dtype);
    return bytes;
}

int push_get_tensors(const rec_t *msg, const char *key, push_tensor **t, size_t *n, rl_err *err) {
    *t = NULL;
    *n = 0;
    long field = rec_find(msg, key);
    if (field < 0) return err_set(err, "no \"%s\" in the message", key);
    size_t len, hdr;
    const uint8_t *p = rec_value(msg, (size_t)field, &len);
    uint32_t count;
    if (mpa_header(p, len, &count, &hdr)) return err_set(err, "\"%s\" is not an array", key);
    if (count > PUSH_MAX_TENSORS)
        return err_set(err, "\"%s\" lists %llu tensors, more than the %d allowed", key, (unsigned long long)count,
                       PUSH_MAX_TENSORS);
    push_tensor *out = xmalloc((count ? count : 1) * sizeof *out);
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, 4096)) {
        fprintf(stderr, "rlpipe: fatal: out of memory creating a msgpack zone\n");
        abort();
    }
    size_t off = hdr;
    int rc = 0;
    for (uint64_t i = 0; i < count && !rc; i++) {
        // Scanned first: msgpack-c would allocate whatever an entry's header declares.
        rl_err e;
        size_t elen;
        int s = mps_scan(p + off, len - off, &entry_limits, NULL, &elen, &e);
        if (s == MPS_NEED) {
            rc = err_set(err, "%s[%llu]: cut short", key, (unsigned long long)i);
            break;
        }
        if (s != MPS_OK) {
            rc = err_set(err, "%s[%llu]: %s", key, (unsigned long long)i, e.msg);
            break;
        }
        msgpack_zone_clear(&zone);
        msgpack_object o;
        size_t uoff = 0;
        const char *why = "not valid msgpack";
        if (msgpack_unpack((const char *)p + off, elen, &uoff, &zone, &o) == MSGPACK_UNPACK_SUCCESS)
            why = tensor_entry(&o, &out[i]);
        if (why) rc = err_set(err, "%s[%llu]: %s", key, (unsigned long long)i, why);
        off += elen;
    }
    if (!rc && off != len) rc = err_set(err, "\"%s\": bytes after the array", key);
    msgpack_zone_destroy(&zone);
    if (rc) {
        free(out);
        return -1;
    }
    *t = out;
    *n = (size_t)count;
    return 0;
}

// ---- What the receiver stores, and the figures of an update ------------------

void push_set_stored(rec_t *msg, const char *key, const surv_round *s, size_t n) {
    sbuf b = {0};
    sbuf_reserve(&b, 1);
    for (size_t i = 0; i < n; i++) {
        if (s[i].dtype == DT_I8) sbuf_printf(&b, "%sint8/%d", i ? "," : "", s[i].group);
        else sbuf_printf(&b, "%s%s", i ? "," : "", dt_name(s[i].dtype));
    }
    rec_set_str(msg, key, (const char *)b.data, b.len);
    sbuf_free(&b);
}

// One entry of stored: p[0..n) into *s; 0, or -1.
static int stored_entry(const char *p, size_t n, surv_round *s) {
    char e[16];
    if (n == 0 || n >= sizeof e || memchr(p, 0, n)) return -1;
    memcpy(e, p, n);
    e[n] = 0;
    s->group = 0;
    if (!strncmp(e, "int8/", 5)) {
        char *end;
        long g = strtol(e + 5, &end, 10);
        if (!isdigit((unsigned char)e[5]) || *end || g < 1 || g > 65536) return -1;
        s->dtype = DT_I8;
        s->group = (int)g;
        return 0;
    }
    return dt_parse(e, &s->dtype) || s->dtype == DT_I8 ? -1 : 0;
}

int push_get_stored(const rec_t *msg, const char *key, surv_round *s, size_t n, rl_err *err) {
    const char *p;
    size_t len;
    rec_status st = rec_get_str(msg, key, &p, &len);
    if (st == REC_MISSING) return 1;
    if (st != REC_OK) return err_set(err, "\"%s\" is not a string", key);
    if (n == 0) return len ? err_set(err, "\"%s\" lists tensors, the hello none", key) : 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (at > len) return err_set(err, "\"%s\" has %zu entries, the tensors are %zu", key, i, n);
        const char *c = memchr(p + at, ',', len - at);
        size_t end = c ? (size_t)(c - p) : len;
        if (stored_entry(p + at, end - at, &s[i]))
            return err_set(err, "\"%s\": entry %zu is not f32, bf16, f16, int8/G (G in 1..65536) or fp8", key, i);
        at = end + 1;
    }
    if (at <= len) return err_set(err, "\"%s\" has more entries than the %zu tensors", key, n);
    return 0;
}

void push_set_update(rec_t *msg, const surv_figures *f) {
    rec_set_uint(msg, "update_from", f->from);
    rec_set_uint(msg, "update_n", f->n);
    rec_set_f64(msg, "update_moved", f->moved);
    rec_set_f64(msg, "update_changed", f->changed);
    if (f->moved > 0) {
        rec_set_f64(msg, "update_norm", f->norm);
        rec_set_f64(msg, "update_along", f->along);
    }
}

int push_get_update(const rec_t *msg, surv_figures *f, rl_err *err) {
    if (!rec_has(msg, "update_from")) return 1;
    memset(f, 0, sizeof *f);
    if (rec_get_uint(msg, "update_from", &f->from) || rec_get_uint(msg, "update_n", &f->n) ||
        rec_get_f64(msg, "update_moved", &f->moved) || rec_get_f64(msg, "update_changed", &f->changed))
        return err_set(err, "its update figures lack update_n, update_moved or update_changed, or are not numbers");
    if (!(f->moved >= 0 && f->moved <= 1 && f->changed >= 0 && f->changed <= 1))
        return err_set(err, "its update figures are not fractions");
    f->norm = f->along = NAN;
    if (f->moved > 0 &&
        (rec_get_f64(msg, "update_norm", &f->norm) || rec_get_f64(msg, "update_along", &f->along)))
        return err_set(err, "its update figures lack update_norm or update_along");
    if (rec_get_uint(msg, "version", &f->to)) f->to = 0;
    return 0;
}
