// safetensors.c — reading (mapped, validated) and writing (F32, BF16, F16) of Hugging
// Face safetensors files. Layout: u64 little-endian N, N bytes of JSON header,
// then the data area; each tensor's data_offsets are relative to the data area.
#include "checkpoint/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/json.h"

// Tensor bytes are used as they lie in the file, which is little-endian.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads little-endian data in place: a little-endian host is needed"
#endif

// Largest integer a JSON number (a double in cJSON) carries exactly.
#define ST_MAX_JSON_INT 9007199254740992.0   // 2^53

static const struct {
    const char *name;
    rl_dtype dtype;
} st_dtypes[] = {{"F32", DT_F32}, {"BF16", DT_BF16}, {"F16", DT_F16}};

static const char *st_dtype_name(rl_dtype t) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
        if (st_dtypes[i].dtype == t) return st_dtypes[i].name;
    return "?";
}

// A JSON number holding a non-negative integer that a double represents exactly.
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_JSON_INT) || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

void st_shape_str(char *buf, size_t size, const int64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
}

// Element count of a shape, or -1 when the product overflows size_t.
static int shape_nelem(const int64_t *shape, int ndim, size_t *out) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > SIZE_MAX) return -1;
        if (__builtin_mul_overflow(n, (size_t)shape[i], &n)) return -1;
    }
    *out = n;
    return 0;
}

// ---- reading ---------------------------------------------------------------

// Parses one header entry {"dtype", "shape", "data_offsets"} into t (data is
// set later) and its byte range [*begin, *end) in the data area.
static int parse_entry(const char *path, const cJSON *e, size_t data_size, st_tensor *t,
                       uint64_t *begin, uint64_t *end, rl_err *err) {
    const char *name = t->name;
    if (!cJSON_IsObject(e)) return err_set(err, "%s: tensor '%s': header entry is not an object", path, name);
    // Other keys are ignored, as the Hugging Face reader ignores them.
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt)) return err_set(err, "%s: tensor '%s': dtype is missing or not a string", path, name);
    size_t d;
    for (d = 0; d < sizeof st_dtypes / sizeof *st_dtypes; d++)
        if (strcmp(dt->valuestring, st_dtypes[d].name) == 0) break;
    if (d == sizeof st_dtypes / sizeof *st_dtypes)
        return err_set(err, "%s: tensor '%s': dtype %s is not supported (F32, BF16 and F16 are read)",
                       path, name, dt->valuestring);
    t->dtype = st_dtypes[d].dtype;

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(sh)) return err_set(err, "%s: tensor '%s': shape is missing or not an array", path, name);
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > ST_MAX_DIMS)
        return err_set(err, "%s: tensor '%s': shape has %d dimensions, more than the %d supported",
                       path, name, ndim, ST_MAX_DIMS);
    t->ndim = 0;
    for (const cJSON *v = sh->child; v; v = v->next) {
        uint64_t dim;
        if (json_uint(v, &dim)) {
            if (cJSON_IsNumber(v) && v->valuedouble < 0)
                return err_set(err, "%s: tensor '%s': shape has a negative dimension %.17g", path, name, v->valuedouble);
            return err_set(err, "%s: tensor '%s': shape dimension %d is not a non-negative integer",
                           path, name, t->ndim);
        }
        t->shape[t->ndim++] = (int64_t)dim;
    }
    char shape_text[256];
    st_shape_str(shape_text, sizeof shape_text, t->shape, t->ndim);
    size_t nbytes;
    if (shape_nelem(t->shape, t->ndim, &t->nelem) ||
        __builtin_mul_overflow(t->nelem, dt_size(t->dtype), &nbytes))
        return err_set(err, "%s: tensor '%s': shape %s has more elements than memory can address",
                       path, name, shape_text);

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t o[2];
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || json_uint(off->child, &o[0]) ||
        json_uint(off->child->next, &o[1])) {
        int ints = cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2;
        for (const cJSON *v = ints ? off->child : NULL; v && ints; v = v->next)
            ints = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble == floor(v->valuedouble);
        if (ints)   // integers, but past what any file (and a double, exactly) holds
            return err_set(err, "%s: tensor '%s': data_offsets [%.0f, %.0f] are out of range (beyond 2^53 bytes, "
                           "and the data area has %zu)", path, name, off->child->valuedouble,
                           off->child->next->valuedouble, data_size);
        return err_set(err, "%s: tensor '%s': data_offsets is not a list of two non-negative integers", path, name);
    }
    if (o[0] > o[1])
        return err_set(err, "%s: tensor '%s': data_offsets [%llu, %llu] begin after they end",
                       path, name, (unsigned long long)o[0], (unsigned long long)o[1]);
    if (o[1] > data_size)
        return err_set(err, "%s: tensor '%s': data_offsets [%llu, %llu] end beyond the data area of %zu bytes "
                       "(file truncated?)", path, name, (unsigned long long)o[0], (unsigned long long)o[1], data_size);
    if (o[1] - o[0] != nbytes)
        return err_set(err, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, shape %s of %s needs %zu",
                       path, name, (unsigned long long)o[0], (unsigned long long)o[1],
                       (unsigned long long)(o[1] - o[0]), shape_text, dt->valuestring, nbytes);
    *begin = o[0];
    *end = o[1];
    return 0;
}

// "__metadata__" is a map of strings to strings; nothing in it is used.
static int check_metadata(const char *path, const cJSON *m, rl_err *err) {
    if (!cJSON_IsObject(m)) return err_set(err, "%s: __metadata__ is not an object", path);
    for (const cJSON *v = m->child; v; v = v->next)
        if (!cJSON_IsString(v)) return err_set(err, "%s: __metadata__ value \"%s\" is not a string", path, v->string);
    return 0;
}

typedef struct {
    uint64_t begin, end;
    size_t index;
} st_range;

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

// Duplicate names (cJSON keeps both) and overlapping byte ranges. Tensors of
// zero bytes overlap nothing. Gaps between tensors are allowed.
static int check_layout(st_file *f, const st_range *ranges, rl_err *err) {
    if (f->n < 2) return 0;
    const st_tensor **by_name = xmalloc(f->n * sizeof *by_name);
    for (size_t i = 0; i < f->n; i++) by_name[i] = &f->t[i];
    qsort(by_name, f->n, sizeof *by_name, cmp_name);
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(by_name[i - 1]->name, by_name[i]->name) == 0) {
            err_set(err, "%s: tensor '%s' is named twice in the header", f->path, by_name[i]->name);
            free(by_name);
            return -1;
        }
    free(by_name);

    st_range *r = xmalloc(f->n * sizeof *r);
    size_t m = 0;
    for (size_t i = 0; i < f->n; i++)
        if (ranges[i].end > ranges[i].begin) r[m++] = ranges[i];
    qsort(r, m, sizeof *r, cmp_range);
    for (size_t i = 1; i < m; i++)
        if (r[i].begin < r[i - 1].end) {
            err_set(err, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' at [%llu, %llu]", f->path,
                    f->t[r[i].index].name, (unsigned long long)r[i].begin, (unsigned long long)r[i].end,
                    f->t[r[i - 1].index].name, (unsigned long long)r[i - 1].begin, (unsigned long long)r[i - 1].end);
            free(r);
            return -1;
        }
    free(r);
    return 0;
}

// Parses and checks the header; fills f->t with data pointers into the data area.
static int parse_header(st_file *f, const char *json, size_t len, const uint8_t *data, size_t data_size,
                        rl_err *err) {
    if (!utf8_valid((const uint8_t *)json, len)) return err_set(err, "%s: header is not valid UTF-8", f->path);
    // JSON has no raw control bytes but whitespace; a NUL would also cut a name short.
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)json[i] < 0x20 && json[i] != ' ' && json[i] != '\t' && json[i] != '\n' && json[i] != '\r')
            return err_set(err, "%s: header has a control byte 0x%02x at byte %zu (not JSON)", f->path,
                           (unsigned char)json[i], i);
    const char *end = NULL;
    errno = 0;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root && errno == ENOMEM)   // from cJSON's malloc
        return err_set(err, "%s: out of memory parsing its header (%zu bytes of JSON)", f->path, len);
    if (!root) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return err_set(err, "%s: header is not valid JSON (error near byte %zu of %zu)", f->path, at, len);
    }
    for (const char *p = end; p < json + len; p++)    // the writer pads with spaces
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return err_set(err, "%s: header has bytes after its JSON object (at byte %zu of %zu)", f->path,
                           (size_t)(p - json), len);
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(err, "%s: header is not a JSON object", f->path);
    }

    size_t n = 0;
    for (const cJSON *e = root->child; e; e = e->next) n++;
    f->t = xmalloc(n * sizeof *f->t);
    st_range *ranges = xmalloc(n * sizeof *ranges);
    int rc = 0;
    for (const cJSON *e = root->child; e && rc == 0; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            rc = check_metadata(f->path, e, err);
            continue;
        }
        st_tensor *t = &f->t[f->n];
        memset(t, 0, sizeof *t);
        t->name = xstrdup(e->string);
        f->n++;
        rc = parse_entry(f->path, e, data_size, t, &ranges[f->n - 1].begin, &ranges[f->n - 1].end, err);
        ranges[f->n - 1].index = f->n - 1;
        if (rc == 0) t->data = data + ranges[f->n - 1].begin;
    }
    if (rc == 0) rc = check_layout(f, ranges, err);
    free(ranges);
    cJSON_Delete(root);
    return rc;
}

st_file *st_open(const char *path, rl_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err_set(err, "cannot open: %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb)) {
        err_set(err, "cannot stat: %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        err_set(err, "%s: not a regular file (a safetensors file is mapped into memory)", path);
        close(fd);
        return NULL;
    }
    if (sb.st_size == 0) {
        err_set(err, "%s: file is empty (0 bytes), not a safetensors file", path);
        close(fd);
        return NULL;
    }
    if (sb.st_size < 8) {
        err_set(err, "%s: file is %lld bytes, too short for a safetensors file (8-byte header length, header, data)",
                path, (long long)sb.st_size);
        close(fd);
        return NULL;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        err_set(err, "%s: file of %lld bytes is larger than memory can map", path, (long long)sb.st_size);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        err_set(err, "cannot map: %s: %s", path, strerror(map_errno));
        return NULL;
    }

    st_file *f = xmalloc(sizeof *f);
    f->path = xstrdup(path);
    f->map = map;
    f->map_size = size;
    f->t = NULL;
    f->n = 0;

    const uint8_t *p = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen > ST_MAX_HEADER) {
        err_set(err, "%s: header length %llu is larger than the %u-byte limit (not a safetensors file?)", path,
                (unsigned long long)hlen, ST_MAX_HEADER);
        st_close(f);
        return NULL;
    }
    if (hlen > size - 8) {
        err_set(err, "%s: header length %llu goes beyond the end of the file (%zu bytes)", path,
                (unsigned long long)hlen, size);
        st_close(f);
        return NULL;
    }
    size_t data_at = 8 + (size_t)hlen;
    if (parse_header(f, (const char *)p + 8, (size_t)hlen, p + data_at, size - data_at, err)) {
        st_close(f);
        return NULL;
    }
    return f;
}

void st_close(st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    if (f->map) munmap(f->map, f->map_size);
    free(f->path);
    free(f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

void st_read_f32_part(const st_tensor *t, size_t at, size_t n, float *dst) {
    if (t->dtype == DT_F32) {
        if (n) memcpy(dst, (const char *)t->data + 4 * at, n * 4);
        return;
    }
    // 16-bit data may be unaligned in the mapping: convert through an aligned buffer.
    uint16_t buf[4096];
    const uint8_t *src = (const uint8_t *)t->data + 2 * at;
    for (size_t i = 0; i < n; i += 4096) {
        size_t k = n - i < 4096 ? n - i : 4096;
        memcpy(buf, src + 2 * i, 2 * k);
        if (t->dtype == DT_BF16) dt_bf16_to_f32(dst + i, buf, k);
        else if (t->dtype == DT_F16) dt_f16_to_f32(dst + i, buf, k);
        else abort();   // st_open admits F32, BF16 and F16 only
    }
}

void st_read_f32(const st_tensor *t, float *dst) { st_read_f32_part(t, 0, t->nelem, dst); }

void st_let_go(const st_tensor *t) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uintptr_t a = (uintptr_t)t->data, b = a + t->nelem * dt_size(t->dtype), p = (uintptr_t)page;
    a = (a + p - 1) & ~(p - 1);   // whole pages within the tensor: its neighbours keep theirs
    b &= ~(p - 1);
    // Advice about a read-only private mapping: the data stay in the file,
    // so a failure only leaves the pages where they were.
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

// ---- writing ---------------------------------------------------------------

// Builds the header (padded with spaces to a multiple of 8 bytes, as the
// Hugging Face writer does; "__metadata__" {"format": "pt"}, as torch's
// save_file writes and transformers expects); checks names and shapes on the way.
static int build_header(const char *path, const st_out *t, size_t n, rl_dtype dtype, sbuf *h, rl_err *err) {
    uint64_t off = 0, esize = dt_size(dtype);
    sbuf_printf(h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (!name || !*name || !utf8_valid((const uint8_t *)name, strlen(name)) || !strcmp(name, "__metadata__"))
            return err_set(err, "%s: tensor %zu: name '%s' cannot be a safetensors tensor name", path, i,
                           name ? name : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(t[j].name, name) == 0) return err_set(err, "%s: tensor '%s' is given twice", path, name);
        if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS)
            return err_set(err, "%s: tensor '%s': %d dimensions (0 to %d are written)", path, name, t[i].ndim,
                           ST_MAX_DIMS);
        size_t nelem, nbytes;
        if (shape_nelem(t[i].shape, t[i].ndim, &nelem) || __builtin_mul_overflow(nelem, (size_t)esize, &nbytes) ||
            nbytes > (size_t)ST_MAX_JSON_INT - off)
            return err_set(err, "%s: tensor '%s': shape has a negative dimension or too many elements", path, name);
        if (nelem && !t[i].data) return err_set(err, "%s: tensor '%s': no data", path, name);
        sbuf_putc(h, ',');
        json_put_str(h, name, strlen(name));
        sbuf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(dtype));
        for (int d = 0; d < t[i].ndim; d++) sbuf_printf(h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        sbuf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                    (unsigned long long)(off + nbytes));
        off += nbytes;
    }
    sbuf_putc(h, '}');
    while (h->len % 8) sbuf_putc(h, ' ');
    if (h->len > ST_MAX_HEADER)
        return err_set(err, "%s: header of %zu bytes is larger than the %u-byte limit", path, h->len, ST_MAX_HEADER);
    return 0;
}

// Where a file's bytes go: write(2) to fd, or with O_DIRECT whole aligned
// blocks staged in blk (the device's DMA reads them: no page cache is filled).
// A file system that refuses O_DIRECT at open or at the first write gets the
// bytes through the page cache instead.
#define ST_BLOCK 4096                 // O_DIRECT alignment: offsets, lengths, addresses
#define ST_STAGE (16u << 20)          // bytes a direct write takes (a multiple of ST_BLOCK)
typedef struct {
    int fd;
    int direct;       // O_DIRECT is on
    uint8_t *blk;     // [ST_STAGE], ST_BLOCK-aligned (direct)
    size_t fill;      // bytes staged in blk
    uint64_t written; // bytes of the file written (staged ones not counted)
} st_sink;

// Writes the staged bytes: whole blocks (the tail zero-padded to one when
// last; st_sink_end cuts the file back). Turns O_DIRECT off when the file
// system refuses it.
static int sink_flush(st_sink *s, int last) {
    size_t n = s->fill;
    if (last && n % ST_BLOCK) {
        size_t pad = ST_BLOCK - n % ST_BLOCK;
        memset(s->blk + n, 0, pad);
        n += pad;
    }
    size_t done = 0;
    while (s->direct && done < n) {
        ssize_t w = write(s->fd, s->blk + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EINVAL && done == 0 && s->written == 0) {   // refused at the first write
            int fl = fcntl(s->fd, F_GETFL);
            if (fl < 0 || fcntl(s->fd, F_SETFL, fl & ~O_DIRECT)) return -1;
            s->direct = 0;
            break;
        }
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    if (!s->direct && fd_write_all(s->fd, s->blk + done, s->fill - done)) return -1;
    s->written += s->fill;
    s->fill = 0;
    return 0;
}

static int sink_put(st_sink *s, const void *p, size_t n) {
    if (!s->blk) {
        s->written += n;
        return fd_write_all(s->fd, p, n);
    }
    for (const uint8_t *q = p; n;) {
        size_t k = ST_STAGE - s->fill < n ? ST_STAGE - s->fill : n;
        memcpy(s->blk + s->fill, q, k);
        s->fill += k, q += k, n -= k;
        if (s->fill == ST_STAGE && sink_flush(s, 0)) return -1;
    }
    return 0;
}

// The staged tail written, and the file cut to its size (a padded tail).
static int sink_end(st_sink *s) {
    if (!s->blk || !s->fill) return 0;
    int padded = s->direct && s->fill % ST_BLOCK;
    if (sink_flush(s, 1)) return -1;
    return padded && ftruncate(s->fd, (off_t)s->written) ? -1 : 0;
}

// One tensor's data at dtype: f32 as it is, else converted (round to nearest
// even) in chunks through buf (ST_CHUNK elements).
#define ST_CHUNK 65536
static int write_data(st_sink *s, const float *x, size_t nelem, rl_dtype dtype, uint16_t *buf) {
    if (dtype == DT_F32) return sink_put(s, x, nelem * 4);
    for (size_t i = 0; i < nelem; i += ST_CHUNK) {
        size_t k = nelem - i < ST_CHUNK ? nelem - i : ST_CHUNK;
        if (dtype == DT_BF16) dt_f32_to_bf16(buf, x + i, k);
        else dt_f32_to_f16(buf, x + i, k);
        if (sink_put(s, buf, 2 * k)) return -1;
    }
    return 0;
}

static int write_file(const char *path, const st_out *t, size_t n, rl_dtype dtype, int direct, rl_err *err) {
    if (dtype != DT_F32 && dtype != DT_BF16 && dtype != DT_F16)
        return err_set(err, "%s: safetensors files are written in F32, BF16 or F16, not %s", path, dt_name(dtype));
    sbuf h = {0};
    if (build_header(path, t, n, dtype, &h, err)) {
        sbuf_free(&h);
        return -1;
    }
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)h.len >> (8 * i));

    const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    st_sink s = {.fd = direct ? open(path, flags | O_DIRECT, 0644) : -1, .direct = direct};
    if (s.fd < 0 && direct && errno == EINVAL) s.direct = 0;   // a file system without O_DIRECT
    if (s.fd < 0 && !s.direct) s.fd = open(path, flags, 0644);
    if (s.fd < 0) {
        sbuf_free(&h);
        return err_set(err, "cannot create: %s: %s", path, strerror(errno));
    }
    if (s.direct && posix_memalign((void **)&s.blk, ST_BLOCK, ST_STAGE)) s.blk = NULL, s.direct = 0;
    if (s.direct == 0 && direct) {
        int fl = fcntl(s.fd, F_GETFL);
        if (fl >= 0 && (fl & O_DIRECT)) fcntl(s.fd, F_SETFL, fl & ~O_DIRECT);
    }
    uint16_t *buf = dtype == DT_F32 ? NULL : xmalloc(ST_CHUNK * sizeof *buf);
    const char *what = "write";
    int rc = sink_put(&s, len, 8) || sink_put(&s, h.data, h.len);
    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t nelem = 0;
        if (shape_nelem(t[i].shape, t[i].ndim, &nelem) == 0 && nelem)   // checked by build_header
            rc = write_data(&s, t[i].data, nelem, dtype, buf);
    }
    if (rc == 0) rc = sink_end(&s);
    if (rc == 0 && fsync(s.fd)) {
        what = "fsync";
        rc = -1;
    }
    int e = errno;
    if (close(s.fd) && rc == 0) {
        what = "close";
        rc = -1;
        e = errno;
    }
    free(buf);
    free(s.blk);
    sbuf_free(&h);
    if (rc) {
        unlink(path);   // a failed write leaves no partial file behind
        return err_set(err, "cannot %s: %s: %s", what, path, strerror(e));
    }
    return 0;
}

int st_write(const char *path, const st_out *t, size_t n, rl_dtype dtype, rl_err *err) {
    return write_file(path, t, n, dtype, 0, err);
}

int st_write_direct(const char *path, const st_out *t, size_t n, rl_dtype dtype, rl_err *err) {
    return write_file(path, t, n, dtype, 1, err);
}

int st_write_f32(const char *path, const st_out *t, size_t n, rl_err *err) { return st_write(path, t, n, DT_F32, err); }

uint64_t st_data_bytes(const st_out *t, rl_dtype dtype) {
    size_t nelem = 0;
    if (shape_nelem(t->shape, t->ndim, &nelem)) return UINT64_MAX;
    return (uint64_t)nelem * dt_size(dtype);
}
