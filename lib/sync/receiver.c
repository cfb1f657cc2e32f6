// receiver.c — the receiving end of weight pushes (receiver.h): one thread
// that accepts, verifies and stages pushes; installation under a mutex at a
// boundary between two uses of the model.
#include "sync/receiver.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"
#include "sync/push.h"
#include "sync/push_lora.h"

// Bytes received (and converted) at a time: large enough that the per-chunk
// costs vanish, small enough to stay in the last-level cache.
#define CHUNK_BYTES (4u << 20)

struct rcv {
    model_t *m;
    rcv_opts o;
    char name[64];                 // "rl-sample 0.1.0"
    net_addr addr;
    char addr_text[400];
    int lfd;
    int stop_pipe[2];              // written by rcv_stop: wakes the thread from any wait
    sbuf token;
    int has_token;
    push_tensor *want;             // (nt) the hello's tensor list, in the model's order
    surv_round *stored;            // (nt) how the model keeps each
    size_t nt;
    const char *prec;              // the model's precision ("bf16")
    hfw_set *base;                 // rcv_opts.base's weights, or NULL: no adapter pushes
    double t_start;                // clock_now() at rcv_start
    surv_watch watch;              // the versions' along, for the warning that updates are lost
    int metrics_failed;            // a metrics line could not be written: no more (the thread's own copy)
    uint8_t *chunk;                // (chunk_cap) received bytes
    size_t chunk_cap;
    pthread_t thread;

    pthread_mutex_t mu;            // guards what follows
    pthread_cond_t cv;
    model_weights *standby;        // filled by the thread
    int held;                      // the caller is using the model
    int ready;                     // standby verified, waiting to be installed
    int stopping;
    uint64_t ready_version;
    double last_stall;             // of the latest install: seconds the holder was blocked
    rcv_stats st;
};

static double timeout_of(const rcv_t *r) { return r->o.timeout > 0 ? r->o.timeout : PUSH_TIMEOUT; }

// With mu held: the standby weights become the model's.
static void install(rcv_t *r, int by_holder) {
    double t0 = clock_now();
    model_weights_swap(r->m, r->standby);
    double dt = clock_now() - t0;
    r->st.version = r->ready_version;
    r->st.installed++;
    r->ready = 0;
    r->last_stall = by_holder ? dt : 0;
    if (by_holder) {
        r->st.stall_s += dt;
        if (dt > r->st.stall_max_s) r->st.stall_max_s = dt;
    }
    pthread_cond_broadcast(&r->cv);
}

uint64_t rcv_hold(rcv_t *r) {
    if (pthread_mutex_trylock(&r->mu)) {   // the thread is installing: that blocks the holder too
        double t0 = clock_now();
        pthread_mutex_lock(&r->mu);
        double dt = clock_now() - t0;
        r->st.stall_s += dt;
        if (dt > r->st.stall_max_s) r->st.stall_max_s = dt;
    }
    if (r->ready) install(r, 1);
    r->held = 1;
    uint64_t v = r->st.version;
    pthread_mutex_unlock(&r->mu);
    return v;
}

void rcv_release(rcv_t *r) {
    pthread_mutex_lock(&r->mu);
    r->held = 0;
    if (r->ready) pthread_cond_broadcast(&r->cv);   // the thread installs it
    pthread_mutex_unlock(&r->mu);
}

int64_t rcv_wait(rcv_t *r, uint64_t v, const volatile sig_atomic_t *stop, int out_fd) {
    double t0 = clock_now();
    int gone = 0;
    pthread_mutex_lock(&r->mu);
    r->held = 0;
    pthread_cond_broadcast(&r->cv);
    while (r->st.version < v && !r->stopping && !*stop && !(gone = out_fd >= 0 && net_hung_up(out_fd))) {
        // A signal handler cannot signal the condition, nor a reader going
        // away: look at *stop and out_fd every 50 ms.
        struct timespec ts = clock_timespec(clock_now() + 0.05);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    if (r->ready) install(r, 1);
    r->held = 1;
    int64_t got = r->st.version >= v ? (int64_t)r->st.version : gone ? -2 : -1;
    r->st.wait_s += clock_now() - t0;
    pthread_mutex_unlock(&r->mu);
    return got;
}

rcv_stats rcv_get_stats(rcv_t *r) {
    pthread_mutex_lock(&r->mu);
    rcv_stats s = r->st;
    pthread_mutex_unlock(&r->mu);
    return s;
}

const char *rcv_address(const rcv_t *r) { return r->addr_text; }

// ---- One push -----------------------------------------------------------------

static void refuse(rcv_t *r, int fd, const char *why) {
    push_send_error(fd, why);
    pthread_mutex_lock(&r->mu);
    r->st.refused++;
    uint64_t v = r->st.version;
    pthread_mutex_unlock(&r->mu);
    fprintf(stderr, "%s: warning: push refused: %s; keeping weights v%llu\n", r->o.tool, why, (unsigned long long)v);
}

// The model's index of each tensor of the push (order[k] for push tensor k),
// after checking that the push names every tensor of the hello once, each
// with its shape; *bytes is the data's size. 0, or -1 with err.
static int match_tensors(const rcv_t *r, const push_tensor *t, size_t n, size_t *order, uint64_t *bytes,
                         rl_err *err) {
    if (n != r->nt) return err_set(err, "the push has %zu tensors, the model %zu", n, r->nt);
    unsigned char *seen = xmalloc(r->nt);
    memset(seen, 0, r->nt);
    int rc = -1;
    for (size_t k = 0; k < n; k++) {
        size_t i = 0;
        while (i < r->nt && strcmp(r->want[i].name, t[k].name)) i++;
        if (i == r->nt) {
            err_set(err, "tensor '%s' is not part of the model", t[k].name);
            goto out;
        }
        if (seen[i]++) {
            err_set(err, "tensor '%s' is sent twice", t[k].name);
            goto out;
        }
        int same = t[k].ndim == r->want[i].ndim;
        for (int d = 0; same && d < t[k].ndim; d++) same = t[k].shape[d] == r->want[i].shape[d];
        if (!same) {
            err_set(err, "tensor '%s' has another shape than the model's", t[k].name);
            goto out;
        }
        order[k] = i;
    }
    *bytes = push_tensors_bytes(t, n);
    rc = 0;
out:
    free(seen);
    return rc;
}

static void set_us(rec_t *msg, const char *key, double seconds) {
    rec_set_uint(msg, key, seconds > 0 ? (uint64_t)(seconds * 1e6 + 0.5) : 0);
}

static int stopping(rcv_t *r) {
    pthread_mutex_lock(&r->mu);
    int s = r->stopping;
    pthread_mutex_unlock(&r->mu);
    return s;
}

// One push being served (serve): its messages and what its push message says.
typedef struct {
    rec_t *msg;              // each message of the exchange in turn
    uint64_t have;           // the version held when the hello was sent
    uint64_t version, bytes;
    push_tensor *t;          // (n) the tensors of the push, in the sender's order
    size_t *order;           // (n) the model's index of each
    size_t n;
    int has_update;          // the sender measured the update (survival.h)
    surv_figures update;
    int lora;                // an adapter push (push_lora.h): what follows is set
    lora_config lc;
    push_lora_slot *slot;    // (n) where each tensor goes in adapter
    lora_adapter *adapter;   // received, then merged into the standby weights
    double merge_s;          // model_weights_fill's time
    char why[1200];          // why the push is refused
} incoming;

// Elements [off, off + cnt) of push tensor k, arrived as src: into the
// standby weights, or widened to f32 into the adapter. 0, or -1 with err.
static int put(rcv_t *r, const incoming *in, size_t k, size_t off, size_t cnt, const void *src, rl_err *err) {
    const push_tensor *t = &in->t[k];
    if (!in->lora) {
        if (model_weights_put(r->m, r->standby, in->order[k], off, cnt, t->dtype, src))
            return err_set(err, "tensor '%s' does not fit the model", t->name);
        return 0;
    }
    float *dst = push_lora_dest(in->adapter, in->slot[k]) + off;
    if (t->dtype == DT_F32) memcpy(dst, src, cnt * sizeof *dst);
    else if (t->dtype == DT_BF16) dt_bf16_to_f32(dst, src, cnt);
    else dt_f16_to_f32(dst, src, cnt);
    return 0;
}

// Receives the data of a push into the standby weights (an adapter: into
// in->adapter): 0 when every byte arrived and the checksum matches, -1 with err.
static int receive_data(rcv_t *r, int fd, const incoming *in, rl_err *err) {
    const push_tensor *t = in->t;
    size_t n = in->n;
    XXH3_state_t *h = XXH3_createState();
    if (!h) return err_set(err, "out of memory");
    XXH3_64bits_reset(h);
    int rc = -1, stop_fd = r->stop_pipe[0];
    double to = timeout_of(r);
    uint64_t done = 0;
    for (size_t k = 0; k < n; k++) {
        size_t es = dt_size(t[k].dtype), K = t[k].ndim == 2 ? (size_t)t[k].shape[1] : 1;
        size_t step = CHUNK_BYTES / es / K * K;   // whole rows: int8 quantizes row by row
        if (step == 0) step = K;
        for (size_t off = 0; off < t[k].n; off += step) {
            size_t cnt = t[k].n - off < step ? t[k].n - off : step, bytes = cnt * es;
            if (bytes > r->chunk_cap) r->chunk = xrealloc(r->chunk, r->chunk_cap = bytes);   // a row over a chunk
            rl_err e;
            int got = net_recv_all(fd, r->chunk, bytes, stop_fd, to, &e);
            if (got != 0) {
                if (got > 0) err_set(err, "the push broke off after %llu bytes of data", (unsigned long long)done);
                else err_set(err, "receiving tensor '%s': %s", t[k].name, e.msg);
                goto out;
            }
            XXH3_64bits_update(h, r->chunk, bytes);
            if (put(r, in, k, off, cnt, r->chunk, err)) goto out;
            done += bytes;
        }
    }
    uint8_t sum[8];
    rl_err e;
    int got = net_recv_all(fd, sum, 8, stop_fd, to, &e);
    if (got != 0) {
        if (got > 0) err_set(err, "the push broke off before its checksum");
        else err_set(err, "receiving the checksum: %s", e.msg);
        goto out;
    }
    uint64_t want = 0;
    for (int i = 7; i >= 0; i--) want = want << 8 | sum[i];
    if (XXH3_64bits_digest(h) != want) {
        err_set(err, "checksum mismatch: the data arrived damaged");
        goto out;
    }
    rc = 0;
out:
    XXH3_freeState(h);
    return rc;
}

// The refusal of a push: in->why, formatted. Returns -1.
static int refusal(incoming *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refusal(incoming *in, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->why, sizeof in->why, fmt, ap);
    va_end(ap);
    return -1;
}

// Step 3: the hello, naming the version held (read under r->mu) and the
// tensors wanted. 0, or -1 when the sender went away.
static int send_hello(rcv_t *r, int fd, incoming *in) {
    pthread_mutex_lock(&r->mu);
    in->have = r->st.version;
    pthread_mutex_unlock(&r->mu);
    rec_set_bool(in->msg, "ok", 1);
    rec_set_cstr(in->msg, "receiver", r->name);
    rec_set_cstr(in->msg, "dtype", r->prec);
    rec_set_uint(in->msg, "version", in->have);
    push_set_tensors(in->msg, "tensors", r->want, r->nt);
    push_set_stored(in->msg, "stored", r->stored, r->nt);
    if (r->base) rec_set_uint(in->msg, "lora", PUSH_LORA);
    rl_err e;
    return push_send_msg(fd, in->msg, r->stop_pipe[0], timeout_of(r), &e) ? -1 : 0;
}

// Step 4, the push message: a version newer than the one held, the xxh3-64
// checksum, and the tensors of the model, each once with its shape (or those
// of an adapter that fits the base: push_lora.h), whose data is `bytes`
// long. 0; 1 when the sender closed instead (it only wanted the hello:
// rl-sync finds we hold its version); -1 with in->why.
static int read_push(rcv_t *r, int fd, incoming *in) {
    rl_err e;
    int got = push_recv_msg(fd, in->msg, r->stop_pipe[0], timeout_of(r), &e);
    if (got > 0) return 1;
    if (got < 0) return refusal(in, "reading the push message: %s", e.msg);
    const char *ck;
    size_t ck_len;
    uint64_t want_bytes = 0;
    if (rec_get_uint(in->msg, "version", &in->version) || rec_get_uint(in->msg, "bytes", &in->bytes))
        return refusal(in, "the push message lacks an unsigned 'version' or 'bytes'");
    if (rec_get_str(in->msg, "checksum", &ck, &ck_len) || ck_len != 7 || memcmp(ck, "xxh3-64", 7))
        return refusal(in, "the push message's 'checksum' is not \"xxh3-64\"");
    if (in->version <= in->have)
        return refusal(in, "version %llu is not newer than the weights held (v%llu)",
                       (unsigned long long)in->version, (unsigned long long)in->have);
    int lora = push_lora_get(in->msg, &in->lc, &e);
    if (lora < 0) return refusal(in, "the push message: %s", e.msg);
    in->lora = lora == 0;
    if (in->lora && !r->base) return refusal(in, "this receiver takes no adapter pushes (it knows no base directory)");
    if (push_get_tensors(in->msg, "tensors", &in->t, &in->n, &e)) return refusal(in, "the push message: %s", e.msg);
    in->order = xmalloc((in->n ? in->n : 1) * sizeof *in->order);
    if (in->lora) {
        in->slot = xmalloc((in->n ? in->n : 1) * sizeof *in->slot);
        if (push_lora_match(model_cfg(r->m), &in->lc, in->t, in->n, in->slot, &want_bytes, &e))
            return refusal(in, "the adapter does not fit the base %s: %s", r->o.base, e.msg);
    } else if (match_tensors(r, in->t, in->n, in->order, &want_bytes, &e)) {
        return refusal(in, "%s", e.msg);
    }
    if (in->bytes != want_bytes)
        return refusal(in, "'bytes' is %llu, the tensors listed hold %llu", (unsigned long long)in->bytes,
                       (unsigned long long)want_bytes);
    int u = push_get_update(in->msg, &in->update, &e);
    if (u < 0) return refusal(in, "the push message: %s", e.msg);
    in->has_update = u == 0 && in->update.from == in->have;   // figures of another update say nothing here
    if (in->lora) in->adapter = lora_new(&in->lc, model_cfg(r->m));
    return 0;
}

// Step 5: the push accepted. 0, or -1 with in->why.
static int send_accept(rcv_t *r, int fd, incoming *in) {
    rl_err e;
    rec_clear(in->msg);
    rec_set_bool(in->msg, "ok", 1);
    if (push_send_msg(fd, in->msg, r->stop_pipe[0], timeout_of(r), &e)) return refusal(in, "%s", e.msg);
    return 0;
}

// The standby weights, verified, installed at the holder's next boundary, or
// now if it is released; takes r->mu. 1 when installed (*stall: seconds the
// holder was blocked by the swap), 0 when the receiver is stopping.
static int install_when_free(rcv_t *r, const incoming *in, double *stall) {
    pthread_mutex_lock(&r->mu);
    r->ready = 1;
    r->ready_version = in->version;
    while (r->ready && r->held && !r->stopping) pthread_cond_wait(&r->cv, &r->mu);
    if (r->ready && !r->stopping) install(r, 0);
    int installed = !r->ready;
    r->ready = 0;
    *stall = r->last_stall;
    if (installed) r->st.bytes += in->bytes;
    pthread_mutex_unlock(&r->mu);
    return installed;
}

// One JSON line of rcv_opts.metrics for an install.
static void metrics_line(rcv_t *r, const incoming *in, double recv, double wait, double stall) {
    sbuf b = {0};
    sbuf_printf(&b, "{\"t\":%.3f,\"version\":%llu,\"from\":%llu,\"bytes\":%llu,\"recv_s\":%.6f,\"wait_s\":%.6f,"
                    "\"stall_s\":%.6f", clock_now() - r->t_start, (unsigned long long)in->version,
                (unsigned long long)in->have, (unsigned long long)in->bytes, recv, wait, stall);
    if (in->lora) sbuf_printf(&b, ",\"adapter\":true,\"merge_s\":%.6f", in->merge_s);
    if (in->has_update) {
        const surv_figures *f = &in->update;
        sbuf_printf(&b, ",\"sampled\":%llu,\"moved\":%.6g,\"changed\":%.6g", (unsigned long long)f->n, f->moved,
                    f->changed);
        if (f->moved > 0) sbuf_printf(&b, ",\"norm\":%.6g,\"along\":%.6g", f->norm, f->along);
    }
    sbuf_printf(&b, "}\n");
    if (fwrite(b.data, 1, b.len, r->o.metrics) != b.len || fflush(r->o.metrics)) {
        int e = errno ? errno : EIO;
        r->metrics_failed = 1;
        pthread_mutex_lock(&r->mu);
        r->st.metrics_errno = e;
        pthread_mutex_unlock(&r->mu);
        fprintf(stderr, "%s: warning: write error: %s: %s; no more metrics lines\n", r->o.tool, r->o.metrics_name,
                strerror(e));
    }
    sbuf_free(&b);
}

// After an install: the line on stderr, the metrics line, and once the
// warning that the sampler's precision loses most of the learner's updates
// (surv_watch_add).
static void report(rcv_t *r, const incoming *in, double recv, double wait, double stall) {
    char upd[300] = "";
    if (in->has_update) {
        char d[240];
        surv_describe(&in->update, r->prec, d, sizeof d);
        snprintf(upd, sizeof upd, "; the update from v%llu: %s", (unsigned long long)in->have, d);
    }
    if (r->o.metrics && !r->metrics_failed) metrics_line(r, in, recv, wait, stall);
    if (!r->o.quiet) {
        char b[32], merged[64] = "";
        if (in->lora) snprintf(merged, sizeof merged, ", merged in %.3f s", in->merge_s);
        fprintf(stderr, "%s: weights v%llu installed from %s push: %s in %.3f s (%.2f GB/s)%s, %.0f us to a boundary, "
                        "stall %.0f us%s\n", r->o.tool, (unsigned long long)in->version, in->lora ? "an adapter" : "a",
                fmt_bytes(in->bytes, b, sizeof b), recv, recv > 0 ? (double)in->bytes / recv / 1e9 : 0.0, merged,
                wait * 1e6, stall * 1e6, upd);
    }
    double mean;
    uint64_t first;
    if (in->has_update && surv_watch_add(&r->watch, &in->update, &mean, &first))
        fprintf(stderr, "%s: warning: at %s, the versions installed carry on average %.2f of the learner's update (the "
                        "%d from v%llu to v%llu; the latest: %.1f%% of the weights changed, %.1f%% in f32): updates "
                        "smaller than half a step of %s round back to the weights held, and the sampler goes on "
                        "sampling the model it started from; sample at a precision that follows them (f16 or f32: "
                        "rl-sample(1), Precision)\n",
                r->o.tool, r->prec, mean, SURV_WINDOW, (unsigned long long)first, (unsigned long long)in->version,
                100 * in->update.changed, 100 * in->update.moved, r->prec);
}

// Step 7: the result to the sender (even while stopping: the weights are
// installed, whether or not the sender hears it), and a line on stderr. t0, t1,
// t2 (clock_now() seconds): the data began, was verified (an adapter: and
// merged, in->merge_s of it), was installed.
static void answer(rcv_t *r, int fd, incoming *in, double t0, double t1, double t2, double stall) {
    rl_err e;
    rec_clear(in->msg);
    rec_set_bool(in->msg, "ok", 1);
    rec_set_uint(in->msg, "version", in->version);
    rec_set_uint(in->msg, "bytes", in->bytes);
    set_us(in->msg, "recv_us", t1 - t0 - in->merge_s);
    set_us(in->msg, "wait_us", t2 - t1);
    set_us(in->msg, "stall_us", stall);
    if (in->lora) set_us(in->msg, "merge_us", in->merge_s);
    push_send_msg(fd, in->msg, -1, 5, &e);
    report(r, in, t1 - t0 - in->merge_s, t2 - t1, stall);
}

// Steps 3-7 of push.h after the greeting; messages go to stderr.
static void serve(rcv_t *r, int fd) {
    rl_err e;
    int g = push_greet(fd, PUSH_WEIGHTS, r->has_token ? &r->token : NULL, r->stop_pipe[0], timeout_of(r), &e);
    if (g > 0) return;   // a probe: connected and left
    if (g < 0) {
        if (!stopping(r)) refuse(r, -1, e.msg);
        return;
    }
    incoming in = {.msg = rec_new()};
    if (send_hello(r, fd, &in)) goto out;   // the sender went away: nothing to report
    int got = read_push(r, fd, &in);
    if (got > 0) goto out;   // it only wanted the hello
    if (got < 0) goto refused;
    if (send_accept(r, fd, &in)) goto refused;
    double t0 = clock_now();
    if (receive_data(r, fd, &in, &e)) {   // step 6
        refusal(&in, "%s", e.msg);
        goto refused;
    }
    if (in.lora) {   // merged now, while the model's user goes on: the swap is a full push's
        double tm = clock_now();
        if (model_weights_fill(r->m, r->standby, r->base, in.adapter, &e)) {
            refusal(&in, "merging the adapter into the base %s: %s", r->o.base, e.msg);
            goto refused;
        }
        in.merge_s = clock_now() - tm;
    }
    double t1 = clock_now(), stall;
    if (!install_when_free(r, &in, &stall)) goto out;   // stopping
    answer(r, fd, &in, t0, t1, clock_now(), stall);
    goto out;
refused:
    if (!stopping(r)) refuse(r, fd, in.why);   // else: the tool is ending, and cut the push off itself
out:
    if (in.adapter) lora_free(in.adapter);
    free(in.slot);
    free(in.order);
    free(in.t);
    rec_free(in.msg);
}

static void *thread_main(void *arg) {
    rcv_t *r = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = r->lfd, .events = POLLIN}, {.fd = r->stop_pipe[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "%s: warning: waiting for pushes: %s; no more weights will be received\n", r->o.tool,
                    strerror(errno));
            break;
        }
        if (p[1].revents) break;
        int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
                fprintf(stderr, "%s: warning: accepting a push: %s\n", r->o.tool, strerror(errno));
                usleep(100000);   // out of descriptors, say: do not spin
            }
            continue;
        }
        net_bulk(fd);
        serve(r, fd);
        close(fd);
    }
    return NULL;
}

// ---- Start and stop ---------------------------------------------------------

int rcv_check_listen(const char *listen, const char *token_file, rl_err *err) {
    net_addr a;
    rl_err e;
    if (net_parse(listen, &a, &e)) return err_set(err, "--listen %s: %s", listen, e.msg);
    if (a.tcp && !token_file)
        return err_set(err, "--listen %s: tcp needs --token-file (a shared secret authenticates every sender)", listen);
    return 0;
}

rcv_t *rcv_start(model_t *m, uint64_t version, const rcv_opts *o, rl_err *err) {
    rcv_t *r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->m = m;
    r->o = *o;
    if (!r->o.tool) r->o.tool = "rlpipe";
    r->lfd = r->stop_pipe[0] = r->stop_pipe[1] = -1;
    snprintf(r->name, sizeof r->name, "%s %s", r->o.tool, RLPIPE_VERSION);
    r->st.version = version;
    r->held = 1;
    if (rcv_check_listen(o->listen, o->token_file, err) || net_parse(o->listen, &r->addr, err)) goto fail;
    if (o->token_file) {
        if (push_read_token(o->token_file, &r->token, err)) goto fail;
        r->has_token = 1;
    }
    r->nt = model_ntensors(m);
    r->want = xmalloc(r->nt * sizeof *r->want);
    memset(r->want, 0, r->nt * sizeof *r->want);
    r->stored = xmalloc((r->nt ? r->nt : 1) * sizeof *r->stored);
    r->prec = model_precision_name(model_options(m));
    if (!r->prec) r->prec = dt_name(model_dtype(m));
    r->t_start = clock_now();
    for (size_t i = 0; i < r->nt; i++) {
        model_tensor mt = model_tensor_at(m, i);
        push_tensor *p = &r->want[i];
        snprintf(p->name, sizeof p->name, "%s", mt.name);
        p->dtype = mt.stored == DT_BF16 || mt.stored == DT_F16 ? mt.stored : DT_F32;
        p->ndim = mt.ndim;
        p->shape[0] = mt.shape[0];
        p->shape[1] = mt.shape[1];
        p->n = mt.n;
        r->stored[i] = (surv_round){.dtype = mt.stored, .group = mt.group};
    }
    if (o->base && !(r->base = hfw_open(o->base, err))) goto fail;
    r->chunk = xmalloc(r->chunk_cap = CHUNK_BYTES);
    // The standby copy now: its pages are touched once, here, not during the
    // first update, and memory that is short fails at start.
    r->standby = model_weights_new(m);
    if (pipe2(r->stop_pipe, O_CLOEXEC)) {
        err_set(err, "pipe: %s", strerror(errno));
        goto fail;
    }
    if ((r->lfd = net_listen(&r->addr, err)) < 0) goto fail;
    net_format(&r->addr, r->addr_text, sizeof r->addr_text);
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;   // rcv_wait's deadlines are clock_now()'s
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    int e = pthread_create(&r->thread, NULL, thread_main, r);
    if (e) {
        err_set(err, "cannot start the receiving thread: %s", strerror(e));
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        goto fail;
    }
    return r;
fail:
    if (r->lfd >= 0) {
        close(r->lfd);
        net_unlink(&r->addr);
    }
    if (r->stop_pipe[0] >= 0) close(r->stop_pipe[0]);
    if (r->stop_pipe[1] >= 0) close(r->stop_pipe[1]);
    sbuf_free(&r->token);
    model_weights_free(m, r->standby);
    hfw_close(r->base);
    free(r->want);
    free(r->stored);
    free(r->chunk);
    free(r);
    return NULL;
}

void rcv_remove_at_exit(const rcv_t *r) { net_unlink_at_exit(&r->addr); }

void rcv_stop(rcv_t *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (write(r->stop_pipe[1], "x", 1) < 0) { /* the pipe is ours and empty: cannot fail */ }
    pthread_join(r->thread, NULL);
    close(r->lfd);
    net_unlink(&r->addr);
    net_forget_at_exit(&r->addr);   // gone: a later socket there is not ours
    close(r->stop_pipe[0]);
    close(r->stop_pipe[1]);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    model_weights_free(r->m, r->standby);
    hfw_close(r->base);
    if (r->token.data) memset(r->token.data, 0, r->token.len);
    sbuf_free(&r->token);
    free(r->want);
    free(r->stored);
    free(r->chunk);
    free(r);
}
