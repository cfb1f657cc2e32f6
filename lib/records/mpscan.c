#include "records/mpscan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const rec_limits rec_default_limits = {
    .max_record = (size_t)256 << 20,
    .max_array = (size_t)1 << 24,
    .max_string = (size_t)64 << 20,
    .max_depth = 32,
};

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

const char *mps_type_name(uint8_t c) {
    if (c <= 0x7f || c >= 0xe0) return "integer";
    if (c <= 0x8f) return "map";
    if (c <= 0x9f) return "array";
    if (c <= 0xbf) return "str";
    switch (c) {
    case 0xc0: return "nil";
    case 0xc1: return "reserved byte 0xc1";
    case 0xc2: case 0xc3: return "boolean";
    case 0xc4: case 0xc5: case 0xc6: return "bin";
    case 0xc7: case 0xc8: case 0xc9: return "ext";
    case 0xca: return "float32";
    case 0xcb: return "float64";
    case 0xcc: case 0xcd: case 0xce: case 0xcf: return "integer";
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: return "integer";
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: return "ext";
    case 0xd9: case 0xda: case 0xdb: return "str";
    case 0xdc: case 0xdd: return "array";
    default: return "map";
    }
}

const char *mps_a_type_name(uint8_t c) {
    static __thread char buf[40];
    const char *t = mps_type_name(c);
    snprintf(buf, sizeof buf, "%s %s", strchr("aeiou", t[0]) ? "an" : "a", t);
    return buf;
}

// Total size of the items whose first byte alone fixes it (0 for the rest):
// integers, nil, booleans, floats.
static const uint8_t SCALAR_SIZE[256] = {
    [0x00 ... 0x7f] = 1, [0xe0 ... 0xff] = 1, [0xc0] = 1, [0xc2] = 1, [0xc3] = 1,
    [0xca] = 5, [0xcb] = 9, [0xcc] = 2, [0xcd] = 3, [0xce] = 5, [0xcf] = 9,
    [0xd0] = 2, [0xd1] = 3, [0xd2] = 5, [0xd3] = 9,
};

enum { K_SCALAR, K_STR, K_BIN, K_EXT, K_ARRAY, K_MAP };

// Decodes the header of the item at p[0..avail): its kind, header size, payload
// size (str/bin/ext/scalars) or element count (array/map).
// Returns 0, or 1 if more bytes are needed for the header, or -1 for 0xc1.
static int item_header(const uint8_t *p, size_t avail, int *kind, size_t *hdr,
                       uint64_t *body, uint64_t *count) {
    uint8_t c = p[0];
    *body = 0;
    *count = 0;
    *kind = K_SCALAR;
    *hdr = 1;
    if (SCALAR_SIZE[c]) { *body = SCALAR_SIZE[c] - 1u; return 0; }
    if (c <= 0x8f) { *kind = K_MAP; *count = c & 0x0f; return 0; }
    if (c <= 0x9f) { *kind = K_ARRAY; *count = c & 0x0f; return 0; }
    if (c <= 0xbf) { *kind = K_STR; *body = c & 0x1f; return 0; }
    size_t lenbytes = 0;
    switch (c) {
    case 0xc1: return -1;
    case 0xc4: *kind = K_BIN; lenbytes = 1; break;
    case 0xc5: *kind = K_BIN; lenbytes = 2; break;
    case 0xc6: *kind = K_BIN; lenbytes = 4; break;
    case 0xc7: *kind = K_EXT; lenbytes = 1; break;
    case 0xc8: *kind = K_EXT; lenbytes = 2; break;
    case 0xc9: *kind = K_EXT; lenbytes = 4; break;
    case 0xd4: *kind = K_EXT; *hdr = 2; *body = 1; break;
    case 0xd5: *kind = K_EXT; *hdr = 2; *body = 2; break;
    case 0xd6: *kind = K_EXT; *hdr = 2; *body = 4; break;
    case 0xd7: *kind = K_EXT; *hdr = 2; *body = 8; break;
    case 0xd8: *kind = K_EXT; *hdr = 2; *body = 16; break;
    case 0xd9: *kind = K_STR; lenbytes = 1; break;
    case 0xda: *kind = K_STR; lenbytes = 2; break;
    case 0xdb: *kind = K_STR; lenbytes = 4; break;
    case 0xdc: *kind = K_ARRAY; lenbytes = 2; break;
    case 0xdd: *kind = K_ARRAY; lenbytes = 4; break;
    case 0xde: *kind = K_MAP; lenbytes = 2; break;
    case 0xdf: *kind = K_MAP; lenbytes = 4; break;
    }
    if (lenbytes == 0) return avail < *hdr ? 1 : 0;  // fixext: type byte
    // ext8/16/32 carry a type byte after the length.
    *hdr = 1 + lenbytes + (*kind == K_EXT);
    if (avail < *hdr) return 1;
    uint64_t v = lenbytes == 1 ? p[1] : lenbytes == 2 ? be16(p + 1) : be32(p + 1);
    if (*kind == K_ARRAY || *kind == K_MAP) *count = v;
    else *body = v;
    return 0;
}

static int key_cmp(const void *a, const void *b, void *base) {
    const mp_field *x = a, *y = b;
    const uint8_t *p = base;
    if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
    return memcmp(p + x->key_off, p + y->key_off, x->key_len);
}

// Rejects a map with the same key twice: later readers would disagree on which wins.
static int check_duplicates(const uint8_t *p, const mp_index *idx, rl_err *err) {
    size_t n = idx->n;
    if (n < 2) return 0;
    if (n <= 16) {
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (!key_cmp(&idx->f[i], &idx->f[j], (void *)p))
                    return err_set(err, "duplicate key \"%.*s\"", (int)idx->f[i].key_len,
                                   (const char *)p + idx->f[i].key_off);
        return 0;
    }
    mp_field *s = xmalloc(n * sizeof *s);
    memcpy(s, idx->f, n * sizeof *s);
    qsort_r(s, n, sizeof *s, key_cmp, (void *)p);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (!key_cmp(&s[i - 1], &s[i], (void *)p))
            rc = err_set(err, "duplicate key \"%.*s\"", (int)s[i].key_len,
                         (const char *)p + s[i].key_off);
    free(s);
    return rc;
}

static void index_push(mp_index *idx, mp_field f) {
    GROW(idx->f, idx->cap, idx->n + 1, 32);
    idx->f[idx->n++] = f;
}

int mps_scan(const uint8_t *p, size_t n, const rec_limits *lim, mp_index *idx,
             size_t *len, rl_err *err) {
    uint64_t left[MPS_MAX_DEPTH + 1];  // items still to read in each open container
    uint8_t in_map[MPS_MAX_DEPTH + 1]; // that container is a map (its odd items, from 1, are keys)
    in_map[0] = 0;
    int depth = 0, max_depth = lim->max_depth < MPS_MAX_DEPTH ? lim->max_depth : MPS_MAX_DEPTH;
    left[0] = 1;
    size_t pos = 0;
    uint64_t top_items = 0;  // items read so far inside the top-level map
    if (idx) { idx->n = 0; idx->is_map = 0; }

    for (;;) {
        while (depth > 0 && left[depth] == 0) depth--;
        if (left[depth] == 0) break;
        left[depth]--;
        int is_key = in_map[depth] && left[depth] % 2 == 1;   // a map of c entries counts 2c items down
        if (pos >= n) { *len = pos + 1; return MPS_NEED; }

        size_t start = pos, hdr;
        uint64_t body, count;
        int kind;
        int h = item_header(p + pos, n - pos, &kind, &hdr, &body, &count);
        if (h < 0) return err_set(err, "invalid msgpack byte 0xc1 at offset %zu", pos);
        if (h > 0) { *len = pos + hdr; return MPS_NEED; }

        if ((kind == K_STR || kind == K_BIN || kind == K_EXT) && body > lim->max_string)
            return err_set(err, "%s of %llu bytes at offset %zu exceeds the string limit of %zu bytes",
                           mps_type_name(p[pos]), (unsigned long long)body, pos, lim->max_string);
        if ((kind == K_ARRAY || kind == K_MAP) && count > lim->max_array)
            return err_set(err, "%s of %llu %s at offset %zu exceeds the limit of %zu elements",
                           kind == K_MAP ? "map" : "array", (unsigned long long)count,
                           kind == K_MAP ? "entries" : "elements", pos, lim->max_array);
        // Every element takes at least one byte: a count past the record limit cannot fit.
        uint64_t min_size = (uint64_t)hdr + body + count * (kind == K_MAP ? 2 : 1);
        if ((uint64_t)pos + min_size > lim->max_record)
            return err_set(err, "object larger than the record limit of %zu bytes", lim->max_record);

        if (depth == 0 && idx) idx->is_map = (kind == K_MAP);
        if (depth == 1 && idx && idx->is_map) {
            if (top_items % 2 == 0) {  // a key of the top-level map
                if (kind != K_STR)
                    return err_set(err, "map key at offset %zu is a %s, not a string", pos,
                                   mps_type_name(p[pos]));
                if (idx->n) idx->f[idx->n - 1].val_len = (uint32_t)(pos - idx->f[idx->n - 1].val_off);
                index_push(idx, (mp_field){(uint32_t)(pos + hdr), (uint32_t)body, 0, 0});
            } else {
                idx->f[idx->n - 1].val_off = (uint32_t)pos;
            }
            top_items++;
        }

        pos += hdr;
        if (kind == K_ARRAY || kind == K_MAP) {
            if (count == 0) continue;
            if (depth == max_depth)
                return err_set(err, "nesting deeper than %d levels at offset %zu", max_depth, start);
            left[++depth] = kind == K_MAP ? 2 * count : count;
            in_map[depth] = kind == K_MAP;
            if (kind == K_ARRAY) {
                // Fast path for the bulk of a rollout: runs of fixed-size
                // scalars (token ids, float32 logprobs) inside arrays.
                // Within a run of one type the stride is constant, so the
                // loads do not wait on each other.
                uint64_t m = left[depth];
                while (m && pos < n) {
                    uint8_t c = p[pos];
                    size_t sz = SCALAR_SIZE[c];
                    if (!sz) break;
                    if (n - pos < sz) { *len = pos + sz; return MPS_NEED; }
                    do { pos += sz; m--; } while (m && n - pos >= sz && p[pos] == c);
                }
                left[depth] = m;
                if (pos > lim->max_record)
                    return err_set(err, "object larger than the record limit of %zu bytes", lim->max_record);
            }
            continue;
        }
        if (n - pos < body) { *len = pos + body; return MPS_NEED; }
        if (kind == K_STR && !utf8_valid(p + pos, body))
            return err_set(err, "string at offset %zu is not valid UTF-8", start);
        // JSON and the tools' options cannot carry a key with NUL, so --json
        // output would not pack back: refused here, where it is read.
        if (is_key && kind == K_STR && memchr(p + pos, 0, body))
            return err_set(err, "map key at offset %zu contains a NUL byte", start);
        pos += body;
    }
    if (idx && idx->is_map) {
        if (idx->n) idx->f[idx->n - 1].val_len = (uint32_t)(pos - idx->f[idx->n - 1].val_off);
        if (check_duplicates(p, idx, err)) return MPS_BAD;
    }
    *len = pos;
    return MPS_OK;
}

void mps_index_free(mp_index *idx) {
    free(idx->f);
    idx->f = NULL;
    idx->n = idx->cap = 0;
}
