// recsink.c — where rl-cat's records go: a record stream, JSON lines, a summary, checks (recsink.h).
#include "sync/recsink.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "records/fields.h"
#include "records/json.h"
#include "sync/recnet.h"

void recsink_init(recsink_t *k, const recsink_opts *o, int fd, const char *name) {
    memset(k, 0, sizeof *k);
    k->o = o;
    k->fd = fd;
    k->name = name;
    k->header = rec_new();
    stats_init(&k->st);
}

void recsink_free(recsink_t *k) {
    rec_free(k->header);
    stats_free(&k->st);
    sbuf_free(&k->line);
}

static int write_text(recsink_t *k, int force, rl_err *err) {
    if (!force && k->line.len < ((size_t)1 << 16)) return 0;
    size_t off = 0;
    while (off < k->line.len) {
        ssize_t n = write(k->fd, k->line.data + off, k->line.len - off);
        if (n < 0) return err_set(err, "write error: %s: %s", k->name, strerror(errno));
        off += (size_t)n;
    }
    k->bytes_out += k->line.len;
    k->line.len = 0;
    return 0;
}

int recsink_fail(const recsink_t *k, rl_err *err) {
    char why[1024];
    if (k->o->to && rnet_refusal(k->fd, 2.0, why, sizeof why)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        err_set(err, "%s (%s said: %s)", msg, k->name, why);
    }
    return -1;
}

int recsink_flush(recsink_t *k, rl_err *err) {
    if (k->w && recw_flush(k->w, err)) return recsink_fail(k, err);
    return k->o->kind == RECSINK_JSON ? write_text(k, 1, err) : 0;
}

int recsink_header(recsink_t *k, const rec_t *h, const char *where, rl_err *err) {
    const char *kind = "", *first = "";
    size_t kl = 0, fl = 0;
    rec_get_str(h, "kind", &kind, &kl);
    if (k->have_header) {
        rec_get_str(k->header, "kind", &first, &fl);
        if (kl != fl || memcmp(kind, first, kl))
            return err_set(err, "member of kind \"%.*s\" cannot join the output of kind \"%.*s\": %s", (int)kl, kind,
                           (int)fl, first, where);
        return 0;
    }
    rec_copy(k->header, h);
    k->have_header = 1;
    if (k->o->no_provenance) {
        rec_del(k->header, "argv");
        rec_del(k->header, "time");
    }
    rl_err e;
    if (k->o->kind == RECSINK_RECORDS) {
        recw_opts wo = recw_default_opts;
        wo.raw = k->o->raw;
        wo.level = k->o->level;
        wo.frame_records = k->o->frame;
        if (!(k->w = recw_fdopen(k->fd, k->name, &wo, k->header, err))) return recsink_fail(k, err);
    } else if (k->o->kind == RECSINK_JSON && k->o->header) {
        if (json_from_rec(k->header, &k->line, &e)) return err_set(err, "header: %s: %s", e.msg, where);
        sbuf_putc(&k->line, '\n');
    }
    return 0;
}

int recsink_generated_header(recsink_t *k, int argc, char **argv, const char *where, rl_err *err) {
    rec_t *h = rec_new();
    rec_make_header(h, k->o->member_kind ? k->o->member_kind : "rollouts", "rl-cat", argc, argv, k->o->no_provenance);
    int rc = recsink_header(k, h, where, err);
    rec_free(h);
    return rc;
}

int recsink_record(recsink_t *k, const rec_t *r, rl_err *err) {
    int rc = 0;
    switch (k->o->kind) {
    case RECSINK_RECORDS:
        rc = recw_write(k->w, r, err);
        break;
    case RECSINK_JSON: {
        size_t before = k->line.len;
        if ((rc = json_from_rec(r, &k->line, err))) k->line.len = before;
        else {
            sbuf_putc(&k->line, '\n');
            if (write_text(k, 0, err)) return -2;
        }
        break;
    }
    case RECSINK_STATS:
        rc = stats_add(&k->st, r, err);
        break;
    case RECSINK_CHECK:
        rc = fld_check(r, err);
        break;
    }
    if (!rc) k->count++;
    return rc ? -1 : 0;
}

void recsink_set_partial(recsink_t *k, const char *why) {
    if (!k->partial[0]) recw_partial_text(k->partial, sizeof k->partial, why);
}

int recsink_close(recsink_t *k, rl_err *err) {
    switch (k->o->kind) {
    case RECSINK_RECORDS: {
        if (k->partial[0]) recw_set_partial(k->w, k->partial);
        if (recw_close(k->w, err)) return recsink_fail(k, err);
        k->bytes_out = recw_bytes_written(k->w);
        recw_free(k->w);
        k->w = NULL;
        uint64_t got;   // --to: the merge has read every record, or says why not
        rl_err e;
        if (k->o->to && rnet_finish(k->fd, &got, &e)) return err_set(err, "%s: %s", k->name, e.msg);
        if (k->o->to && got != k->count)
            return err_set(err, "%s: the merge read %llu of the %llu records sent", k->name, (unsigned long long)got,
                           (unsigned long long)k->count);
        break;
    }
    case RECSINK_JSON:
        if (k->o->header && !k->partial[0])
            sbuf_printf(&k->line, "{\"rlpipe_end\":1,\"count\":%llu}\n", (unsigned long long)k->count);
        if (k->o->header && k->partial[0]) {
            rec_t *t = rec_new();
            rec_set_uint(t, "rlpipe_end", 1);
            rec_set_uint(t, "count", k->count);
            rec_set_cstr(t, "partial", k->partial);
            int rc = json_from_rec(t, &k->line, err);
            rec_free(t);
            if (rc) return -1;
            sbuf_putc(&k->line, '\n');
        }
        break;
    case RECSINK_STATS:
        if (k->o->json) stats_json(&k->st, &k->line);
        else stats_table(&k->st, &k->line);
        break;
    case RECSINK_CHECK:
        break;
    }
    if (k->o->kind != RECSINK_RECORDS && k->o->kind != RECSINK_CHECK) return write_text(k, 1, err);
    return 0;
}
