#include "records/reader.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/instream.h"

enum { EXPECT_HEADER, IN_MEMBER, DONE, FAILED };

struct recr {
    ins_t *in;
    rec_limits lim;
    mp_index idx;
    int state;
    uint64_t records;         // data records delivered, whole file
    uint64_t member_records;  // data records in the current member
    uint64_t members;
    rl_err err;
};

static recr_t *recr_new(ins_t *in, const rec_limits *lim) {
    recr_t *r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->in = in;
    r->lim = lim ? *lim : rec_default_limits;
    r->state = EXPECT_HEADER;
    return r;
}

recr_t *recr_open(const char *path, const rec_limits *lim, rl_err *err) {
    ins_t *in = ins_open(path, err);
    return in ? recr_new(in, lim) : NULL;
}

recr_t *recr_fdopen(int fd, const char *name, const rec_limits *lim) { return recr_new(ins_fdopen(fd, name), lim); }

void recr_close(recr_t *r) {
    if (!r) return;
    ins_close(r->in);
    mps_index_free(&r->idx);
    free(r);
}

const char *recr_error(const recr_t *r) { return r->err.msg; }
const char *recr_name(const recr_t *r) { return ins_name(r->in); }
uint64_t recr_records(const recr_t *r) { return r->records; }
uint64_t recr_bytes_in(const recr_t *r) { return ins_offset(r->in); }
int recr_would_block(const recr_t *r) { return ins_would_block(r->in); }

// Records the error as "<what>: <file> record <N>" and enters the failed state.
static recr_event fail(recr_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static recr_event fail(recr_t *r, const char *fmt, ...) {
    char what[sizeof r->err.msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    err_set(&r->err, "%s: %s record %llu", what, ins_name(r->in), (unsigned long long)r->records);
    r->state = FAILED;
    return RECR_ERROR;
}

static const char *before_it(const recr_t *r) {
    static __thread char s[64];
    if (r->records == 0) return "no complete record before it";
    snprintf(s, sizeof s, "%llu complete record%s before it", (unsigned long long)r->records,
             r->records == 1 ? "" : "s");
    return s;
}

// Describes the first bytes of a file that is not a record stream.
static void describe_start(const uint8_t *p, size_t n, char *out, size_t outsz) {
    size_t k = n < 8 ? n : 8, text = 0;
    int len = snprintf(out, outsz, "it starts with bytes");
    for (size_t i = 0; i < k && len > 0 && (size_t)len < outsz; i++)
        len += snprintf(out + len, outsz - (size_t)len, " %02x", p[i]);
    for (size_t i = 0; i < k; i++) text += isprint(p[i]) || isspace(p[i]);
    if (len > 0 && (size_t)len < outsz && k && text == k)
        snprintf(out + len, outsz - (size_t)len, p[0] == '{'
                 ? " (\"{\": JSON lines? convert them with rl-cat --pack)" : " (text?)");
}

// Reads the next complete object into out (a map) or fails.
// Returns 1, 0 at a clean end of input between members, or RECR_ERROR (from fail).
static int next_object(recr_t *r, rec_t *out) {
    size_t want = 1;
    for (;;) {
        size_t avail, len;
        const uint8_t *p = ins_data(r->in, &avail);
        if (avail) {
            rl_err e;
            int rc = mps_scan(p, avail, &r->lim, &r->idx, &len, &e);
            if (rc == MPS_OK) {
                if (!r->idx.is_map) {
                    if (r->members == 0) {
                        char d[160];
                        describe_start(p, avail, d, sizeof d);
                        return fail(r, "not an rlpipe stream: the first object is %s, not a header map; %s",
                                    mps_a_type_name(p[0]), d);
                    }
                    return fail(r, "record is %s, not a map (at decoded byte %llu)", mps_a_type_name(p[0]),
                                (unsigned long long)(ins_decoded(r->in) - avail));
                }
                rec_load(out, p, len, &r->idx);
                ins_consume(r->in, len);
                return 1;
            }
            if (rc == MPS_BAD) {
                if (r->members == 0 && r->state == EXPECT_HEADER) {
                    char d[160];
                    describe_start(p, avail, d, sizeof d);
                    return fail(r, "not an rlpipe stream: %s; %s", e.msg, d);
                }
                return fail(r, "invalid record: %s (record starts at decoded byte %llu)", e.msg,
                            (unsigned long long)(ins_decoded(r->in) - avail));
            }
            want = len;  // MPS_NEED: a lower bound on the object's size
        }
        rl_err e;
        int m = ins_more(r->in, want, &e);
        if (m < 0) {
            if (!strncmp(e.msg, "truncated", 9)) return fail(r, "%s (%s)", e.msg, before_it(r));
            return fail(r, "%s", e.msg);
        }
        if (m > 0) continue;
        // End of input.
        if (avail)
            return fail(r, "truncated stream: %s cut mid-way (%s)",
                        r->state == EXPECT_HEADER ? "header" : "record", before_it(r));
        if (r->state == IN_MEMBER)
            return fail(r, "truncated stream: member %llu has no trailer (%s)",
                        (unsigned long long)r->members, before_it(r));
        if (r->members == 0) return fail(r, "empty input: no rlpipe header");
        return 0;
    }
}

recr_event recr_next(recr_t *r, rec_t *out) {
    if (r->state == FAILED) return RECR_ERROR;
    if (r->state == DONE) return RECR_END;
    int rc = next_object(r, out);
    if (rc < 0) return RECR_ERROR;
    if (rc == 0) { r->state = DONE; return RECR_END; }

    uint64_t v;
    if (r->state == EXPECT_HEADER) {
        rec_status s = rec_get_uint(out, "rlpipe", &v);
        if (s != REC_OK) {
            if (r->members == 0)
                return fail(r, "not an rlpipe stream: the first map has no \"rlpipe\" key (%s)",
                            s == REC_MISSING ? "missing" : "not an unsigned integer");
            return fail(r, "expected the header of member %llu after a trailer, found a map without \"rlpipe\"",
                        (unsigned long long)r->members + 1);
        }
        if (v != 1) return fail(r, "unsupported stream version %llu (this reader knows version 1)",
                                 (unsigned long long)v);
        const char *kind;
        size_t klen;
        if (rec_has(out, "kind") && rec_get_str(out, "kind", &kind, &klen) != REC_OK)
            return fail(r, "header of member %llu: \"kind\" is not a string", (unsigned long long)r->members + 1);
        r->members++;
        r->member_records = 0;
        r->state = IN_MEMBER;
        return RECR_HEADER;
    }
    if (rec_has(out, "rlpipe_end")) {
        rec_status s = rec_get_uint(out, "count", &v);
        if (s != REC_OK)
            return fail(r, "trailer of member %llu: \"count\" is %s", (unsigned long long)r->members,
                        s == REC_MISSING ? "missing" : "not an unsigned integer");
        if (v != r->member_records)
            return fail(r, "trailer count mismatch: the trailer of member %llu says %llu records, the member has %llu",
                        (unsigned long long)r->members, (unsigned long long)v,
                        (unsigned long long)r->member_records);
        const char *why;
        size_t len;
        if (rec_has(out, "partial") && rec_get_str(out, "partial", &why, &len) != REC_OK)
            return fail(r, "trailer of member %llu: \"partial\" is not a string", (unsigned long long)r->members);
        ins_member_end(r->in);
        r->state = EXPECT_HEADER;
        return RECR_TRAILER;
    }
    if (rec_has(out, "rlpipe"))
        return fail(r, "truncated stream: member %llu has no trailer, a new header follows its %llu records (%s)",
                    (unsigned long long)r->members, (unsigned long long)r->member_records, before_it(r));
    r->records++;
    r->member_records++;
    return RECR_RECORD;
}

const char *rec_partial(const rec_t *trailer, size_t *len) {
    const char *why;
    return rec_get_str(trailer, "partial", &why, len) == REC_OK ? why : NULL;
}

int recr_read(recr_t *r, rec_t *out) {
    for (;;) {
        recr_event ev = recr_next(r, out);
        if (ev == RECR_RECORD) return 1;
        if (ev == RECR_END) return 0;
        if (ev == RECR_ERROR) return -1;
    }
}
