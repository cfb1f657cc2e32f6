// fuzz_records.c — the record stream reader (instream.c, reader.c, mpscan.c,
// record.c, fields.c) over arbitrary bytes: zstd frames or raw msgpack, one
// member or several. Every event is read to the end or the first error, and
// each record goes through what rl-cat --check and --json do with it
// (fld_check, json_from_rec), the typed getters and the encoder.
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "records/fields.h"
#include "records/json.h"
#include "records/reader.h"
#include "records/record.h"

// Limits small enough that a declared size over them is cheap to refuse.
static const rec_limits fuzz_limits = {
    .max_record = 1 << 20,
    .max_array = 1 << 16,
    .max_string = 1 << 18,
    .max_depth = 16,
};

static void exercise(const rec_t *r, u32_vec *u32s, f32_vec *f32s, u8_vec *u8s, sbuf *enc) {
    rl_err err;
    (void)fld_check(r, &err);
    for (size_t i = 0; i < rec_nfields(r); i++) {
        size_t klen, n;
        const char *k = rec_key(r, i, &klen);
        char key[256];
        if (klen >= sizeof key || memchr(k, 0, klen)) continue;
        memcpy(key, k, klen);
        key[klen] = 0;
        uint64_t u;
        int64_t s;
        double d;
        const char *str;
        (void)rec_get_uint(r, key, &u);
        (void)rec_get_int(r, key, &s);
        (void)rec_get_f64(r, key, &d);
        (void)rec_get_str(r, key, &str, &n);
        (void)rec_get_len(r, key, &n);
        (void)rec_get_u32s(r, key, u32s);
        (void)rec_get_f32s(r, key, f32s);
        (void)rec_get_u8s(r, key, u8s);
    }
    enc->len = 0;
    rec_encode(r, enc);
    enc->len = 0;
    (void)json_from_rec(r, enc, &err);   // rl-cat --json
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int fd = -1;
    if (fd < 0) fd = fz_memfd("fuzz_records");
    rl_err err;
    recr_t *r = recr_open(fz_fill(fd, data, size), &fuzz_limits, &err);
    if (!r) __builtin_trap();   // a memfd always opens
    rec_t *rec = rec_new();
    u32_vec u32s = {0};
    f32_vec f32s = {0};
    u8_vec u8s = {0};
    sbuf enc = {0};
    recr_event e;
    while ((e = recr_next(r, rec)) != RECR_END && e != RECR_ERROR) {
        if (e == RECR_RECORD || e == RECR_HEADER) exercise(rec, &u32s, &f32s, &u8s, &enc);
    }
    if (e == RECR_ERROR) (void)strlen(recr_error(r));
    (void)recr_records(r), (void)recr_bytes_in(r);
    u32_vec_free(&u32s);
    f32_vec_free(&f32s);
    u8_vec_free(&u8s);
    sbuf_free(&enc);
    rec_free(rec);
    recr_close(r);
    return 0;
}
