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

static void *peer_main(void *arg) {
    peer *p = arg;
    struct syncer *s = p->s;
    const sync_opts *o = &s->o;
    push_opts po = {.token = o->token, .timeout = o->timeout, .stop_fd = s->stop_pipe[0]};
    double next_try = 0, next_probe = 0, deadline = -1;
    uint64_t tried_seq = 0;   // the offer of the last unsuccessful try: a newer one is tried at once
    int fails = 0, done = 0;
    char dir[sizeof s->dir];
    pthread_mutex_lock(&s->mu);
    while (!s->stopping && !done) {
        double now = clock_now();
        int newer = s->seq && !(p->have_held && p->held >= s->version);
        int push = newer && (now >= next_try || s->seq != tried_seq);
        int probe = !push && o->watch && p->reached && now >= next_probe;
        if (!push && !probe) {
            double when = p->reached && o->watch ? next_probe : 0;
            if (newer && (when <= 0 || next_try < when)) when = next_try;
            wait_until(s, when);
            continue;
        }
        if (probe) {
            pthread_mutex_unlock(&s->mu);
            int gone = probe_gone(p);
            pthread_mutex_lock(&s->mu);
            next_probe = clock_now() + o->poll;
            if (gone && !p->gone) {
                p->gone = 1;
                s->st.gone++;
                notify(s);
                pthread_mutex_unlock(&s->mu);
                emit(s, p, SYNC_GONE, 0, NULL, NULL);
                pthread_mutex_lock(&s->mu);
            } else if (!gone && p->gone) {   // back (restarted?): what it holds is asked again
                p->gone = 0;
                p->have_held = 0;
                s->st.gone--;
                notify(s);
            }
            continue;
        }
        uint64_t seq = s->seq, version = s->version;
        snprintf(dir, sizeof dir, "%s", s->dir);
        p->pushing = 1;
        s->st.pushing++;
        notify(s);
        pthread_mutex_unlock(&s->mu);
        if (deadline < 0) deadline = clock_now() + o->retry;
        push_report rep;
        rl_err err;
        int rc = push_weights(p->to, dir, version, &po, &rep, &err);
        pthread_mutex_lock(&s->mu);
        p->pushing = 0;
        s->st.pushing--;
        now = clock_now();
        sync_kind kind = SYNC_FAILED;
        int say = 1;
        char msg[sizeof err.msg + sizeof p->name + 100];
        msg[0] = 0;
        if (s->stopping) break;   // dropped: neither done nor failed
        if (rc == PUSH_OK || (rc < 0 && rep.connected)) {   // somebody was there
            if (p->gone) s->st.gone--;
            if (p->waiting_said) s->st.waiting--;
            p->reached = 1, p->gone = 0, p->waiting_said = 0;
        }
        if (rc == PUSH_OK) {
            kind = rep.skipped ? SYNC_HELD : SYNC_PUSHED;
            p->have_held = 1;
            p->held = rep.skipped ? rep.had : version;
            if (!rep.skipped && p->have_last && version > p->last + 1) s->st.passed_over += version - p->last - 1;
            p->have_last = 1;
            p->last = rep.skipped ? rep.had : version;
            if (rep.skipped) {
                s->st.held++;
            } else {
                s->st.pushes++;
                s->st.bytes += rep.bytes;
                s->st.seconds += rep.seconds;
            }
            fails = 0;
            next_probe = now + o->poll;
            done = !o->watch;
        } else if (rc == PUSH_UNREACHABLE) {
            tried_seq = seq;
            next_try = now + o->poll;
            if (!o->watch && next_try > deadline) next_try = deadline;   // the last try when --retry runs out
            kind = SYNC_WAITING;
            if (!o->watch && now >= deadline) {
                char tried[64] = "", prefix[sizeof p->name + 32];
                if (o->retry > 0) snprintf(tried, sizeof tried, " (tried for %g s)", o->retry);
                snprintf(prefix, sizeof prefix, "cannot connect to %s: ", p->name);   // net_connect's words
                size_t skip = strncmp(err.msg, prefix, strlen(prefix)) ? 0 : strlen(prefix);
                snprintf(msg, sizeof msg, "nobody listens at %s%s: %s", p->name, tried, err.msg + skip);
                s->st.failures++;
                kind = SYNC_FAILED;
                done = 1;
            } else if (p->reached && !p->gone) {
                p->gone = 1;
                s->st.gone++;
                kind = SYNC_GONE;
            } else if (!p->reached && !p->waiting_said) {
                p->waiting_said = 1;
                s->st.waiting++;
                snprintf(msg, sizeof msg, "%s", err.msg);
            } else {
                say = 0;   // nothing new to say
            }
        } else if (seq < s->seq && access(dir, F_OK) != 0) {
            // Its directory was removed (rl-learn --keep) after a newer version was
            // offered: passed over for that one, which is tried at once.
            say = 0;
        } else {
            snprintf(msg, sizeof msg, "%s", err.msg);
            s->st.failures++;
            if (p->reached) p->have_last = 1, p->last = version;
            tried_seq = seq;
            fails++;
            double wait = o->poll * pow(2, fails - 1);
            next_try = now + (wait < SYNC_BACKOFF_MAX ? wait : SYNC_BACKOFF_MAX);
            done = !o->watch;
        }
        notify(s);
        pthread_mutex_unlock(&s->mu);
        if (say) emit(s, p, kind, kind == SYNC_HELD ? rep.had : version, &rep, msg);
        pthread_mutex_lock(&s->mu);
    }
    p->ended = 1;
    s->st.ended++;
    notify(s);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

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
    for (size_t i = 0; i < s->o.nto; i++) pthread_join(s->p[i].thread, NULL);
    sync_stats st = s->st;
    for (int i = 0; i < 2; i++) close(s->stop_pipe[i]), close(s->note_pipe[i]);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->event_mu);
    free(s->p);
    free(s);
    return st;
}
