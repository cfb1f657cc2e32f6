// Unit tests of the record layer: scanner limits, the record API, writer and
// reader round trips, and the truncation and corruption sweeps in-process
// (this file is also built with AddressSanitizer + UndefinedBehaviorSanitizer).
#include <math.h>
#include <msgpack.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "records/json.h"
#include "records/mparray.h"
#include "records/mpscan.h"
#include "records/reader.h"
#include "records/record.h"
#include "records/rollout.h"
#include "records/writer.h"

// ---- helpers ---------------------------------------------------------------

// A file descriptor reading exactly p[0..n) (an anonymous in-memory file).
static int mem_fd(const void *p, size_t n) {
    int fd = memfd_create("rlpipe-test", 0);
    if (fd < 0) { perror("memfd_create"); exit(2); }
    if (n && write(fd, p, n) != (ssize_t)n) { perror("write"); exit(2); }
    lseek(fd, 0, SEEK_SET);
    return fd;
}

static char fd_path[64];
static const char *path_of(int fd) {
    snprintf(fd_path, sizeof fd_path, "/proc/self/fd/%d", fd);
    return fd_path;
}

// Writes a member of n records {"id": i, "ids": [...], "logp": [...]} into out.
static void write_member(sbuf *out, int n, const recw_opts *o) {
    int fd = memfd_create("rlpipe-out", 0);
    rec_t *h = rec_new(), *r = rec_new();
    rec_make_header(h, "rollouts", "test", 0, NULL, 1);
    rl_err e;
    recw_t *w = recw_fdopen(fd, "mem", o, h, &e);
    for (int i = 0; i < n; i++) {
        uint32_t ids[5] = {(uint32_t)i, 1, 2, 70000, 3};
        float lp[5] = {-0.5f * (float)i, -1e-3f, -2.f, -0.25f, -1.f / 3};
        rec_clear(r);
        rec_set_uint(r, "id", (uint64_t)i);
        rec_set_u32s(r, "ids", ids, 5);
        rec_set_f32s(r, "logp", lp, 5);
        rec_set_cstr(r, "text", "caf\xc3\xa9");
        if (recw_write(w, r, &e)) { printf("write failed: %s\n", e.msg); exit(2); }
    }
    if (recw_close(w, &e)) { printf("close failed: %s\n", e.msg); exit(2); }
    recw_free(w);
    off_t len = lseek(fd, 0, SEEK_END);
    size_t old = out->len;
    sbuf_reserve(out, (size_t)len);
    if (pread(fd, out->data + old, (size_t)len, 0) != len) exit(2);
    out->len += (size_t)len;
    close(fd);
    rec_free(h);
    rec_free(r);
}

typedef struct {
    int records;        // data records delivered
    int ok_ids;         // delivered records with the expected id (0, 1, 2, ... across members)
    int status;         // 0 clean end, -1 error
    char err[1024];
} read_result;

// Reads p[0..n) to the end; record k is expected to have id k % per_member.
static read_result read_all(const void *p, size_t n, int per_member) {
    read_result res = {0};
    int fd = mem_fd(p, n);
    rl_err e;
    recr_t *r = recr_open(path_of(fd), NULL, &e);
    rec_t *rec = rec_new();
    int rc;
    while ((rc = recr_read(r, rec)) == 1) {
        uint64_t id;
        if (rec_get_uint(rec, "id", &id) == REC_OK && id == (uint64_t)(res.records % per_member)) res.ok_ids++;
        res.records++;
    }
    res.status = rc;
    if (rc < 0) snprintf(res.err, sizeof res.err, "%s", recr_error(r));
    recr_close(r);
    rec_free(rec);
    close(fd);
    return res;
}

// ---- the scanner -----------------------------------------------------------

static void scan_finds_the_end_of_each_msgpack_type(void) {
    static const struct { const char *bytes; size_t n; } objs[] = {
        {"\x05", 1}, {"\xe0", 1}, {"\xc0", 1}, {"\xc3", 1}, {"\xcc\xff", 2}, {"\xcd\x01\x00", 3},
        {"\xce\0\0\0\1", 5}, {"\xcf\0\0\0\0\0\0\0\1", 9}, {"\xd3\xff\xff\xff\xff\xff\xff\xff\xff", 9},
        {"\xca\x3f\x80\0\0", 5}, {"\xcb\x3f\xf0\0\0\0\0\0\0", 9}, {"\xa3" "abc", 4},
        {"\xd9\x03" "abc", 5}, {"\xc4\x02\xff\x00", 4}, {"\xd4\x01\x05", 3}, {"\xc7\x01\x07\x00", 4},
        {"\x92\x01\xa1x", 4}, {"\xdc\x00\x01\xc0", 4}, {"\x81\xa1k\x90", 4},
    };
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) {
        size_t len;
        rl_err e;
        int rc = mps_scan((const uint8_t *)objs[i].bytes, objs[i].n, &rec_default_limits, NULL, &len, &e);
        CHECK(rc == MPS_OK && len == objs[i].n, "object %zu: rc %d len %zu, expected %zu", i, rc, len, objs[i].n);
        // Every proper prefix needs more bytes, and says at least one more.
        for (size_t k = 0; k < objs[i].n; k++) {
            rc = mps_scan((const uint8_t *)objs[i].bytes, k, &rec_default_limits, NULL, &len, &e);
            CHECK(rc == MPS_NEED && len > k, "object %zu cut at %zu: rc %d need %zu", i, k, rc, len);
        }
    }
}

static void scan_rejects_an_array_declaring_2_to_the_32_elements_before_reading_them(void) {
    const uint8_t bytes[] = {0x81, 0xa3, 'i', 'd', 's', 0xdd, 0xff, 0xff, 0xff, 0xff};
    size_t len;
    rl_err e;
    int rc = mps_scan(bytes, sizeof bytes, &rec_default_limits, NULL, &len, &e);
    CHECK(rc == MPS_BAD, "rc %d", rc);
    CHECK(strstr(e.msg, "4294967295 elements") && strstr(e.msg, "limit"), "message: %s", e.msg);
}

static void scan_enforces_string_record_and_depth_limits(void) {
    rec_limits lim = rec_default_limits;
    lim.max_string = 3;
    size_t len;
    rl_err e;
    CHECK(mps_scan((const uint8_t *)"\xa4" "abcd", 5, &lim, NULL, &len, &e) == MPS_BAD &&
          strstr(e.msg, "string limit of 3 bytes"), "%s", e.msg);
    // A str32 declaring 4 GB fails on its header, before any byte of it arrives.
    CHECK(mps_scan((const uint8_t *)"\xdb\xff\xff\xff\xff", 5, &rec_default_limits, NULL, &len, &e) == MPS_BAD,
          "str32 of 4 GB accepted");
    lim = rec_default_limits;
    lim.max_record = 8;
    CHECK(mps_scan((const uint8_t *)"\xa9" "123456789", 10, &lim, NULL, &len, &e) == MPS_BAD &&
          strstr(e.msg, "record limit of 8 bytes"), "%s", e.msg);
    uint8_t deep[40];
    memset(deep, 0x91, sizeof deep);   // [[[[...
    lim = rec_default_limits;
    CHECK(mps_scan(deep, sizeof deep, &lim, NULL, &len, &e) == MPS_BAD && strstr(e.msg, "nesting deeper than 32"),
          "%s", e.msg);
}

static void scan_rejects_invalid_utf8_non_string_keys_and_duplicate_keys(void) {
    size_t len;
    rl_err e;
    mp_index idx = {0};
    CHECK(mps_scan((const uint8_t *)"\xa2\xc3\x28", 3, &rec_default_limits, NULL, &len, &e) == MPS_BAD &&
          strstr(e.msg, "UTF-8"), "%s", e.msg);
    CHECK(mps_scan((const uint8_t *)"\xa3\xed\xa0\x80", 4, &rec_default_limits, NULL, &len, &e) == MPS_BAD,
          "a UTF-8 encoded surrogate was accepted");
    CHECK(mps_scan((const uint8_t *)"\x81\x01\x02", 3, &rec_default_limits, &idx, &len, &e) == MPS_BAD &&
          strstr(e.msg, "not a string"), "%s", e.msg);
    CHECK(mps_scan((const uint8_t *)"\x82\xa1k\x01\xa1k\x02", 7, &rec_default_limits, &idx, &len, &e) == MPS_BAD &&
          strstr(e.msg, "duplicate key \"k\""), "%s", e.msg);
    CHECK(mps_scan((const uint8_t *)"\xc1", 1, &rec_default_limits, NULL, &len, &e) == MPS_BAD, "0xc1 accepted");
    mps_index_free(&idx);
}

// ---- the record API --------------------------------------------------------

static void record_typed_fields_read_back_exactly(void) {
    rec_t *r = rec_new();
    uint32_t ids[3] = {0, 65535, 4000000000u};
    float lp[3] = {-0.1f, -INFINITY, 1e-38f};
    uint8_t mask[3] = {1, 0, 1};
    rec_set_uint(r, "id", UINT64_MAX);
    rec_set_int(r, "neg", INT64_MIN);
    rec_set_f64(r, "reward", 0.1);
    rec_set_cstr(r, "text", "na\xc3\xafve");
    rec_set_u32s(r, "ids", ids, 3);
    rec_set_f32s(r, "logp", lp, 3);
    rec_set_u8s(r, "mask", mask, 3);

    // Through the encoding and back, as a reader would see it.
    sbuf b = {0};
    rec_encode(r, &b);
    rec_t *q = rec_new();
    rl_err e;
    CHECK(rec_parse(q, b.data, b.len, &rec_default_limits, &e) == 0, "%s", e.msg);
    uint64_t u;
    int64_t i;
    double d;
    const char *s;
    size_t n;
    u32_vec vi = {0};
    f32_vec vf = {0};
    u8_vec vm = {0};
    CHECK(rec_get_uint(q, "id", &u) == REC_OK && u == UINT64_MAX, "id");
    CHECK(rec_get_int(q, "neg", &i) == REC_OK && i == INT64_MIN, "neg");
    CHECK(rec_get_f64(q, "reward", &d) == REC_OK && d == 0.1, "reward %.17g", d);
    CHECK(rec_get_str(q, "text", &s, &n) == REC_OK && n == 6 && !memcmp(s, "na\xc3\xafve", 6), "text");
    CHECK(rec_get_u32s(q, "ids", &vi) == REC_OK && vi.n == 3 && !memcmp(vi.v, ids, sizeof ids), "ids");
    CHECK(rec_get_f32s(q, "logp", &vf) == REC_OK && vf.n == 3 && !memcmp(vf.v, lp, sizeof lp), "logp");
    CHECK(rec_get_u8s(q, "mask", &vm) == REC_OK && vm.n == 3 && !memcmp(vm.v, mask, 3), "mask");
    CHECK(rec_get_len(q, "ids", &n) == REC_OK && n == 3, "len");
    // Asking for the wrong type, or a missing key, says so.
    CHECK(rec_get_uint(q, "text", &u) == REC_TYPE, "str read as uint");
    CHECK(rec_get_uint(q, "neg", &u) == REC_TYPE, "negative read as uint");
    CHECK(rec_get_u32s(q, "logp", &vi) == REC_TYPE, "floats read as uints");
    CHECK(rec_get_f64(q, "nope", &d) == REC_MISSING, "missing key");
    // Integers are numbers too.
    CHECK(rec_get_f64(q, "id", &d) == REC_OK && d == 18446744073709551616.0, "uint as f64");
    u32_vec_free(&vi);
    f32_vec_free(&vf);
    u8_vec_free(&vm);
    sbuf_free(&b);
    rec_free(q);
    rec_free(r);
}

static void record_unknown_fields_pass_through_byte_for_byte(void) {
    // A map written by another program: a non-minimal uint (cd 00 05), a
    // nested map, ext and bin values; then one field is replaced.
    const uint8_t in[] = {0x84, 0xa1, 'a', 0xcd, 0x00, 0x05, 0xa1, 'n', 0x81, 0xa1, 'x', 0x90,
                          0xa1, 'e', 0xd4, 0x01, 0x07, 0xa1, 'b', 0xc4, 0x01, 0xff};
    rec_t *r = rec_new();
    rl_err e;
    CHECK(rec_parse(r, in, sizeof in, &rec_default_limits, &e) == 0, "%s", e.msg);
    sbuf out = {0};
    rec_encode(r, &out);
    CHECK(out.len == sizeof in && !memcmp(out.data, in, sizeof in), "untouched record re-encoded differently");
    rec_set_uint(r, "n", 7);   // replace in place: order kept, others untouched
    out.len = 0;
    rec_encode(r, &out);
    const uint8_t want[] = {0x84, 0xa1, 'a', 0xcd, 0x00, 0x05, 0xa1, 'n', 0x07,
                            0xa1, 'e', 0xd4, 0x01, 0x07, 0xa1, 'b', 0xc4, 0x01, 0xff};
    CHECK(out.len == sizeof want && !memcmp(out.data, want, sizeof want), "replaced field: %zu bytes", out.len);
    CHECK(rec_del(r, "a") == 1 && rec_nfields(r) == 3 && !rec_has(r, "a"), "delete");
    sbuf_free(&out);
    rec_free(r);
}

// ---- writer and reader -----------------------------------------------------

static void writer_and_reader_round_trip_compressed_raw_and_multi_member(void) {
    recw_opts z = recw_default_opts, raw = recw_default_opts;
    z.frame_records = 3;
    raw.raw = 1;
    sbuf s = {0};
    write_member(&s, 10, &z);     // zstd, 4 frames
    write_member(&s, 10, &raw);   // raw msgpack after zstd
    write_member(&s, 10, &z);     // zstd after raw
    read_result res = read_all(s.data, s.len, 10);
    CHECK(res.status == 0, "error: %s", res.err);
    CHECK(res.records == 30 && res.ok_ids == 30, "%d records, %d in order", res.records, res.ok_ids);
    sbuf_free(&s);
}

static void reader_rejects_a_trailer_whose_count_disagrees(void) {
    recw_opts raw = recw_default_opts;
    raw.raw = 1;
    sbuf s = {0};
    write_member(&s, 3, &raw);
    // The raw trailer ends with "count": 3 as the fixint 0x03; make it 4.
    CHECK(s.data[s.len - 1] == 0x03, "unexpected trailer encoding");
    s.data[s.len - 1] = 0x04;
    read_result res = read_all(s.data, s.len, 3);
    CHECK(res.status < 0 && strstr(res.err, "trailer count mismatch") && res.records == 3, "%s", res.err);
    sbuf_free(&s);
}

// Cuts a stream at every byte offset: every cut is reported, never read as a
// clean end, and the records before the cut come out in order. A cut exactly
// between two members leaves a valid, shorter stream: that one reads cleanly.
static void sweep(const sbuf *s, size_t member_end, int per_member, int *undetected, int *out_of_order,
                  int *regress) {
    int prev = 0;
    for (size_t k = 0; k < s->len; k++) {
        read_result res = read_all(s->data, k, per_member);
        if (res.ok_ids != res.records) (*out_of_order)++;
        if (res.records < prev) (*regress)++;
        prev = res.records;
        if (k == member_end) {
            if (res.status != 0 || res.records != per_member) (*undetected)++;
        } else if (res.status == 0 || (k > 0 && !strstr(res.err, "truncated stream"))) {
            (*undetected)++;
        }
    }
}

static void truncation_at_every_byte_offset_is_detected(void) {
    recw_opts z = recw_default_opts, raw = recw_default_opts;
    z.frame_records = 2;
    raw.raw = 1;
    sbuf zs = {0}, rs = {0};
    write_member(&zs, 12, &z);
    size_t first_member = zs.len;
    write_member(&zs, 12, &z);
    write_member(&rs, 12, &raw);
    int undetected = 0, disorder = 0, regress = 0;
    sweep(&zs, first_member, 12, &undetected, &disorder, &regress);
    sweep(&rs, (size_t)-1, 12, &undetected, &disorder, &regress);
    CHECK(undetected == 0 && disorder == 0 && regress == 0,
          "%d cuts undetected, %d with wrong records, %d delivering fewer than a shorter cut (of %zu)",
          undetected, disorder, regress, zs.len + rs.len);
    // The complete records of a frame cut mid-way are still delivered: a cut
    // one byte before the end loses only the trailer.
    read_result res = read_all(zs.data, zs.len - 1, 12);
    CHECK(res.records == 24, "cut before the last byte delivered %d of 24", res.records);
    sbuf_free(&zs);
    sbuf_free(&rs);
}

static void corrupt_bytes_never_reach_the_reader_as_records(void) {
    recw_opts z = recw_default_opts;
    z.frame_records = 4;
    sbuf s = {0};
    write_member(&s, 12, &z);
    int undetected = 0, bad_records = 0;
    for (size_t k = 0; k < s.len; k++) {
        for (int bit = 0; bit < 8; bit += 7) {
            s.data[k] ^= (uint8_t)(1u << bit);
            read_result res = read_all(s.data, s.len, 12);
            s.data[k] ^= (uint8_t)(1u << bit);
            if (res.ok_ids != res.records) bad_records++;
            // A flip that leaves the content intact (e.g. a larger window
            // size in a frame header) may read cleanly; the content must then
            // be all twelve records, unchanged.
            if (res.status == 0 && res.ok_ids != 12) undetected++;
        }
    }
    CHECK(undetected == 0 && bad_records == 0, "%d flips undetected, %d delivered altered records (of %zu)",
          undetected, bad_records, 2 * s.len);
    sbuf_free(&s);
}

static void reader_names_file_record_and_reason(void) {
    const char text[] = "hello, world\n";
    read_result res = read_all(text, sizeof text - 1, 1);
    CHECK(res.status < 0 && strstr(res.err, "not an rlpipe stream") && strstr(res.err, "/proc/self/fd/") &&
          strstr(res.err, "record 0"), "%s", res.err);
    res = read_all("", 0, 1);
    CHECK(res.status < 0 && strstr(res.err, "empty input"), "%s", res.err);
}

// msgpack-c unpacks an empty str with a NULL pointer (found by fuzz_jsonl).
static void json_writes_an_empty_key_and_an_empty_string_value(void) {
    rec_t *r = rec_new();
    rec_set_str(r, "", "", 0);
    rec_set_str(r, "k", "", 0);
    sbuf out = {0};
    rl_err err;
    int rc = json_from_rec(r, &out, &err);
    rec_free(r);
    sbuf_putc(&out, 0);
    int same = !strcmp((const char *)out.data, "{\"\":\"\",\"k\":\"\"}");
    CHECK(rc == 0 && same, "rc %d, %s", rc, rc ? err.msg : (const char *)out.data);
    sbuf_free(&out);
}

// ... and rec_get_str gives it as "", never NULL: callers copy from it (a
// prompt's empty "answer", found by fuzz_jsonl).
static void an_empty_string_reads_back_as_an_empty_string_not_null(void) {
    rec_t *r = rec_new();
    rec_set_str(r, "answer", "", 0);
    sbuf enc = {0};
    rec_encode(r, &enc);
    rec_free(r);
    rec_t *q = rec_new();
    rl_err err;
    CHECK(rec_parse(q, enc.data, enc.len, &rec_default_limits, &err) == 0, "%s", err.msg);
    const char *s = NULL;
    size_t n = 1;
    CHECK(rec_get_str(q, "answer", &s, &n) == REC_OK && s && !*s && n == 0, "got %p, %zu bytes", (const void *)s, n);
    rec_free(q);
    sbuf_free(&enc);
}

// ---- the rollout view ------------------------------------------------------

// A rollout record with every field of the view, 3 completion tokens.
static rec_t *good_rollout(void) {
    rec_t *r = rec_new();
    uint32_t prompt[2] = {1, 9}, ids[3] = {4, 5, 2}, ver[3] = {7, 7, 8};
    float lp[3] = {-0.5f, -1.25f, -2.f}, lpl[3] = {-0.25f, -INFINITY, -3.f}, w[3] = {1.f, 0.f, 2.f};
    float lpr[3] = {-0.75f, -1.5f, -4.f};
    uint8_t mask[3] = {1, 0, 1};
    rec_set_uint(r, "id", 11);
    rec_set_uint(r, "group", 3);
    rec_set_cstr(r, "prompt", "1+1=");
    rec_set_cstr(r, "answer", "2");
    rec_set_u32s(r, "prompt_ids", prompt, 2);
    rec_set_u32s(r, "ids", ids, 3);
    rec_set_cstr(r, "text", "2");
    rec_set_f32s(r, "logp", lp, 3);
    rec_set_u32s(r, "ver", ver, 3);
    rec_set_cstr(r, "finish", "stop");
    rec_set_f64(r, "reward", 1.0);
    rec_set_f64(r, "temperature", 0.7);
    rec_set_f64(r, "top_p", 0.9);
    rec_set_int(r, "top_k", 40);
    rec_set_f32s(r, "logp_learner", lpl, 3);
    rec_set_uint(r, "ver_learner", 9);
    rec_set_f32s(r, "logp_ref", lpr, 3);
    rec_set_f32s(r, "w", w, 3);
    rec_set_u8s(r, "mask", mask, 3);
    rec_set_f64(r, "adv", -0.5);
    rec_set_uint(r, "drawn", 4);
    return r;
}

static void rollout_view_of_a_good_record_fills_every_field(void) {
    rec_t *r = good_rollout();
    rollout_view v = {0};
    rl_err e = {{0}};
    int rc = rollout_read(&v, r, &e);
    CHECK(rc == 0, "refused: %s", e.msg);
    unsigned all = RO_ID | RO_GROUP | RO_PROMPT | RO_ANSWER | RO_PROMPT_IDS | RO_IDS | RO_TEXT | RO_LOGP | RO_VER |
                   RO_FINISH | RO_REWARD | RO_TEMPERATURE | RO_TOP_P | RO_TOP_K | RO_LOGP_LEARNER | RO_VER_LEARNER |
                   RO_W | RO_MASK | RO_ADV | RO_LOGP_REF | RO_DRAWN;
    CHECK(v.has == all, "has %#x, expected %#x", v.has, all);
    CHECK(v.id == 11 && v.group == 3 && v.ver_learner == 9 && v.drawn == 4, "id %llu group %llu ver_learner %llu drawn %llu",
          (unsigned long long)v.id, (unsigned long long)v.group, (unsigned long long)v.ver_learner,
          (unsigned long long)v.drawn);
    CHECK(v.prompt_len == 4 && !memcmp(v.prompt, "1+1=", 4) && v.answer_len == 1 && *v.answer == '2', "strings");
    CHECK(v.finish_len == 4 && !memcmp(v.finish, "stop", 4), "finish");
    CHECK(v.n == 3 && v.ids.n == 3 && v.ids.v[2] == 2 && v.prompt_ids.n == 2 && v.prompt_ids.v[1] == 9, "ids");
    CHECK(v.logp.v[1] == -1.25f && isinf(v.logp_learner.v[1]) && v.w.v[2] == 2.f && v.mask.v[1] == 0 &&
              v.ver.v[2] == 8 && v.logp_ref.n == 3 && v.logp_ref.v[2] == -4.f, "per-token arrays exactly as written");
    CHECK(v.reward == 1.0 && v.adv == -0.5 && v.temperature == 0.7 && v.top_p == 0.9 && v.top_k == 40, "numbers");
    rollout_view_free(&v);
    rec_free(r);
}

static void rollout_view_of_a_record_without_sampling_fields_has_their_defaults(void) {
    rec_t *r = rec_new();
    rec_set_cstr(r, "prompt", "hi");
    rollout_view v = {0};
    rl_err e = {{0}};
    CHECK(rollout_read(&v, r, &e) == 0, "refused: %s", e.msg);
    CHECK(v.has == RO_PROMPT && v.n == 0, "has %#x n %zu", v.has, v.n);
    CHECK(v.temperature == 1 && v.top_p == 1 && v.top_k == 0, "temperature %g top_p %g top_k %lld", v.temperature,
          v.top_p, (long long)v.top_k);
    CHECK(*v.answer == 0 && v.messages == NULL, "absent strings are empty");
    rollout_view_free(&v);
    rec_free(r);
}

// The message rollout_read gives for good_rollout() changed by set.
static void refusal(void (*set)(rec_t *), char *msg, size_t n) {
    rec_t *r = good_rollout();
    set(r);
    rollout_view v = {0};
    rl_err e = {{0}};
    int rc = rollout_read(&v, r, &e);
    snprintf(msg, n, "%s", rc ? e.msg : "(accepted)");
    rollout_view_free(&v);
    rec_free(r);
}

// A change of good_rollout() and the message rollout_read refuses it with.
typedef struct {
    void (*set)(rec_t *);
    const char *msg;
} refusal_case;

static void expect_refusals(const refusal_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char msg[2048];
        refusal(cases[i].set, msg, sizeof msg);
        CHECK(!strcmp(msg, cases[i].msg), "case %zu: '%s', expected '%s'", i, msg, cases[i].msg);
    }
}

static void ids_a_string(rec_t *r) { rec_set_cstr(r, "ids", "4 5 2"); }
static void logp_of_strings(rec_t *r) {
    char *s[3] = {"a", "b", "c"};
    rec_set_strs(r, "logp", s, 3);
}
static void group_negative(rec_t *r) { rec_set_int(r, "group", -1); }
static void reward_a_string(rec_t *r) { rec_set_cstr(r, "reward", "1"); }
static void top_k_a_float(rec_t *r) { rec_set_f64(r, "top_k", 1.5); }
static void drawn_a_float(rec_t *r) { rec_set_f64(r, "drawn", 2.5); }
static void drawn_zero(rec_t *r) { rec_set_uint(r, "drawn", 0); }
static void mask_with_a_2(rec_t *r) {
    uint8_t m[3] = {1, 2, 0};
    rec_set_u8s(r, "mask", m, 3);
}

static void rollout_view_refuses_a_field_of_the_wrong_type_naming_field_and_type(void) {
    static const refusal_case cases[] = {
        {ids_a_string, "field \"ids\" is not an array of unsigned 32-bit integers"},
        {logp_of_strings, "field \"logp\" is not an array of numbers (float32)"},
        {group_negative, "field \"group\" is not an unsigned integer"},
        {reward_a_string, "field \"reward\" is not a number"},
        {top_k_a_float, "field \"top_k\" is not an integer"},
        {mask_with_a_2, "field \"mask\" is not an array of 0/1"},
        {drawn_a_float, "field \"drawn\" is not an unsigned integer"},
    };
    expect_refusals(cases, sizeof cases / sizeof *cases);
}

static void logp_short(rec_t *r) {
    float lp[2] = {-1, -2};
    rec_set_f32s(r, "logp", lp, 2);
}
static void mask_long(rec_t *r) {
    uint8_t m[4] = {1, 1, 1, 1};
    rec_set_u8s(r, "mask", m, 4);
}
static void logp_ref_long(rec_t *r) {
    float lp[4] = {-1, -2, -3, -4};
    rec_set_f32s(r, "logp_ref", lp, 4);
}
static void no_ids_and_w_short(rec_t *r) {
    float w[2] = {1, 1};
    rec_del(r, "ids");
    rec_set_f32s(r, "w", w, 2);
}

static void rollout_view_refuses_per_token_arrays_whose_lengths_disagree(void) {
    static const refusal_case cases[] = {
        {logp_short, "field \"logp\" has 2 elements but \"ids\" has 3 (one per completion token)"},
        {mask_long, "field \"mask\" has 4 elements but \"ids\" has 3 (one per completion token)"},
        {logp_ref_long, "field \"logp_ref\" has 4 elements but \"ids\" has 3 (one per completion token)"},
        // without ids the first per-token array present sets the length
        {no_ids_and_w_short, "field \"w\" has 2 elements but \"logp\" has 3 (one per completion token)"},
    };
    expect_refusals(cases, sizeof cases / sizeof *cases);
}

static void rollout_view_refuses_values_out_of_range_naming_the_token(void) {
    static const struct {
        const char *key;
        float v[3];
        const char *msg;
    } cases[] = {
        {"logp", {-1, NAN, -2}, "field \"logp\" holds NaN at token 1 (a log-probability is finite)"},
        {"logp", {-1, -2, -INFINITY}, "field \"logp\" holds -inf at token 2 (a log-probability is finite)"},
        {"logp_learner", {INFINITY, -1, -2},
         "field \"logp_learner\" holds +inf at token 0 (a log-probability is finite or -inf)"},
        {"w", {1, -0.5f, 1}, "field \"w\" holds -0.5 at token 1 (a weight is finite and not negative)"},
        {"logp_ref", {-1, -INFINITY, -2}, "field \"logp_ref\" holds -inf at token 1 (a log-probability is finite)"},
    };
    static const refusal_case zero[] = {
        {drawn_zero, "field \"drawn\" is 0: a written group is one of the groups drawn (at least 1)"},
    };
    expect_refusals(zero, 1);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rec_t *r = good_rollout();
        rec_set_f32s(r, cases[i].key, cases[i].v, 3);
        rollout_view v = {0};
        rl_err e = {{0}};
        int rc = rollout_read(&v, r, &e);
        rollout_view_free(&v);
        rec_free(r);
        CHECK(rc < 0 && !strcmp(e.msg, cases[i].msg), "case %zu: '%s', expected '%s'", i, rc ? e.msg : "(accepted)",
              cases[i].msg);
    }
}

static void rollout_decode_checks_types_and_lengths_but_passes_any_float(void) {
    rec_t *r = good_rollout();
    float lp[3] = {NAN, INFINITY, -INFINITY};
    rec_set_f32s(r, "logp", lp, 3);
    rollout_view v = {0};
    rl_err e = {{0}};
    int rc = rollout_decode(&v, r, &e);
    CHECK(rc == 0 && isnan(v.logp.v[0]) && isinf(v.logp.v[2]), "refused: %s", e.msg);
    rec_set_cstr(r, "ids", "x");
    rc = rollout_decode(&v, r, &e);
    rollout_view_free(&v);
    rec_free(r);
    CHECK(rc < 0 && !strcmp(e.msg, "field \"ids\" is not an array of unsigned 32-bit integers"), "'%s'", e.msg);
}

static void rollout_view_reads_rewards_and_pred_and_refuses_other_types(void) {
    rec_t *r = good_rollout(), *parts = rec_new();
    sbuf enc = {0};
    rl_err e = {{0}};
    rollout_view v = {0};
    rec_set_f64(parts, "acc", 1.0);
    rec_set_int(parts, "fmt.tags", -2);   // any numeric encoding is a number
    rec_encode(parts, &enc);
    rec_set_raw(r, "rewards", 7, enc.data, enc.len);
    rec_set_cstr(r, "pred", "42");
    double acc = 0, tags = 0;
    int rc = rollout_read(&v, r, &e);
    int got = rc == 0 && rec_get_f64(v.rewards, "acc", &acc) == REC_OK && rec_get_f64(v.rewards, "fmt.tags", &tags) == REC_OK;
    CHECK(got && (v.has & RO_REWARDS) && (v.has & RO_PRED), "rc %d: %s", rc, e.msg);
    CHECK(acc == 1.0 && tags == -2.0 && rec_nfields(v.rewards) == 2, "rewards acc %g, fmt.tags %g", acc, tags);
    CHECK(v.pred_len == 2 && !memcmp(v.pred, "42", 2), "pred '%.*s'", (int)v.pred_len, v.pred);
    rec_set_cstr(parts, "bad", "x");
    enc.len = 0;
    rec_encode(parts, &enc);
    rec_set_raw(r, "rewards", 7, enc.data, enc.len);
    rc = rollout_read(&v, r, &e);
    CHECK(rc < 0 && !strcmp(e.msg, "field \"rewards\" is not a map of names to numbers"), "'%s'", rc ? e.msg : "(accepted)");
    rec_set_f64(r, "rewards", 1.0);
    rc = rollout_read(&v, r, &e);
    CHECK(rc < 0 && !strcmp(e.msg, "field \"rewards\" is not a map of names to numbers"), "'%s'", rc ? e.msg : "(accepted)");
    rec_del(r, "rewards");
    rec_set_uint(r, "pred", 42);
    rc = rollout_read(&v, r, &e);
    CHECK(rc < 0 && !strcmp(e.msg, "field \"pred\" is not a string"), "'%s'", rc ? e.msg : "(accepted)");
    rec_del(r, "pred");
    CHECK(rollout_read(&v, r, &e) == 0 && !(v.has & (RO_REWARDS | RO_PRED)) && v.pred_len == 0, "%s", e.msg);
    rollout_view_free(&v);
    sbuf_free(&enc);
    rec_free(parts);
    rec_free(r);
}

static void rollout_require_names_the_missing_field_and_why(void) {
    rec_t *r = good_rollout();
    rec_del(r, "logp_learner");
    rollout_view v = {0};
    rl_err e = {{0}};
    CHECK(rollout_read(&v, r, &e) == 0, "refused: %s", e.msg);
    CHECK(rollout_require(&v, RO_IDS | RO_LOGP, "needed", &e) == 0, "ids and logp are there: %s", e.msg);
    CHECK(rollout_require(&v, RO_IDS | RO_LOGP_LEARNER, "give --model DIR to compute it", &e) < 0 &&
              !strcmp(e.msg, "field \"logp_learner\" is missing (give --model DIR to compute it)"),
          "'%s'", e.msg);
    CHECK(rollout_finite(RO_REWARD, NAN, &e) < 0 && !strcmp(e.msg, "field \"reward\" is nan: it must be a finite number"),
          "'%s'", e.msg);
    CHECK(rollout_vocab("ids", v.ids.v, v.n, 5, &e) < 0 &&
              !strcmp(e.msg, "field \"ids\" holds token id 5 at position 1, not below the model's vocabulary size 5"),
          "'%s'", e.msg);
    CHECK(rollout_vocab("ids", v.ids.v, v.n, 6, &e) == 0, "ids below 6 refused: %s", e.msg);
    rollout_view_free(&v);
    rec_free(r);
}

static void array_header_is_the_shortest_form_and_reads_back(void) {
    // n: the count; len: fixarray 1 byte below 16, array16 3 bytes below 2^16, array32 5 bytes
    const struct { uint32_t n; size_t len; uint8_t first; } cases[] = {
        {0, 1, 0x90}, {15, 1, 0x9f}, {16, 3, 0xdc}, {65535, 3, 0xdc}, {65536, 5, 0xdd}, {UINT32_MAX, 5, 0xdd},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sbuf b = {0};
        mpa_put_header(&b, cases[i].n);
        uint32_t count = 1;
        size_t hdr = 0;
        int rc = mpa_header(b.data, b.len, &count, &hdr);
        int cut = b.len > 1 ? mpa_header(b.data, b.len - 1, &count, &hdr) : -1;
        size_t len = b.len;
        uint8_t first = b.data[0];
        sbuf_free(&b);
        CHECK(len == cases[i].len && first == cases[i].first, "%u: %zu bytes from 0x%02x", cases[i].n, len, first);
        CHECK(rc == 0 && hdr == len, "%u: rc %d, header %zu bytes", cases[i].n, rc, hdr);
        CHECK(cut == -1, "%u: a header cut short was read", cases[i].n);
    }
    // The same bytes as msgpack-c's packer writes.
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 70000);
    sbuf b = {0};
    mpa_put_header(&b, 70000);
    int same = b.len == sb.size && !memcmp(b.data, sb.data, b.len);
    sbuf_free(&b);
    msgpack_sbuffer_destroy(&sb);
    CHECK(same, "array of 70000: differs from msgpack_pack_array");
}

static void array_header_refuses_non_arrays_and_empty_input(void) {
    uint32_t count;
    size_t hdr;
    CHECK(mpa_header((const uint8_t *)"", 0, &count, &hdr) == -1, "empty input read as an array");
    CHECK(mpa_header((const uint8_t *)"\x80", 1, &count, &hdr) == -1, "a map read as an array");
    CHECK(mpa_header((const uint8_t *)"\xa1" "a", 2, &count, &hdr) == -1, "a str read as an array");
    CHECK(mpa_header((const uint8_t *)"\xde\x00\x01", 3, &count, &hdr) == -1, "a map16 read as an array");
}

static void array_split_gives_each_element_its_bytes(void) {
    // [1, "ab", {"k": [2]}, []]
    const uint8_t a[] = {0x94, 0x01, 0xa2, 'a', 'b', 0x81, 0xa1, 'k', 0x91, 0x02, 0x90};
    const size_t off[] = {1, 2, 5, 10, 11};
    mpa_elems e = {0};
    int rc = mpa_split(a, sizeof a, &e);
    size_t n = e.n;
    int same = rc == 0 && n == 4 && !memcmp(e.off, off, sizeof off);
    // The same array with an array16 header; an empty array.
    const uint8_t a16[] = {0xdc, 0x00, 0x02, 0xc0, 0xc3};
    int rc16 = mpa_split(a16, sizeof a16, &e);
    size_t n16 = e.n, first16 = e.off[0], end16 = e.off[2];
    int rc0 = mpa_split((const uint8_t *)"\x90", 1, &e);
    size_t n0 = e.n, end0 = e.off[0];
    mpa_elems_free(&e);
    CHECK(same, "rc %d, %zu elements", rc, n);
    CHECK(rc16 == 0 && n16 == 2 && first16 == 3 && end16 == 5, "array16: rc %d, %zu elements", rc16, n16);
    CHECK(rc0 == 0 && n0 == 0 && end0 == 1, "[]: rc %d, %zu elements", rc0, n0);
}

static void array_split_refuses_what_is_not_one_whole_array(void) {
    const uint8_t a[] = {0x92, 0x01, 0xa2, 'a', 'b'};
    mpa_elems e = {0};
    int whole = mpa_split(a, sizeof a, &e);
    int cut = 0, after;
    for (size_t k = 0; k < sizeof a; k++) cut |= mpa_split(a, k, &e) == 0;   // every proper prefix
    const uint8_t more[] = {0x92, 0x01, 0x02, 0x03};                          // bytes after the array
    after = mpa_split(more, sizeof more, &e);
    // 2^32 - 1 elements declared in 5 bytes: refused before any offset is made room for.
    int huge = mpa_split((const uint8_t *)"\xdd\xff\xff\xff\xff", 5, &e);
    size_t cap = e.cap;
    int map = mpa_split((const uint8_t *)"\x81\x01\x02", 3, &e);
    int bad = mpa_split((const uint8_t *)"\x91\xc1", 2, &e);   // 0xc1 is never valid
    mpa_elems_free(&e);
    CHECK(whole == 0, "the whole array refused");
    CHECK(!cut, "a prefix split");
    CHECK(after == -1, "bytes after the array accepted");
    CHECK(huge == -1 && cap <= 16, "rc %d, %zu offsets allocated", huge, cap);
    CHECK(map == -1 && bad == -1, "a map (%d) or a malformed element (%d) split", map, bad);
}

int main(void) {
    RUN(scan_finds_the_end_of_each_msgpack_type);
    RUN(scan_rejects_an_array_declaring_2_to_the_32_elements_before_reading_them);
    RUN(scan_enforces_string_record_and_depth_limits);
    RUN(scan_rejects_invalid_utf8_non_string_keys_and_duplicate_keys);
    RUN(array_header_is_the_shortest_form_and_reads_back);
    RUN(array_header_refuses_non_arrays_and_empty_input);
    RUN(array_split_gives_each_element_its_bytes);
    RUN(array_split_refuses_what_is_not_one_whole_array);
    RUN(record_typed_fields_read_back_exactly);
    RUN(record_unknown_fields_pass_through_byte_for_byte);
    RUN(writer_and_reader_round_trip_compressed_raw_and_multi_member);
    RUN(reader_rejects_a_trailer_whose_count_disagrees);
    RUN(truncation_at_every_byte_offset_is_detected);
    RUN(corrupt_bytes_never_reach_the_reader_as_records);
    RUN(reader_names_file_record_and_reason);
    RUN(json_writes_an_empty_key_and_an_empty_string_value);
    RUN(an_empty_string_reads_back_as_an_empty_string_not_null);
    RUN(rollout_view_of_a_good_record_fills_every_field);
    RUN(rollout_view_of_a_record_without_sampling_fields_has_their_defaults);
    RUN(rollout_view_refuses_a_field_of_the_wrong_type_naming_field_and_type);
    RUN(rollout_view_refuses_per_token_arrays_whose_lengths_disagree);
    RUN(rollout_view_refuses_values_out_of_range_naming_the_token);
    RUN(rollout_decode_checks_types_and_lengths_but_passes_any_float);
    RUN(rollout_view_reads_rewards_and_pred_and_refuses_other_types);
    RUN(rollout_require_names_the_missing_field_and_why);
    CHECK_DONE();
}
