// publish.c — the versions a training run publishes, and its metrics (publish.h).
#include "learn/publish.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/config.h"
#include "checkpoint/hfweights.h"
#include "clock.h"
#include "learn/ckpt_model.h"
#include "learn/zero.h"

// metrics: the descriptor of the metrics file, or -1. A line that does not
// fit (a full disk) is cut off again, so that the file holds whole lines only
// and a --resume appends after the last of them.
static int report(const pub_opts *o, int metrics, const lrn_metrics *m, rl_err *err) {
    if (metrics < 0 && o->quiet) return 0;
    sbuf line = {0};
    lrn_metrics_json(m, &line);
    sbuf_putc(&line, '\n');
    struct stat st;
    int rc = 0;
    if (metrics >= 0 && fstat(metrics, &st)) rc = err_set(err, "cannot stat: %s: %s", o->metrics, strerror(errno));
    else if (metrics >= 0 && fd_write_all(metrics, line.data, line.len)) {
        int e = errno;
        if (S_ISREG(st.st_mode) && ftruncate(metrics, st.st_size))
            rc = err_set(err, "write error: %s: %s (and the part of the line written stays: %s)", o->metrics,
                         strerror(e), strerror(errno));
        else rc = err_set(err, "write error: %s: %s", o->metrics, strerror(e));
    }
    sbuf_free(&line);
    if (rc || o->quiet) return rc;
    fprintf(stderr, "%s: step %llu: %llu seqs, %llu tokens, loss %.4g, grad %.3g, lr %.3g", o->tool,
            (unsigned long long)m->step, (unsigned long long)m->samples, (unsigned long long)m->tokens, m->loss,
            m->grad_norm, m->lr);
    if (m->has_reward) fprintf(stderr, ", reward %.3f, acc %.3f", m->reward_mean, m->accuracy);
    if (m->has_lag) fprintf(stderr, ", lag %.2f", m->lag_mean);
    fprintf(stderr, ", %.0f tok/s, %.2f s\n", m->tokens_per_s, m->seconds);
    return 0;
}

int pub_trim_metrics(publisher *p, size_t *dropped, rl_err *err) {
    *dropped = 0;
    struct stat st;
    if (p->metrics < 0) return 0;
    if (fstat(p->metrics, &st)) return err_set(err, "cannot stat: %s: %s", p->o->metrics, strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_size == 0) return 0;
    sbuf text = {0};
    sbuf_reserve(&text, (size_t)st.st_size);
    ssize_t got = pread(p->metrics, text.data, (size_t)st.st_size, 0);
    if (got != (ssize_t)st.st_size) {
        int e = got < 0 ? errno : EIO;
        sbuf_free(&text);
        return err_set(err, "cannot read: %s: %s", p->o->metrics, strerror(e));
    }
    const char *s = (const char *)text.data, *end = s + st.st_size;
    size_t cut = (size_t)st.st_size;
    for (const char *line = s; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *v = nl ? memmem(line, (size_t)(nl - line), "\"version\":", 10) : NULL;
        if (!nl || (v && strtoull(v + 10, NULL, 10) > p->version)) {
            cut = (size_t)(line - s);
            for (const char *q = line; q < end; q++) *dropped += *q == '\n' || q == end - 1;
            break;
        }
        line = nl + 1;
    }
    sbuf_free(&text);
    if (cut < (size_t)st.st_size && ftruncate(p->metrics, (off_t)cut))
        return err_set(err, "cannot cut the lines of the versions after %llu from %s: %s", (unsigned long long)p->version,
                       p->o->metrics, strerror(errno));
    return 0;
}

// The writer's thread, once version `version` is published: the step that
// made it is reported.
static int published(void *ctx, uint64_t version, rl_err *err) {
    publisher *p = ctx;
    if (!p->weights_only) p->complete = version;
    if (p->has_pending) {
        double now = clock_now();
        p->pending.save_s = now - p->step_end;
        p->pending.elapsed = now - p->t0;
        if (report(p->o, p->metrics, &p->pending, err)) return -1;
    }
    if (p->o->published) p->o->published(p->o->ctx, version, p->complete);
    return 0;
}

// The writer's thread, when a version written while the next step runs failed.
static void write_failed(void *ctx, const char *message) {
    const publisher *p = ctx;
    p->o->failed(p->o->ctx, message);
}

// Every exit waits for the version being written (one written in the
// background that fails has ended the process already).
static ckpt_writer *exit_writer;
static void wait_at_exit(void) {
    rl_err e;
    if (exit_writer) ckpt_writer_wait(exit_writer, &e);
}

void pub_init(publisher *p, const pub_opts *o, const lrn_opts *lrn, dist_t *d, double t0) {
    memset(p, 0, sizeof *p);
    p->o = o;
    p->lrn = lrn;
    p->t0 = t0;
    p->d = d;
    p->dp = dist_active(d);
    p->rank = dist_rank(d);
    p->metrics = -1;
    if (!p->rank) {
        p->background = !p->dp;
        p->writer = ckpt_writer_new(published, p->background ? write_failed : NULL, p);
        exit_writer = p->writer;
        atexit(wait_at_exit);
    }
}

// The model's training state: all of AdamW's moments, or this rank's part.
static int train_init(publisher *p, rl_err *err) {
    if (!p->dp) return model_train_init(p->m, err);
    return (p->parts = zero_train_init(p->m, p->d, err)) ? 0 : -1;
}

// The adapters p->m trains: those of directory adir (a PEFT adapter, or a
// version holding one; NULL: new ones of config o->lora, from o->seed), on
// the base from directory `base`, which adapter_config.json names.
static int attach_lora(publisher *p, const char *adir, const char *base, rl_err *err) {
    const pub_opts *o = p->o;
    lora_config c = o->lora ? *o->lora : (lora_config){0};
    lora_adapter *a = NULL;
    if (adir) {
        double dropout = 0;
        if (!(a = lora_read(adir, model_cfg(p->m), &dropout, err))) return -1;
        if (dropout != 0) {
            lora_free(a);
            return err_set(err, "%s/%s: lora_dropout %g: rlpipe trains adapters without dropout (set it to 0)", adir,
                           LORA_CONFIG, dropout);
        }
        c = a->c;
    }
    if (!realpath(base, c.base)) {
        lora_free(a);
        return err_set(err, "%s: %s", base, strerror(errno));
    }
    int rc = model_lora_attach(p->m, &c, a, o->seed, err);
    lora_free(a);
    return rc;
}

int pub_start(publisher *p, tokenizer **tok, rl_err *err) {
    const pub_opts *o = p->o;
    rl_err e;
    char dir[4096];
    uint64_t version = 0;
    model_opts mo = {.dtype = o->lora || o->adapter ? o->base_dtype : DT_F32, .device = o->device};
    int have = ckpt_resolve(o->out, dir, sizeof dir, &version, &e) == 0 && access(dir, F_OK) == 0 &&
               strcmp(dir, o->out) != 0;
    if (o->resume) {
        if (!have) return err_set(err, "--resume: %s holds no checkpoint (no file 'latest')", o->out);
        // A run killed while it removed old versions leaves their temporaries and the versions after them.
        if (!p->rank && ckpt_tidy(o->out, o->keep, o->keep_every, err)) return -1;
        if (lora_exists(dir)) {   // LoRA: the base its adapter names, the adapter, AdamW's state
            lora_config c;
            if (lora_config_read(dir, &c, NULL, err)) return -1;
            if (!c.base[0])
                return err_set(err, "%s/%s: no base_model_name_or_path: which base to resume on", dir, LORA_CONFIG);
            mo.dtype = o->base_dtype;
            if (!(p->m = model_load(c.base, &mo, err)) || attach_lora(p, dir, c.base, err)) return -1;
        } else if (!(p->m = model_load(dir, &mo, err))) {
            return -1;
        }
        if (train_init(p, err) || ckpt_read_optimizer(dir, p->m, err)) return -1;
        p->version = version;
        snprintf(p->from, sizeof p->from, "%s", dir);
        uint64_t records = 0;
        int found = ckpt_state_uint(dir, "records", &records, err);
        if (found > 0) found = ckpt_state_uint(dir, "step", &p->steps, err);
        if (found < 0) return -1;
        if (!found) return err_set(err, "%s/state.json: no \"records\" or \"step\" count: not written by rl-learn", dir);
        p->skip = o->no_skip ? 0 : records;
    } else {
        if (have && !p->rank)   // (the other ranks may see rank 0's first version already)
            return err_set(err, "%s already holds checkpoints (latest: %s): continue with --resume, or choose another "
                           "--out", o->out, dir);
        if (o->init) {
            if (ckpt_resolve(o->init, p->from, sizeof p->from, &p->version, err)) return -1;
            if (lora_exists(p->from) && !hfw_exists(p->from))
                return err_set(err, "%s holds a LoRA adapter, not a model: give its base with --init and the "
                               "adapter with --adapter %s", p->from, p->from);
            if (!(p->m = model_load(p->from, &mo, err))) return -1;
            if ((o->lora || o->adapter) && attach_lora(p, o->adapter, p->from, err)) return -1;
        } else {
            model_config c;
            if (cfg_load(o->config, &c, err) || !(p->m = model_random(&c, o->seed, (float)o->init_std, &mo, err)))
                return -1;
            // The tokenizer beside the config file, if there is one, goes with it.
            if (path_parent(o->config, p->from, sizeof p->from)) return err_set(err, "path too long: %s", o->config);
        }
        if (train_init(p, err)) return -1;
    }
    p->complete = p->version;
    char tpath[4200];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", p->from);
    if (p->from[0] && access(tpath, F_OK) != 0) p->from[0] = 0;   // a model directory without a tokenizer
    if (p->from[0] && !(*tok = tok_load(tpath, err))) return -1;
    return 0;
}

int pub_wait(publisher *p, rl_err *err) { return p->writer ? ckpt_writer_wait(p->writer, err) : 0; }

// The options of writing version p->version.
static ckpt_write_opts write_opts(const publisher *p, const char *state_json) {
    return (ckpt_write_opts){.root = p->o->out, .version = p->version, .state_json = state_json,
                             .copy_from = p->from[0] ? p->from : NULL, .keep = p->o->keep,
                             .keep_every = p->o->keep_every, .save = p->o->save, .weights_only = p->weights_only,
                             .lora = model_lora(p->m) != NULL, .merged = p->o->merged};
}

static void writing(publisher *p) {
    if (p->o->writing) p->o->writing(p->o->ctx);
}

int pub_save(publisher *p, learner_t *l, const lrn_metrics *m, rl_err *err) {
    int weights_only = m && p->version % p->o->state_every != 0;
    if (p->rank) {   // the other ranks send their parts of AdamW's moments to rank 0's checkpoint
        p->weights_only = weights_only;
        return weights_only ? 0 : zero_gather_moments(p->m, p->d, p->parts, NULL, NULL, err);
    }
    double end = clock_now();
    if (pub_wait(p, err)) return -1;   // (the writer reads pending and weights_only until then)
    p->weights_only = weights_only;
    p->has_pending = m != NULL;
    if (m) p->pending = *m;
    p->step_end = end;
    sbuf st = {0};
    ckpt_state_json(&st, p->lrn, p->version, p->steps, p->skip + (l ? lrn_consumed(l) : 0), p->o->seed);
    sbuf_putc(&st, 0);
    ckpt_write_opts w = write_opts(p, (const char *)st.data);
    writing(p);
    int rc = ckpt_writer_save(p->writer, &w, p->m, p->dp ? p->d : NULL, p->parts, err);
    sbuf_free(&st);
    if (rc || ((!p->background || !m) && pub_wait(p, err))) return -1;
    // The next version copies the tokenizer files from this one: the version
    // a --resume started from may be gone (--keep), this one stays.
    if (p->from[0] && (size_t)snprintf(p->from, sizeof p->from, "%s/v%06llu", p->o->out,
                                       (unsigned long long)p->version) >= sizeof p->from)
        return err_set(err, "path too long: %s", p->o->out);
    return 0;
}

int pub_complete_last(publisher *p, rl_err *err) {
    if (pub_wait(p, err)) return -1;   // (rank 0: the writer reads weights_only until then)
    if (!p->weights_only) return 0;
    p->weights_only = 0;
    if (p->rank) return zero_gather_moments(p->m, p->d, p->parts, NULL, NULL, err);
    writing(p);
    ckpt_write_opts w = write_opts(p, NULL);
    if (ckpt_writer_complete(p->writer, &w, p->m, p->dp ? p->d : NULL, p->parts, err)) return -1;
    p->complete = p->version;
    if (p->o->published) p->o->published(p->o->ctx, p->version, p->complete);
    return 0;
}

void pub_free(publisher *p) {
    exit_writer = NULL;
    ckpt_writer_free(p->writer);
    model_free(p->m);
    free(p->parts);
}
