// pusher.h — the sending end of a weight push (push.h): one version directory
// (config.json + model.safetensors, F32/BF16/F16) to one receiver, each tensor
// converted to the dtype the receiver asks for, streamed from the mapped file;
// or a version holding a LoRA adapter (push_lora.h), its tensors as they lie
// in adapter_model.safetensors, which the receiver merges into its base.
#ifndef RLPIPE_PUSHER_H
#define RLPIPE_PUSHER_H

#include <stddef.h>
#include <stdint.h>

#include "sync/net.h"
#include "sync/survival.h"
#include "util.h"

typedef struct {
    const sbuf *token;        // shared secret, or NULL (no authentication offered)
    double timeout;           // seconds without progress before giving up (<= 0: PUSH_TIMEOUT)
    int stop_fd;              // >= 0: readable = give up now ("stopped")
    // NULL, or the sample of the weights last pushed to this receiver: the
    // push then measures how much of the update from the version the receiver
    // holds survives the precision it keeps them at (survival.h; the hello's
    // stored), tells the receiver, and keeps the new version's sample; a
    // receiver found holding the version offered has its sample taken.
    surv_t *surv;
} push_opts;

typedef struct {
    int connected;            // somebody accepted the connection (even if it said nothing)
    char receiver[64];        // the receiver's name from its hello ("rl-sample 0.1.0")
    char dtype[16];           // its precision (rl-sample --dtype)
    uint64_t had;             // the version it held when it said hello
    uint64_t version, bytes;  // pushed (bytes: tensor data)
    int skipped;              // 1: it already held this version or a newer one; nothing was sent
    double seconds;           // connect to result
    double recv_us, wait_us, stall_us;   // as the receiver reported them
    int adapter;              // an adapter push (push_lora.h)
    double merge_us;          // its merge into the receiver's standby weights, as reported
    int has_update;           // the update was measured (push_opts.surv, with a sample of the version held)
    surv_figures update;
    // Set by the syncer (surv_watch_add over the receiver's versions): the
    // warning that its precision loses the updates is due, with the window's
    // mean along and the version it starts from.
    int lost;
    double lost_along;
    uint64_t lost_from;
} push_report;

enum { PUSH_OK = 0, PUSH_UNREACHABLE = 1 };

// Pushes dir's weights as `version` to the receiver at `to`. Returns PUSH_OK
// (rep filled; rep->skipped when the receiver already held `version` or a newer one);
// PUSH_UNREACHABLE with err when nobody listens at `to`; -1 with err when
// the checkpoint cannot be read, does not fit the receiver's model (a tensor
// it needs missing or of another shape), the receiver refused the push (an
// adapter that does not fit its base, a receiver that takes no adapters) or
// the transfer failed. An adapter push carries no figures of the update
// (survival.h): the sample of the weights last pushed is dropped, and the
// next full push is measured from the one after it.
int push_weights(const net_addr *to, const char *dir, uint64_t version, const push_opts *o, push_report *rep,
                 rl_err *err);

#endif
