// merge.c — record streams merged whole group by whole group (merge.h). One
// reader thread per source completes groups into the source's queue; the
// caller's thread takes them out (mrg_next) in arrival order or in rounds.
// Everything shared is under one mutex: the queues, the counts, the faults.
#include "records/merge.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "records/fields.h"
#include "records/reader.h"

// Complete groups a source may hold before its reader waits for the writer
// (at least 4 rounds): memory stays bounded when one source runs ahead.
#define MRG_HOLD_MIN 64

typedef struct mgroup {
    rec_t **recs;
    size_t n, cap;
    int has_group;
    uint64_t id;                 // its "group" in the source
    uint64_t seq;                // completion order over all sources
    struct mgroup *next;
} mgroup;

typedef struct {
    struct mrg *m;
    size_t index;
    char *path;                  // NULL: a descriptor
    int fd;
    mrg_end_fn end;
    void *ctx;
    pthread_t thread;
    int started;
    // Under m->mu:
    mgroup *head, *tail;         // complete groups not yet out
    size_t queued;
    uint64_t taken;              // groups out in the current round
    mrg_source_stats st;
} msrc;

struct mrg {
    mrg_opts o;
    double t0;                   // clock_now() at mrg_new: the start limit counts from it
    size_t hold;
    pthread_mutex_t mu;
    pthread_cond_t ready;        // for the writer: a group completed, a source ended or failed
    pthread_cond_t space;        // for the readers: a group went out
    // Under mu:
    msrc **src;
    size_t n, cap;
    int expected;                // sources still to come (mrg_expect)
    rec_t *header;               // the first member header to arrive
    int have_header, header_out;
    uint64_t seq, rounds;
    int round_open;              // a group of the current round has gone out
    char **faults;               // messages not yet reported
    size_t nfaults, fault_head;
    // The writer's own:
    char fault[2200];
    mgroup *cur;                 // the group going out
    size_t cur_i;
    msrc *cur_src;
    uint64_t groups_out;
};

// ---- Groups ---------------------------------------------------------------------

static mgroup *group_new(int has_group, uint64_t id) {
    mgroup *g = xmalloc(sizeof *g);
    memset(g, 0, sizeof *g);
    g->has_group = has_group;
    g->id = id;
    return g;
}

static void group_add(mgroup *g, const rec_t *r) {
    GROW(g->recs, g->cap, g->n + 1, 8);
    g->recs[g->n] = rec_new();
    rec_copy(g->recs[g->n++], r);
}

static void group_free(mgroup *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) rec_free(g->recs[i]);
    free(g->recs);
    free(g);
}

// ---- The readers ----------------------------------------------------------------

// Queues *g, complete (nothing if NULL), then waits while the source holds
// more than its share.
static void complete(msrc *s, mgroup **g) {
    if (!*g) return;
    mrg_t *m = s->m;
    pthread_mutex_lock(&m->mu);
    (*g)->seq = m->seq++;
    if (s->tail) s->tail->next = *g;
    else s->head = *g;
    s->tail = *g;
    s->queued++;
    *g = NULL;
    pthread_cond_broadcast(&m->ready);
    while (s->queued >= m->hold) pthread_cond_wait(&m->space, &m->mu);
    pthread_mutex_unlock(&m->mu);
}

// A message for mrg_next to report: kind 'F' a source failed (MRG_FAULT),
// 'P' a member it read is partial (MRG_PARTIAL).
static void put_report(mrg_t *m, char kind, const char *msg) {
    m->faults = xrealloc(m->faults, (m->nfaults + 1) * sizeof *m->faults);
    size_t n = strlen(msg);
    char *s = xmalloc(n + 2);
    s[0] = kind;
    memcpy(s + 1, msg, n + 1);
    m->faults[m->nfaults++] = s;
    pthread_cond_broadcast(&m->ready);
}
static void put_fault(mrg_t *m, const char *msg) { put_report(m, 'F', msg); }

static void kind_of(const rec_t *h, const char **kind, size_t *n) {
    if (rec_get_str(h, "kind", kind, n) != REC_OK) *kind = "", *n = 0;
}

static void group_size_text(int has, uint64_t size, char *buf, size_t n) {
    if (has) snprintf(buf, n, "groups of %llu", (unsigned long long)size);
    else snprintf(buf, n, "no group size");
}

// The first header becomes the merge's; every later one must agree with it.
static int check_header(mrg_t *m, const rec_t *h, rl_err *err) {
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    if (!m->have_header) {
        rec_copy(m->header, h);
        m->have_header = 1;
    } else {
        const char *k1, *k2;
        size_t n1, n2;
        kind_of(h, &k1, &n1);
        kind_of(m->header, &k2, &n2);
        uint64_t g1, g2;
        int has1 = fld_group_size(h, &g1), has2 = fld_group_size(m->header, &g2);
        if (n1 != n2 || memcmp(k1, k2, n1)) {
            rc = err_set(err, "a member of kind \"%.*s\" cannot join the merge of kind \"%.*s\"", (int)n1, k1,
                         (int)n2, k2);
        } else if (has1 != has2 || g1 != g2) {
            char a[64], b[64];
            group_size_text(has1, g1, a, sizeof a);
            group_size_text(has2, g2, b, sizeof b);
            rc = err_set(err, "a member whose header says \"sampling\": %s cannot join the merge of %s", a, b);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

// A named pipe under a start limit (mrg_opts.start_timeout): opened without
// waiting for a writer, then polled until it has data, or its writer came
// and went, or the limit passes. Its reader, or NULL with err; *fd: the
// descriptor the caller closes after the reader.
static recr_t *open_fifo(mrg_t *m, msrc *s, int *fd, rl_err *err) {
    int f = open(s->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) {
        err_set(err, "cannot open: %s: %s", s->path, strerror(errno));
        return NULL;
    }
    for (;;) {
        double left = m->t0 + m->o.start_timeout - clock_now();
        if (left <= 0) {
            close(f);
            err_set(err, "%s: no writer wrote to this named pipe within %g s of the start (--start-timeout)",
                    s->path, m->o.start_timeout);
            return NULL;
        }
        struct pollfd p = {.fd = f, .events = POLLIN};
        int rc = poll(&p, 1, (int)ceil(left * 1000));
        if (rc > 0) break;
        if (rc < 0 && errno != EINTR) {
            err_set(err, "%s: poll: %s", s->path, strerror(errno));
            close(f);
            return NULL;
        }
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        err_set(err, "%s: fcntl: %s", s->path, strerror(errno));
        close(f);
        return NULL;
    }
    *fd = f;
    return recr_fdopen(f, s->st.name, &m->o.lim);
}

// A source's reader, or NULL with err; *fd >= 0: a descriptor to close after it.
static recr_t *open_source(mrg_t *m, msrc *s, int *fd, rl_err *err) {
    struct stat sb;
    *fd = -1;
    if (!s->path) return recr_fdopen(s->fd, s->st.name, &m->o.lim);
    if (m->o.start_timeout > 0 && strcmp(s->path, "-") && stat(s->path, &sb) == 0 && S_ISFIFO(sb.st_mode))
        return open_fifo(m, s, fd, err);
    return recr_open(s->path, &m->o.lim, err);
}

static void *reader_main(void *arg) {
    msrc *s = arg;
    mrg_t *m = s->m;
    rl_err e;
    char why[sizeof m->fault - 200] = "";
    int own_fd;
    recr_t *r = open_source(m, s, &own_fd, &e);
    if (!r) snprintf(why, sizeof why, "%s", e.msg);
    pthread_mutex_lock(&m->mu);
    s->st.opened = r != NULL;
    pthread_mutex_unlock(&m->mu);
    rec_t *rec = rec_new();
    mgroup *g = NULL;
    uint64_t size = 0;           // records per group, from the member's header (0: not said)
    while (r && !why[0]) {
        recr_event ev = recr_next(r, rec);
        if (ev == RECR_RECORD) {
            pthread_mutex_lock(&m->mu);
            s->st.records++;
            pthread_mutex_unlock(&m->mu);
            uint64_t id = 0;
            rec_status st = rec_get_uint(rec, "group", &id);
            if (st == REC_TYPE) {    // dropped with the incomplete group before it
                if (!g) g = group_new(0, 0);
                group_add(g, rec);
                snprintf(why, sizeof why, "\"group\" is not an unsigned integer: %s record %llu", s->st.name,
                         (unsigned long long)recr_records(r) - 1);
                break;
            }
            int has = st == REC_OK;
            if (g && !(has && g->has_group && g->id == id)) complete(s, &g);
            if (!g) g = group_new(has, id);
            group_add(g, rec);
            if (!has || (size && g->n >= size)) complete(s, &g);
        } else if (ev == RECR_HEADER) {
            complete(s, &g);
            pthread_mutex_lock(&m->mu);
            s->st.members++;
            pthread_mutex_unlock(&m->mu);
            if (check_header(m, rec, &e))
                snprintf(why, sizeof why, "%s: %s record %llu", e.msg, s->st.name,
                         (unsigned long long)recr_records(r));
            fld_group_size(rec, &size);
        } else if (ev == RECR_TRAILER) {
            complete(s, &g);
            size_t n;
            const char *partial = rec_partial(rec, &n);
            if (partial) {
                char msg[sizeof m->fault];
                snprintf(msg, sizeof msg, "%s member %llu: a partial member, its writer lost records (%.*s)",
                         s->st.name, (unsigned long long)s->st.members, (int)(n < 1500 ? n : 1500), partial);
                pthread_mutex_lock(&m->mu);
                put_report(m, 'P', msg);
                pthread_mutex_unlock(&m->mu);
            }
        } else if (ev == RECR_END) {
            complete(s, &g);
            break;
        } else {
            snprintf(why, sizeof why, "%s", recr_error(r));
        }
    }
    rec_free(rec);
    pthread_mutex_lock(&m->mu);
    uint64_t records = s->st.records;
    if (why[0]) {
        char msg[sizeof m->fault];
        size_t dropped = g ? g->n : 0;
        if (dropped)
            snprintf(msg, sizeof msg, "%s (the %zu record%s of its incomplete group dropped)", why, dropped,
                     dropped == 1 ? "" : "s");
        else
            snprintf(msg, sizeof msg, "%s", why);
        s->st.records_dropped += dropped;
        s->st.groups_dropped += dropped > 0;
        s->st.failed = 1;
        put_fault(m, msg);
    }
    if (r) s->st.bytes_in = recr_bytes_in(r);
    pthread_mutex_unlock(&m->mu);
    group_free(g);
    recr_close(r);
    if (own_fd >= 0) close(own_fd);
    // Before the source counts as ended: mrg_free, after MRG_END, finds every answer given.
    if (s->end) s->end(s->ctx, s->fd, why[0] ? why : NULL, records);
    pthread_mutex_lock(&m->mu);
    s->st.ended = 1;
    pthread_cond_broadcast(&m->ready);
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

// ---- Sources --------------------------------------------------------------------

mrg_t *mrg_new(const mrg_opts *o) {
    mrg_t *m = xmalloc(sizeof *m);
    memset(m, 0, sizeof *m);
    m->o = *o;
    m->t0 = clock_now();
    m->hold = o->round > MRG_HOLD_MIN / 4 ? 4 * o->round : MRG_HOLD_MIN;
    m->header = rec_new();
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;   // mrg_next's deadlines are clock_now()'s: monotonic
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->ready, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&m->space, NULL);
    return m;
}

static void add(mrg_t *m, msrc *s) {
    s->m = m;
    pthread_mutex_lock(&m->mu);
    s->index = m->n;
    GROW(m->src, m->cap, m->n + 1, 8);
    m->src[m->n++] = s;
    if (!s->path && m->expected > 0) m->expected--;
    s->started = 1;   // before the thread can end: mrg_free, after MRG_END, joins it
    pthread_mutex_unlock(&m->mu);
    int e = pthread_create(&s->thread, NULL, reader_main, s);
    if (!e) return;
    char msg[sizeof s->st.name + 100];
    snprintf(msg, sizeof msg, "cannot start a thread to read %s: %s", s->st.name, strerror(e));
    if (s->end) s->end(s->ctx, s->fd, msg, 0);
    pthread_mutex_lock(&m->mu);
    s->started = 0;
    s->st.failed = s->st.ended = 1;
    put_fault(m, msg);
    pthread_mutex_unlock(&m->mu);
}

void mrg_add_path(mrg_t *m, const char *path) {
    msrc *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->path = xstrdup(path);
    s->fd = -1;
    snprintf(s->st.name, sizeof s->st.name, "%s", strcmp(path, "-") ? path : "(stdin)");
    add(m, s);
}

void mrg_add_fd(mrg_t *m, int fd, const char *name, mrg_end_fn end, void *ctx) {
    msrc *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->end = end;
    s->ctx = ctx;
    snprintf(s->st.name, sizeof s->st.name, "%s", name);
    add(m, s);
}

void mrg_expect(mrg_t *m, int n) {
    pthread_mutex_lock(&m->mu);
    m->expected += n;
    if (m->expected < 0) m->expected = 0;
    pthread_cond_broadcast(&m->ready);
    pthread_mutex_unlock(&m->mu);
}

// ---- The writer -----------------------------------------------------------------

static int drained(const msrc *s) { return s->st.ended && !s->head; }

// The source whose group goes out next (under mu), or NULL: in arrival order,
// the group that completed first; in rounds, the same among the sources that
// have not given their N groups to this round. A round ends when every live
// source has given N, and none is awaited.
static msrc *pick(mrg_t *m) {
    uint64_t N = m->o.round;
    for (;;) {
        msrc *best = NULL;
        for (size_t i = 0; i < m->n; i++) {
            msrc *s = m->src[i];
            if (s->head && (!N || s->taken < N) && (!best || s->head->seq < best->head->seq)) best = s;
        }
        if (best || !N || m->expected > 0 || !m->round_open) return best;
        for (size_t i = 0; i < m->n; i++)
            if (m->src[i]->taken < N && !drained(m->src[i])) return NULL;
        for (size_t i = 0; i < m->n; i++) m->src[i]->taken = 0;   // the next round
        m->round_open = 0;
    }
}

static int all_done(const mrg_t *m) {
    if (m->expected > 0) return 0;
    for (size_t i = 0; i < m->n; i++)
        if (!drained(m->src[i])) return 0;
    return 1;
}

// The next record of the group going out, renumbered.
static mrg_event next_record(mrg_t *m, rec_t *out) {
    mgroup *g = m->cur;
    rec_copy(out, g->recs[m->cur_i]);
    if (g->has_group) rec_set_uint(out, "group", m->groups_out - 1);
    rec_set_uint(out, "merge_source", m->cur_src->index);
    if (g->has_group) rec_set_uint(out, "source_group", g->id);
    if (++m->cur_i == g->n) {
        group_free(g);
        m->cur = NULL;
        m->cur_i = 0;
    }
    return MRG_RECORD;
}

mrg_event mrg_next(mrg_t *m, rec_t *out, double wait) {
    if (m->cur) return next_record(m, out);
    int waited = 0;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        if (m->fault_head < m->nfaults) {
            char *f = m->faults[m->fault_head++];
            snprintf(m->fault, sizeof m->fault, "%s", f + 1);
            mrg_event ev = f[0] == 'P' ? MRG_PARTIAL : MRG_FAULT;
            free(f);
            pthread_mutex_unlock(&m->mu);
            return ev;
        }
        msrc *s = pick(m);
        int done = !s && all_done(m);
        if ((s || done) && m->have_header && !m->header_out) {
            m->header_out = 1;
            rec_copy(out, m->header);
            pthread_mutex_unlock(&m->mu);
            return MRG_HEADER;
        }
        if (s) {
            mgroup *g = s->head;
            s->head = g->next;
            if (!s->head) s->tail = NULL;
            s->queued--;
            s->taken++;
            s->st.groups_out++;
            s->st.records_out += g->n;
            if (!m->round_open) m->rounds++;
            m->round_open = 1;
            m->groups_out++;
            m->cur = g;
            m->cur_src = s;
            pthread_cond_broadcast(&m->space);
            pthread_mutex_unlock(&m->mu);
            return next_record(m, out);
        }
        if (done) {
            pthread_mutex_unlock(&m->mu);
            return MRG_END;
        }
        if (wait == 0 || (wait > 0 && waited)) {
            pthread_mutex_unlock(&m->mu);
            return MRG_NONE;
        }
        if (wait < 0) pthread_cond_wait(&m->ready, &m->mu);
        else {
            struct timespec ts = clock_timespec(clock_now() + wait);
            pthread_cond_timedwait(&m->ready, &m->mu, &ts);
            waited = 1;
        }
    }
}

const char *mrg_fault(const mrg_t *m) { return m->fault; }

size_t mrg_nsources(mrg_t *m) {
    pthread_mutex_lock(&m->mu);
    size_t n = m->n;
    pthread_mutex_unlock(&m->mu);
    return n;
}

int mrg_expected(mrg_t *m) {
    pthread_mutex_lock(&m->mu);
    int n = m->expected;
    pthread_mutex_unlock(&m->mu);
    return n;
}

void mrg_source(mrg_t *m, size_t i, mrg_source_stats *st) {
    pthread_mutex_lock(&m->mu);
    *st = m->src[i]->st;
    pthread_mutex_unlock(&m->mu);
}

void mrg_summary(mrg_t *m, sbuf *out) {
    uint64_t in = 0, rout = 0, gout = 0, dropped = 0, gdropped = 0, bytes = 0;
    sbuf per = {0};
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n; i++) {
        const mrg_source_stats *st = &m->src[i]->st;
        in += st->records, rout += st->records_out, gout += st->groups_out;
        dropped += st->records_dropped, gdropped += st->groups_dropped, bytes += st->bytes_in;
        sbuf_printf(&per, "%s%s %llu in", i ? ", " : "", st->name, (unsigned long long)st->records);
        if (st->failed) sbuf_printf(&per, " (%llu dropped, failed)", (unsigned long long)st->records_dropped);
    }
    sbuf_printf(out, "merge of %zu source%s: %llu records in, %llu out in %llu groups, %llu dropped in %llu incomplete group%s",
                m->n, m->n == 1 ? "" : "s", (unsigned long long)in, (unsigned long long)rout,
                (unsigned long long)gout, (unsigned long long)dropped, (unsigned long long)gdropped,
                gdropped == 1 ? "" : "s");
    if (m->o.round)
        sbuf_printf(out, ", %llu round%s of %llu", (unsigned long long)m->rounds, m->rounds == 1 ? "" : "s",
                    (unsigned long long)m->o.round);
    pthread_mutex_unlock(&m->mu);
    char b[32];
    sbuf_printf(out, "; %.*s; %s in", (int)per.len, per.len ? (const char *)per.data : "", fmt_bytes(bytes, b, sizeof b));
    sbuf_free(&per);
}

void mrg_free(mrg_t *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        msrc *s = m->src[i];
        if (s->started) pthread_join(s->thread, NULL);
        for (mgroup *g = s->head, *next; g; g = next) {
            next = g->next;
            group_free(g);
        }
        free(s->path);
        free(s);
    }
    group_free(m->cur);
    for (size_t i = m->fault_head; i < m->nfaults; i++) free(m->faults[i]);
    free(m->faults);
    free(m->src);
    rec_free(m->header);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->ready);
    pthread_cond_destroy(&m->space);
    free(m);
}
