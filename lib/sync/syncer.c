// syncer.c — one thread per receiver pushing the newest version offered
// (syncer.h). Shared state is under one mutex; the threads wait on a
// condition variable (offers, stop) with a deadline (the next try or probe);
// pushes and probes run unlocked.
#include "sync/syncer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define SYNC_BACKOFF_MAX 60.0   // seconds: the longest wait before a failed push is tried again

typedef struct {
    struct syncer *s;
    const net_addr *to;
    char name[400];
    pthread_t thread;
    // Under s->mu:
    int reached;             // it has answered at least once
    int gone;                // reached before, and nobody listens there now
    int have_held;           // `held` is known (and still true unless gone)
    uint64_t held;           // the version it holds
    int pushing, waiting_said, ended;
    int have_last;
    uint64_t last;           // the version of its last exchange (pushed, held, or failed)
    // The thread's own, unlocked (times: clock_now() seconds):
    double next_try;         // a failed offer is tried again then
    double next_probe;       // watch: the next probe of a receiver reached
    double deadline;         // one-shot: the last try of an unreachable receiver (-1: before the first try)
    uint64_t tried_seq;      // the offer of the last unsuccessful try: a newer one is tried at once
    int fails;               // failed pushes in a row: the backoff's exponent
    surv_t *surv;            // the sample of the weights last pushed to it (survival.h)
    surv_watch watch;        // the along of the versions pushed to it
} peer;

struct syncer {
    sync_opts o;
    pthread_mutex_t mu, event_mu;
    pthread_cond_t cv;
    int stopping;
    int stop_pipe[2];        // written by sync_stop: pushes in flight give up
    int note_pipe[2];        // written on every change (sync_fd)
    uint64_t seq, version;   // the newest offer (seq 0: none yet)
    char dir[4096];
    sync_stats st;
    peer *p;
};

// One push to a peer (push_once): the offer pushed, push_weights' outcome, and
// the event it makes.
typedef struct {
    uint64_t seq, version;
    char dir[sizeof ((struct syncer *)0)->dir];
    int rc;
    push_report rep;
    rl_err err;
    sync_kind kind;
    int say;                 // 0: no event (nothing new to tell)
    char msg[sizeof ((rl_err *)0)->msg + sizeof ((peer *)0)->name + 100];
} attempt;

static void notify(struct syncer *s) {
    char c = 1;
    ssize_t w = write(s->note_pipe[1], &c, 1);   // full: a note is pending anyway
    (void)w;
}

static void emit(struct syncer *s, peer *p, sync_kind kind, uint64_t version, const push_report *rep,
                 const char *error) {
    if (!s->o.event) return;
    sync_event e = {.kind = kind, .to = p->name, .version = version, .rep = rep, .error = error};
    pthread_mutex_lock(&s->event_mu);
    s->o.event(s->o.ctx, &e);
    pthread_mutex_unlock(&s->event_mu);
}

// With s->mu held: waits for a signal of s->cv (an offer, sync_stop) or until
// `when` (clock_now() seconds; <= 0: no deadline).
static void wait_until(struct syncer *s, double when) {
    if (when <= 0) {
        pthread_cond_wait(&s->cv, &s->mu);
        return;
    }
    if (when <= clock_now()) return;
    struct timespec ts = clock_timespec(when);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

// Connect and close: 1 when nobody listens at p->to, else 0.
static int probe_gone(const peer *p) {
    rl_err e;
    int unreachable = 0, fd = net_connect(p->to, &unreachable, &e);
    if (fd >= 0) close(fd);
    return unreachable;
}

// ---- One receiver's thread ----------------------------------------------------

// With s->mu held: an offer exists that the receiver is not known to hold.
static int offer_newer(const peer *p) {
    const struct syncer *s = p->s;
    return s->seq && !(p->have_held && p->held >= s->version);
}

typedef enum { STEP_WAIT, STEP_PROBE, STEP_PUSH } step;

// With s->mu held: what is due now. A push, when the offer is newer than what
// the receiver holds and either its backoff is over or it is not the offer that
// failed; else, watching a receiver reached, a probe every poll interval.
static step next_step(const peer *p) {
    const struct syncer *s = p->s;
    double now = clock_now();
    if (offer_newer(p) && (now >= p->next_try || s->seq != p->tried_seq)) return STEP_PUSH;
    if (s->o.watch && p->reached && now >= p->next_probe) return STEP_PROBE;
    return STEP_WAIT;
}

// With s->mu held: sleeps until an offer, sync_stop, or the next probe or try.
static void wait_for_work(peer *p) {
    struct syncer *s = p->s;
    double when = p->reached && s->o.watch ? p->next_probe : 0;
    if (offer_newer(p) && (when <= 0 || p->next_try < when)) when = p->next_try;
    wait_until(s, when);
}

// With s->mu held (released during the connection and the event): is anybody
// still listening at a receiver reached before? A receiver back (restarted?)
// is asked again what it holds.
static void probe(peer *p) {
    struct syncer *s = p->s;
    pthread_mutex_unlock(&s->mu);
    int gone = probe_gone(p);
    pthread_mutex_lock(&s->mu);
    p->next_probe = clock_now() + s->o.poll;
    if (gone && !p->gone) {
        p->gone = 1;
        s->st.gone++;
        notify(s);
        pthread_mutex_unlock(&s->mu);
        emit(s, p, SYNC_GONE, 0, NULL, NULL);
        pthread_mutex_lock(&s->mu);
    } else if (!gone && p->gone) {
        p->gone = 0;
        p->have_held = 0;
        s->st.gone--;
        notify(s);
    }
}

// With s->mu held: somebody answered at p->to.
static void note_reached(peer *p) {
    struct syncer *s = p->s;
    if (p->gone) s->st.gone--;
    if (p->waiting_said) s->st.waiting--;
    p->reached = 1, p->gone = 0, p->waiting_said = 0;
}

// With s->mu held: the receiver holds a->version now, or held a->rep.had
// already. 1 when the thread is done (one-shot).
static int settle_pushed(peer *p, attempt *a, double now) {
    struct syncer *s = p->s;
    const push_report *rep = &a->rep;
    uint64_t version = a->version;
    a->kind = rep->skipped ? SYNC_HELD : SYNC_PUSHED;
    p->have_held = 1;
    p->held = rep->skipped ? rep->had : version;
    if (!rep->skipped && p->have_last && version > p->last + 1) s->st.passed_over += version - p->last - 1;
    p->have_last = 1;
    p->last = rep->skipped ? rep->had : version;
    if (rep->skipped) {
        s->st.held++;
    } else {
        s->st.pushes++;
        s->st.bytes += rep->bytes;
        s->st.seconds += rep->seconds;
    }
    p->fails = 0;
    p->next_probe = now + s->o.poll;
    return !s->o.watch;
}

// With s->mu held: nobody listens at p->to. Tried again every poll interval;
// one-shot, a failure once --retry has run out. Said once per change: waiting
// (never reached), gone (reached before). 1 when the thread is done.
static int settle_unreachable(peer *p, attempt *a, double now) {
    struct syncer *s = p->s;
    const sync_opts *o = &s->o;
    p->tried_seq = a->seq;
    p->next_try = now + o->poll;
    if (!o->watch && p->next_try > p->deadline) p->next_try = p->deadline;   // the last try when --retry runs out
    a->kind = SYNC_WAITING;
    if (!o->watch && now >= p->deadline) {
        char tried[64] = "", prefix[sizeof p->name + 32];
        if (o->retry > 0) snprintf(tried, sizeof tried, " (tried for %g s)", o->retry);
        snprintf(prefix, sizeof prefix, "cannot connect to %s: ", p->name);   // net_connect's words
        size_t skip = strncmp(a->err.msg, prefix, strlen(prefix)) ? 0 : strlen(prefix);
        snprintf(a->msg, sizeof a->msg, "nobody listens at %s%s: %s", p->name, tried, a->err.msg + skip);
        s->st.failures++;
        a->kind = SYNC_FAILED;
        return 1;
    }
    if (p->reached && !p->gone) {
        p->gone = 1;
        s->st.gone++;
        a->kind = SYNC_GONE;
    } else if (!p->reached && !p->waiting_said) {
        p->waiting_said = 1;
        s->st.waiting++;
        snprintf(a->msg, sizeof a->msg, "%s", a->err.msg);
    } else {
        a->say = 0;   // nothing new to say
    }
    return 0;
}

// With s->mu held: the push failed (the receiver refused it, the transfer broke,
// the checkpoint is unreadable): tried again after a doubling backoff, at most
// SYNC_BACKOFF_MAX; one-shot, not at all. 1 when the thread is done.
static int settle_failed(peer *p, attempt *a, double now) {
    struct syncer *s = p->s;
    snprintf(a->msg, sizeof a->msg, "%s", a->err.msg);
    s->st.failures++;
    if (p->reached) p->have_last = 1, p->last = a->version;
    p->tried_seq = a->seq;
    p->fails++;
    double wait = s->o.poll * pow(2, p->fails - 1);
    p->next_try = now + (wait < SYNC_BACKOFF_MAX ? wait : SYNC_BACKOFF_MAX);
    return !s->o.watch;
}

// With s->mu held: a push's outcome (a->rc, at `now`) in the receiver's state
// and the stats, and the event to make (a->kind, a->say, a->msg). 1 when the
// thread is done.
static int settle(peer *p, attempt *a, double now) {
    struct syncer *s = p->s;
    a->kind = SYNC_FAILED;
    a->say = 1;
    a->msg[0] = 0;
    if (a->rc == PUSH_OK || (a->rc < 0 && a->rep.connected)) note_reached(p);
    if (a->rc == PUSH_OK) return settle_pushed(p, a, now);
    if (a->rc == PUSH_UNREACHABLE) return settle_unreachable(p, a, now);
    if (a->seq < s->seq && access(a->dir, F_OK) != 0) {
        // Its directory was removed (rl-learn --keep) after a newer version was
        // offered: passed over for that one, which is tried at once.
        a->say = 0;
        return 0;
    }
    return settle_failed(p, a, now);
}

// With s->mu held (released during the push and the event): pushes the newest
// offer to the receiver and settles the outcome. 1 when the thread is done;
// a push cut off by sync_stop is dropped unsettled.
static int push_once(peer *p) {
    struct syncer *s = p->s;
    const sync_opts *o = &s->o;
    attempt a;
    a.seq = s->seq, a.version = s->version;
    snprintf(a.dir, sizeof a.dir, "%s", s->dir);
    p->pushing = 1;
    s->st.pushing++;
    notify(s);
    pthread_mutex_unlock(&s->mu);

    if (p->deadline < 0) p->deadline = clock_now() + o->retry;
    push_opts po = {.token = o->token, .timeout = o->timeout, .stop_fd = s->stop_pipe[0], .surv = p->surv};
    a.rc = push_weights(p->to, a.dir, a.version, &po, &a.rep, &a.err);
    if (a.rc == PUSH_OK && a.rep.has_update)
        a.rep.lost = surv_watch_add(&p->watch, &a.rep.update, &a.rep.lost_along, &a.rep.lost_from);

    pthread_mutex_lock(&s->mu);
    p->pushing = 0;
    s->st.pushing--;
    double now = clock_now();
    if (s->stopping) return 0;   // dropped: neither done nor failed
    int done = settle(p, &a, now);
    notify(s);
    pthread_mutex_unlock(&s->mu);
    if (a.say) emit(s, p, a.kind, a.kind == SYNC_HELD ? a.rep.had : a.version, &a.rep, a.msg);
    pthread_mutex_lock(&s->mu);
    return done;
}

// The thread of one receiver: until sync_stop (one-shot: until the first
// offer is settled), pushes each offer newer than what the receiver holds and,
// watching, probes a receiver reached. Holds s->mu except while it waits,
// pushes, probes or tells an event.
static void *peer_main(void *arg) {
    peer *p = arg;
    struct syncer *s = p->s;
    int done = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping && !done) {
        switch (next_step(p)) {
        case STEP_WAIT: wait_for_work(p); break;
        case STEP_PROBE: probe(p); break;
        case STEP_PUSH: done = push_once(p); break;
        }
    }
    p->ended = 1;
    s->st.ended++;
    notify(s);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// ---- The syncer -----------------------------------------------------------------

static void make_pipe(int fds[2]) {
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK)) {
        fprintf(stderr, "rlpipe: fatal: pipe: %s\n", strerror(errno));
        abort();
    }
}

sync_t *sync_start(const sync_opts *o) {
    struct syncer *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->event_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    make_pipe(s->stop_pipe);
    make_pipe(s->note_pipe);
    s->p = xmalloc((o->nto ? o->nto : 1) * sizeof *s->p);
    memset(s->p, 0, (o->nto ? o->nto : 1) * sizeof *s->p);
    for (size_t i = 0; i < o->nto; i++) {
        peer *p = &s->p[i];
        p->s = s;
        p->to = &o->to[i];
        p->deadline = -1;
        p->surv = surv_new();
        net_format(p->to, p->name, sizeof p->name);
        int rc = pthread_create(&p->thread, NULL, peer_main, p);
        if (rc) {
            fprintf(stderr, "rlpipe: fatal: pthread_create: %s\n", strerror(rc));
            abort();
        }
    }
    return s;
}

void sync_offer(sync_t *s, const char *dir, uint64_t version) {
    pthread_mutex_lock(&s->mu);
    if (!s->seq || version > s->version) {
        s->seq++;
        s->version = version;
        snprintf(s->dir, sizeof s->dir, "%s", dir);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

int sync_fd(const sync_t *s) { return s->note_pipe[0]; }

sync_stats sync_get_stats(sync_t *s) {
    char buf[256];
    while (read(s->note_pipe[0], buf, sizeof buf) > 0) {}
    pthread_mutex_lock(&s->mu);
    sync_stats st = s->st;
    pthread_mutex_unlock(&s->mu);
    return st;
}

int sync_all_hold(sync_t *s, uint64_t v) {
    pthread_mutex_lock(&s->mu);
    int all = 1;
    for (size_t i = 0; i < s->o.nto; i++) all &= s->p[i].have_held && s->p[i].held >= v;
    pthread_mutex_unlock(&s->mu);
    return all;
}

int sync_all_gone(sync_t *s) {
    pthread_mutex_lock(&s->mu);
    int reached = 0, alive = 0;
    for (size_t i = 0; i < s->o.nto; i++) {
        reached += s->p[i].reached;
        alive += s->p[i].reached && !s->p[i].gone;
    }
    pthread_mutex_unlock(&s->mu);
    return reached && !alive;
}

sync_stats sync_stop(sync_t *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    char c = 1;
    ssize_t w = write(s->stop_pipe[1], &c, 1);
    (void)w;
    for (size_t i = 0; i < s->o.nto; i++) {
        pthread_join(s->p[i].thread, NULL);
        surv_free(s->p[i].surv);
    }
    sync_stats st = s->st;
    for (int i = 0; i < 2; i++) close(s->stop_pipe[i]), close(s->note_pipe[i]);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->event_mu);
    free(s->p);
    free(s);
    return st;
}
