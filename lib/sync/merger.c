// merger.c — rl-cat --merge's files and listened addresses in one merge (merger.h).
#include "sync/merger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sync/recnet.h"

struct merger {
    merger_opts o;
    mrg_t *m;
    rnet_t **listeners;
    size_t n, cap;
    int refused, failed;    // peers refused, listeners that failed (set on their threads)
};

static void on_connection(void *ctx, int fd, const char *name) {
    mrg_add_fd(((merger *)ctx)->m, fd, name, rnet_source_end, NULL);
}

static void on_refused(void *ctx, const char *msg) {
    merger *g = ctx;
    __atomic_add_fetch(&g->refused, 1, __ATOMIC_RELAXED);
    if (g->o.refused) g->o.refused(g->o.ctx, msg);
}

static void on_failed(void *ctx, int missing, const char *msg) {
    merger *g = ctx;
    __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
    if (g->o.failed) g->o.failed(g->o.ctx, missing, msg);
    mrg_expect(g->m, -missing);
}

merger *merger_new(const merger_opts *o) {
    merger *g = xmalloc(sizeof *g);
    memset(g, 0, sizeof *g);
    g->o = *o;
    g->m = mrg_new(&o->merge);
    return g;
}

const char *merger_listen(merger *g, net_addr *a, rl_err *err) {
    rnet_opts ro = {.token = g->o.token, .expect = g->o.senders, .start_timeout = g->o.merge.start_timeout,
                    .tool = g->o.tool, .source = on_connection, .refused = on_refused, .failed = on_failed,
                    .ctx = g};
    GROW(g->listeners, g->cap, g->n + 1, 4);
    mrg_expect(g->m, g->o.senders);
    rnet_t *l = rnet_listen(a, &ro, err);
    if (!l) return NULL;
    g->listeners[g->n++] = l;
    return rnet_address(l);
}

void merger_add_path(merger *g, const char *path) { mrg_add_path(g->m, path); }

mrg_t *merger_merge(merger *g) { return g->m; }

void merger_origin(merger *g, const rec_t *rec, mrg_source_stats *st) {
    uint64_t src = 0;
    snprintf(st->name, sizeof st->name, "?");
    if (rec_get_uint(rec, "merge_source", &src) == REC_OK && src < mrg_nsources(g->m)) mrg_source(g->m, src, st);
}

uint64_t merger_members(merger *g) {
    uint64_t members = 0;
    for (size_t i = 0; i < mrg_nsources(g->m); i++) {
        mrg_source_stats st;
        mrg_source(g->m, i, &st);
        members += st.members;
    }
    return members;
}

int merger_refused(merger *g) { return __atomic_load_n(&g->refused, __ATOMIC_RELAXED); }
int merger_failed(merger *g) { return __atomic_load_n(&g->failed, __ATOMIC_RELAXED); }

void merger_free(merger *g) {
    mrg_free(g->m);
    for (size_t i = 0; i < g->n; i++) rnet_join(g->listeners[i]);
    free(g->listeners);
    free(g);
}
