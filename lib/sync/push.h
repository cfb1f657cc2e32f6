// push.h — the weight-push protocol (doc/design.md §5) both ends speak: rl-sync
// sends a version, a receiver (rl-sample --listen, rl-ratio --listen) takes
// it. One push per connection; all integers little-endian. A *message* is a
// u32 length L (1 <= L <= PUSH_MSG_MAX, checked before anything is allocated)
// followed by L bytes: one msgpack map with string keys.
//
//  1. receiver -> sender, PUSH_GREETING bytes: "RLPW", u32 protocol (1),
//     u32 flags (bit 0: authentication required), u32 0, 32-byte random nonce.
//  2. only when authentication is required, sender -> receiver, 32 bytes:
//     HMAC-SHA256(token, "rlpipe push 1" || nonce). The receiver compares in
//     constant time; on a mismatch it sends {ok: false, error} and closes.
//  3. receiver -> sender, message *hello*: {ok: true, receiver: "rl-sample
//     0.1.0", dtype: "bf16" (its precision), version: V (installed, or verified and about to
//     be), tensors: [[name, dtype, [d0, d1...]], ...]}: every tensor it needs,
//     each with the dtype it prefers to receive ("f32", or the receiver's
//     "bf16"/"f16" for the matrices it stores so), and stored: "bf16,f32,
//     int8/32,...": how it keeps each of them, in the list's order (f32, bf16,
//     f16, int8/G with one scale per G inputs, fp8 with one per row), so that
//     the sender can tell how much of the update survives (survival.h); and
//     lora: 1 when it takes adapter pushes (below; absent: it does not).
//  4. sender -> receiver, message *push*: {version: N, bytes: B, checksum:
//     "xxh3-64", tensors: [[name, dtype, [d0, ...]], ...]}: each tensor of the
//     hello exactly once, in any order, each as f32, bf16 or f16; and, when
//     the sender measured them from the hello's stored, the figures of
//     survival.h over the update from the version the receiver holds:
//     update_from, update_n (unsigned), update_moved, update_changed,
//     update_norm, update_along (floats; the last two absent when nothing
//     sampled moved).
//     An *adapter push* (sync/push_lora.h), to a receiver whose hello says
//     lora: 1, carries instead lora: {r, alpha, rslora, targets:
//     "q_proj,v_proj,..."} and, in tensors, the adapter's own: PEFT's
//     lora_A (r, in) and lora_B (out, r) of every decoder layer and target
//     of the receiver's base, each once, each as f32, bf16 or f16 (as they
//     lie in adapter_model.safetensors); no update figures. The receiver
//     merges them into the weights of its base directory as model_load_merged
//     does (f32, rounded once to its precision) after step 6, before the
//     swap.
//  5. receiver -> sender, message {ok: true}, or {ok: false, error} and close
//     (N not newer than V, a tensor missing, unknown or of another shape, B not
//     the sum of the tensors' sizes, an adapter whose tensors do not fit the
//     base, named, ...).
//  6. sender -> receiver: B bytes, the tensors' elements in the push's order,
//     row-major, then 8 bytes: XXH3-64 (seed 0) of those B bytes.
//  7. receiver -> sender, message *result*: {ok: true, version: N, bytes: B,
//     recv_us: first data byte to checksum verified, wait_us: verified (an
//     adapter: and merged) to installed, stall_us: how long the model's user
//     was blocked by the swap; an adapter push adds merge_us: the merge}
//     or {ok: false, error}.
// A push that breaks off, makes no progress for PUSH_TIMEOUT seconds or fails
// its checksum is dropped; the receiver keeps the weights it had. Keys a
// receiver or sender does not know are ignored: the protocol number stays 1,
// and an older sender never sees what lora: 1 offers; an older receiver's
// hello has no lora, and rl-sync tells the user to push a merged model.
//
// Steps 1-2 also open the other channel rlpipe speaks over sockets, record
// streams (rl-cat --to into rl-cat --merge, sync/recnet.h), with a magic and
// an HMAC label of its own, so that neither end can be taken for the other's:
//   PUSH_WEIGHTS  "RLPW", HMAC label "rlpipe push 1" (the steps above);
//   PUSH_RECORDS  "RLPR", HMAC label "rlpipe records 1".
#ifndef RLPIPE_PUSH_H
#define RLPIPE_PUSH_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "records/record.h"
#include "sync/survival.h"
#include "util.h"

#define PUSH_MAGIC "RLPW"
#define PUSH_RECORDS_MAGIC "RLPR"
#define PUSH_PROTOCOL 1u
#define PUSH_AUTH_REQUIRED 1u
#define PUSH_NONCE 32
#define PUSH_MAC 32
#define PUSH_GREETING (16 + PUSH_NONCE)
#define PUSH_MSG_MAX (16u << 20)
#define PUSH_TIMEOUT 30.0
// The sender's answer to the greeting (step 2) is awaited this long at most:
// a sender answers at once, and one peer that connects and stays silent
// (anyone who can reach a tcp port) may hold up the pushes behind it no longer.
#define PUSH_GREET_TIMEOUT 3.0
#define PUSH_MAX_TENSORS 65536
#define PUSH_TOKEN_MIN 16
#define PUSH_TOKEN_MAX 4096

// The shared secret of --token-file: the file's bytes with one trailing
// newline (\n or \r\n) dropped, PUSH_TOKEN_MIN..PUSH_TOKEN_MAX bytes. A file
// that others than its owner may read is refused (like ssh's keys): 0, or -1
// with err naming the file.
int push_read_token(const char *path, sbuf *token, rl_err *err);

// Messages (the framing above). push_recv_msg checks the length before
// reading the bytes and parses the map with rec_parse: 0; 1 when the peer
// closed before the length (a clean end); -1 with err.
int push_send_msg(int fd, const rec_t *msg, int stop_fd, double timeout, rl_err *err);
int push_recv_msg(int fd, rec_t *msg, int stop_fd, double timeout, rl_err *err);
// {ok: false, error: msg}, best effort (the peer may be gone).
void push_send_error(int fd, const char *msg);

typedef enum { PUSH_WEIGHTS, PUSH_RECORDS } push_channel;

// Steps 1-2, receiver side: sends the channel's greeting (flag set when token
// is not NULL) and checks the sender's answer, awaited PUSH_GREET_TIMEOUT
// seconds at most (timeout if shorter). 0; 1 when the peer closed before
// answering; -1 with err (a wrong answer: {ok: false} has been sent).
int push_greet(int fd, push_channel ch, const sbuf *token, int stop_fd, double timeout, rl_err *err);
// Steps 1-2, sender side: reads and checks the greeting (the other channel's
// is an error that says what answered), answers it. A receiver that requires
// authentication when token is NULL is an error that says so (--token-file).
// 0, or -1 with err.
int push_answer(int fd, push_channel ch, const sbuf *token, double timeout, rl_err *err);

// Tensor lists of the hello and push messages.
#define PUSH_MAX_DIMS 4
typedef struct {
    char name[128];
    rl_dtype dtype;           // f32, bf16 or f16 (int8 never travels)
    int ndim;
    int64_t shape[PUSH_MAX_DIMS];
    size_t n;                 // elements
} push_tensor;

// Sets key to [[name, dtype, [shape...]], ...].
void push_set_tensors(rec_t *msg, const char *key, const push_tensor *t, size_t n);
// The hello's stored: key = "f32,bf16,int8/32,..." for s[0..n).
void push_set_stored(rec_t *msg, const char *key, const surv_round *s, size_t n);
// Reads it back into s[0..n): 0; 1 when key is absent; -1 with err when it
// is not a string of n such entries (a group outside 1..65536).
int push_get_stored(const rec_t *msg, const char *key, surv_round *s, size_t n, rl_err *err);
// The figures of the push message (step 4): set; read back (0; 1 when the
// message has none; -1 with err when they are malformed).
void push_set_update(rec_t *msg, const surv_figures *f);
int push_get_update(const rec_t *msg, surv_figures *f, rl_err *err);

// The bytes of the data of t[0..n): each tensor's elements at its dtype.
uint64_t push_tensors_bytes(const push_tensor *t, size_t n);

// Reads key back (*t malloc'd, *n entries): 0, or -1 with err saying which
// entry is malformed (not such a triple, a dtype other than f32/bf16/f16, more
// than PUSH_MAX_DIMS dimensions, a negative dimension, a name too long, more
// than PUSH_MAX_TENSORS entries, an element count that overflows).
int push_get_tensors(const rec_t *msg, const char *key, push_tensor **t, size_t *n, rl_err *err);

#endif
