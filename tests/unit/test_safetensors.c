// Unit tests of the model-file layer: safetensors reading (every malformation
// refused with the file and tensor named) and F32 writing, the f32 <-> bf16/f16
// conversions of dtype.c against exact bit patterns, and config.json loading,
// checking and saving (this file is also built with ASan + UBSan).
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "checkpoint/config.h"
#include "checkpoint/safetensors.h"
#include "dtype.h"
#include "tmpdir.h"

// ---- helpers ---------------------------------------------------------------

static char tmp_dir[256];

static const char *tmp_path(const char *name) { return tmpdir_file(tmp_dir, name); }

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
        perror(path);
        exit(2);
    }
}

static uint8_t *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    sbuf b = {0};
    uint8_t chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) sbuf_put(&b, chunk, got);
    fclose(f);
    *n = b.len;
    return b.data;
}

// A safetensors file: the 8-byte length of `header`, `header`, then n bytes of data.
static const char *st_file_with(const char *name, const char *header, const void *data, size_t n) {
    const char *path = tmp_path(name);
    size_t hl = strlen(header);
    sbuf b = {0};
    for (int i = 0; i < 8; i++) sbuf_putc(&b, (uint8_t)((uint64_t)hl >> (8 * i)));
    sbuf_put(&b, header, hl);
    sbuf_put(&b, data, n);
    write_bytes(path, b.data, b.len);
    sbuf_free(&b);
    return path;
}

// st_open's message for path, or NULL if it opened.
static const char *open_error(const char *path) {
    static rl_err e;
    st_file *f = st_open(path, &e);
    if (f) {
        st_close(f);
        return NULL;
    }
    return e.msg;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- safetensors: writing and reading back ---------------------------------

static void write_then_open_gives_back_names_shapes_and_exact_values_in_order(void) {
    float a[6] = {1, -2.5f, 1e-30f, -0.0f, INFINITY, NAN}, b[5] = {3, 4, 5, 6, 7}, s = 0.1f, e8[4] = {9, 8, 7, 6};
    st_out t[] = {
        {"model.layers.0.mlp.up_proj.weight", 2, {2, 3}, a},
        {"model.norm.weight", 1, {5}, b},
        {"scalar", 0, {0}, &s},
        {"empty", 2, {0, 4}, NULL},
        {"eight_dims", 8, {1, 1, 2, 1, 1, 2, 1, 1}, e8},
    };
    rl_err e;
    const char *path = tmp_path("roundtrip.safetensors");
    CHECK(st_write_f32(path, t, 5, &e) == 0, "write: %s", e.msg);
    st_file *f = st_open(path, &e);
    CHECK(f, "open: %s", e.msg);
    CHECK(f->n == 5, "%zu tensors, expected 5", f->n);
    const size_t nelem[5] = {6, 5, 1, 0, 4};
    const float *data[5] = {a, b, &s, NULL, e8};
    for (size_t i = 0; i < 5; i++) {
        const st_tensor *r = &f->t[i];
        CHECK(strcmp(r->name, t[i].name) == 0, "tensor %zu is '%s', expected '%s'", i, r->name, t[i].name);
        CHECK(r->dtype == DT_F32 && r->ndim == t[i].ndim && r->nelem == nelem[i], "tensor %zu: dtype %d ndim %d nelem %zu",
              i, r->dtype, r->ndim, r->nelem);
        for (int d = 0; d < r->ndim; d++) CHECK(r->shape[d] == t[i].shape[d], "tensor %zu dim %d", i, d);
        float got[6];
        st_read_f32(r, got);
        for (size_t k = 0; k < nelem[i]; k++)
            CHECK(bits_of(got[k]) == bits_of(data[i][k]), "tensor %zu value %zu: %08x, expected %08x", i, k,
                  bits_of(got[k]), bits_of(data[i][k]));
    }
    CHECK(st_find(f, "model.norm.weight") == &f->t[1], "st_find finds the second tensor");
    CHECK(st_find(f, "model.norm") == NULL, "st_find of a missing name is NULL");
    st_close(f);
}

static void written_header_has_format_pt_is_padded_with_spaces_to_8_bytes_and_offsets_are_contiguous(void) {
    float a[3] = {1, 2, 3}, b[2] = {4, 5};
    st_out t[] = {{"a", 1, {3}, a}, {"b\"q", 2, {1, 2}, b}};
    rl_err e;
    const char *path = tmp_path("layout.safetensors");
    CHECK(st_write_f32(path, t, 2, &e) == 0, "write: %s", e.msg);
    size_t n;
    uint8_t *p = read_bytes(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | p[i];
    CHECK(hl % 8 == 0, "header length %llu is not a multiple of 8", (unsigned long long)hl);
    CHECK(n == 8 + hl + 20, "file of %zu bytes, expected 8 + %llu + 20", n, (unsigned long long)hl);
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                       "\"b\\\"q\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[12,20]}}";
    size_t wl = strlen(want);
    CHECK(hl >= wl && hl - wl < 8 && memcmp(p + 8, want, wl) == 0, "header is '%.*s'", (int)hl, (const char *)p + 8);
    for (size_t i = wl; i < hl; i++) CHECK(p[8 + i] == ' ', "padding byte %zu is 0x%02x", i, p[8 + i]);
    float got[5];
    memcpy(got, p + 8 + hl, 20);
    CHECK(got[0] == 1 && got[2] == 3 && got[3] == 4 && got[4] == 5, "data %g %g %g %g", got[0], got[2], got[3], got[4]);
    free(p);
}

static void write_replaces_a_longer_existing_file(void) {
    float big[64] = {0}, one = 42;
    st_out t1 = {"big", 1, {64}, big}, t2 = {"one", 1, {1}, &one};
    rl_err e;
    const char *path = tmp_path("replace.safetensors");
    CHECK(st_write_f32(path, &t1, 1, &e) == 0, "%s", e.msg);
    CHECK(st_write_f32(path, &t2, 1, &e) == 0, "%s", e.msg);
    st_file *f = st_open(path, &e);
    CHECK(f, "%s", e.msg);
    float v = 0;
    int ok = f->n == 1 && !strcmp(f->t[0].name, "one") && f->map_size < 8 + 64 + 256;
    if (ok) st_read_f32(&f->t[0], &v);
    size_t size = f->map_size;
    st_close(f);
    CHECK(ok && v == 42, "file of %zu bytes, value %g", size, v);
}

// st_write_direct: the bytes of st_write, whatever the sizes against the
// 4096-byte blocks and the 16 MiB staging buffer of O_DIRECT, at each dtype,
// over a longer file, and in dir (a file system with O_DIRECT or without).
static void direct_write_matches(const char *dir) {
    size_t big = (16u << 20) / 4 * 2 + 1001;   // past two staging buffers, a tail that is no whole block
    float *x = malloc(big * sizeof *x);
    for (size_t i = 0; i < big; i++) x[i] = (float)((i * 2654435761u) % 1000003) * 1e-3f - 500;
    const struct {
        st_out t[2];
        size_t n;
    } sets[] = {
        {{{"one", 1, {3}, x}}, 1},                                  // less than a block
        {{{"a", 1, {1024 - 13}, x}, {"b", 1, {13}, x + 7}}, 2},    // about a block
        {{{"big", 1, {(int64_t)big}, x}, {"tail", 2, {3, 5}, x + 11}}, 2},
    };
    const rl_dtype dts[] = {DT_F32, DT_BF16, DT_F16};
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/buffered.safetensors", dir);
    snprintf(b, sizeof b, "%s/direct.safetensors", dir);
    for (size_t k = 0; k < sizeof sets / sizeof *sets; k++)
        for (size_t d = 0; d < 3; d++) {
            rl_err e;
            float pad[4096] = {0};
            st_out longer = {"longer", 1, {4096}, pad};
            CHECK(st_write(a, sets[k].t, sets[k].n, dts[d], &e) == 0, "%s", e.msg);
            CHECK(st_write_f32(b, &longer, 1, &e) == 0 && st_write(b, &longer, 1, DT_F32, &e) == 0, "%s", e.msg);
            CHECK(st_write_direct(b, sets[k].t, sets[k].n, dts[d], &e) == 0, "%s", e.msg);
            size_t na, nb;
            uint8_t *pa = read_bytes(a, &na), *pb = read_bytes(b, &nb);
            int same = na == nb && !memcmp(pa, pb, na);
            free(pa);
            free(pb);
            CHECK(same, "%s: set %zu at %s: %zu bytes buffered, %zu direct, or other bytes", dir, k,
                  dt_name(dts[d]), na, nb);
        }
    unlink(a);
    unlink(b);
    free(x);
}

static void a_direct_write_gives_the_bytes_of_a_buffered_one(void) {
    direct_write_matches(tmp_dir);
    struct stat st;
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) {   // tmpfs
        char shm[64];
        snprintf(shm, sizeof shm, "/dev/shm/rlpipe-st-%ld", (long)getpid());
        CHECK(mkdir(shm, 0700) == 0, "mkdir %s", shm);
        direct_write_matches(shm);
        rmdir(shm);
    }
}

static void write_refuses_bad_tensors_and_unwritable_paths_naming_them(void) {
    float x[2] = {1, 2};
    const struct {
        st_out t[2];
        size_t n;
        const char *want;
    } cases[] = {
        {{{"w", 1, {2}, x}, {"w", 1, {2}, x}}, 2, "tensor 'w' is given twice"},
        {{{"w", 9, {1, 1, 1, 1, 1, 1, 1, 1}, x}}, 1, "tensor 'w': 9 dimensions"},
        {{{"w", 1, {-2}, x}}, 1, "tensor 'w': shape has a negative dimension"},
        {{{"__metadata__", 1, {2}, x}}, 1, "name '__metadata__' cannot be"},
        {{{"w", 2, {INT64_MAX, 4}, x}}, 1, "too many elements"},
        {{{"w", 1, {2}, NULL}}, 1, "tensor 'w': no data"},
    };
    const char *path = tmp_path("refused.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rl_err e;
        CHECK(st_write_f32(path, cases[i].t, cases[i].n, &e) == -1, "case %zu written", i);
        CHECK(strstr(e.msg, path) && strstr(e.msg, cases[i].want), "case %zu: message '%s' lacks '%s'", i, e.msg,
              cases[i].want);
        CHECK(access(path, F_OK) != 0, "case %zu left a file", i);
    }
    rl_err e;
    const char *missing = tmp_path("no/such/dir/model.safetensors");
    st_out t = {"w", 1, {2}, x};
    CHECK(st_write_f32(missing, &t, 1, &e) == -1, "written into a missing directory");
    CHECK(strstr(e.msg, "cannot create") && strstr(e.msg, missing) && strstr(e.msg, "No such file or directory"),
          "message: %s", e.msg);
}

// ---- safetensors: reading files written by others --------------------------

static void bf16_and_f16_tensors_at_odd_addresses_are_converted_exactly(void) {
    // The header is 117 bytes long, so the data area starts at byte 125 (odd).
    const char *h = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                    "\"h\":{\"dtype\":\"F16\",\"shape\":[5],\"data_offsets\":[8,18]}}";
    char header[160];
    CHECK(strlen(h) <= 117, "header of %zu bytes", strlen(h));
    snprintf(header, sizeof header, "%s%*s", h, (int)(117 - strlen(h)), "");
    const uint16_t v[9] = {0x3F80, 0xC000, 0x7F80, 0x0001, 0x3C00, 0x0001, 0x7BFF, 0xFC00, 0x3555};
    uint8_t data[18];
    for (int i = 0; i < 9; i++) data[2 * i] = (uint8_t)v[i], data[2 * i + 1] = (uint8_t)(v[i] >> 8);
    const char *path = st_file_with("halves.safetensors", header, data, sizeof data);
    rl_err e;
    st_file *f = st_open(path, &e);
    CHECK(f, "%s", e.msg);
    CHECK(f->n == 2 && f->t[0].dtype == DT_BF16 && f->t[1].dtype == DT_F16, "n %zu", f->n);
    CHECK((uintptr_t)f->t[0].data % 2 == 1 && (uintptr_t)f->t[1].data % 2 == 1, "data is not at odd addresses");
    float got[9];
    st_read_f32(&f->t[0], got);
    st_read_f32(&f->t[1], got + 4);
    st_close(f);
    // 1, -2, inf, 2^-133 (smallest bf16 subnormal); 1, 2^-24, 65504, -inf, 0.333251953125
    const uint32_t want[9] = {0x3F800000, 0xC0000000, 0x7F800000, 0x00010000, 0x3F800000,
                              0x33800000, 0x477FE000, 0xFF800000, 0x3EAAA000};
    for (int i = 0; i < 9; i++) CHECK(bits_of(got[i]) == want[i], "value %d: %08x, expected %08x", i, bits_of(got[i]), want[i]);
}

static void a_large_f16_tensor_is_converted_across_chunks(void) {
    enum { N = 65536 };
    uint8_t *data = xmalloc(2 * N);
    for (int i = 0; i < N; i++) data[2 * i] = (uint8_t)i, data[2 * i + 1] = (uint8_t)(i >> 8);
    const char *path = st_file_with("all_f16.safetensors",
                                    "{\"all\":{\"dtype\":\"F16\",\"shape\":[256,256],\"data_offsets\":[0,131072]}}  ",
                                    data, 2 * N);
    free(data);
    rl_err e;
    st_file *f = st_open(path, &e);
    CHECK(f, "%s", e.msg);
    float *got = xmalloc(N * sizeof *got);
    st_read_f32(&f->t[0], got);
    st_close(f);
    int bad = -1;
    for (int i = 0; i < N && bad < 0; i++)
        if (bits_of(got[i]) != bits_of(f16_to_f32((uint16_t)i))) bad = i;
    free(got);
    CHECK(bad < 0, "element %d differs from f16_to_f32", bad);
}

// The process's resident pages of mapped files (RssFile), in bytes; -1 if unknown.
static long rss_file(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssFile: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

// A BF16 tensor of 2^21 values (4 MiB, at an odd address) read in parts of
// any size gives the values read whole; once let go, the mapping's pages of
// it leave the process (RssFile falls by at least 3 MiB) and it reads the
// same again (from the file).
static void a_tensor_reads_in_parts_as_whole_and_again_after_it_is_let_go(void) {
    enum { N = 1 << 21 };
    uint8_t *data = xmalloc(2 * N);
    for (int i = 0; i < N; i++) {
        uint16_t b = (uint16_t)(0x3C00 + (i * 2654435761u >> 20) % 0x0800);   // values in [2^-7, 2^-3)
        data[2 * i] = (uint8_t)b, data[2 * i + 1] = (uint8_t)(b >> 8);
    }
    // header of 69 bytes: the data start at byte 77 (odd)
    const char *path = st_file_with("parts.safetensors",
                                    "{\"p\":{\"dtype\":\"BF16\",\"shape\":[2048,1024],\"data_offsets\":[0,4194304]}}",
                                    data, 2 * N);
    free(data);
    rl_err e;
    st_file *f = st_open(path, &e);
    CHECK(f, "%s", e.msg);
    float *whole = xmalloc(N * sizeof *whole), *part = xmalloc(N * sizeof *part);
    st_read_f32(&f->t[0], whole);
    const size_t sizes[] = {1, 4095, 4096, 4097, 1000003};
    size_t at = 0;
    for (int k = 0; at < N; k++) {
        size_t n = sizes[k % 5] < N - at ? sizes[k % 5] : N - at;
        st_read_f32_part(&f->t[0], at, n, part + at);
        at += n;
    }
    int parts_same = memcmp(whole, part, N * sizeof *whole) == 0;
    long before = rss_file();
    st_let_go(&f->t[0]);
    long after = rss_file();
    st_read_f32(&f->t[0], part);
    int again_same = memcmp(whole, part, N * sizeof *whole) == 0;
    st_close(f);
    free(whole), free(part);
    CHECK(parts_same, "the parts differ from the whole");
    CHECK(before >= 0 && after >= 0 && before - after >= 3 << 20, "RssFile %ld bytes before st_let_go, %ld after",
          before, after);
    CHECK(again_same, "the tensor reads otherwise after st_let_go");
}

static void metadata_gaps_unknown_keys_and_empty_tensors_are_accepted(void) {
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"comment\":[1]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}";
    const float d[3] = {1.5f, 99, -2};
    rl_err e;
    st_file *f = st_open(st_file_with("lenient.safetensors", h, d, sizeof d), &e);
    CHECK(f, "%s", e.msg);
    float a = 0, b = 0;
    int ok = f->n == 3 && st_find(f, "__metadata__") == NULL && f->t[1].nelem == 0 && f->t[2].ndim == 0 &&
             f->t[2].nelem == 1;
    if (ok) st_read_f32(&f->t[0], &a), st_read_f32(&f->t[2], &b);
    st_close(f);
    CHECK(ok && a == 1.5f && b == -2, "a %g b %g", a, b);

    f = st_open(st_file_with("nothing.safetensors", "{}      ", NULL, 0), &e);
    CHECK(f && f->n == 0, "an empty header: %s", f ? "" : e.msg);
    st_close(f);
}

// ---- safetensors: refusals -------------------------------------------------

static void malformed_headers_are_refused_naming_the_file_tensor_and_problem(void) {
    static const struct {
        const char *header;
        size_t data;          // bytes of data area (zeros)
        const char *want[2];  // the message contains both
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",", 0, {"header is not valid JSON", "near byte"}},
        {"[1, 2]", 0, {"header is not a JSON object", ""}},
        {"{} x", 0, {"bytes after its JSON object", ""}},
        {"{\"a\":5}", 0, {"tensor 'a'", "not an object"}},
        {"{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, {"tensor 'ids'", "dtype I64 is not supported"}},
        {"{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, {"tensor 'a'", "dtype is missing"}},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, {"tensor 'a'", "dtype is missing"}},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, {"tensor 'a'", "shape is missing"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, {"tensor 'a'", "negative dimension -1"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 4, {"tensor 'a'", "shape dimension 0 is not"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         {"tensor 'a'", "9 dimensions, more than the 8"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
         {"tensor 'a'", "more elements than memory"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, {"tensor 'a'", "data_offsets is not a list of two"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8, {"tensor 'a'", "data_offsets is not a list of two"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e20]}}", 8, {"tensor 'a'", "data_offsets [0, 100000000000000000000] are out of range"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", 8, {"tensor 'a'", "data_offsets is not a list of two"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, {"tensor 'a'", "[8, 4] begin after they end"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
         {"tensor 'a'", "[0, 16] end beyond the data area of 12 bytes"}},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4, {"tensor 'a'", "hold 4 bytes, shape [3] of BF16 needs 6"}},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\",\"shape\":[4],"
         "\"data_offsets\":[8,24]}}", 24, {"tensor 'b': data_offsets [8, 24] overlap tensor 'a' at [0, 16]", ""}},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[4,8]}}", 8, {"tensor 'w' is named twice", ""}},
        {"{\"__metadata__\":{\"format\":1}}", 0, {"__metadata__ value \"format\" is not a string", ""}},
        {"{\"__metadata__\":[]}", 0, {"__metadata__ is not an object", ""}},
        {"{\"a\x01\":{}}", 0, {"control byte 0x01 at byte 3", ""}},
        {"{\"\xff\":{}}", 0, {"header is not valid UTF-8", ""}},
    };
    static const uint8_t zeros[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = st_file_with("bad.safetensors", cases[i].header, zeros, cases[i].data);
        const char *msg = open_error(path);
        CHECK(msg, "case %zu (%s) was accepted", i, cases[i].header);
        CHECK(strncmp(msg, path, strlen(path)) == 0, "case %zu: message does not start with the file: %s", i, msg);
        for (int k = 0; k < 2; k++)
            CHECK(strstr(msg, cases[i].want[k]), "case %zu: message '%s' lacks '%s'", i, msg, cases[i].want[k]);
    }
}

static void a_size_disagreement_is_reported_in_full(void) {
    static const uint8_t zeros[16];
    const char *path = st_file_with("model.safetensors",
                                    "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}",
                                    zeros, sizeof zeros);
    char want[1024];
    snprintf(want, sizeof want, "%s: tensor 'model.norm.weight': data_offsets [0, 12] hold 12 bytes, shape [4] of F32 needs 16",
             path);
    const char *msg = open_error(path);
    CHECK(msg && strcmp(msg, want) == 0, "message: %s", msg ? msg : "(opened)");
}

static void short_empty_and_oversized_files_are_refused(void) {
    const char *msg, *path;
    path = tmp_path("empty.safetensors");
    write_bytes(path, "", 0);
    msg = open_error(path);
    CHECK(msg && strstr(msg, path) && strstr(msg, "file is empty"), "empty: %s", msg ? msg : "(opened)");

    path = tmp_path("short.safetensors");
    write_bytes(path, "\x02\0\0\0\0", 5);
    msg = open_error(path);
    CHECK(msg && strstr(msg, path) && strstr(msg, "file is 5 bytes, too short"), "short: %s", msg ? msg : "(opened)");

    uint8_t big[16] = {0};
    uint64_t over = (uint64_t)ST_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++) big[i] = (uint8_t)(over >> (8 * i));
    path = tmp_path("huge_header.safetensors");
    write_bytes(path, big, sizeof big);
    msg = open_error(path);
    CHECK(msg && strstr(msg, "header length 104857601 is larger than the 104857600-byte limit"), "huge: %s",
          msg ? msg : "(opened)");

    memset(big, 0xff, 8);   // 2^64 - 1
    write_bytes(path, big, sizeof big);
    msg = open_error(path);
    CHECK(msg && strstr(msg, "header length 18446744073709551615 is larger"), "2^64-1: %s", msg ? msg : "(opened)");

    const uint8_t beyond[12] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    path = tmp_path("beyond.safetensors");
    write_bytes(path, beyond, sizeof beyond);
    msg = open_error(path);
    CHECK(msg && strstr(msg, "header length 9 goes beyond the end of the file (12 bytes)"), "beyond: %s",
          msg ? msg : "(opened)");

    path = tmp_path("does-not-exist.safetensors");
    msg = open_error(path);
    CHECK(msg && strstr(msg, "cannot open") && strstr(msg, path) && strstr(msg, "No such file or directory"),
          "missing: %s", msg ? msg : "(opened)");

    msg = open_error(tmp_dir);
    CHECK(msg && strstr(msg, "not a regular file"), "directory: %s", msg ? msg : "(opened)");
}

// ---- dtype conversions ------------------------------------------------------

static void f32_to_bf16_rounds_to_nearest_even_and_keeps_specials(void) {
    static const struct { uint32_t f; uint16_t h; } cases[] = {
        {0x3F800000, 0x3F80},   // 1
        {0x3F808000, 0x3F80},   // halfway, even below: down
        {0x3F818000, 0x3F82},   // halfway, odd below: up
        {0x3F808001, 0x3F81},   // above halfway: up
        {0x3F80FFFF, 0x3F81},
        {0xBF807FFF, 0xBF80},   // below halfway, negative: toward zero
        {0x7F7FFFFF, 0x7F80},   // largest float rounds to inf
        {0x7F7F7FFF, 0x7F7F},   // stays finite
        {0x7F800000, 0x7F80},   // inf
        {0xFF800000, 0xFF80},   // -inf
        {0x7FC00000, 0x7FC0},   // quiet NaN
        {0x7F800001, 0x7FC0},   // signalling NaN, payload only in the low half: quieted, still NaN
        {0xFFA00000, 0xFFE0},   // negative NaN with payload: quieted
        {0x80000000, 0x8000},   // -0
        {0x00010000, 0x0001},   // smallest bf16 subnormal
        {0x00008000, 0x0000},   // half of it: ties to even zero
        {0x00018000, 0x0002},   // 1.5 of it: ties to even 2
        {0x00008001, 0x0001},
        {0x007FFFFF, 0x0080},   // largest f32 subnormal rounds up to the smallest normal
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t h = f32_to_bf16(float_of(cases[i].f));
        CHECK(h == cases[i].h, "f32 %08x -> bf16 %04x, expected %04x", cases[i].f, h, cases[i].h);
    }
}

// Independent reference: the nearer of the two bf16 neighbours, compared in
// double (exact), the even one on a tie; the step above the largest finite is 2^128.
static uint16_t bf16_reference(uint32_t u) {
    uint32_t mag = u & 0x7fffffffu, sign = u & 0x80000000u;
    double x = (double)float_of(mag);
    uint32_t lo = mag >> 16, hi = lo + 1;
    double vlo = (double)bf16_to_f32((uint16_t)lo), vhi = hi == 0x7F80 ? ldexp(1, 128) : (double)bf16_to_f32((uint16_t)hi);
    uint32_t r = x - vlo < vhi - x ? lo : x - vlo > vhi - x ? hi : (lo & 1 ? hi : lo);
    return (uint16_t)((sign >> 16) | r);
}

static void f32_to_bf16_agrees_with_a_reference_over_a_sweep_of_all_exponents(void) {
    for (uint64_t k = 0; k < (1ull << 32); k += 65521) {
        uint32_t base = (uint32_t)k;
        // The sample, and the bit patterns around its rounding boundary.
        uint32_t us[5] = {base, (base & 0xFFFF0000u) | 0x7FFF, (base & 0xFFFF0000u) | 0x8000,
                          (base & 0xFFFF0000u) | 0x8001, base | 0xFFFF};
        for (int j = 0; j < 5; j++) {
            uint32_t u = us[j];
            if ((u & 0x7F800000u) == 0x7F800000u) continue;   // inf and NaN: tested above
            uint16_t h = f32_to_bf16(float_of(u)), want = bf16_reference(u);
            CHECK(h == want, "f32 %08x -> bf16 %04x, expected %04x", u, h, want);
        }
    }
}

static void every_bf16_survives_the_trip_through_f32(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        CHECK(bits_of(f) == h << 16, "bf16 %04x -> f32 %08x", h, bits_of(f));
        uint16_t back = f32_to_bf16(f);
        int nan = (h & 0x7F80) == 0x7F80 && (h & 0x7F);
        CHECK(back == (nan ? (h | 0x40) : h), "bf16 %04x -> %04x", h, back);
    }
}

static void f32_to_f16_rounds_to_nearest_even_with_subnormals_and_overflow(void) {
    static const struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3C00},
        {-2.0f, 0xC000},
        {1.0f + 0x1p-11f, 0x3C00},             // halfway between 1 and 1 + 2^-10: even
        {1.0f + 3 * 0x1p-11f, 0x3C02},         // halfway, odd below: up
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01},  // above halfway
        {65504.0f, 0x7BFF},                    // largest f16
        {65519.99f, 0x7BFF},                   // below the halfway point to 2^16
        {65520.0f, 0x7C00},                    // halfway: rounds to inf
        {1e10f, 0x7C00},
        {-1e10f, 0xFC00},
        {INFINITY, 0x7C00},
        {-INFINITY, 0xFC00},
        {0x1p-14f, 0x0400},                    // smallest normal
        {0x1p-24f, 0x0001},                    // smallest subnormal
        {0x1p-25f, 0x0000},                    // half of it: even zero
        {0x1.8p-24f, 0x0002},                  // 1.5 of it: even 2
        {0x1.000002p-25f, 0x0001},             // just above half: up
        {1023 * 0x1p-24f, 0x03FF},             // largest subnormal
        {1023.5f * 0x1p-24f, 0x0400},          // halfway to the smallest normal: even, which is it
        {-0x1p-24f, 0x8001},
        {-0.0f, 0x8000},
        {1e-30f, 0x0000},
        {0.1f, 0x2E66},
        {1.0f / 3, 0x3555},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t h = f32_to_f16(cases[i].f);
        CHECK(h == cases[i].h, "f32 %a -> f16 %04x, expected %04x", (double)cases[i].f, h, cases[i].h);
    }
    uint16_t n = f32_to_f16(NAN);
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x3FF), "NaN -> %04x, not a NaN", n);
}

static void f16_to_f32_gives_exact_values_including_subnormals(void) {
    static const struct { uint16_t h; uint32_t f; } cases[] = {
        {0x3C00, 0x3F800000}, {0x0001, 0x33800000}, {0x03FF, 0x387FC000}, {0x0400, 0x38800000},
        {0x7BFF, 0x477FE000}, {0x7C00, 0x7F800000}, {0xFC00, 0xFF800000}, {0x8000, 0x80000000},
        {0x8001, 0xB3800000}, {0x3555, 0x3EAAA000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t f = bits_of(f16_to_f32(cases[i].h));
        CHECK(f == cases[i].f, "f16 %04x -> f32 %08x, expected %08x", cases[i].h, f, cases[i].f);
    }
    float q = f16_to_f32(0x7E00);
    CHECK(isnan(q), "f16 7e00 -> %g", (double)q);
}

static void every_f16_survives_the_trip_through_f32(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;   // NaN
        uint16_t back = f32_to_f16(f16_to_f32((uint16_t)h));
        CHECK(back == h, "f16 %04x -> %04x", h, back);
    }
}

#ifdef __FLT16_MAX__
// The compiler's own f32 -> _Float16 conversion (correctly rounded) as the reference.
static void f32_to_f16_agrees_with_the_compilers_float16_over_a_sweep(void) {
    for (uint64_t k = 0; k < (1ull << 32); k += 4099) {
        uint32_t base = (uint32_t)k;
        uint32_t us[4] = {base, (base & ~0x1FFFu) | 0x0FFF, (base & ~0x1FFFu) | 0x1000, (base & ~0x1FFFu) | 0x1001};
        for (int j = 0; j < 4; j++) {
            float f = float_of(us[j]);
            if (isnan(f)) continue;
            _Float16 r = (_Float16)f;
            uint16_t want;
            memcpy(&want, &r, 2);
            uint16_t h = f32_to_f16(f);
            CHECK(h == want, "f32 %08x -> f16 %04x, expected %04x", us[j], h, want);
        }
    }
}
#endif

// ---- config.json -----------------------------------------------------------

static const char *config_file(const char *name, const char *text) {
    const char *path = tmp_path(name);
    write_bytes(path, text, strlen(text));
    return path;
}

// A model directory DIR holding config.json and, when gen is not NULL, generation_config.json.
static const char *model_dir(const char *name, const char *config, const char *gen) {
    static char dirs[4][512];
    static int next;
    char *dir = dirs[next++ % 4], path[600];
    snprintf(dir, sizeof dirs[0], "%s/%s", tmp_dir, name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_bytes(path, config, strlen(config));
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (gen) write_bytes(path, gen, strlen(gen));
    else unlink(path);
    return dir;
}

static const char *llama2_7b =
    "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
    "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 4096,\n  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 11008,\n  \"max_position_embeddings\": 4096,\n  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 32,\n  \"num_key_value_heads\": 32,\n"
    "  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": null,\n"
    "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"float16\",\n  \"transformers_version\": \"4.31.0\",\n"
    "  \"use_cache\": true,\n  \"vocab_size\": 32000\n}\n";

static const char *tinyllama =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"bos_token_id\": 1,"
    " \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 5632, \"max_position_embeddings\": 2048, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 22, \"num_key_value_heads\": 4, \"pretraining_tp\": 1,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"vocab_size\": 32000}";

static const char *qwen2_05b =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
    " \"eos_token_id\": [151645, 151643], \"hidden_act\": \"silu\", \"hidden_size\": 896,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 4864, \"max_position_embeddings\": 32768,"
    " \"max_window_layers\": 24, \"model_type\": \"qwen2\", \"num_attention_heads\": 14,"
    " \"num_hidden_layers\": 24, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
    " \"sliding_window\": 32768, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"use_cache\": true, \"use_sliding_window\": false, \"attention_bias\": false, \"vocab_size\": 151936}";

static const char *llama32_1b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009], \"head_dim\": 64,"
    " \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 8192,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"pretraining_tp\": 1,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
    " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";

static const char *qwen3_06b =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
    " \"hidden_size\": 1024, \"initializer_range\": 0.02, \"intermediate_size\": 3072,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
    " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
    " \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

static const char *mistral_7b_v03 =
    "{\"architectures\": [\"MistralForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1,"
    " \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 14336, \"max_position_embeddings\": 32768, \"model_type\": \"mistral\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05,"
    " \"rope_theta\": 1000000.0, \"sliding_window\": null, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.42.0.dev0\", \"use_cache\": true,"
    " \"vocab_size\": 32768}";

static const char *smollm2_135m =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 576,"
    " \"initializer_range\": 0.041666666666666664, \"intermediate_size\": 1536, \"is_llama_config\": true,"
    " \"max_position_embeddings\": 8192, \"model_type\": \"llama\", \"num_attention_heads\": 9,"
    " \"num_hidden_layers\": 30, \"num_key_value_heads\": 3, \"pad_token_id\": 2, \"pretraining_tp\": 1,"
    " \"rms_norm_eps\": 1e-05, \"rope_interleaved\": false, \"rope_scaling\": null, \"rope_theta\": 100000,"
    " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.42.3\","
    " \"transformers.js_config\": {\"kv_cache_dtype\": {\"q4f16\": \"float16\", \"fp16\": \"float16\"}},"
    " \"use_cache\": true, \"vocab_size\": 49152}";

// Every field but the generation defaults.
static int same_config(const model_config *a, const model_config *b) {
    const cfg_rope *ra = &a->rope, *rb = &b->rope;
    int same = !strcmp(a->model_type, b->model_type) && a->hidden == b->hidden && a->inter == b->inter &&
               a->layers == b->layers && a->heads == b->heads && a->kv_heads == b->kv_heads &&
               a->head_dim == b->head_dim && a->vocab == b->vocab && a->max_pos == b->max_pos &&
               a->rms_eps == b->rms_eps && a->rope_theta == b->rope_theta && a->tie_embeddings == b->tie_embeddings &&
               a->qkv_bias == b->qkv_bias && a->o_bias == b->o_bias && a->bos_id == b->bos_id &&
               a->eos_id == b->eos_id && a->n_eos == b->n_eos && a->has_pad == b->has_pad &&
               (!a->has_pad || a->pad_id == b->pad_id) && a->mlp_bias == b->mlp_bias && a->qk_norm == b->qk_norm &&
               a->sliding_window == b->sliding_window && !strcmp(a->torch_dtype, b->torch_dtype) &&
               ra->type == rb->type && ra->factor == rb->factor && ra->low_freq_factor == rb->low_freq_factor &&
               ra->high_freq_factor == rb->high_freq_factor && ra->original_max_pos == rb->original_max_pos &&
               ra->attention_factor == rb->attention_factor && ra->beta_fast == rb->beta_fast &&
               ra->beta_slow == rb->beta_slow;
    for (int i = 0; same && i < a->n_eos; i++) same = a->eos_ids[i] == b->eos_ids[i];
    return same;
}

static void describe(const model_config *c, char *buf, size_t n) {
    snprintf(buf, n, "%s C %d F %d L %d NH %d NKV %d HS %d V %d pos %d eps %g theta %g tie %d bias %d/%d/%d "
             "qk_norm %d window %d bos %d eos %d (%d ids) pad %d/%d dtype '%s' rope %d factor %g low %g high %g "
             "orig %d attn %g beta %g/%g", c->model_type, c->hidden, c->inter, c->layers, c->heads, c->kv_heads,
             c->head_dim, c->vocab, c->max_pos, c->rms_eps, c->rope_theta, c->tie_embeddings, c->qkv_bias, c->o_bias,
             c->mlp_bias, c->qk_norm, c->sliding_window, c->bos_id, c->eos_id, c->n_eos, c->has_pad, c->pad_id,
             c->torch_dtype, (int)c->rope.type, c->rope.factor, c->rope.low_freq_factor, c->rope.high_freq_factor,
             c->rope.original_max_pos, c->rope.attention_factor, c->rope.beta_fast, c->rope.beta_slow);
}

static void real_world_configs_load_with_their_values(void) {
    const struct {
        const char *name, *text;
        model_config want;
    } cases[] = {
        {"llama2.json", llama2_7b,
         {.model_type = "llama", .hidden = 4096, .inter = 11008, .layers = 32, .heads = 32, .kv_heads = 32,
          .head_dim = 128, .vocab = 32000, .max_pos = 4096, .rms_eps = 1e-5, .rope_theta = 10000, .bos_id = 1,
          .eos_id = 2, .n_eos = 1, .eos_ids = {2}, .torch_dtype = "float16"}},
        {"tinyllama.json", tinyllama,
         {.model_type = "llama", .hidden = 2048, .inter = 5632, .layers = 22, .heads = 32, .kv_heads = 4,
          .head_dim = 64, .vocab = 32000, .max_pos = 2048, .rms_eps = 1e-5, .rope_theta = 10000, .bos_id = 1,
          .eos_id = 2, .n_eos = 1, .eos_ids = {2}, .torch_dtype = "bfloat16"}},
        // Qwen2 has q/k/v biases whatever attention_bias says; sliding_window is off
        // (use_sliding_window false); every eos id is kept, the first is eos_id.
        {"qwen2.json", qwen2_05b,
         {.model_type = "qwen2", .hidden = 896, .inter = 4864, .layers = 24, .heads = 14, .kv_heads = 2,
          .head_dim = 64, .vocab = 151936, .max_pos = 32768, .rms_eps = 1e-6, .rope_theta = 1e6,
          .tie_embeddings = 1, .qkv_bias = 1, .bos_id = 151643, .eos_id = 151645, .n_eos = 2,
          .eos_ids = {151645, 151643}, .torch_dtype = "bfloat16"}},
        {"llama32.json", llama32_1b,
         {.model_type = "llama", .hidden = 2048, .inter = 8192, .layers = 16, .heads = 32, .kv_heads = 8,
          .head_dim = 64, .vocab = 128256, .max_pos = 131072, .rms_eps = 1e-5, .rope_theta = 500000,
          .tie_embeddings = 1, .bos_id = 128000, .eos_id = 128001, .n_eos = 3, .eos_ids = {128001, 128008, 128009},
          .torch_dtype = "bfloat16",
          .rope = {.type = CFG_ROPE_LLAMA3, .factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
                   .original_max_pos = 8192}}},
        // Qwen3: per-head q/k norms, head_dim 128 although hidden / heads is 64.
        {"qwen3.json", qwen3_06b,
         {.model_type = "qwen3", .hidden = 1024, .inter = 3072, .layers = 28, .heads = 16, .kv_heads = 8,
          .head_dim = 128, .vocab = 151936, .max_pos = 40960, .rms_eps = 1e-6, .rope_theta = 1e6,
          .tie_embeddings = 1, .qk_norm = 1, .bos_id = 151643, .eos_id = 151645, .n_eos = 1, .eos_ids = {151645},
          .torch_dtype = "bfloat16"}},
        {"mistral.json", mistral_7b_v03,
         {.model_type = "mistral", .hidden = 4096, .inter = 14336, .layers = 32, .heads = 32, .kv_heads = 8,
          .head_dim = 128, .vocab = 32768, .max_pos = 32768, .rms_eps = 1e-5, .rope_theta = 1e6, .bos_id = 1,
          .eos_id = 2, .n_eos = 1, .eos_ids = {2}, .torch_dtype = "bfloat16"}},
        // SmolLM2: nanotron's markers (is_llama_config, rope_interleaved false) and a pad id.
        {"smollm2.json", smollm2_135m,
         {.model_type = "llama", .hidden = 576, .inter = 1536, .layers = 30, .heads = 9, .kv_heads = 3,
          .head_dim = 64, .vocab = 49152, .max_pos = 8192, .rms_eps = 1e-5, .rope_theta = 100000,
          .tie_embeddings = 1, .bos_id = 1, .eos_id = 2, .n_eos = 1, .eos_ids = {2}, .has_pad = 1, .pad_id = 2,
          .torch_dtype = "bfloat16"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        model_config c;
        rl_err e;
        char got[600];
        CHECK(cfg_load(config_file(cases[i].name, cases[i].text), &c, &e) == 0, "%s: %s", cases[i].name, e.msg);
        describe(&c, got, sizeof got);
        CHECK(same_config(&c, &cases[i].want), "%s: got %s", cases[i].name, got);
    }
}

#define SIZES "\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,\"vocab_size\":100,"

static void absent_keys_take_the_transformers_defaults(void) {
    const struct {
        const char *text;
        model_config want;
    } cases[] = {
        {"{\"model_type\":\"llama\"," SIZES "\"num_attention_heads\":4}",
         {.model_type = "llama", .hidden = 64, .inter = 96, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 16,
          .vocab = 100, .max_pos = 2048, .rms_eps = 1e-6, .rope_theta = 10000, .bos_id = -1, .eos_id = -1}},
        // Qwen2Config: num_key_value_heads 32 when absent, num_attention_heads when null.
        {"{\"model_type\":\"qwen2\"," SIZES "\"num_attention_heads\":4,\"head_dim\":null,\"num_key_value_heads\":null,"
         "\"bos_token_id\":null,\"eos_token_id\":[]}",
         {.model_type = "qwen2", .hidden = 64, .inter = 96, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 16,
          .vocab = 100, .max_pos = 32768, .rms_eps = 1e-6, .rope_theta = 10000, .qkv_bias = 1, .bos_id = -1,
          .eos_id = -1}},
        {"{\"model_type\":\"qwen2\"," SIZES "\"num_attention_heads\":32}",
         {.model_type = "qwen2", .hidden = 64, .inter = 96, .layers = 2, .heads = 32, .kv_heads = 32, .head_dim = 2,
          .vocab = 100, .max_pos = 32768, .rms_eps = 1e-6, .rope_theta = 10000, .qkv_bias = 1, .bos_id = -1,
          .eos_id = -1}},
        // An explicit head_dim need not be hidden / heads; attention_bias gives llama all four biases.
        {"{\"model_type\":\"llama\"," SIZES "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,"
         "\"attention_bias\":true,\"mlp_bias\":true,\"tie_word_embeddings\":true,\"eos_token_id\":[7,8],"
         "\"rope_theta\":500000}",
         {.model_type = "llama", .hidden = 64, .inter = 96, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 32,
          .vocab = 100, .max_pos = 2048, .rms_eps = 1e-6, .rope_theta = 500000, .tie_embeddings = 1, .qkv_bias = 1,
          .o_bias = 1, .mlp_bias = 1, .bos_id = -1, .eos_id = 7, .n_eos = 2, .eos_ids = {7, 8}}},
        // transformers 5 keeps rope_theta in rope_parameters.
        {"{\"model_type\":\"qwen2\"," SIZES "\"num_attention_heads\":4,\"num_key_value_heads\":4,"
         "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1000000.0}}",
         {.model_type = "qwen2", .hidden = 64, .inter = 96, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 16,
          .vocab = 100, .max_pos = 32768, .rms_eps = 1e-6, .rope_theta = 1e6, .qkv_bias = 1, .bos_id = -1,
          .eos_id = -1}},
        // Qwen3Config: head_dim 128, num_key_value_heads 32; attention_bias on all four.
        {"{\"model_type\":\"qwen3\"," SIZES "\"num_attention_heads\":32,\"attention_bias\":true}",
         {.model_type = "qwen3", .hidden = 64, .inter = 96, .layers = 2, .heads = 32, .kv_heads = 32,
          .head_dim = 128, .vocab = 100, .max_pos = 32768, .rms_eps = 1e-6, .rope_theta = 10000, .qkv_bias = 1,
          .o_bias = 1, .qk_norm = 1, .bos_id = -1, .eos_id = -1}},
        // MistralConfig: num_key_value_heads 8, 131072 positions, a window of 4096 when sliding_window is absent.
        {"{\"model_type\":\"mistral\"," SIZES "\"num_attention_heads\":16}",
         {.model_type = "mistral", .hidden = 64, .inter = 96, .layers = 2, .heads = 16, .kv_heads = 8, .head_dim = 4,
          .vocab = 100, .max_pos = 131072, .rms_eps = 1e-6, .rope_theta = 10000, .sliding_window = 4096,
          .bos_id = -1, .eos_id = -1}},
        // Qwen's window counts only with use_sliding_window (absent sliding_window: 4096).
        {"{\"model_type\":\"qwen3\"," SIZES "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"head_dim\":16,"
         "\"use_sliding_window\":true,\"max_window_layers\":1,"
         "\"layer_types\":[\"full_attention\",\"sliding_attention\"]}",
         {.model_type = "qwen3", .hidden = 64, .inter = 96, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 16,
          .vocab = 100, .max_pos = 32768, .rms_eps = 1e-6, .rope_theta = 10000, .qk_norm = 1, .sliding_window = 4096,
          .bos_id = -1, .eos_id = -1}},
        {"{\"model_type\":\"qwen2\"," SIZES "\"num_attention_heads\":4,\"num_key_value_heads\":4,"
         "\"use_sliding_window\":true,\"sliding_window\":128,\"_name_or_path\":\"x\",\"dtype\":\"float16\"}",
         {.model_type = "qwen2", .hidden = 64, .inter = 96, .layers = 2, .heads = 4, .kv_heads = 4, .head_dim = 16,
          .vocab = 100, .max_pos = 32768, .rms_eps = 1e-6, .rope_theta = 10000, .qkv_bias = 1, .sliding_window = 128,
          .bos_id = -1, .eos_id = -1, .torch_dtype = "float16"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        model_config c;
        rl_err e;
        char got[600];
        CHECK(cfg_load(config_file("defaults.json", cases[i].text), &c, &e) == 0, "case %zu: %s", i, e.msg);
        describe(&c, got, sizeof got);
        CHECK(same_config(&c, &cases[i].want), "case %zu: got %s", i, got);
    }
}

// Every rope_scaling type with the keys transformers 4.46 reads for it
// (rope_type or the older "type"), and the same as transformers 5's rope_parameters.
static void rope_scaling_types_load_with_their_parameters(void) {
    const struct {
        const char *rope;
        cfg_rope want;
    } cases[] = {
        {"\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}", {.type = CFG_ROPE_LINEAR, .factor = 2}},
        {"\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":4}", {.type = CFG_ROPE_DYNAMIC, .factor = 4}},
        {"\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2.0,\"original_max_position_embeddings\":64}",
         {.type = CFG_ROPE_DYNAMIC, .factor = 2, .original_max_pos = 64}},
        {"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}", {.type = CFG_ROPE_YARN, .factor = 4}},
        {"\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0,\"attention_factor\":1.5,\"beta_fast\":16.0,"
         "\"beta_slow\":2.0,\"original_max_position_embeddings\":2048}",
         {.type = CFG_ROPE_YARN, .factor = 4, .attention_factor = 1.5, .beta_fast = 16, .beta_slow = 2,
          .original_max_pos = 2048}},
        {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
         "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":512}",
         {.type = CFG_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_pos = 512}},
        {"\"rope_scaling\":{\"rope_type\":\"default\"}", {.type = CFG_ROPE_DEFAULT}},
        {"\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":3.0,\"rope_theta\":10000.0}",
         {.type = CFG_ROPE_LINEAR, .factor = 3}},
        {"\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":3.0},\"rope_parameters\":{\"rope_type\":\"linear\","
         "\"factor\":3.0}", {.type = CFG_ROPE_LINEAR, .factor = 3}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024];
        snprintf(text, sizeof text, "{\"model_type\":\"llama\"," SIZES "\"num_attention_heads\":4,%s}", cases[i].rope);
        model_config c;
        rl_err e;
        CHECK(cfg_load(config_file("rope.json", text), &c, &e) == 0, "case %zu: %s", i, e.msg);
        model_config want = c;
        want.rope = cases[i].want;
        char got[600];
        describe(&c, got, sizeof got);
        CHECK(same_config(&c, &want) && c.max_pos == 2048, "case %zu: got %s", i, got);
    }
}

// generation_config.json beside config.json: its eos ids join the config's
// (config's first, no repeats), bos and pad fill the config's absent ones,
// and its sampling defaults are recorded, as a tool prints them.
static void generation_config_adds_eos_ids_and_records_sampling_defaults(void) {
    const char *dir = model_dir("gen", qwen2_05b,
                                "{\"bos_token_id\": 151643, \"pad_token_id\": 151643, \"do_sample\": true,"
                                " \"eos_token_id\": [151645, 151643, 151644], \"repetition_penalty\": 1.1,"
                                " \"temperature\": 0.7, \"top_p\": 0.8, \"top_k\": 20, \"max_new_tokens\": 512,"
                                " \"transformers_version\": \"4.37.0\"}");
    model_config c;
    rl_err e;
    CHECK(cfg_load(dir, &c, &e) == 0, "%s", e.msg);
    CHECK(c.n_eos == 3 && c.eos_ids[0] == 151645 && c.eos_ids[1] == 151643 && c.eos_ids[2] == 151644 &&
          c.eos_id == 151645, "eos: %d ids, %d %d %d", c.n_eos, c.eos_ids[0], c.eos_ids[1], c.eos_ids[2]);
    CHECK(c.bos_id == 151643 && c.has_pad && c.pad_id == 151643, "bos %d pad %d/%d", c.bos_id, c.has_pad, c.pad_id);
    char s[256];
    cfg_generation_str(&c, s, sizeof s);
    CHECK(c.gen.present && !strcmp(s, "do_sample true, temperature 0.7, top_p 0.8, repetition_penalty 1.1, top_k 20, "
                                      "max_new_tokens 512"), "'%s'", s);

    // A config with a single eos and no bos takes both; the config's own ids come first.
    dir = model_dir("gen2", "{\"model_type\":\"llama\"," SIZES "\"num_attention_heads\":4,\"eos_token_id\":9,"
                    "\"pad_token_id\":3}", "{\"eos_token_id\": 5, \"bos_token_id\": 4, \"pad_token_id\": 6}");
    CHECK(cfg_load(dir, &c, &e) == 0, "%s", e.msg);
    cfg_generation_str(&c, s, sizeof s);
    CHECK(c.n_eos == 2 && c.eos_ids[0] == 9 && c.eos_ids[1] == 5 && c.bos_id == 4 && c.pad_id == 3 && !s[0],
          "eos %d: %d %d, bos %d, pad %d, defaults '%s'", c.n_eos, c.eos_ids[0], c.eos_ids[1], c.bos_id, c.pad_id, s);

    // Without the file nothing is recorded; a broken file is refused, naming it and the key.
    dir = model_dir("gen3", qwen2_05b, NULL);
    CHECK(cfg_load(dir, &c, &e) == 0 && !c.gen.present && c.n_eos == 2, "%s", e.msg);
    const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"temperature\": \"hot\"}", "temperature is not a number (found \"hot\")"},
        {"{\"eos_token_id\": [1, -2]}", "eos_token_id -2 is negative"},
        {"{\"eos_token_id\": 999999}", "eos_token_id 999999 is not a token id"},
        {"{\"do_sample\": 1}", "do_sample is not true or false"},
        {"[]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dir = model_dir("gen4", qwen2_05b, bad[i].text);
        char want[1024];
        snprintf(want, sizeof want, "%s/%s: %s", dir, i == 2 ? "config.json" : "generation_config.json", bad[i].want);
        CHECK(cfg_load(dir, &c, &e) == -1, "case %zu accepted", i);
        CHECK(strncmp(e.msg, want, strlen(want)) == 0, "case %zu: '%s', expected '%s...'", i, e.msg, want);
    }
}

static void a_model_directory_is_read_through_its_config_json(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/model", tmp_dir);
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    config_file("model/config.json", tinyllama);
    model_config c;
    rl_err e;
    CHECK(cfg_load(dir, &c, &e) == 0, "%s", e.msg);
    CHECK(c.kv_heads == 4 && c.layers == 22, "NKV %d L %d", c.kv_heads, c.layers);
}

static void bad_configs_are_refused_naming_the_file_and_the_key(void) {
#define LLAMA "{\"model_type\":\"llama\"," SIZES "\"num_attention_heads\":4,"
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"{\"model_type\":\"gemma\"," SIZES "\"num_attention_heads\":4}",
         "model_type \"gemma\" is not supported (supported: llama, mistral, qwen2, qwen3)"},
        {"{" SIZES "\"num_attention_heads\":4}", "model_type is missing (supported: llama, mistral, qwen2, qwen3)"},
        {"{\"model_type\":\"llama\",\"intermediate_size\":96,\"num_hidden_layers\":2,\"vocab_size\":100,"
         "\"num_attention_heads\":4}", "hidden_size is missing"},
        {"{\"model_type\":\"llama\"," SIZES "\"num_attention_heads\":null}", "num_attention_heads is missing"},
        {"{\"model_type\":\"llama\",\"hidden_size\":\"64\",\"intermediate_size\":96,\"num_hidden_layers\":2,"
         "\"vocab_size\":100,\"num_attention_heads\":4}", "hidden_size is not an integer (found \"64\")"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64.5,\"intermediate_size\":96,\"num_hidden_layers\":2,"
         "\"vocab_size\":100,\"num_attention_heads\":4}", "hidden_size is not an integer"},
        {"{\"model_type\":\"llama\"," SIZES "\"num_attention_heads\":0}", "num_attention_heads 0 is out of range"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":-96,\"num_hidden_layers\":2,"
         "\"vocab_size\":100,\"num_attention_heads\":4}", "intermediate_size -96 is out of range (1 to 16777216)"},
        {"{\"model_type\":\"llama\",\"hidden_size\":1e12,\"intermediate_size\":96,\"num_hidden_layers\":2,"
         "\"vocab_size\":100,\"num_attention_heads\":4}", "hidden_size 1000000000000 is out of range"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
         "\"vocab_size\":8388608,\"num_attention_heads\":4}", "vocab_size 8388608 is out of range (1 to 4194304)"},
        {"{\"model_type\":\"llama\"," SIZES "\"num_attention_heads\":8,\"num_key_value_heads\":3}",
         "num_key_value_heads 3 does not divide num_attention_heads 8"},
        {LLAMA "\"num_key_value_heads\":8}", "num_key_value_heads 8 does not divide num_attention_heads 4"},
        {"{\"model_type\":\"qwen2\"," SIZES "\"num_attention_heads\":4}",
         "num_key_value_heads 32 does not divide num_attention_heads 4"},
        {"{\"model_type\":\"llama\",\"hidden_size\":100,\"intermediate_size\":96,\"num_hidden_layers\":2,"
         "\"vocab_size\":100,\"num_attention_heads\":8}", "num_attention_heads 8 does not divide hidden_size 100"},
        {"{\"model_type\":\"llama\",\"hidden_size\":24,\"intermediate_size\":96,\"num_hidden_layers\":2,"
         "\"vocab_size\":100,\"num_attention_heads\":8}", "head_dim 3 is odd"},
        {"{\"model_type\":\"qwen2\"," SIZES "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"head_dim\":32}",
         "head_dim 32 is not supported for qwen2 unless it is hidden_size / num_attention_heads = 16"},
        {LLAMA "\"hidden_act\":\"gelu\"}", "hidden_act \"gelu\" is not supported (only \"silu\")"},
        // keys: unknown ones, and those supported at one value only
        {LLAMA "\"quantization_config\":{\"bits\":4}}",
         "quantization_config {\"bits\":4} is not supported for model_type llama (not a key rlpipe reads"},
        {LLAMA "\"sliding_window\":4096}", "sliding_window 4096 is not supported for model_type llama"},
        {"{\"model_type\":\"mistral\"," SIZES "\"num_attention_heads\":4,\"mlp_bias\":true}",
         "mlp_bias true is not supported (only false: only llama has MLP biases)"},
        {"{\"model_type\":\"mistral\"," SIZES "\"num_attention_heads\":4,\"attention_bias\":true}",
         "attention_bias true is not supported (only false"},
        {"{\"model_type\":\"mistral\"," SIZES "\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"linear\","
         "\"factor\":2.0}}", "rope_scaling {\"rope_type\":\"linear\",\"factor\":2} is not supported (only null"},
        {LLAMA "\"pretraining_tp\":2}", "pretraining_tp 2 is not supported (only 1"},
        {LLAMA "\"attention_dropout\":0.1}", "attention_dropout 0.1 is not supported (only 0: rlpipe trains without"},
        {LLAMA "\"rope_interleaved\":true}", "rope_interleaved true is not supported (only false"},
        {"{\"model_type\":\"qwen2\"," SIZES "\"num_attention_heads\":4,\"num_key_value_heads\":4,"
         "\"use_sliding_window\":true,\"sliding_window\":0}", "sliding_window 0 is not positive"},
        {"{\"model_type\":\"qwen3\"," SIZES "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"head_dim\":16,"
         "\"layer_types\":[\"full_attention\",\"sliding_attention\"]}", "layer_types \"sliding_attention\" is not supported (full_attention, or"},
        {"{\"model_type\":\"qwen3\"," SIZES "\"num_attention_heads\":4,\"layer_types\":[\"full_attention\"]}",
         "layer_types is not a list of num_hidden_layers 2 names"},
        {LLAMA "\"torch_dtype\":\"int8\"}", "torch_dtype \"int8\" is not supported (float32, bfloat16 or float16)"},
        {LLAMA "\"torch_dtype\":\"float32\",\"dtype\":\"bfloat16\"}",
         "torch_dtype \"float32\" and dtype \"bfloat16\" disagree"},
        // rope_scaling
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1]}}",
         "rope_scaling rope_type \"longrope\" is not supported (supported: default, linear, dynamic, yarn, llama3)"},
        {LLAMA "\"rope_scaling\":{\"factor\":8.0}}", "rope_scaling has no rope_type"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}}",
         "rope_scaling with rope_type \"llama3\" needs low_freq_factor"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0,\"beta_fast\":3.0}}",
         "rope_scaling beta_fast 3 is not supported with rope_type \"linear\" (it takes: factor)"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"mscale\":1.0}}",
         "rope_scaling mscale 1 is not supported with rope_type \"yarn\""},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":0.5}}",
         "rope_scaling factor 0.5 is not supported (a number >= 1)"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":\"2\"}}",
         "rope_scaling factor is not a number (found \"2\")"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2.0,"
         "\"original_max_position_embeddings\":1.5}}",
         "rope_scaling original_max_position_embeddings is not an integer (found 1.5)"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4.0,"
         "\"high_freq_factor\":1.0,\"original_max_position_embeddings\":512}}",
         "rope_scaling llama3 needs 0 < low_freq_factor < high_freq_factor (found 4 and 1)"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":512}}",
         "rope_scaling original_max_position_embeddings 512 with rope_type \"yarn\" is not supported unless it "
         "equals max_position_embeddings 2048"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"attention_factor\":-1.0}}",
         "rope_scaling attention_factor -1 is not a positive number"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"linear\",\"type\":\"yarn\",\"factor\":2.0}}",
         "rope_scaling rope_type and type disagree"},
        {LLAMA "\"rope_scaling\":[]}", "rope_scaling is not an object (found [])"},
        {LLAMA "\"rope_parameters\":{\"rope_type\":\"longrope\",\"rope_theta\":1e6}}",
         "rope_parameters rope_type \"longrope\" is not supported"},
        {LLAMA "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0},\"rope_parameters\":{\"rope_type\":"
         "\"linear\",\"factor\":3.0}}", "rope_scaling and rope_parameters disagree"},
        {LLAMA "\"rope_theta\":10000,\"rope_parameters\":{\"rope_theta\":500000}}",
         "rope_theta 10000 and rope_parameters rope_theta 500000 disagree"},
        {LLAMA "\"mlp_bias\":\"no\"}", "mlp_bias is not true or false"},
        {LLAMA "\"tie_word_embeddings\":\"yes\"}", "tie_word_embeddings is not true or false"},
        {LLAMA "\"bos_token_id\":\"1\"}", "bos_token_id is not an integer"},
        {LLAMA "\"pad_token_id\":100}", "pad_token_id 100 is not a token id (0 to 99, or -1 for none)"},
        {LLAMA "\"eos_token_id\":100}", "eos_token_id 100 is not a token id (0 to 99, or -1 for none)"},
        {LLAMA "\"eos_token_id\":[-5]}", "eos_token_id -5 is negative"},
        {LLAMA "\"rms_norm_eps\":\"1e-5\"}", "rms_norm_eps is not a number"},
        {LLAMA "\"rms_norm_eps\":0}", "rms_norm_eps 0 is not a positive number"},
        {LLAMA "\"rope_theta\":-1}", "rope_theta -1 is not a positive number"},
        {"{\"model_type\":\"llama\",\"hidden_size\":16777216,\"intermediate_size\":16777216,"
         "\"num_hidden_layers\":16777216,\"vocab_size\":4194304,\"num_attention_heads\":16}",
         "hidden_size 16777216, intermediate_size 16777216, num_hidden_layers 16777216 and vocab_size 4194304 make "
         "more than 2^40 parameters"},
        {LLAMA "\"rope_theta\":1", "not valid JSON"},
        {"[1]", "not a JSON object"},
    };
#undef LLAMA
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = config_file("config.json", cases[i].text);
        model_config c;
        rl_err e;
        CHECK(cfg_load(path, &c, &e) == -1, "case %zu was accepted: %s", i, cases[i].text);
        char want[1024];
        snprintf(want, sizeof want, "%s: %s", path, cases[i].want);
        CHECK(strncmp(e.msg, want, strlen(want)) == 0, "case %zu: message '%s', expected '%s...'", i, e.msg, want);
    }
    model_config c;
    rl_err e;
    const char *missing = tmp_path("nowhere/config.json");
    CHECK(cfg_load(missing, &c, &e) == -1 && strstr(e.msg, missing) && strstr(e.msg, "No such file or directory"),
          "missing file: %s", e.msg);
}

// Configs of every family and feature, built in code, saved and read back.
static const model_config saved_cases[] = {
    {.model_type = "llama", .hidden = 2048, .inter = 5632, .layers = 22, .heads = 32, .kv_heads = 4, .head_dim = 64,
     .vocab = 32000, .max_pos = 2048, .rms_eps = 1e-5, .rope_theta = 10000, .bos_id = 1, .eos_id = 2, .n_eos = 1,
     .eos_ids = {2}},
    {.model_type = "llama", .hidden = 64, .inter = 96, .layers = 3, .heads = 4, .kv_heads = 2, .head_dim = 32,
     .vocab = 1000, .max_pos = 512, .rms_eps = 0.1 + 0.2, .rope_theta = 1.0 / 3, .tie_embeddings = 1, .qkv_bias = 1,
     .o_bias = 1, .mlp_bias = 1, .bos_id = -1, .eos_id = 999, .n_eos = 1, .eos_ids = {999}, .has_pad = 1,
     .pad_id = 0, .torch_dtype = "float16"},
    {.model_type = "qwen2", .hidden = 896, .inter = 4864, .layers = 24, .heads = 14, .kv_heads = 2, .head_dim = 64,
     .vocab = 151936, .max_pos = 32768, .rms_eps = 1e-6, .rope_theta = 1000000, .tie_embeddings = 1, .qkv_bias = 1,
     .bos_id = 151643, .eos_id = 151645, .n_eos = 2, .eos_ids = {151645, 151643}, .torch_dtype = "bfloat16",
     .rope = {.type = CFG_ROPE_YARN, .factor = 4, .attention_factor = 1.25, .beta_fast = 16, .beta_slow = 2}},
    {.model_type = "llama", .hidden = 2048, .inter = 8192, .layers = 16, .heads = 32, .kv_heads = 8, .head_dim = 64,
     .vocab = 128256, .max_pos = 131072, .rms_eps = 1e-5, .rope_theta = 500000, .tie_embeddings = 1, .bos_id = 128000,
     .eos_id = 128001, .n_eos = 3, .eos_ids = {128001, 128008, 128009},
     .rope = {.type = CFG_ROPE_LLAMA3, .factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
              .original_max_pos = 8192}},
    {.model_type = "qwen3", .hidden = 1024, .inter = 3072, .layers = 28, .heads = 16, .kv_heads = 8, .head_dim = 128,
     .vocab = 151936, .max_pos = 40960, .rms_eps = 1e-6, .rope_theta = 1e6, .tie_embeddings = 1, .qk_norm = 1,
     .bos_id = 151643, .eos_id = 151645, .sliding_window = 1024},
    {.model_type = "mistral", .hidden = 4096, .inter = 14336, .layers = 32, .heads = 32, .kv_heads = 8,
     .head_dim = 128, .vocab = 32768, .max_pos = 32768, .rms_eps = 1e-5, .rope_theta = 1e6, .bos_id = 1, .eos_id = 2,
     .sliding_window = 4096},
    {.model_type = "mistral", .hidden = 64, .inter = 96, .layers = 1, .heads = 4, .kv_heads = 4, .head_dim = 16,
     .vocab = 100, .max_pos = 64, .rms_eps = 1e-5, .rope_theta = 1e4, .bos_id = -1, .eos_id = -1},
    {.model_type = "llama", .hidden = 64, .inter = 96, .layers = 1, .heads = 4, .kv_heads = 4, .head_dim = 16,
     .vocab = 100, .max_pos = 64, .rms_eps = 1e-5, .rope_theta = 1e4, .bos_id = -1, .eos_id = -1,
     .rope = {.type = CFG_ROPE_DYNAMIC, .factor = 2.5, .original_max_pos = 32}},
    {.model_type = "llama", .hidden = 64, .inter = 96, .layers = 1, .heads = 4, .kv_heads = 4, .head_dim = 16,
     .vocab = 100, .max_pos = 64, .rms_eps = 1e-5, .rope_theta = 1e4, .bos_id = -1, .eos_id = -1,
     .rope = {.type = CFG_ROPE_LINEAR, .factor = 1.0 / 0.3}},
};

static void cfg_save_then_cfg_load_is_the_identity_with_exact_doubles(void) {
    for (size_t i = 0; i < sizeof saved_cases / sizeof *saved_cases; i++) {
        const char *path = tmp_path("saved.json");
        model_config c, want = saved_cases[i];
        rl_err e;
        char got[600];
        CHECK(cfg_save(path, &want, &e) == 0, "case %zu: %s", i, e.msg);
        CHECK(cfg_load(path, &c, &e) == 0, "case %zu: %s", i, e.msg);
        if (!want.torch_dtype[0]) strcpy(want.torch_dtype, "float32");   // what the weights are saved at by default
        if (want.n_eos == 0 && want.eos_id >= 0) want.eos_ids[want.n_eos++] = want.eos_id;
        describe(&c, got, sizeof got);
        CHECK(same_config(&c, &want), "case %zu: got %s", i, got);
    }
}

// The keys transformers reads, spelt as it writes them: architectures, floats
// as floats in rope_scaling (it warns about an int factor), only the keys each
// rope type takes (yarn without original_max_position_embeddings), the window
// keys of each family, eos lists as lists.
static void saved_config_carries_what_transformers_needs(void) {
    const struct {
        size_t i;
        const char *arch, *want[6];
    } cases[] = {
        {2, "Qwen2ForCausalLM",
         {"\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"attention_factor\": 1.25, \"beta_fast\": "
          "16.0, \"beta_slow\": 2.0},", "\"use_sliding_window\": false,", "\"sliding_window\": null,",
          "\"eos_token_id\": [151645, 151643],", "\"torch_dtype\": \"bfloat16\"", "\"rope_theta\": 1000000.0,"}},
        {3, "LlamaForCausalLM",
         {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
          "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192},",
          "\"attention_bias\": false,", "\"mlp_bias\": false,", "\"eos_token_id\": [128001, 128008, 128009],",
          "\"torch_dtype\": \"float32\"", "\"head_dim\": 64,"}},
        {4, "Qwen3ForCausalLM",
         {"\"head_dim\": 128,", "\"attention_bias\": false,", "\"use_sliding_window\": true,",
          "\"sliding_window\": 1024,", "\"rope_scaling\": null,", "\"eos_token_id\": 151645,"}},
        {5, "MistralForCausalLM",
         {"\"sliding_window\": 4096,", "\"hidden_act\": \"silu\",", "\"bos_token_id\": 1,", "\"head_dim\": 128,",
          "\"tie_word_embeddings\": false,", "\"num_key_value_heads\": 8,"}},
        {1, "LlamaForCausalLM",
         {"\"attention_bias\": true,", "\"mlp_bias\": true,", "\"pad_token_id\": 0,", "\"bos_token_id\": null,",
          "\"torch_dtype\": \"float16\"", "\"tie_word_embeddings\": true,"}},
        {7, "LlamaForCausalLM",
         {"\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.5, \"original_max_position_embeddings\": 32},",
          "\"eos_token_id\": null,", "\"max_position_embeddings\": 64,", "\"rope_theta\": 10000.0,",
          "\"rms_norm_eps\": 1e-05,", "\"model_type\": \"llama\","}},
    };
    const char *path = tmp_path("hf.json");
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        rl_err e;
        CHECK(cfg_save(path, &saved_cases[cases[k].i], &e) == 0, "%s", e.msg);
        size_t n;
        char *text = (char *)read_bytes(path, &n);
        cJSON *j = cJSON_ParseWithLength(text, n);
        const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
        int ok = j && cJSON_IsArray(arch) && cJSON_GetArraySize(arch) == 1 && cJSON_IsString(arch->child) &&
                 !strcmp(arch->child->valuestring, cases[k].arch);
        cJSON_Delete(j);
        for (int w = 0; ok && w < 6; w++)
            if (!strstr(text, cases[k].want[w])) {
                printf("# case %zu lacks %s in:\n%s", k, cases[k].want[w], text);
                ok = 0;
            }
        free(text);
        CHECK(ok, "case %zu (%s): not JSON, wrong architectures, or a key written otherwise", k, cases[k].arch);
    }
}

// Each case is GOOD with one field or two set otherwise, later initializers
// overriding earlier ones as C defines.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
static void cfg_check_refuses_configs_built_wrong_in_code(void) {
#define GOOD .model_type = "llama", .hidden = 64, .inter = 96, .layers = 2, .heads = 8, .kv_heads = 2, .head_dim = 8, \
             .vocab = 100, .max_pos = 128, .rms_eps = 1e-6, .rope_theta = 10000, .bos_id = -1, .eos_id = -1
    const model_config good = {GOOD};
    rl_err e;
    CHECK(cfg_check(&good, &e) == 0, "%s", e.msg);
    const struct {
        model_config c;
        const char *want;
    } cases[] = {
        {{GOOD, .kv_heads = 3}, "config: num_key_value_heads 3 does not divide num_attention_heads 8"},
        {{GOOD, .model_type = "gpt2"}, "config: model_type \"gpt2\" is not supported"},
        {{GOOD, .qkv_bias = 1}, "config: llama has attention_bias"},
        {{GOOD, .model_type = "qwen3", .qk_norm = 1, .o_bias = 1}, "config: qwen3 has attention_bias"},
        {{GOOD, .model_type = "qwen2", .qkv_bias = 1, .o_bias = 1}, "config: qwen2 has biases on q, k, v"},
        {{GOOD, .model_type = "qwen2", .qkv_bias = 1, .head_dim = 16},
         "config: head_dim 16 is not hidden_size 64 / num_attention_heads 8"},
        {{GOOD, .model_type = "mistral", .qkv_bias = 1, .o_bias = 1}, "config: mistral has no attention biases"},
        {{GOOD, .model_type = "qwen3", .qk_norm = 1, .mlp_bias = 1}, "config: qwen3 has no mlp_bias"},
        {{GOOD, .model_type = "qwen3"}, "config: qwen3 has q_norm and k_norm (qk_norm 0)"},
        {{GOOD, .qk_norm = 1}, "config: llama has no q_norm and k_norm (qk_norm 1)"},
        {{GOOD, .sliding_window = 64}, "config: sliding_window 64: llama has none"},
        {{GOOD, .model_type = "mistral", .sliding_window = -1}, "config: sliding_window -1: must be positive"},
        {{GOOD, .model_type = "mistral", .rope = {.type = CFG_ROPE_LINEAR, .factor = 2}},
         "config: mistral has no rope_scaling"},
        {{GOOD, .rope = {.type = CFG_ROPE_LINEAR, .factor = 0.5}}, "config: rope_scaling linear factor 0.5 is not"},
        {{GOOD, .rope = {.type = CFG_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4}},
         "config: rope_scaling llama3 original_max_position_embeddings 0 is not positive"},
        {{GOOD, .rope = {.type = CFG_ROPE_YARN, .factor = 2, .beta_fast = 1, .beta_slow = 4}},
         "config: rope_scaling yarn needs attention_factor >= 0 and beta_fast >= beta_slow"},
        {{GOOD, .rope = {.type = (cfg_rope_type)9}}, "config: rope_scaling type 9 is not one of rlpipe's"},
        {{GOOD, .rms_eps = NAN}, "config: rms_norm_eps nan is not"},
        {{GOOD, .head_dim = 0}, "config: head_dim 0 is out of range"},
        {{GOOD, .bos_id = -2}, "config: bos_token_id -2 is not a token id"},
        {{GOOD, .has_pad = 1, .pad_id = 100}, "config: pad_token_id 100 is not a token id"},
        {{GOOD, .tie_embeddings = 2}, "config: tie_word_embeddings, qkv_bias"},
        {{GOOD, .torch_dtype = "int8"}, "config: torch_dtype is not float32, bfloat16 or float16"},
        {{GOOD, .n_eos = 2, .eos_id = 5, .eos_ids = {5, 100}}, "config: eos_token_id 100 is not a token id"},
    };
#undef GOOD
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(cfg_check(&cases[i].c, &e) == -1, "case %zu accepted", i);
        CHECK(strncmp(e.msg, cases[i].want, strlen(cases[i].want)) == 0, "case %zu: '%s', expected '%s...'", i,
              e.msg, cases[i].want);
    }
    // cfg_save checks first and creates nothing for an invalid config.
    const char *path = tmp_path("invalid.json");
    CHECK(cfg_save(path, &cases[0].c, &e) == -1 && access(path, F_OK) != 0, "invalid config saved");
    CHECK(cfg_save(tmp_path("no/dir/config.json"), &good, &e) == -1 && strstr(e.msg, "cannot create") &&
          strstr(e.msg, "No such file or directory"), "save into a missing directory: %s", e.msg);
}
#pragma GCC diagnostic pop

// The longest sequence computed as transformers computes it: the positions,
// or less where a sliding window or dynamic NTK scaling would change attention.
static void the_longest_sequence_is_bounded_by_window_and_dynamic_rope(void) {
    model_config c = saved_cases[6];   // mistral, 64 positions, no window
    const char *why;
    CHECK(cfg_max_seq(&c, &why) == 64 && !strcmp(why, "max_position_embeddings"), "%s", why);
    c.sliding_window = 16;
    CHECK(cfg_max_seq(&c, &why) == 16 && !strcmp(why, "sliding_window"), "%s", why);
    c.sliding_window = 100;                    // a window longer than the positions changes nothing
    CHECK(cfg_max_seq(&c, &why) == 64 && !strcmp(why, "max_position_embeddings"), "%s", why);
    c = saved_cases[7];                        // llama, dynamic with original_max_position_embeddings 32
    CHECK(cfg_max_seq(&c, &why) == 32 && !strcmp(why, "rope_scaling dynamic original_max_position_embeddings"),
          "%s", why);
    c.rope.original_max_pos = 0;               // transformers 4.46: dynamic from max_position_embeddings on
    CHECK(cfg_max_seq(&c, NULL) == 64, "dynamic without original_max_position_embeddings");
}

#undef SIZES

// ---- main ------------------------------------------------------------------

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(path);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/rlpipe-st.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror(tmp_dir);
        return 2;
    }
    RUN(write_then_open_gives_back_names_shapes_and_exact_values_in_order);
    RUN(written_header_has_format_pt_is_padded_with_spaces_to_8_bytes_and_offsets_are_contiguous);
    RUN(write_replaces_a_longer_existing_file);
    RUN(a_direct_write_gives_the_bytes_of_a_buffered_one);
    RUN(write_refuses_bad_tensors_and_unwritable_paths_naming_them);
    RUN(bf16_and_f16_tensors_at_odd_addresses_are_converted_exactly);
    RUN(a_large_f16_tensor_is_converted_across_chunks);
    RUN(a_tensor_reads_in_parts_as_whole_and_again_after_it_is_let_go);
    RUN(metadata_gaps_unknown_keys_and_empty_tensors_are_accepted);
    RUN(malformed_headers_are_refused_naming_the_file_tensor_and_problem);
    RUN(a_size_disagreement_is_reported_in_full);
    RUN(short_empty_and_oversized_files_are_refused);
    RUN(f32_to_bf16_rounds_to_nearest_even_and_keeps_specials);
    RUN(f32_to_bf16_agrees_with_a_reference_over_a_sweep_of_all_exponents);
    RUN(every_bf16_survives_the_trip_through_f32);
    RUN(f32_to_f16_rounds_to_nearest_even_with_subnormals_and_overflow);
    RUN(f16_to_f32_gives_exact_values_including_subnormals);
    RUN(every_f16_survives_the_trip_through_f32);
#ifdef __FLT16_MAX__
    RUN(f32_to_f16_agrees_with_the_compilers_float16_over_a_sweep);
#endif
    RUN(real_world_configs_load_with_their_values);
    RUN(absent_keys_take_the_transformers_defaults);
    RUN(rope_scaling_types_load_with_their_parameters);
    RUN(generation_config_adds_eos_ids_and_records_sampling_defaults);
    RUN(a_model_directory_is_read_through_its_config_json);
    RUN(bad_configs_are_refused_naming_the_file_and_the_key);
    RUN(cfg_save_then_cfg_load_is_the_identity_with_exact_doubles);
    RUN(saved_config_carries_what_transformers_needs);
    RUN(cfg_check_refuses_configs_built_wrong_in_code);
    RUN(the_longest_sequence_is_bounded_by_window_and_dynamic_rope);
    nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    CHECK_DONE();
}
