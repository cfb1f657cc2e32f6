// fuzz_push.c — the push protocol's decoding (push.c, net.c), the peer's
// bytes arriving over a socketpair (a non-blocking write of at most what
// its buffer holds, then end of input). The first byte m chooses:
//   m % 4 = 0: messages (push_recv_msg) until the end or an error, the
//              tensor lists of each (push_get_tensors "tensors"), their
//              stored lists (push_get_stored), update figures
//              (push_get_update) and adapter maps (push_lora_get), with
//              the tensors checked as an adapter's for a small base
//              (push_lora_match);
//   m % 4 = 1: a receiver's greeting, answered by push_answer (with a
//              token when m & 4);
//   m % 4 = 2: a sender's answer to push_greet's greeting (a token required;
//              the nonce is random, so the answer is wrong unless m & 4 says
//              to send none: the peer closed);
//   m % 4 = 3: an address for net_parse (net_format's text must parse to the
//              same address), or with m & 4 a token file (push_read_token).
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "sync/net.h"
#include "sync/push.h"
#include "sync/push_lora.h"

#define TIMEOUT 1.0   // seconds; the bytes are all there, or the peer has closed

static const sbuf token = {(uint8_t *)"a token of thirty-two bytes, fix", 32, 33};

// A connected pair: [0] is ours, [1] the peer's, which sent p[0..n) and
// stopped writing.
static void peer_sent(int sv[2], const uint8_t *p, size_t n) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) abort();
    for (size_t done = 0; done < n;) {
        ssize_t w = send(sv[1], p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;   // the buffer is full: the rest is never sent
        done += (size_t)w;
    }
    if (shutdown(sv[1], SHUT_WR)) abort();
}

// The hello's stored, read for as many tensors as it has entries (one fewer
// is an error): what reads back writes as a string that reads the same.
static void stored(const rec_t *msg) {
    const char *p;
    size_t len;
    if (rec_get_str(msg, "stored", &p, &len) != REC_OK || len > 4096) return;
    size_t n = 1;
    for (size_t i = 0; i < len; i++) n += p[i] == ',';
    if (n > 2048) return;
    surv_round s[2048], s2[2048];
    rl_err err;
    if (push_get_stored(msg, "stored", s, n, &err)) return;   // malformed: err says why
    if (n > 1 && push_get_stored(msg, "stored", s2, n - 1, &err) == 0) {
        fprintf(stderr, "fuzz_push: stored with %zu entries read as %zu\n", n, n - 1);
        __builtin_trap();
    }
    rec_t *again = rec_new();
    push_set_stored(again, "stored", s, n);
    if (push_get_stored(again, "stored", s2, n, &err) || memcmp(s, s2, n * sizeof *s)) {
        fprintf(stderr, "fuzz_push: a stored list written by push_set_stored reads back otherwise\n");
        __builtin_trap();
    }
    rec_free(again);
}

// The "lora" map, read back as written, and the tensor list checked as an
// adapter's for a base of 2 layers (hidden 32, mlp 48, 2 heads of 16, 1 kv
// head): each accepted tensor lands inside its adapter matrix.
static void adapter(const rec_t *msg, const push_tensor *t, size_t n) {
    lora_config c, c2;
    rl_err err;
    if (push_lora_get(msg, &c, &err)) return;
    rec_t *again = rec_new();
    push_lora_set(again, &c);
    if (push_lora_get(again, &c2, &err) || memcmp(&c, &c2, sizeof c)) {
        fprintf(stderr, "fuzz_push: a lora map written by push_lora_set reads back otherwise\n");
        __builtin_trap();
    }
    rec_free(again);
    if (!t) return;
    model_config mc = {.hidden = 32, .inter = 48, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 16};
    push_lora_slot *slot = xmalloc((n ? n : 1) * sizeof *slot);
    uint64_t bytes;
    if (push_lora_match(&mc, &c, t, n, slot, &bytes, &err) == 0) {
        lora_adapter *a = lora_new(&c, &mc);
        for (size_t k = 0; k < n; k++) {
            float *d = push_lora_dest(a, slot[k]);
            if (!d) {
                fprintf(stderr, "fuzz_push: push_lora_match accepted %s, which the adapter lacks\n", t[k].name);
                __builtin_trap();
            }
            memset(d, 0, t[k].n * sizeof *d);   // out of bounds: ASan says so
        }
        lora_free(a);
    }
    free(slot);
}

static void messages(int fd) {
    rec_t *msg = rec_new();
    rl_err err;
    while (push_recv_msg(fd, msg, -1, TIMEOUT, &err) == 0) {
        push_tensor *t = NULL;
        size_t n = 0;
        uint64_t v;
        if (!push_get_tensors(msg, "tensors", &t, &n, &err)) {
            rec_t *again = rec_new();
            push_set_tensors(again, "tensors", t, n);   // what was read writes back as a list that reads the same
            push_tensor *t2;
            size_t n2;
            if (push_get_tensors(again, "tensors", &t2, &n2, &err) || n2 != n ||
                (n && memcmp(t, t2, n * sizeof *t))) {
                fprintf(stderr, "fuzz_push: a tensor list written by push_set_tensors reads back otherwise\n");
                __builtin_trap();
            }
            free(t2);
            rec_free(again);
        }
        adapter(msg, t, n);
        free(t);
        (void)rec_get_uint(msg, "version", &v);
        stored(msg);
        surv_figures f;
        if (push_get_update(msg, &f, &err) == 0 && !(f.moved >= 0 && f.moved <= 1 && f.changed >= 0 && f.changed <= 1)) {
            fprintf(stderr, "fuzz_push: push_get_update accepted fractions outside [0, 1]\n");
            __builtin_trap();
        }
    }
    rec_free(msg);
}

static void address(const uint8_t *p, size_t n) {
    char s[512], text[512];
    if (n >= sizeof s) return;
    memcpy(s, p, n);
    s[n] = 0;
    net_addr a, b;
    rl_err err;
    if (net_parse(s, &a, &err)) return;
    net_format(&a, text, sizeof text);
    if (net_parse(text, &b, &err) || a.tcp != b.tcp || strcmp(a.path, b.path) || strcmp(a.host, b.host) ||
        strcmp(a.port, b.port)) {
        fprintf(stderr, "fuzz_push: net_parse(\"%s\") formats as \"%s\", which parses otherwise\n", s, text);
        __builtin_trap();
    }
}

static void token_file(const uint8_t *p, size_t n) {
    static int fd = -1;
    if (fd < 0) {
        fd = fz_memfd("fuzz_push");
        if (fchmod(fd, 0600)) abort();
    }
    sbuf t = {0};
    rl_err err;
    (void)push_read_token(fz_fill(fd, p, n), &t, &err);
    sbuf_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t m = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (m % 4 == 3) {
        if (m & 4)
            token_file(p, n);
        else
            address(p, n);
        return 0;
    }
    int sv[2];
    peer_sent(sv, p, m % 4 == 2 && (m & 4) ? 0 : n);
    rl_err err;
    if (m % 4 == 0) messages(sv[0]);
    if (m % 4 == 1) (void)push_answer(sv[0], PUSH_WEIGHTS, m & 4 ? &token : NULL, TIMEOUT, &err);
    if (m % 4 == 2) (void)push_greet(sv[0], PUSH_WEIGHTS, &token, -1, TIMEOUT, &err);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
