// test_merge.c — streams merged whole group by whole group (records/merge.h,
// rl-cat --merge): a group of the header's size goes out before the next
// record comes; rounds wait for an awaited source, which joins the first
// round; a source that breaks loses its incomplete group only; groups are
// renumbered in output order and say where they came from. Sources are pipes
// written by the test, so that what has and has not arrived is the test's to say.
// (Also built with AddressSanitizer + UndefinedBehaviorSanitizer.)
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "records/fields.h"
#include "records/merge.h"
#include "records/writer.h"

// ---- helpers ---------------------------------------------------------------

// A source written by the test: a pipe and a raw writer on its writing end.
typedef struct {
    int fd[2];
    recw_t *w;
    uint64_t next_id;
} src;

// Opens a source whose header says "sampling": {"group": group_size} (0: says nothing).
static void src_open(src *s, uint64_t group_size) {
    if (pipe(s->fd)) { perror("pipe"); exit(2); }
    rec_t *h = rec_new();
    rec_make_header(h, "rollouts", "test", 0, NULL, 1);
    if (group_size) {
        rec_t *sampling = rec_new();
        sbuf enc = {0};
        rec_set_uint(sampling, "group", group_size);
        rec_encode(sampling, &enc);
        rec_set_raw(h, "sampling", 8, enc.data, enc.len);
        sbuf_free(&enc);
        rec_free(sampling);
    }
    recw_opts o = recw_default_opts;
    o.raw = 1;
    rl_err e;
    if (!(s->w = recw_fdopen(s->fd[1], "test pipe", &o, h, &e))) { printf("recw: %s\n", e.msg); exit(2); }
    rec_free(h);
    s->next_id = 0;
}

// n records of group g, flushed into the pipe.
static void src_group(src *s, uint64_t g, int n) {
    rec_t *r = rec_new();
    rl_err e;
    for (int i = 0; i < n; i++) {
        rec_clear(r);
        rec_set_uint(r, "id", s->next_id++);
        rec_set_uint(r, "group", g);
        if (recw_write(s->w, r, &e)) { printf("recw: %s\n", e.msg); exit(2); }
    }
    if (recw_flush(s->w, &e)) { printf("recw: %s\n", e.msg); exit(2); }
    rec_free(r);
}

// Ends the stream: with its trailer (clean), or cut off (no trailer).
static void src_end(src *s, int clean) {
    rl_err e;
    if (clean && recw_close(s->w, &e)) { printf("recw: %s\n", e.msg); exit(2); }
    recw_free(s->w);
    close(s->fd[1]);
}

// A record that went out: its output group, source, source group and id.
typedef struct {
    uint64_t group, source, source_group, id;
} out_rec;

static out_rec out_of(const rec_t *r) {
    out_rec o = {0};
    rec_get_uint(r, "group", &o.group);
    rec_get_uint(r, "merge_source", &o.source);
    rec_get_uint(r, "source_group", &o.source_group);
    rec_get_uint(r, "id", &o.id);
    return o;
}

// The sources' readers run on threads; a test that waits for ever is a failure.
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL a merge test waited for more than 20 s\n";
    if (write(1, msg, sizeof msg - 1)) {}
    _exit(1);
}

// Waits until source i has been read to its end.
static void wait_ended(mrg_t *m, size_t i) {
    mrg_source_stats st;
    for (;;) {
        mrg_source(m, i, &st);
        if (st.ended) return;
        struct timespec ts = {.tv_nsec = 2000000};
        nanosleep(&ts, NULL);
    }
}

static void src_close_read(src *s) { close(s->fd[0]); }

// A whole source at once: groups 0, 1, ... of the given sizes (n of them), then its end.
static void src_whole(src *s, const int *sizes, int n, int clean) {
    src_open(s, 0);
    for (int g = 0; g < n; g++) src_group(s, (uint64_t)g, sizes[g]);
    src_end(s, clean);
}

// ---- cases -----------------------------------------------------------------

static void a_group_of_the_header_size_goes_out_before_the_next_record_comes(void) {
    mrg_opts o = {.round = 0, .lim = rec_default_limits};
    mrg_t *m = mrg_new(&o);
    src a;
    src_open(&a, 2);
    src_group(&a, 7, 2);   // complete by its size: nothing more is written until it is out
    mrg_add_fd(m, a.fd[0], "a", NULL, NULL);
    rec_t *r = rec_new();
    CHECK(mrg_next(m, r, -1) == MRG_HEADER, "no header first");
    uint64_t g;
    CHECK(fld_group_size(r, &g) == 1 && g == 2, "the header's group size: %llu", (unsigned long long)g);
    for (uint64_t i = 0; i < 2; i++) {
        CHECK(mrg_next(m, r, -1) == MRG_RECORD, "record %llu of the first group", (unsigned long long)i);
        out_rec x = out_of(r);
        CHECK(x.group == 0 && x.source == 0 && x.source_group == 7 && x.id == i, "record %llu: group %llu, "
              "source %llu, source_group %llu, id %llu", (unsigned long long)i, (unsigned long long)x.group,
              (unsigned long long)x.source, (unsigned long long)x.source_group, (unsigned long long)x.id);
    }
    CHECK(mrg_next(m, r, 0) == MRG_NONE, "something more before the writer wrote more");
    src_group(&a, 7, 1);   // the same "group" again: a group of its own, as output group 1
    src_end(&a, 1);
    CHECK(mrg_next(m, r, -1) == MRG_RECORD && out_of(r).group == 1 && out_of(r).source_group == 7, "second group");
    CHECK(mrg_next(m, r, -1) == MRG_END, "no end");
    mrg_free(m);
    src_close_read(&a);
    rec_free(r);
}

static void rounds_wait_for_an_awaited_source_which_joins_the_first_round(void) {
    mrg_opts o = {.round = 1, .lim = rec_default_limits};
    mrg_t *m = mrg_new(&o);
    src a, b;
    src_whole(&a, (int[]){2, 2}, 2, 1);
    mrg_add_fd(m, a.fd[0], "a", NULL, NULL);
    mrg_expect(m, 1);   // a connection still to come
    rec_t *r = rec_new();
    CHECK(mrg_next(m, r, -1) == MRG_HEADER, "no header first");
    for (int i = 0; i < 2; i++) CHECK(mrg_next(m, r, -1) == MRG_RECORD && out_of(r).source_group == 0, "a's group 0");
    wait_ended(m, 0);   // a's group 1 is complete and held: round 0 awaits b
    CHECK(mrg_next(m, r, 0) == MRG_NONE, "round 0 ended before the awaited source came");
    src_whole(&b, (int[]){3}, 1, 1);
    mrg_add_fd(m, b.fd[0], "b", NULL, NULL);
    uint64_t want[][3] = {{1, 1, 0}, {1, 1, 0}, {1, 1, 0}, {2, 0, 1}, {2, 0, 1}};   // group, source, source_group
    for (size_t i = 0; i < 5; i++) {
        CHECK(mrg_next(m, r, -1) == MRG_RECORD, "record %zu", i);
        out_rec x = out_of(r);
        CHECK(x.group == want[i][0] && x.source == want[i][1] && x.source_group == want[i][2],
              "record %zu: group %llu of source %llu (its group %llu)", i, (unsigned long long)x.group,
              (unsigned long long)x.source, (unsigned long long)x.source_group);
    }
    CHECK(mrg_next(m, r, -1) == MRG_END, "no end");
    sbuf line = {0};
    mrg_summary(m, &line);
    sbuf_putc(&line, 0);
    CHECK(strstr((char *)line.data, "7 records in, 7 out in 3 groups, 0 dropped in 0 incomplete groups, 2 rounds of 1; "
                                    "a 4 in, b 3 in; "), "%s", (char *)line.data);
    sbuf_free(&line);
    mrg_free(m);
    src_close_read(&a);
    src_close_read(&b);
    rec_free(r);
}

static void a_source_cut_mid_group_loses_that_group_only_and_is_named(void) {
    mrg_opts o = {.round = 0, .lim = rec_default_limits};
    mrg_t *m = mrg_new(&o);
    src a, b;
    src_whole(&a, (int[]){2, 2}, 2, 1);
    src_whole(&b, (int[]){2, 1}, 2, 0);   // no trailer: cut in its group 1
    mrg_add_fd(m, a.fd[0], "a", NULL, NULL);
    mrg_add_fd(m, b.fd[0], "b", NULL, NULL);
    rec_t *r = rec_new();
    int faults = 0, records = 0, header = 0;
    uint64_t from_b = 0;
    mrg_event ev;
    while ((ev = mrg_next(m, r, -1)) != MRG_END) {
        if (ev == MRG_FAULT) {
            faults++;
            CHECK(strstr(mrg_fault(m), "truncated stream") && strstr(mrg_fault(m), ": b record 3 (the 1 record of its "
                                                                                  "incomplete group dropped)"),
                  "%s", mrg_fault(m));
        }
        header += ev == MRG_HEADER;
        if (ev == MRG_RECORD) {
            records++;
            from_b += out_of(r).source == 1;
        }
    }
    CHECK(faults == 1 && header == 1 && records == 6 && from_b == 2, "%d faults, %d headers, %d records, %llu of b",
          faults, header, records, (unsigned long long)from_b);
    mrg_source_stats st;
    mrg_source(m, 1, &st);
    CHECK(st.failed && st.records == 3 && st.records_out == 2 && st.records_dropped == 1 && st.groups_dropped == 1,
          "b: failed %d, %llu in, %llu out, %llu dropped", st.failed, (unsigned long long)st.records,
          (unsigned long long)st.records_out, (unsigned long long)st.records_dropped);
    mrg_free(m);
    src_close_read(&a);
    src_close_read(&b);
    rec_free(r);
}

// What a source's end callback was told.
typedef struct {
    int calls, fd, error;
    uint64_t records;
} end_seen;

static void on_end(void *ctx, int fd, const char *error, uint64_t records) {
    end_seen *seen = ctx;
    seen->calls++;
    seen->fd = fd;
    seen->records = records;
    seen->error = error != NULL;
}

static void a_source_that_ends_calls_its_end_once_with_the_records_read(void) {
    mrg_opts o = {.round = 0, .lim = rec_default_limits};
    mrg_t *m = mrg_new(&o);
    src a;
    src_whole(&a, (int[]){4}, 1, 1);
    end_seen seen = {0};
    mrg_add_fd(m, a.fd[0], "a", on_end, &seen);
    rec_t *r = rec_new();
    while (mrg_next(m, r, -1) != MRG_END) {}
    mrg_free(m);   // after MRG_END every end has been called
    CHECK(seen.calls == 1 && seen.fd == a.fd[0] && seen.records == 4 && !seen.error, "%d calls, fd %d, %llu records",
          seen.calls, seen.fd, (unsigned long long)seen.records);
    src_close_read(&a);
    rec_free(r);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(20);
    RUN(a_group_of_the_header_size_goes_out_before_the_next_record_comes);
    RUN(rounds_wait_for_an_awaited_source_which_joins_the_first_round);
    RUN(a_source_cut_mid_group_loses_that_group_only_and_is_named);
    RUN(a_source_that_ends_calls_its_end_once_with_the_records_read);
    CHECK_DONE();
}
