// ckpt_writer.c — checkpoint versions written on a thread of their own (ckpt_writer.h).
#include "learn/ckpt_writer.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct ckpt_writer {
    ckpt_done_fn done;
    ckpt_failed_fn failed;
    void *ctx;
    ckpt_snap *snap;            // the version being written (reused for the next)
    ckpt_write_opts o;          // its options, pointing to the copies below
    char *root, *state_json, *copy_from;
    pthread_t thread;
    int running;                // a thread to join
    pthread_mutex_t lock;       // guards reading
    pthread_cond_t released;
    int reading;                // the thread reads the model's own parameters
    int has_error;
    rl_err error;               // the last write's error until a wait returns it
};

static void release_model(void *arg) {
    ckpt_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    w->reading = 0;
    pthread_cond_broadcast(&w->released);
    pthread_mutex_unlock(&w->lock);
}

void ckpt_writer_wait_model(ckpt_writer *w) {
    pthread_mutex_lock(&w->lock);
    while (w->reading) pthread_cond_wait(&w->released, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

ckpt_writer *ckpt_writer_new(ckpt_done_fn done, ckpt_failed_fn failed, void *ctx) {
    ckpt_writer *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->done = done, w->failed = failed, w->ctx = ctx;
    w->snap = ckpt_snap_new();
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->released, NULL);
    ckpt_snap_on_release(w->snap, release_model, w);
    return w;
}

static void *write_version(void *arg) {
    ckpt_writer *w = arg;
    rl_err e = {{0}};
    int rc = ckpt_snap_write(&w->o, w->snap, &e);
    release_model(w);   // (a write that failed before the weights)
    if (rc == 0 && w->done) rc = w->done(w->ctx, w->o.version, &e);
    if (rc && w->failed) w->failed(w->ctx, e.msg);
    if (rc) w->error = e, w->has_error = 1;
    return NULL;
}

int ckpt_writer_wait(ckpt_writer *w, rl_err *err) {
    if (w->running) {
        pthread_join(w->thread, NULL);
        w->running = 0;
    }
    if (!w->has_error) return 0;
    w->has_error = 0;
    return err_set(err, "%s", w->error.msg);
}

int ckpt_writer_busy(ckpt_writer *w) { return w->running; }

static char *copy_or_null(char *old, const char *s) {
    free(old);
    return s ? xstrdup(s) : NULL;
}

int ckpt_writer_save(ckpt_writer *w, const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts,
                     rl_err *err) {
    // What the model keeps in host memory is read in place (ckpt_snap_take's borrow).
    if (ckpt_writer_wait(w, err) || ckpt_snap_take(w->snap, m, d, parts, o->weights_only, 1, err)) return -1;
    w->o = *o;
    w->o.root = w->root = copy_or_null(w->root, o->root);
    w->o.state_json = w->state_json = copy_or_null(w->state_json, o->state_json);
    w->o.copy_from = w->copy_from = copy_or_null(w->copy_from, o->copy_from);
    w->reading = ckpt_snap_borrowed(w->snap);   // (no thread runs: no lock needed)
    // The thread starts with every signal blocked: they stay the caller's.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, write_version, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        w->reading = 0;
        return err_set(err, "cannot start the checkpoint writer's thread: %s", strerror(rc));
    }
    w->running = 1;
    return 0;
}

int ckpt_writer_complete(ckpt_writer *w, const ckpt_write_opts *o, const model_t *m, dist_t *d, const size_t *parts,
                         rl_err *err) {
    if (ckpt_writer_wait(w, err) || ckpt_snap_take(w->snap, m, d, parts, 0, 1, err)) return -1;
    return ckpt_snap_complete(o, w->snap, err);
}

void ckpt_writer_free(ckpt_writer *w) {
    if (!w) return;
    rl_err e;
    ckpt_writer_wait(w, &e);
    ckpt_snap_free(w->snap);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->released);
    free(w->root);
    free(w->state_json);
    free(w->copy_from);
    free(w);
}
