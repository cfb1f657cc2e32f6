// pusher.c — the sending end of a weight push: push.h's steps 1-7 for one
// version directory and one receiver. Tensors whose file dtype is the one the
// receiver asks for go from the mapping to the socket as they lie; the others
// are converted a chunk at a time (f32 in between, with dtype.h's functions,
// so the bytes are those the receiver would compute from f32 itself).
#include "sync/pusher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/hfweights.h"
#include "clock.h"
#include "records/record.h"
#include "sync/push.h"
#include "sync/push_lora.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pusher.c sends the file's little-endian tensor bytes as they lie: a little-endian host is needed"
#endif

#define CHUNK_ELEMS ((size_t)1 << 20)   // elements converted per step: 4 MiB of f32 in between

typedef struct {
    const net_addr *to;
    char addr[400];           // the receiver, for messages
    const push_opts *o;
    double timeout;
    int fd;
    rec_t *msg;
    rl_err *err;
} push_conn;

// err = "ADDR: what[: inner]" (inner: the message a callee left in err;
// what NULL: "ADDR: inner").
static int fail(push_conn *c, const char *what, int with_inner) {
    char inner[sizeof c->err->msg];
    snprintf(inner, sizeof inner, "%s", with_inner ? c->err->msg : "");
    return err_set(c->err, "%s: %s%s%s", c->addr, what ? what : "", what && with_inner ? ": " : "", inner);
}

// The message after the current one; "what" names it for errors. An
// {ok: false, error} answer is an error quoting the receiver.
static int recv_answer(push_conn *c, const char *what) {
    char buf[200];
    int rc = push_recv_msg(c->fd, c->msg, c->o->stop_fd, c->timeout, c->err);
    if (rc > 0) {
        snprintf(buf, sizeof buf, "the receiver closed the connection before its %s", what);
        return fail(c, buf, 0);
    }
    if (rc < 0) {
        snprintf(buf, sizeof buf, "reading its %s", what);
        return fail(c, buf, 1);
    }
    long i = rec_find(c->msg, "ok");
    size_t n = 0;
    const uint8_t *v = i >= 0 ? rec_value(c->msg, (size_t)i, &n) : NULL;
    if (v && n == 1 && *v == 0xc3) return 0;   // true
    const char *e = NULL;
    size_t elen = 0;
    if (rec_get_str(c->msg, "error", &e, &elen) != REC_OK) e = "(no reason given)", elen = strlen(e);
    if (elen > 600) elen = 600;
    if (!v || n != 1 || *v != 0xc2) {
        snprintf(buf, sizeof buf, "its %s is not {ok: true} or {ok: false, error}", what);
        return fail(c, buf, 0);
    }
    return err_set(c->err, "%s: the receiver refused the push: %.*s", c->addr, (int)elen, e);
}

static void copy_str(const rec_t *m, const char *key, char *dst, size_t size) {
    const char *s;
    size_t n;
    if (rec_get_str(m, key, &s, &n) != REC_OK) s = "?", n = 1;
    snprintf(dst, size, "%.*s", (int)(n < size ? n : size - 1), s);
}

// Checks the receiver's tensor list against the file: each one present, of the
// same shape. The list becomes the push's (same order, the dtypes asked for).
static int match_tensors(push_conn *c, const hfw_set *f, const push_tensor *t, size_t n, const st_tensor **src,
                         uint64_t *bytes) {
    char what[800], a[256], b[256];
    *bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const st_tensor *s = hfw_find(f, t[i].name);
        if (!s) {
            snprintf(what, sizeof what, "the receiver needs tensor %s, which is not in %s", t[i].name, f->where);
            return fail(c, what, 0);
        }
        int same = s->ndim == t[i].ndim;
        for (int d = 0; same && d < s->ndim; d++) same = s->shape[d] == t[i].shape[d];
        if (!same) {
            st_shape_str(a, sizeof a, s->shape, s->ndim);
            st_shape_str(b, sizeof b, t[i].shape, t[i].ndim);
            snprintf(what, sizeof what, "tensor %s is %s in %s, but the receiver's model has %s", t[i].name, a,
                     f->where, b);
            return fail(c, what, 0);
        }
        if (t[i].dtype != DT_F32 && t[i].dtype != DT_BF16 && t[i].dtype != DT_F16) {
            snprintf(what, sizeof what, "the receiver asks for tensor %s as %s", t[i].name, dt_name(t[i].dtype));
            return fail(c, what, 0);
        }
        src[i] = s;
        *bytes += (uint64_t)s->nelem * dt_size(t[i].dtype);
    }
    return 0;
}

typedef struct {
    float *f32;               // CHUNK_ELEMS: the elements as f32
    uint16_t *in16, *out16;   // CHUNK_ELEMS: 16-bit source (aligned copy) and wire elements
    XXH3_state_t *hash;
} stream_bufs;

static int send_bytes(push_conn *c, stream_bufs *b, const void *p, size_t n) {
    XXH3_64bits_update(b->hash, p, n);
    if (net_send_all(c->fd, p, n, c->o->stop_fd, c->timeout, c->err)) return fail(c, "sending the tensor data", 1);
    return 0;
}

// Step 6 for one tensor: its elements as `wire` (file bytes are possibly unaligned).
static int send_tensor(push_conn *c, stream_bufs *b, const st_tensor *s, rl_dtype wire) {
    const uint8_t *p = s->data;
    size_t in_size = dt_size(s->dtype);
    if (s->dtype == wire) {
        size_t total = s->nelem * in_size, step = CHUNK_ELEMS * 4;
        for (size_t off = 0; off < total; off += step)
            if (send_bytes(c, b, p + off, total - off < step ? total - off : step)) return -1;
        return 0;
    }
    for (size_t i = 0; i < s->nelem; i += CHUNK_ELEMS) {
        size_t k = s->nelem - i < CHUNK_ELEMS ? s->nelem - i : CHUNK_ELEMS;
        const uint8_t *src = p + i * in_size;
        if (s->dtype == DT_F32) memcpy(b->f32, src, 4 * k);
        else {
            memcpy(b->in16, src, 2 * k);
            if (s->dtype == DT_BF16) dt_bf16_to_f32(b->f32, b->in16, k);
            else dt_f16_to_f32(b->f32, b->in16, k);
        }
        int rc;
        if (wire == DT_F32) rc = send_bytes(c, b, b->f32, 4 * k);
        else {
            if (wire == DT_BF16) dt_f32_to_bf16(b->out16, b->f32, k);
            else dt_f32_to_f16(b->out16, b->f32, k);
            rc = send_bytes(c, b, b->out16, 2 * k);
        }
        if (rc) return -1;
    }
    return 0;
}

// The update from the version the receiver holds to this one, over the
// sample of o->surv, at the precision the hello's stored gives each tensor
// (none given: not measured). 0, or -1 when stored is malformed.
static int measure(push_conn *c, const st_tensor **src, size_t n, uint64_t version, push_report *rep) {
    surv_round *kept = xmalloc((n ? n : 1) * sizeof *kept);
    int g = push_get_stored(c->msg, "stored", kept, n, c->err);
    if (g < 0) fail(c, "its hello", 1);
    if (g == 0) {
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++) total += src[i]->nelem;
        surv_begin(c->o->surv, rep->had, version, total);
        for (size_t i = 0; i < n; i++) {
            const st_tensor *s = src[i];
            size_t K = s->ndim >= 2 ? (size_t)s->shape[s->ndim - 1] : s->nelem;   // a vector is one row
            if (K) surv_rows(c->o->surv, s->nelem / K, K, s->data, s->dtype, kept[i]);
        }
        rep->has_update = surv_end(c->o->surv, &rep->update);
    }
    free(kept);
    return g < 0 ? -1 : 0;
}

// The checkpoint's tensors that the hello lists, in its order (an adapter:
// the file's tensors, in its order): src[i] is the file's tensor for t[i];
// bytes, what they weigh as the receiver asks.
typedef struct {
    hfw_set *f;
    st_file *adapter;         // an adapter push: its weights file, lc its config
    lora_config lc;
    push_tensor *t;
    const st_tensor **src;
    size_t n;
    uint64_t bytes;
} matched;

static void matched_free(matched *m) {
    free(m->src);
    free(m->t);
    hfw_close(m->f);
    st_close(m->adapter);
}

// Opens dir and matches its tensors to the hello in c->msg. 0, or -1 with
// c->err set; matched_free() either way.
static int match_hello(push_conn *c, const char *dir, matched *m) {
    *m = (matched){0};
    if (!(m->f = hfw_open(dir, c->err))) return fail(c, "reading the checkpoint", 1);
    if (push_get_tensors(c->msg, "tensors", &m->t, &m->n, c->err))
        return fail(c, "its hello lists the tensors wrongly", 1);
    m->src = xmalloc((m->n ? m->n : 1) * sizeof *m->src);
    return match_tensors(c, m->f, m->t, m->n, m->src, &m->bytes);
}

// Opens dir's adapter for a receiver whose hello in c->msg says it takes
// adapter pushes: its tensors as they lie. 0, or -1 with c->err set;
// matched_free() either way.
static int match_adapter(push_conn *c, const char *dir, matched *m) {
    *m = (matched){0};
    uint64_t lora = 0;
    if (rec_get_uint(c->msg, "lora", &lora) != REC_OK || lora < PUSH_LORA) {
        char what[4300];
        snprintf(what, sizeof what, "%s holds a LoRA adapter, and the receiver takes no adapter pushes (an older "
                 "rlpipe): push a model directory, the base with the adapter merged", dir);
        return fail(c, what, 0);
    }
    if (push_lora_open(dir, &m->lc, &m->adapter, &m->t, &m->n, c->err)) return fail(c, "reading the adapter", 1);
    m->src = xmalloc((m->n ? m->n : 1) * sizeof *m->src);
    for (size_t i = 0; i < m->n; i++) m->src[i] = &m->adapter->t[i];
    m->bytes = push_tensors_bytes(m->t, m->n);
    return 0;
}

// The receiver holds `version` already: its sample is taken, so that the
// first version pushed to it has figures. Nothing is said when the
// checkpoint does not fit it: a push would say so.
static void sample_held(push_conn *c, const char *dir, uint64_t version) {
    rl_err quiet, *err = c->err;
    c->err = &quiet;
    matched m;
    push_report held = {.had = version};
    if (match_hello(c, dir, &m) || measure(c, m.src, m.n, version, &held)) surv_drop(c->o->surv);
    matched_free(&m);
    c->err = err;
}

// Steps 4-7 once the hello has been read and the version is newer.
static int push_data(push_conn *c, const char *dir, uint64_t version, push_report *rep) {
    matched m;
    stream_bufs b = {0};
    int rc = -1;
    rep->adapter = push_lora_is_adapter(dir);
    if (rep->adapter ? match_adapter(c, dir, &m) : match_hello(c, dir, &m)) goto out;
    if (!rep->adapter && c->o->surv && measure(c, m.src, m.n, version, rep)) goto out;

    rec_clear(c->msg);
    rec_set_uint(c->msg, "version", version);
    rec_set_uint(c->msg, "bytes", m.bytes);
    rec_set_cstr(c->msg, "checksum", "xxh3-64");
    push_set_tensors(c->msg, "tensors", m.t, m.n);
    if (rep->adapter) push_lora_set(c->msg, &m.lc);
    if (rep->has_update) push_set_update(c->msg, &rep->update);
    if (push_send_msg(c->fd, c->msg, c->o->stop_fd, c->timeout, c->err)) {
        fail(c, "sending the push message", 1);
        goto out;
    }
    if (recv_answer(c, "answer to the push message")) goto out;

    b.f32 = xmalloc(CHUNK_ELEMS * sizeof *b.f32);
    b.in16 = xmalloc(CHUNK_ELEMS * sizeof *b.in16);
    b.out16 = xmalloc(CHUNK_ELEMS * sizeof *b.out16);
    if (!(b.hash = XXH3_createState())) abort();
    XXH3_64bits_reset(b.hash);
    for (size_t i = 0; i < m.n; i++)
        if (send_tensor(c, &b, m.src[i], m.t[i].dtype)) goto out;
    uint64_t h = XXH3_64bits_digest(b.hash);   // sent little-endian: the host's order
    if (net_send_all(c->fd, &h, 8, c->o->stop_fd, c->timeout, c->err)) {
        fail(c, "sending the checksum", 1);
        goto out;
    }
    if (recv_answer(c, "result")) goto out;
    rep->version = version;
    rep->bytes = m.bytes;
    double us;
    if (rec_get_f64(c->msg, "recv_us", &us) == REC_OK) rep->recv_us = us;
    if (rec_get_f64(c->msg, "wait_us", &us) == REC_OK) rep->wait_us = us;
    if (rec_get_f64(c->msg, "stall_us", &us) == REC_OK) rep->stall_us = us;
    if (rec_get_f64(c->msg, "merge_us", &us) == REC_OK) rep->merge_us = us;
    rc = 0;
out:
    // the receiver may not hold this version, or holds weights no sample was taken of
    if ((rc || rep->adapter) && c->o->surv) surv_drop(c->o->surv);
    if (b.hash) XXH3_freeState(b.hash);
    free(b.f32);
    free(b.in16);
    free(b.out16);
    matched_free(&m);
    return rc;
}

int push_weights(const net_addr *to, const char *dir, uint64_t version, const push_opts *o, push_report *rep,
                 rl_err *err) {
    memset(rep, 0, sizeof *rep);
    push_conn c = {.to = to, .o = o, .timeout = o->timeout > 0 ? o->timeout : PUSH_TIMEOUT, .err = err};
    net_format(to, c.addr, sizeof c.addr);
    double t0 = clock_now();
    int unreachable = 0;
    if ((c.fd = net_connect(to, &unreachable, err)) < 0) return unreachable ? PUSH_UNREACHABLE : -1;
    rep->connected = 1;
    net_bulk(c.fd);
    c.msg = rec_new();
    int rc = -1;
    if (push_answer(c.fd, PUSH_WEIGHTS, o->token, c.timeout, err)) {
        fail(&c, NULL, 1);
        goto out;
    }
    if (recv_answer(&c, "hello")) goto out;
    copy_str(c.msg, "receiver", rep->receiver, sizeof rep->receiver);
    copy_str(c.msg, "dtype", rep->dtype, sizeof rep->dtype);
    if (rec_get_uint(c.msg, "version", &rep->had) != REC_OK) {
        fail(&c, "its hello has no version", 0);
        goto out;
    }
    if (rep->had >= version) {   // nothing to send: closing now is the end of the exchange
        rep->skipped = 1;
        if (o->surv && rep->had == version) sample_held(&c, dir, version);
        rc = PUSH_OK;
        goto out;
    }
    if (push_data(&c, dir, version, rep) == 0) rc = PUSH_OK;
out:
    rep->seconds = clock_now() - t0;
    rec_free(c.msg);
    close(c.fd);
    return rc;
}
