#include "records/writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "records/outstream.h"

const recw_opts recw_default_opts = {.raw = 0, .level = 3, .frame_records = 1024, .frame_bytes = (size_t)1 << 20};

struct recw {
    outs_t *out;
    recw_opts o;
    sbuf enc;                // one record's encoding
    uint64_t count;
    size_t frame_records, frame_bytes;   // in the current frame
    char partial[1024];      // the trailer's "partial" reason ("": the member is whole)
};

static int put(recw_t *w, const rec_t *rec, rl_err *err) {
    w->enc.len = 0;
    rec_encode(rec, &w->enc);
    w->frame_bytes += w->enc.len;
    return outs_write(w->out, w->enc.data, w->enc.len, err);
}

recw_t *recw_fdopen(int fd, const char *name, const recw_opts *o, const rec_t *header, rl_err *err) {
    uint64_t v;
    if (rec_get_uint(header, "rlpipe", &v) != REC_OK || v != 1) {
        err_set(err, "internal error: a member header must carry \"rlpipe\": 1");
        return NULL;
    }
    recw_t *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->o = o ? *o : recw_default_opts;
    if (!w->o.frame_records) w->o.frame_records = recw_default_opts.frame_records;
    if (!w->o.frame_bytes) w->o.frame_bytes = recw_default_opts.frame_bytes;
    w->out = outs_fdopen(fd, name, !w->o.raw, w->o.level);
    if (!w->out) {
        err_set(err, "out of memory creating a zstd context");
        free(w);
        return NULL;
    }
    if (put(w, header, err)) { recw_free(w); return NULL; }
    return w;
}

int recw_flush(recw_t *w, rl_err *err) {
    w->frame_records = w->frame_bytes = 0;
    return outs_end_frame(w->out, err);
}

int recw_write(recw_t *w, const rec_t *rec, rl_err *err) {
    if (rec_has(rec, "rlpipe") || rec_has(rec, "rlpipe_end"))
        return err_set(err, "a record may not carry the reserved key \"%s\"",
                       rec_has(rec, "rlpipe") ? "rlpipe" : "rlpipe_end");
    if (put(w, rec, err)) return -1;
    w->count++;
    if (++w->frame_records >= w->o.frame_records || w->frame_bytes >= w->o.frame_bytes)
        return recw_flush(w, err);
    return 0;
}

void recw_partial_text(char *dst, size_t size, const char *why) {
    // The trailer's string is UTF-8 as every other: cut before a character
    // that does not fit, or that is not UTF-8.
    size_t n = strlen(why);
    if (n >= size) n = size - 1;
    n = utf8_valid_len((const uint8_t *)why, n);
    memcpy(dst, why, n);
    dst[n] = 0;
    if (!n) snprintf(dst, size, "records lost");
}

void recw_set_partial(recw_t *w, const char *why) {
    if (!w->partial[0]) recw_partial_text(w->partial, sizeof w->partial, why);
}

int recw_close(recw_t *w, rl_err *err) {
    rec_t *t = rec_new();
    rec_set_uint(t, "rlpipe_end", 1);
    rec_set_uint(t, "count", w->count);
    if (w->partial[0]) rec_set_cstr(t, "partial", w->partial);
    int rc = put(w, t, err);
    rec_free(t);
    if (!rc) rc = recw_flush(w, err);
    return rc;
}

void recw_free(recw_t *w) {
    if (!w) return;
    outs_free(w->out);
    sbuf_free(&w->enc);
    free(w);
}

uint64_t recw_bytes_written(const recw_t *w) { return outs_bytes_written(w->out); }

void rec_make_header(rec_t *h, const char *kind, const char *tool, int argc, char **argv, int no_provenance) {
    rec_clear(h);
    rec_set_uint(h, "rlpipe", 1);
    rec_set_cstr(h, "kind", kind);
    char producer[128];
    snprintf(producer, sizeof producer, "%s %s", tool, RLPIPE_VERSION);
    rec_set_cstr(h, "producer", producer);
    if (no_provenance) return;
    rec_set_strs(h, "argv", argv, (size_t)argc);
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    rec_set_cstr(h, "time", when);
}
