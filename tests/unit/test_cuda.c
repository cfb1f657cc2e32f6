// test_cuda.c — the CUDA backend against the CPU backend (ops.h): every
// operation on the same fresh random inputs, uploaded to each, then the whole
// model built on each from one seed. The CPU backend is the reference here
// (test_backward.c and test_model.c hold it to double-precision references),
// so these cases say how close the GPU must come to it:
//   - f32 operations: max |gpu − cpu| / max |cpu| <= 1e-5 (F32_TOL), the
//     error relative to the tensor's scale: both accumulate in f32 but in
//     other orders (cuBLAS against OpenBLAS, tree reductions, atomics), and
//     the roundings of sums of up to a thousand terms come to 1e-7 .. 1e-6;
//   - copies (embed, gather, scatter, add, zero) are exact;
//   - RLPIPE_TF32=1 products <= 5e-4 (inputs rounded to 10-bit mantissas,
//     about 3e-4 measured on random products);
//   - 16-bit, int8 and fp8 weights: products of 1..8 rows read the weights
//     as they are, so they are f32 products (1e-5); of 64 rows and more the
//     GPU rounds the inputs to bf16/f16 (8 or 11 bits), so 1e-2;
//   - bf16 rounding of activations (round_bf16) is exact, and so are
//     products with int8 input rows (W8A8, ops.h ACT_I8): the same
//     quantization, int32 sums, and the same two f32 multiplies after;
//   - products with fp8 input rows (ACT_FP8): the same quantization, exact
//     products, f32 sums in other orders: 1e-5 at 1..8 rows; 5e-4 at more
//     (FP8_TOL: fp8 tensor cores add within a block of products at less than
//     f32 precision before the sums are promoted to f32);
//   - sampling: the same rule (smp_draw_u) on the same logits and uniforms;
//   - the whole model: log-probs within 1e-4 nats, gradients within 1e-4 of
//     each tensor's norm (f32), log-probs within 0.1 nats with bf16 weights,
//     with bf16 activations and W8A8 int8 (with the f32 head too), 0.5 with
//     W8A8 fp8 (see the cases).
// Sizes are awkward on purpose: odd widths, K not a multiple of 8, N of 1, 3,
// 9 and a few hundred, grouped-query attention with NH/NKV = 4, sequences
// at different cache positions and rows. Every output starts as NaN (or a
// random value where the op accumulates), so unwritten elements fail.
// Measured errors are printed as "# ..." lines.
//
// Without a GPU, or in a build without CUDA (ops_cuda() says why), every case
// prints "SKIP name: why" and the program exits 0. Arguments name the cases
// to run (all by default). Run from the repository root (models/tiny).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "checkpoint/config.h"
#include "dtype.h"
#include "model/model.h"
#include "model/ops.h"
#include "model/sampling.h"
#include "rng.h"

#define F32_TOL 1e-5       // f32 operations, relative to the tensor's largest element
#define TF32_TOL 5e-4      // f32 products with RLPIPE_TF32=1
#define LOWP_TOL 1e-2      // 16-bit and 8-bit weights at 64 rows or more: inputs rounded to 16 bits
#define FP8_TOL 5e-4       // fp8 input rows and weights at more than 8 rows: fp8 tensor cores' sums
#define ADAMW_TOL 1e-6     // three AdamW steps: elementwise, no sums
#define MODEL_TOL 1e-4     // whole model, f32: log-probs (nats) and gradients (norm-wise)
#define MODEL_BF16_TOL 0.1  // whole model, bf16 weights, scoring: activations rounded to bf16 on the GPU

static const rl_ops *CPU, *GPU;
static rl_rng R;

// ---- one host array on both backends ----------------------------------------

typedef struct {
    void *c, *g;   // the CPU's copy, the GPU's
} buf;

static buf both(const void *host, size_t bytes) {
    buf b = {CPU->alloc(bytes), GPU->alloc(bytes)};
    CPU->upload(b.c, host, bytes);
    GPU->upload(b.g, host, bytes);
    return b;
}

// n floats of NaN on both: an output whose unwritten elements then show
static buf nans(size_t n) {
    float *h = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    buf b = both(h, n * sizeof(float));
    free(h);
    return b;
}

static void release(buf *b) {
    if (b->c) CPU->free(b->c);
    if (b->g) GPU->free(b->g);
    b->c = b->g = NULL;
}

static void *fetch(const rl_ops *o, const void *src, size_t bytes) {
    void *h = malloc(bytes + 1);
    o->download(h, src, bytes);
    return h;
}

// The same call on each backend: O is the backend, D(b) its copy of buffer b,
// DM(m) its rl_mat of matrix m.
#define BOTH(call)                                                                                         \
    do {                                                                                                   \
        for (int on_gpu_ = 0; on_gpu_ < 2; on_gpu_++) {                                                    \
            const rl_ops *O = on_gpu_ ? GPU : CPU;                                                         \
            call;                                                                                          \
        }                                                                                                  \
    } while (0)
#define D(b) (on_gpu_ ? (b).g : (b).c)
#define DM(m) (on_gpu_ ? &(m).g : &(m).c)

// max |gpu − cpu| / max |cpu| over the first n floats of b: the error
// relative to the tensor's scale (NaN when either holds a NaN).
static double rel_err(const buf *b, size_t n) {
    float *c = fetch(CPU, b->c, n * sizeof(float)), *g = fetch(GPU, b->g, n * sizeof(float));
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (c[i] != c[i] || g[i] != g[i]) {
            e = NAN;
            break;
        }
        double d = c[i] == g[i] ? 0 : fabs((double)g[i] - c[i]);   // equal infinities: 0
        if (d != d) d = INFINITY;
        if (d > e) e = d;
        if (fabs(c[i]) > m) m = fabs(c[i]);
    }
    free(c);
    free(g);
    return m > 0 ? e / m : e;
}

// Elements of size sz (n of them) whose bits differ between the two copies.
static size_t n_differ(const buf *b, size_t n, size_t sz) {
    char *c = fetch(CPU, b->c, n * sz), *g = fetch(GPU, b->g, n * sz);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(c + i * sz, g + i * sz, sz) != 0;
    free(c);
    free(g);
    return k;
}

// The larger of a running worst w and e, where a NaN, once in, stays.
static double worse(double w, double e) { return w != w || e <= w ? w : e; }

// ---- random inputs (host) ----------------------------------------------------

static float *normal(size_t n, double scale) {
    float *x = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal(&R));
    return x;
}

static int32_t *below(size_t n, int32_t bound) {   // uniform in [0, bound)
    int32_t *x = malloc(n * sizeof(int32_t) + 1);
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)(rng_u64(&R) % (uint64_t)bound);
    return x;
}

static buf both_normal(size_t n, double scale) {
    float *h = normal(n, scale);
    buf b = both(h, n * sizeof(float));
    free(h);
    return b;
}

static buf both_below(size_t n, int32_t bound) {
    int32_t *h = below(n, bound);
    buf b = both(h, n * sizeof(int32_t));
    free(h);
    return b;
}

// A weight matrix W (M, K) from f32 values at dtype dt (int8: quantised in
// groups of `group`; fp8: one scale per row, group K), on both backends.
typedef struct {
    rl_mat c, g;
    buf data, scales;
} mat;

static mat make_mat(rl_dtype dt, int group, int M, int K, const float *w) {
    size_t n = (size_t)M * K, bytes = n * dt_size(dt), ns = 0;
    void *data = malloc(bytes + 1);
    float *sc = NULL;
    switch (dt) {
    case DT_F32: memcpy(data, w, bytes); break;
    case DT_BF16: dt_f32_to_bf16(data, w, n); break;
    case DT_F16: dt_f32_to_f16(data, w, n); break;
    case DT_I8:
        ns = (size_t)M * ((K + group - 1) / group);
        sc = malloc(ns * sizeof(float));
        dt_quantize_i8(data, sc, w, (size_t)M, (size_t)K, group);
        break;
    case DT_FP8:
        group = K;
        ns = (size_t)M;
        sc = malloc(ns * sizeof(float));
        dt_quantize_fp8(data, sc, w, (size_t)M, (size_t)K);
        break;
    }
    mat m = {.data = both(data, bytes)};
    if (sc) m.scales = both(sc, ns * sizeof(float));
    int g = dt == DT_I8 || dt == DT_FP8 ? group : 0;
    m.c = (rl_mat){.dtype = dt, .rows = M, .cols = K, .group = g, .data = m.data.c, .scales = sc ? m.scales.c : NULL};
    m.g = (rl_mat){.dtype = dt, .rows = M, .cols = K, .group = g, .data = m.data.g, .scales = sc ? m.scales.g : NULL};
    free(data);
    free(sc);
    return m;
}

// The weights of a W8A8 product (ops.h rl_act): int8 (ACT_I8) or fp8
// (ACT_FP8) with one scale per row, whose input rows the product quantizes.
static mat make_w8a8(rl_act act, int M, int K, const float *w) {
    mat m = make_mat(act == ACT_I8 ? DT_I8 : DT_FP8, K, M, K, w);
    m.c.act = m.g.act = act;
    return m;
}

static void free_mat(mat *m) {
    release(&m->data);
    release(&m->scales);
}

// The weight precisions of the sampler: dtype and int8 group.
static const struct {
    rl_dtype dt;
    int group;
    const char *name;
} LOWP[] = {{DT_BF16, 0, "bf16"}, {DT_F16, 0, "f16"}, {DT_I8, 32, "int8/32"}, {DT_I8, 64, "int8/64"},
            {DT_FP8, 0, "fp8"}};
#define NLOWP (sizeof LOWP / sizeof *LOWP)

static const int ROWS[] = {1, 3, 9, 300};   // N: one row, a few, more than 8, a few hundred
#define NROWS (sizeof ROWS / sizeof *ROWS)

// ---- copies: embed, gather, scatter, add, zero ---------------------------------

static void embed_gives_the_cpus_rows_exactly_at_every_weight_dtype(void) {
    // widths whose last int8 group is short: 97 = 3·32 + 1 = 64 + 33, 130 = 4·32 + 2 = 2·64 + 2
    const int Cs[] = {97, 130};
    const struct { rl_dtype dt; int group; const char *name; } dts[] = {
        {DT_F32, 0, "f32"}, {DT_BF16, 0, "bf16"}, {DT_F16, 0, "f16"}, {DT_I8, 32, "int8/32"}, {DT_I8, 64, "int8/64"},
        {DT_FP8, 0, "fp8"}};
    enum { V = 301 };
    for (size_t c = 0; c < 2; c++)
        for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
            int C = Cs[c];
            float *w = normal((size_t)V * C, 1.0);
            mat T = make_mat(dts[d].dt, dts[d].group, V, C, w);
            for (size_t r = 0; r < NROWS; r++) {
                int N = ROWS[r];
                buf ids = both_below((size_t)N, V), out = nans((size_t)N * C);
                BOTH(O->embed(D(out), DM(T), D(ids), N));
                size_t k = n_differ(&out, (size_t)N * C, sizeof(float));
                CHECK(k == 0, "%s table (%d, %d), N=%d: %zu of %d values differ from the CPU's; expected equal bits",
                      dts[d].name, V, C, N, k, N * C);
                release(&ids);
                release(&out);
            }
            free_mat(&T);
            free(w);
        }
}

static void gather_and_scatter_rows_move_the_cpus_rows_exactly(void) {
    enum { W = 97 };
    for (size_t r = 0; r < NROWS; r++) {
        int N = ROWS[r], ND = N + 50;   // the destination of scatter has rows left alone
        // gather: rows with repeats from a source of ND rows
        buf src = both_normal((size_t)ND * W, 1.0), rows = both_below((size_t)N, ND), dst = nans((size_t)N * W);
        BOTH(O->gather_rows(D(dst), D(src), DT_F32, D(rows), N, W));
        size_t k = n_differ(&dst, (size_t)N * W, sizeof(float));
        CHECK(k == 0, "gather N=%d W=%d: %zu values differ from the CPU's; expected equal bits", N, W, k);
        release(&rows);
        release(&dst);
        // scatter: N distinct rows (a shuffled prefix) of a random destination
        int32_t *perm = malloc((size_t)ND * sizeof(int32_t));
        for (int i = 0; i < ND; i++) perm[i] = i;
        for (int i = ND - 1; i > 0; i--) {
            int j = (int)(rng_u64(&R) % (uint64_t)(i + 1));
            int32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        buf srows = both(perm, (size_t)N * sizeof(int32_t)), from = both_normal((size_t)N * W, 1.0);
        BOTH(O->scatter_rows(D(src), DT_F32, D(srows), D(from), N, W));
        k = n_differ(&src, (size_t)ND * W, sizeof(float));
        CHECK(k == 0, "scatter N=%d into %d rows, W=%d: %zu values differ from the CPU's; expected equal bits", N, ND,
              W, k);
        free(perm);
        release(&srows);
        release(&from);
        release(&src);
    }
}

static void add_and_zero_give_the_cpus_values_exactly(void) {
    const size_t ns[] = {1, 3, 9, 1000003};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        size_t n = ns[i];
        buf x = both_normal(n, 1.0), y = both_normal(n, 1.0);
        BOTH(O->add(D(x), D(y), n));
        size_t k = n_differ(&x, n, sizeof(float));
        CHECK(k == 0, "add n=%zu: %zu sums differ from the CPU's; expected equal bits", n, k);
        BOTH(O->zero(D(x), n));
        float *g = fetch(GPU, x.g, n * sizeof(float));
        size_t nz = 0;
        for (size_t j = 0; j < n; j++) nz += g[j] != 0;
        free(g);
        CHECK(nz == 0, "zero n=%zu: %zu elements are not 0", n, nz);
        release(&x);
        release(&y);
    }
}

static void scale_gives_the_cpus_values_exactly(void) {
    const size_t ns[] = {1, 3, 9, 1000003};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        size_t n = ns[i];
        buf x = both_normal(n, 1.0);
        BOTH(O->scale(D(x), 0.37f, n));
        size_t k = n_differ(&x, n, sizeof(float));
        CHECK(k == 0, "scale n=%zu: %zu products differ from the CPU's; expected equal bits", n, k);
        release(&x);
    }
}

// Values whose rounding to bf16 is a case of its own: ties either way, the
// largest finite values (one rounds to infinity), infinities, NaNs with
// payloads (kept, made quiet), subnormals, signed zeros.
static const uint32_t BF16_EDGES[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f807fffu, 0x3f808001u,
                                      0x7f7f7fffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                      0x7fc00000u, 0x7f800001u, 0xff812345u, 0x7fbfffffu, 0x00000001u,
                                      0x00008000u, 0x80018000u, 0x007fffffu, 0x00000000u, 0x80000000u};

static void round_bf16_gives_the_cpus_bits_ties_nan_and_infinities_too(void) {
    const size_t ns[] = {1, 3, 20, 1000003};
    size_t ne = sizeof BF16_EDGES / sizeof *BF16_EDGES;
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        size_t n = ns[i];
        float *h = normal(n, 1.0);
        for (size_t j = 0; j < n; j++) {   // the edges first, then values of every scale
            if (j < ne) memcpy(&h[j], &BF16_EDGES[j], 4);
            else h[j] = ldexpf(h[j], (int)(rng_u64(&R) % 200) - 100);
        }
        buf x = both(h, n * sizeof(float));
        BOTH(O->round_bf16(D(x), n));
        size_t k = n_differ(&x, n, sizeof(float));
        CHECK(k == 0, "round_bf16 n=%zu: %zu values differ from the CPU's; expected equal bits", n, k);
        release(&x);
        free(h);
    }
}

// ---- f32 forward operations ----------------------------------------------------

static void rmsnorm_matches_cpu_within_1e_5_also_in_place(void) {
    const int Cs[] = {97, 2048};
    for (size_t c = 0; c < 2; c++)
        for (size_t r = 0; r < NROWS; r++) {
            int N = ROWS[r], C = Cs[c];
            size_t n = (size_t)N * C;
            buf x = both_normal(n, 2.0), g = both_normal((size_t)C, 1.0), out = nans(n);
            BOTH(O->rmsnorm(D(out), D(x), D(g), N, C, 1e-5f));
            double e = rel_err(&out, n);
            BOTH(O->rmsnorm(D(x), D(x), D(g), N, C, 1e-6f));   // out = x
            double ei = rel_err(&x, n);
            printf("# rmsnorm N=%d C=%d: relative error %.2e, in place %.2e\n", N, C, e, ei);
            CHECK(e <= F32_TOL && ei <= F32_TOL, "N=%d C=%d: max|gpu - cpu| / max|cpu| = %g, in place %g; bound 1e-5",
                  N, C, e, ei);
            release(&x);
            release(&g);
            release(&out);
        }
}

// Shapes (M, K) of products: K odd and not a multiple of 8 in each.
static const struct { int M, K; } MK[] = {{45, 97}, {257, 130}, {513, 1001}};
#define NMK (sizeof MK / sizeof *MK)

static void matmul_f32_matches_cpu_within_1e_5_with_and_without_bias(void) {
    for (size_t s = 0; s < NMK; s++)
        for (size_t r = 0; r < NROWS; r++) {
            int N = ROWS[r], M = MK[s].M, K = MK[s].K, with_bias = (int)((s + r) % 2);
            float *w = normal((size_t)M * K, 1.0);
            mat W = make_mat(DT_F32, 0, M, K, w);
            buf x = both_normal((size_t)N * K, 1.0), bias = both_normal((size_t)M, 1.0), out = nans((size_t)N * M);
            BOTH(O->matmul(D(out), D(x), DM(W), with_bias ? D(bias) : NULL, N));
            double e = rel_err(&out, (size_t)N * M);
            printf("# matmul f32 N=%d M=%d K=%d bias=%d: relative error %.2e\n", N, M, K, with_bias, e);
            CHECK(e <= F32_TOL, "N=%d M=%d K=%d bias=%d: max|gpu - cpu| / max|cpu| = %g, bound 1e-5", N, M, K,
                  with_bias, e);
            free(w);
            free_mat(&W);
            release(&x);
            release(&bias);
            release(&out);
        }
}

// Runs this program again as a child with RLPIPE_TF32=1 and the one case
// `name` (the CUDA backend reads the variable once, when it starts): its
// output (stdout and stderr) into out, its wait status into *status.
static int rerun_with_tf32(const char *name, char *out, size_t size, int *status) {
    int fd[2];
    if (pipe(fd) < 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        setenv("RLPIPE_TF32", "1", 1);
        execl("/proc/self/exe", "test_cuda", name, (char *)NULL);
        fprintf(stderr, "exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    size_t len = 0;
    char sink[4096];
    for (;;) {   // keep reading to the end, so that the child never blocks on a full pipe
        ssize_t k = len + 1 < size ? read(fd[0], out + len, size - 1 - len) : read(fd[0], sink, sizeof sink);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        if (len + 1 < size) len += (size_t)k;
    }
    out[len] = 0;
    close(fd[0]);
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR) return -1;
    return 0;
}

// With RLPIPE_TF32=1 the f32 products use TF32 tensor cores. This case runs
// itself again in a child process with the variable set (see main).
static void matmul_with_RLPIPE_TF32_1_uses_tf32_within_5e_4_of_cpu(void) {
    const char *tf = getenv("RLPIPE_TF32");
    if (!tf || strcmp(tf, "1") != 0) {   // the parent: run the child, relay its lines and verdict
        static char out[1 << 16];
        int status = 0;
        CHECK(rerun_with_tf32(check_case, out, sizeof out, &status) == 0, "cannot run /proc/self/exe: %s",
              strerror(errno));
        char pass[256], fail[256];
        snprintf(pass, sizeof pass, "PASS %s\n", check_case);
        snprintf(fail, sizeof fail, "FAIL %s: ", check_case);
        const char *f = strstr(out, fail);
        for (char *l = out; *l;) {   // the child's measurements
            char *e = strchr(l, '\n');
            if (e) *e = 0;
            if (l[0] == '#') printf("%s (RLPIPE_TF32=1)\n", l);
            if (!e) break;
            *e = '\n';
            l = e + 1;
        }
        int clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        CHECK(clean && strstr(out, pass) && !f, "the case run with RLPIPE_TF32=1 %s: %.600s",
              WIFSIGNALED(status) ? "was killed by a signal" : clean ? "did not pass" : "exited non-zero",
              f ? f : out);
        return;
    }
    // The child. K = 1024 random products per output: TF32 rounding gives
    // about 3e-4 relative (3e-8 in f32), so an error within the f32 bound
    // means the variable was not honoured.
    enum { N = 256, M = 512, K = 1024 };
    float *w = normal((size_t)M * K, 1.0);
    mat W = make_mat(DT_F32, 0, M, K, w);
    buf x = both_normal((size_t)N * K, 1.0), out = nans((size_t)N * M);
    BOTH(O->matmul(D(out), D(x), DM(W), NULL, N));
    double e = rel_err(&out, (size_t)N * M);
    buf dout = both_normal((size_t)N * M, 1.0), dx = nans((size_t)N * K), dW = both_normal((size_t)M * K, 1.0);
    BOTH(O->matmul_dx(D(dx), D(dout), DM(W), N, 0));
    double edx = rel_err(&dx, (size_t)N * K);
    BOTH(O->matmul_dw(D(dW), NULL, D(dout), D(x), N, M, K));
    double edw = rel_err(&dW, (size_t)M * K);
    printf("# matmul N=%d M=%d K=%d: relative error %.2e; matmul_dx %.2e, matmul_dw %.2e\n", N, M, K, e, edx, edw);
    CHECK(e <= TF32_TOL && edx <= TF32_TOL && edw <= TF32_TOL,
          "max|gpu - cpu| / max|cpu|: matmul %g, matmul_dx %g, matmul_dw %g; bound 5e-4", e, edx, edw);
    CHECK(e > F32_TOL, "matmul error %g is within f32's 1e-5: RLPIPE_TF32=1 did not make the product use TF32 "
          "(expected about 3e-4)", e);
    free(w);
    free_mat(&W);
    release(&x);
    release(&out);
    release(&dout);
    release(&dx);
    release(&dW);
}

// 16-bit and 8-bit weights at n rows for each of rows[]: the largest error.
static void lowp_matmul(const int *rows, size_t nrows, double bound, const char *why) {
    // K = 97 and 1001 take the decode kernel's scalar path; K = 1024 (a
    // multiple of 16) its vectorised one, 16-byte loads, int8 groups by shift.
    const struct { int M, K; } shapes[] = {{61, 97}, {300, 1001}, {257, 1024}};
    for (size_t s = 0; s < 3; s++)
        for (size_t d = 0; d < NLOWP; d++) {
            int M = shapes[s].M, K = shapes[s].K;
            float *w = normal((size_t)M * K, 1.0);
            mat W = make_mat(LOWP[d].dt, LOWP[d].group, M, K, w);
            buf bias = both_normal((size_t)M, 1.0);
            for (size_t r = 0; r < nrows; r++) {
                int N = rows[r], with_bias = (int)(r % 2);
                buf x = both_normal((size_t)N * K, 1.0), out = nans((size_t)N * M);
                BOTH(O->matmul(D(out), D(x), DM(W), with_bias ? D(bias) : NULL, N));
                double e = rel_err(&out, (size_t)N * M);
                printf("# matmul %s N=%d M=%d K=%d bias=%d: relative error %.2e\n", LOWP[d].name, N, M, K, with_bias,
                       e);
                CHECK(e <= bound, "%s weights, N=%d M=%d K=%d: max|gpu - cpu| / max|cpu| = %g, bound %g (%s)",
                      LOWP[d].name, N, M, K, e, bound, why);
                release(&x);
                release(&out);
            }
            free(w);
            free_mat(&W);
            release(&bias);
        }
}

static void matmul_16bit_and_8bit_weights_at_1_to_8_rows_read_weights_exactly_within_1e_5(void) {
    const int rows[] = {1, 3, 5, 8};
    lowp_matmul(rows, 4, F32_TOL, "1..8 rows read the stored weights, f32 inputs");
}

static void matmul_16bit_and_8bit_weights_at_64_rows_or_more_within_1e_2(void) {
    const int rows[] = {64, 300};
    lowp_matmul(rows, 2, LOWP_TOL, "the GPU rounds the inputs to 16 bits");
}

// ---- products with quantized input rows (W8A8, ops.h rl_act) ----------------------

// Shapes (M, K) of W8A8 products, for the GPU's paths: K a multiple of 16
// (16-byte loads when decoding; cuBLASLt when M is a multiple of 4 for int8,
// of 16 for fp8 on sm_89 and later), K a multiple of 4 but not of 16
// (cuBLASLt's int8 product, byte loads when decoding), K odd and M not a
// multiple of 4 (the GPU's own int8 kernel, fp8 through bf16 tensor cores).
static const struct { int M, K; } W8A8_MK[] = {{64, 1024}, {100, 132}, {61, 97}, {257, 1024}, {96, 2048}};
#define NW8A8 (sizeof W8A8_MK / sizeof *W8A8_MK)
static const int W8A8_ROWS[] = {1, 3, 64, 200};   // decoding (1 .. 8 rows) and more
#define NW8A8_ROWS (sizeof W8A8_ROWS / sizeof *W8A8_ROWS)

// Input rows (N, K) for a W8A8 product: normal, but row 1 all zeros (its
// scale is 0) and row 2 spread over 24 binades (many values round to 0 in
// int8, to subnormals in fp8).
static buf w8a8_input(int N, int K) {
    float *h = normal((size_t)N * K, 1.0);
    for (int k = 0; k < K; k++) {
        if (N > 1) h[(size_t)K + k] = 0;
        if (N > 2) h[2 * (size_t)K + k] = ldexpf(h[2 * (size_t)K + k], -(k % 24));
    }
    buf b = both(h, (size_t)N * K * sizeof(float));
    free(h);
    return b;
}

// The int32 sums of int8 values are exact in any order, and the GPU
// quantizes each row as the CPU does and scales the sums with the same two
// f32 multiplies (then adds the bias): equal bits on every path.
static void matmul_with_int8_input_rows_gives_the_cpus_bits(void) {
    for (size_t s = 0; s < NW8A8; s++) {
        int M = W8A8_MK[s].M, K = W8A8_MK[s].K;
        float *w = normal((size_t)M * K, 1.0);
        mat W = make_w8a8(ACT_I8, M, K, w);
        buf bias = both_normal((size_t)M, 1.0);
        for (size_t r = 0; r < NW8A8_ROWS; r++) {
            int N = W8A8_ROWS[r], with_bias = (int)((s + r) % 2);
            buf x = w8a8_input(N, K), out = nans((size_t)N * M);
            BOTH(O->matmul(D(out), D(x), DM(W), with_bias ? D(bias) : NULL, N));
            size_t k = n_differ(&out, (size_t)N * M, sizeof(float));
            double e = rel_err(&out, (size_t)N * M);
            printf("# matmul int8 rows N=%d M=%d K=%d bias=%d: %zu values differ, relative error %.2e\n", N, M, K,
                   with_bias, k, e);
            CHECK(k == 0, "N=%d M=%d K=%d bias=%d: %zu of %d values differ from the CPU's (relative error %g); "
                  "expected equal bits", N, M, K, with_bias, k, N * M, e);
            release(&x);
            release(&out);
        }
        free(w);
        free_mat(&W);
        release(&bias);
    }
}

// fp8: the same quantization, products exact in f32, sums in f32 in other
// orders. A row quantized differently (one code apart) moves its outputs by
// about 1e-3 of their scale, far beyond 1e-5.
static void matmul_with_fp8_input_rows_matches_cpu_within_1e_5_at_1_to_8_rows_5e_4_at_more(void) {
    for (size_t s = 0; s < NW8A8; s++) {
        int M = W8A8_MK[s].M, K = W8A8_MK[s].K;
        float *w = normal((size_t)M * K, 1.0);
        mat W = make_w8a8(ACT_FP8, M, K, w);
        buf bias = both_normal((size_t)M, 1.0);
        for (size_t r = 0; r < NW8A8_ROWS; r++) {
            int N = W8A8_ROWS[r], with_bias = (int)((s + r) % 2);
            double bound = N <= 8 ? F32_TOL : FP8_TOL;
            buf x = w8a8_input(N, K), out = nans((size_t)N * M);
            BOTH(O->matmul(D(out), D(x), DM(W), with_bias ? D(bias) : NULL, N));
            double e = rel_err(&out, (size_t)N * M);
            printf("# matmul fp8 rows N=%d M=%d K=%d bias=%d: relative error %.2e\n", N, M, K, with_bias, e);
            CHECK(e <= bound, "N=%d M=%d K=%d bias=%d: max|gpu - cpu| / max|cpu| = %g, bound %g", N, M, K,
                  with_bias, e, bound);
            release(&x);
            release(&out);
        }
        free(w);
        free_mat(&W);
        release(&bias);
    }
}

static void rope_and_backward(int backward) {
    enum { MAXPOS = 4096 };
    const struct { int H, HS; } hs[] = {{3, 6}, {8, 64}, {2, 128}};
    for (size_t c = 0; c < 3; c++) {
        int H = hs[c].H, HS = hs[c].HS, half = HS / 2;
        float *cs = malloc((size_t)MAXPOS * HS * sizeof(float));
        for (int p = 0; p < MAXPOS; p++)
            for (int i = 0; i < half; i++) {
                double a = p * pow(c == 2 ? 1e6 : 10000.0, -2.0 * i / HS);
                cs[((size_t)p * half + i) * 2] = (float)cos(a);
                cs[((size_t)p * half + i) * 2 + 1] = (float)sin(a);
            }
        buf tab = both(cs, (size_t)MAXPOS * HS * sizeof(float));
        for (size_t r = 0; r < NROWS; r++) {
            int N = ROWS[r];
            size_t n = (size_t)N * H * HS;
            buf pos = both_below((size_t)N, MAXPOS), x = both_normal(n, 1.0);
            if (backward) BOTH(O->rope_backward(D(x), D(pos), D(tab), N, H, HS));
            else BOTH(O->rope(D(x), D(pos), D(tab), N, H, HS));
            double e = rel_err(&x, n);
            printf("# %s N=%d H=%d HS=%d: relative error %.2e\n", backward ? "rope_backward" : "rope", N, H, HS, e);
            CHECK(e <= F32_TOL, "N=%d H=%d HS=%d, positions up to %d: max|gpu - cpu| / max|cpu| = %g, bound 1e-5", N,
                  H, HS, MAXPOS - 1, e);
            release(&pos);
            release(&x);
        }
        release(&tab);
        free(cs);
    }
}

static void rope_matches_cpu_within_1e_5(void) { rope_and_backward(0); }
static void rope_backward_matches_cpu_within_1e_5(void) { rope_and_backward(1); }

static void swiglu_matches_cpu_within_1e_5_also_in_place(void) {
    const int Fs[] = {97, 1001};
    for (size_t f = 0; f < 2; f++)
        for (size_t r = 0; r < NROWS; r++) {
            int N = ROWS[r], F = Fs[f];
            size_t n = (size_t)N * F;
            buf g = both_normal(n, 3.0), u = both_normal(n, 1.0), out = nans(n);
            BOTH(O->swiglu(D(out), D(g), D(u), N, F));
            double e = rel_err(&out, n);
            BOTH(O->swiglu(D(g), D(g), D(u), N, F));   // out = gate, as the model calls it
            double ei = rel_err(&g, n);
            printf("# swiglu N=%d F=%d: relative error %.2e, in place %.2e\n", N, F, e, ei);
            CHECK(e <= F32_TOL && ei <= F32_TOL, "N=%d F=%d: max|gpu - cpu| / max|cpu| = %g, in place %g; bound 1e-5",
                  N, F, e, ei);
            release(&g);
            release(&u);
            release(&out);
        }
}

// Shapes (N, V) of logits: 1 to 300 rows of a small vocabulary, and a few
// rows of GPT-2's and of Qwen's; temperatures 0.5 to 2 (inv_temps).
typedef struct {
    int N, V;
} nv;
static const nv LOGIT_SHAPES[] = {{1, 301}, {3, 301}, {9, 301}, {300, 301}, {9, 50257}, {3, 151936}};
#define NLOGIT (sizeof LOGIT_SHAPES / sizeof *LOGIT_SHAPES)

static buf inv_temps(int N) {
    const float temps[] = {0.7f, 1.0f, 1.3f, 0.5f, 2.0f};
    float *t = malloc((size_t)N * sizeof(float));
    for (int i = 0; i < N; i++) t[i] = 1.0f / temps[i % 5];
    buf b = both(t, (size_t)N * sizeof(float));
    free(t);
    return b;
}

static void logprob_and_entropy_at_temperatures_match_cpu_within_1e_5(void) {
    for (size_t s = 0; s < NLOGIT; s++) {
        int N = LOGIT_SHAPES[s].N, V = LOGIT_SHAPES[s].V;
        buf l = both_normal((size_t)N * V, 2.0), t = both_below((size_t)N, V), it = inv_temps(N);
        buf lp = nans((size_t)N), ent = nans((size_t)N), lp2 = nans((size_t)N);
        BOTH(O->logprob(D(lp), D(ent), D(l), D(t), D(it), N, V));
        BOTH(O->logprob(D(lp2), NULL, D(l), D(t), D(it), N, V));
        double e = rel_err(&lp, (size_t)N), ee = rel_err(&ent, (size_t)N), e2 = rel_err(&lp2, (size_t)N);
        printf("# logprob N=%d V=%d: relative error logp %.2e, entropy %.2e, logp without entropy %.2e\n", N, V, e, ee,
               e2);
        CHECK(e <= F32_TOL && ee <= F32_TOL && e2 <= F32_TOL,
              "N=%d V=%d: max|gpu - cpu| / max|cpu| of logp %g, entropy %g, logp without entropy %g; bound 1e-5", N, V,
              e, ee, e2);
        buf *bs[] = {&l, &t, &it, &lp, &ent, &lp2};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) release(bs[i]);
    }
}

// ---- f32 backward operations ----------------------------------------------------

static void logprob_backward_matches_cpu_within_1e_5_and_rows_without_loss_are_0(void) {
    for (size_t s = 0; s < NLOGIT; s++) {
        int N = LOGIT_SHAPES[s].N, V = LOGIT_SHAPES[s].V;
        float *dl = normal((size_t)N, 1.0);
        if (N > 1) dl[1] = 0;   // a row without loss (a prompt's)
        buf l = both_normal((size_t)N * V, 2.0), t = both_below((size_t)N, V), it = inv_temps(N);
        buf d = both(dl, (size_t)N * sizeof(float));
        BOTH(O->logprob_backward(D(l), D(t), D(it), D(d), NULL, N, V));
        double e = rel_err(&l, (size_t)N * V);
        printf("# logprob_backward N=%d V=%d: relative error %.2e\n", N, V, e);
        CHECK(e <= F32_TOL, "N=%d V=%d: max|gpu - cpu| / max|cpu| = %g, bound 1e-5", N, V, e);
        if (N > 1) {
            float *g = fetch(GPU, (float *)l.g + V, (size_t)V * sizeof(float));
            size_t nz = 0;
            for (int j = 0; j < V; j++) nz += g[j] != 0;
            free(g);
            CHECK(nz == 0, "N=%d V=%d: the row with dlogp 0 has %zu nonzero gradients, expected all 0", N, V, nz);
        }
        free(dl);
        buf *bs[] = {&l, &t, &it, &d};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) release(bs[i]);
    }
}

// With an entropy term dent (ops.h): rows of both terms, of dent alone (dlogp
// 0), of dlogp alone (dent 0), whose bits must be those of a call without
// dent, and of neither (zeros).
static void logprob_backward_with_dent_matches_cpu_within_1e_5_and_rows_without_it_are_unchanged(void) {
    for (size_t s = 0; s < NLOGIT; s++) {
        int N = LOGIT_SHAPES[s].N, V = LOGIT_SHAPES[s].V;
        float *dl = normal((size_t)N, 1.0), *de = normal((size_t)N, 1.0);
        for (int i = 0; i < N; i++) {
            if (i % 4 == 1) dl[i] = 0;   // dent alone
            if (i % 4 == 2) de[i] = 0;   // dlogp alone
            if (i % 4 == 3) dl[i] = de[i] = 0;
        }
        float *x = normal((size_t)N * V, 2.0);
        buf l = both(x, (size_t)N * V * sizeof(float)), l0 = both(x, (size_t)N * V * sizeof(float));
        buf t = both_below((size_t)N, V), it = inv_temps(N);
        buf d = both(dl, (size_t)N * sizeof(float)), e = both(de, (size_t)N * sizeof(float));
        BOTH(O->logprob_backward(D(l), D(t), D(it), D(d), D(e), N, V));
        BOTH(O->logprob_backward(D(l0), D(t), D(it), D(d), NULL, N, V));
        double err = rel_err(&l, (size_t)N * V);
        printf("# logprob_backward with dent N=%d V=%d: relative error %.2e\n", N, V, err);
        CHECK(err <= F32_TOL, "N=%d V=%d: max|gpu - cpu| / max|cpu| = %g, bound 1e-5", N, V, err);
        float *g = fetch(GPU, l.g, (size_t)N * V * sizeof(float)), *g0 = fetch(GPU, l0.g, (size_t)N * V * sizeof(float));
        size_t moved = 0;
        for (int i = 0; i < N; i++)
            if (de[i] == 0) moved += memcmp(g + (size_t)i * V, g0 + (size_t)i * V, (size_t)V * sizeof(float)) != 0;
        CHECK(moved == 0, "N=%d V=%d: %zu rows with dent 0 differ from the call without dent", N, V, moved);
        free(g);
        free(g0);
        free(dl);
        free(de);
        free(x);
        buf *bs[] = {&l, &l0, &t, &it, &d, &e};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) release(bs[i]);
    }
}

// Shapes (N, M, K) of the backward products: 1 to 300 rows, odd M and K
static const struct { int N, M, K; } NMKB[] = {
    {1, 45, 97}, {3, 130, 97}, {9, 97, 45}, {300, 257, 130}, {300, 40, 24}, {67, 513, 1001}};
#define NNMKB (sizeof NMKB / sizeof *NMKB)

static void matmul_dx_matches_cpu_within_1e_5_written_and_accumulated(void) {
    for (size_t s = 0; s < NNMKB; s++)
        for (int acc = 0; acc < 2; acc++) {
            int N = NMKB[s].N, M = NMKB[s].M, K = NMKB[s].K;
            float *w = normal((size_t)M * K, 1.0);
            mat W = make_mat(DT_F32, 0, M, K, w);
            buf dout = both_normal((size_t)N * M, 1.0), dx = acc ? both_normal((size_t)N * K, 1.0) : nans((size_t)N * K);
            BOTH(O->matmul_dx(D(dx), D(dout), DM(W), N, acc));
            double e = rel_err(&dx, (size_t)N * K);
            printf("# matmul_dx N=%d M=%d K=%d accumulate=%d: relative error %.2e\n", N, M, K, acc, e);
            CHECK(e <= F32_TOL, "N=%d M=%d K=%d accumulate=%d: max|gpu - cpu| / max|cpu| = %g, bound 1e-5", N, M, K,
                  acc, e);
            free(w);
            free_mat(&W);
            release(&dout);
            release(&dx);
        }
}

// bf16 weights (a frozen base under LoRA): the GPU rounds dout to bf16 to
// meet them, the CPU widens them; within 1e-2, as 16-bit products are.
static void matmul_dx_with_bf16_weights_matches_cpu_within_1e_2(void) {
    for (size_t s = 0; s < NNMKB; s++) {
        int N = NMKB[s].N, M = NMKB[s].M, K = NMKB[s].K;
        float *w = normal((size_t)M * K, 1.0);
        mat W = make_mat(DT_BF16, 0, M, K, w);
        buf dout = both_normal((size_t)N * M, 1.0), dx = both_normal((size_t)N * K, 1.0);
        BOTH(O->matmul_dx(D(dx), D(dout), DM(W), N, 1));
        double e = rel_err(&dx, (size_t)N * K);
        printf("# matmul_dx bf16 N=%d M=%d K=%d accumulate=1: relative error %.2e\n", N, M, K, e);
        CHECK(e <= 1e-2, "N=%d M=%d K=%d: max|gpu - cpu| / max|cpu| = %g, bound 1e-2", N, M, K, e);
        free(w);
        free_mat(&W);
        release(&dout);
        release(&dx);
    }
}

static void matmul_dw_accumulates_like_cpu_within_1e_5_with_and_without_bias(void) {
    for (size_t s = 0; s < NNMKB; s++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            int N = NMKB[s].N, M = NMKB[s].M, K = NMKB[s].K;
            buf dout = both_normal((size_t)N * M, 1.0), x = both_normal((size_t)N * K, 1.0);
            buf dW = both_normal((size_t)M * K, 1.0), db = both_normal((size_t)M, 1.0);
            for (int k = 0; k < 2; k++)   // two calls: the initial values plus twice the gradient
                BOTH(O->matmul_dw(D(dW), with_bias ? D(db) : NULL, D(dout), D(x), N, M, K));
            double e = rel_err(&dW, (size_t)M * K), eb = rel_err(&db, (size_t)M);
            printf("# matmul_dw N=%d M=%d K=%d bias=%d, two calls: relative error dW %.2e, dbias %.2e\n", N, M, K,
                   with_bias, e, eb);
            CHECK(e <= F32_TOL && eb <= F32_TOL,
                  "N=%d M=%d K=%d bias=%d: max|gpu - cpu| / max|cpu| of dW %g, dbias %g; bound 1e-5", N, M, K,
                  with_bias, e, eb);
            release(&dout);
            release(&x);
            release(&dW);
            release(&db);
        }
}

static void rmsnorm_backward_accumulates_like_cpu_within_1e_5(void) {
    const int Cs[] = {97, 2048};
    for (size_t c = 0; c < 2; c++)
        for (size_t r = 0; r < NROWS; r++) {
            int N = ROWS[r], C = Cs[c];
            size_t n = (size_t)N * C;
            buf x = both_normal(n, 2.0), g = both_normal((size_t)C, 1.0), dout = both_normal(n, 1.0);
            buf dx = both_normal(n, 1.0), dg = both_normal((size_t)C, 1.0);
            for (int k = 0; k < 2; k++)   // both gradients accumulate
                BOTH(O->rmsnorm_backward(D(dx), D(dg), D(dout), D(x), D(g), N, C, 1e-5f));
            double ex = rel_err(&dx, n), eg = rel_err(&dg, (size_t)C);
            printf("# rmsnorm_backward N=%d C=%d, two calls: relative error dx %.2e, dg %.2e\n", N, C, ex, eg);
            CHECK(ex <= F32_TOL && eg <= F32_TOL, "N=%d C=%d: max|gpu - cpu| / max|cpu| of dx %g, dg %g; bound 1e-5",
                  N, C, ex, eg);
            // dg NULL (a frozen norm weight): dx as with it
            buf dx2 = both_normal(n, 1.0);
            BOTH(O->rmsnorm_backward(D(dx2), NULL, D(dout), D(x), D(g), N, C, 1e-5f));
            double e2 = rel_err(&dx2, n);
            CHECK(e2 <= F32_TOL, "N=%d C=%d without dg: max|gpu - cpu| / max|cpu| of dx %g; bound 1e-5", N, C, e2);
            buf *bs[] = {&x, &g, &dout, &dx, &dg, &dx2};
            for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) release(bs[i]);
        }
}

static void swiglu_backward_matches_cpu_within_1e_5_also_over_dout(void) {
    const int Fs[] = {97, 1001};
    for (size_t f = 0; f < 2; f++)
        for (size_t r = 0; r < NROWS; r++) {
            int N = ROWS[r], F = Fs[f];
            size_t n = (size_t)N * F;
            buf g = both_normal(n, 3.0), u = both_normal(n, 1.0), d = both_normal(n, 1.0);
            buf dg = nans(n), du = nans(n);
            BOTH(O->swiglu_backward(D(dg), D(du), D(d), D(g), D(u), N, F));
            double eg = rel_err(&dg, n), eu = rel_err(&du, n);
            BOTH(O->swiglu_backward(D(d), D(du), D(d), D(g), D(u), N, F));   // dgate over dout
            double ei = rel_err(&d, n);
            printf("# swiglu_backward N=%d F=%d: relative error dgate %.2e, dup %.2e, dgate over dout %.2e\n", N, F, eg,
                   eu, ei);
            CHECK(eg <= F32_TOL && eu <= F32_TOL && ei <= F32_TOL,
                  "N=%d F=%d: max|gpu - cpu| / max|cpu| of dgate %g, dup %g, dgate over dout %g; bound 1e-5", N, F, eg,
                  eu, ei);
            buf *bs[] = {&g, &u, &d, &dg, &du};
            for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) release(bs[i]);
        }
}

static void embed_backward_adds_repeated_ids_like_cpu_within_1e_5(void) {
    enum { V = 50 };
    const int Cs[] = {97, 1024}, Ns[] = {1, 3, 9, 600};
    for (size_t c = 0; c < 2; c++)
        for (size_t r = 0; r < 4; r++) {
            int N = Ns[r], C = Cs[c];
            // ids below 7: each repeats about N/7 times (rows 7.. get nothing)
            buf ids = both_below((size_t)N, 7), d = both_normal((size_t)N * C, 1.0), dt = both_normal((size_t)V * C, 1.0);
            for (int k = 0; k < 2; k++) BOTH(O->embed_backward(D(dt), D(d), D(ids), N, C));
            double e = rel_err(&dt, (size_t)V * C);
            printf("# embed_backward N=%d C=%d, ids below 7, two calls: relative error %.2e\n", N, C, e);
            CHECK(e <= F32_TOL, "N=%d C=%d: max|gpu - cpu| / max|cpu| = %g, bound 1e-5", N, C, e);
            release(&ids);
            release(&d);
            release(&dt);
        }
}

// ---- attention -------------------------------------------------------------------

static const struct { int NH, NKV, HS; } HEADS[] = {{8, 2, 64}, {4, 1, 128}, {6, 6, 48}};

// Training layout, as the model scores: sequences of 1, 3, 9 and 300 rows
// one after another, each its own keys (kv rows = query rows, pos0 0).
static const rl_attn_seq NOCACHE[] = {{0, 1, 0, 0}, {1, 3, 0, 1}, {4, 9, 0, 4}, {13, 300, 0, 13}};
enum { NOCACHE_N = 313 };

static void attention_without_a_cache_matches_cpu_within_1e_5_with_lse(void) {
    for (size_t h = 0; h < sizeof HEADS / sizeof *HEADS; h++) {
        int NH = HEADS[h].NH, NKV = HEADS[h].NKV, HS = HEADS[h].HS, N = NOCACHE_N;
        size_t nq = (size_t)N * NH * HS, nk = (size_t)N * NKV * HS;
        buf q = both_normal(nq, 2.0), k = both_normal(nk, 1.0), v = both_normal(nk, 1.0);
        buf seqs = both(NOCACHE, sizeof NOCACHE), out = nans(nq), lse = nans((size_t)N * NH), out2 = nans(nq);
        BOTH(O->attention(D(out), D(lse), D(q), D(k), D(v), DT_F32, D(seqs), 4, N, NH, NKV, HS));
        BOTH(O->attention(D(out2), NULL, D(q), D(k), D(v), DT_F32, D(seqs), 4, N, NH, NKV, HS));
        double eo = rel_err(&out, nq), el = rel_err(&lse, (size_t)N * NH), e2 = rel_err(&out2, nq);
        printf("# attention, sequences of 1, 3, 9, 300 rows, NH=%d NKV=%d HS=%d: relative error out %.2e, lse %.2e, "
               "out without lse %.2e\n", NH, NKV, HS, eo, el, e2);
        CHECK(eo <= F32_TOL && el <= F32_TOL && e2 <= F32_TOL,
              "NH=%d NKV=%d HS=%d: max|gpu - cpu| / max|cpu| of out %g, lse %g, out without lse %g; bound 1e-5", NH, NKV,
              HS, eo, el, e2);
        buf *bs[] = {&q, &k, &v, &seqs, &out, &lse, &out2};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) release(bs[i]);
    }
}

static void attention_with_a_cache_matches_cpu_within_1e_5_kv_rows_elsewhere(void) {
    // A cache of 6 slots of 512 rows, random everywhere (rows a sequence does
    // not own must not be read). Query rows are packed; each sequence's keys
    // start at its slot, slots out of order: decoding after 300 and after 0
    // tokens, a short prefill after 17, one of 9 after 100, a long one after 200.
    enum { SLOT = 512, NK = 6 * SLOT, N = 264 };
    const rl_attn_seq cache[] = {{0, 1, 300, 3 * SLOT}, {1, 1, 0, 0},         {2, 3, 17, 5 * SLOT},
                                 {5, 9, 100, 1 * SLOT}, {14, 250, 200, 4 * SLOT}};
    for (size_t h = 0; h < sizeof HEADS / sizeof *HEADS; h++) {
        int NH = HEADS[h].NH, NKV = HEADS[h].NKV, HS = HEADS[h].HS;
        size_t nq = (size_t)N * NH * HS, nk = (size_t)NK * NKV * HS;
        buf q = both_normal(nq, 2.0), k = both_normal(nk, 1.0), v = both_normal(nk, 1.0);
        buf seqs = both(cache, sizeof cache), out = nans(nq), lse = nans((size_t)N * NH);
        BOTH(O->attention(D(out), D(lse), D(q), D(k), D(v), DT_F32, D(seqs), 5, N, NH, NKV, HS));
        double eo = rel_err(&out, nq), el = rel_err(&lse, (size_t)N * NH);
        printf("# attention with a cache, NH=%d NKV=%d HS=%d: relative error out %.2e, lse %.2e\n", NH, NKV, HS, eo,
               el);
        CHECK(eo <= F32_TOL && el <= F32_TOL,
              "NH=%d NKV=%d HS=%d: max|gpu - cpu| / max|cpu| of out %g, lse %g; bound 1e-5", NH, NKV, HS, eo, el);
        buf *bs[] = {&q, &k, &v, &seqs, &out, &lse};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) release(bs[i]);
    }
}

static void attention_backward_with_gqa_matches_cpu_within_1e_5(void) {
    for (size_t h = 0; h < sizeof HEADS / sizeof *HEADS; h++) {
        int NH = HEADS[h].NH, NKV = HEADS[h].NKV, HS = HEADS[h].HS, N = NOCACHE_N;
        size_t nq = (size_t)N * NH * HS, nk = (size_t)N * NKV * HS, nl = (size_t)N * NH;
        buf q = both_normal(nq, 2.0), k = both_normal(nk, 1.0), v = both_normal(nk, 1.0), dout = both_normal(nq, 1.0);
        buf seqs = both(NOCACHE, sizeof NOCACHE);
        // the forward's out and lse, the CPU's on both, so both backward passes read the same
        float *ho = CPU->alloc(nq * sizeof(float)), *hl = CPU->alloc(nl * sizeof(float));
        CPU->attention(ho, hl, q.c, k.c, v.c, DT_F32, seqs.c, 4, N, NH, NKV, HS);
        float *o_h = fetch(CPU, ho, nq * sizeof(float)), *l_h = fetch(CPU, hl, nl * sizeof(float));
        buf out = both(o_h, nq * sizeof(float)), lse = both(l_h, nl * sizeof(float));
        CPU->free(ho);
        CPU->free(hl);
        free(o_h);
        free(l_h);
        buf dq = nans(nq), dk = nans(nk), dv = nans(nk);
        BOTH(O->attention_backward(D(dq), D(dk), D(dv), D(dout), D(q), D(k), D(v), D(out), D(lse), D(seqs), 4, N, NH,
                                   NKV, HS));
        double eq = rel_err(&dq, nq), ek = rel_err(&dk, nk), ev = rel_err(&dv, nk);
        printf("# attention_backward, sequences of 1, 3, 9, 300 rows, NH=%d NKV=%d HS=%d: relative error dq %.2e, "
               "dk %.2e, dv %.2e\n", NH, NKV, HS, eq, ek, ev);
        CHECK(eq <= F32_TOL && ek <= F32_TOL && ev <= F32_TOL,
              "NH=%d NKV=%d HS=%d: max|gpu - cpu| / max|cpu| of dq %g, dk %g, dv %g; bound 1e-5", NH, NKV, HS, eq, ek,
              ev);
        buf *bs[] = {&q, &k, &v, &dout, &seqs, &out, &lse, &dq, &dk, &dv};
        for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) release(bs[i]);
    }
}

// ---- sumsq, adamw ------------------------------------------------------------------

// Both sum in double. Each f32 square is within 2^-24 of its double value,
// and over a million random terms those errors average out to ~1e-10 of the
// sum, where an f32 accumulator would be ~1e-8 to 1e-7 off: 1e-9 for the
// long vector, one f32 rounding (1.2e-7) for short ones.
static void sumsq_matches_cpu_accumulated_in_double(void) {
    const size_t ns[] = {1, 3, 9, 1000003};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        size_t n = ns[i];
        buf x = both_normal(n, 1.0);
        double c = CPU->sumsq(x.c, n), g = GPU->sumsq(x.g, n), e = fabs(g - c) / c, bound = n > 1000 ? 1e-9 : 1.2e-7;
        printf("# sumsq n=%zu: relative error %.2e\n", n, e);
        CHECK(e <= bound, "n=%zu: gpu %.17g, cpu %.17g, relative error %g, bound %g", n, g, c, e, bound);
        release(&x);
    }
}

static void adamw_three_steps_match_cpu_within_1e_6(void) {
    const size_t ns[] = {1, 3, 9, 100003};
    rl_adamw h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.1f, .gscale = 0.5f};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        size_t n = ns[i];
        float *v0 = normal(n, 1e-3);
        for (size_t j = 0; j < n; j++) v0[j] *= v0[j];   // a second moment: positive
        buf p = both_normal(n, 0.02), m = both_normal(n, 1e-3), v = both(v0, n * sizeof(float));
        for (int step = 1; step <= 3; step++) {
            buf g = both_normal(n, 1e-3);
            h.bc1 = 1 - pow(h.beta1, step);
            h.bc2_sqrt = sqrt(1 - pow(h.beta2, step));
            BOTH(O->adamw(D(p), D(g), D(m), D(v), n, &h));
            release(&g);
        }
        double ep = rel_err(&p, n), em = rel_err(&m, n), ev = rel_err(&v, n);
        printf("# adamw n=%zu, 3 steps: relative error p %.2e, m %.2e, v %.2e\n", n, ep, em, ev);
        CHECK(ep <= ADAMW_TOL && em <= ADAMW_TOL && ev <= ADAMW_TOL,
              "n=%zu: max|gpu - cpu| / max|cpu| of p %g, m %g, v %g; bound 1e-6", n, ep, em, ev);
        free(v0);
        release(&p);
        release(&m);
        release(&v);
    }
}

// ---- sample --------------------------------------------------------------------------

typedef struct {
    int32_t *tok;
    double *logp;
} draws;

static void free_draws(draws *d) {
    free(d->tok);
    free(d->logp);
}

// N tokens drawn on backend o from logits (N, V) with parameters p and the
// uniforms u (host arrays, uploaded); the outputs start as -1 and NaN.
static draws draw(const rl_ops *o, const float *logits, const double *u, const smp_params *p, int N, int V) {
    draws d = {malloc((size_t)N * sizeof(int32_t)), malloc((size_t)N * sizeof(double))};
    for (int i = 0; i < N; i++) {
        d.tok[i] = -1;
        d.logp[i] = NAN;
    }
    size_t nl = (size_t)N * V * sizeof(float), nt = (size_t)N * sizeof(int32_t), nd = (size_t)N * sizeof(double);
    float *l = o->alloc(nl);
    double *du = o->alloc(nd), *lp = o->alloc(nd);
    int32_t *tok = o->alloc(nt);
    o->upload(l, logits, nl);
    o->upload(du, u, nd);
    o->upload(tok, d.tok, nt);
    o->upload(lp, d.logp, nd);
    o->sample(tok, lp, l, p, du, N, V);
    o->download(d.tok, tok, nt);
    o->download(d.logp, lp, nd);
    o->free(l);
    o->free(du);
    o->free(lp);
    o->free(tok);
    return d;
}

// Uniforms in [0, 1), with both ends: u = 0 and the largest double below 1.
static double *uniforms(int N) {
    double *u = malloc((size_t)N * sizeof(double));
    for (int i = 0; i < N; i++) u[i] = rng_uniform(&R);
    u[0] = 0;
    if (N > 1) u[1] = nextafter(1.0, 0.0);
    return u;
}

static const nv SAMPLE_SHAPES[] = {{256, 5003}, {3, 151936}};

static void sample_greedy_gives_the_cpus_tokens_the_lowest_id_of_a_tie_and_logp_0(void) {
    const smp_params ps[] = {{0, 1, 0}, {0, 0.9f, 50}};   // temperature 0 is greedy, whatever top-k/top-p say
    for (size_t s = 0; s < 2; s++)
        for (size_t k = 0; k < 2; k++) {
            int N = SAMPLE_SHAPES[s].N, V = SAMPLE_SHAPES[s].V, ntie = N < 8 ? N : 8;
            float *l = normal((size_t)N * V, 2.0);
            int32_t lower[8];
            for (int i = 0; i < ntie; i++) {   // rows with the largest logit at two ids
                float *row = l + (size_t)i * V, mx = -INFINITY;
                for (int j = 0; j < V; j++) mx = fmaxf(mx, row[j]);
                int a = (int)(rng_u64(&R) % (uint64_t)V), b = (a + 1 + (int)(rng_u64(&R) % (uint64_t)(V - 1))) % V;
                row[a] = row[b] = mx + 1;
                lower[i] = a < b ? a : b;
            }
            double *u = uniforms(N);
            draws c = draw(CPU, l, u, &ps[k], N, V), g = draw(GPU, l, u, &ps[k], N, V);
            for (int i = 0; i < N; i++) {
                CHECK(g.tok[i] == c.tok[i], "N=%d V=%d top-p %g top-k %u, row %d: token %d, the CPU's %d; greedy "
                      "tokens must be equal", N, V, ps[k].top_p, ps[k].top_k, i, g.tok[i], c.tok[i]);
                CHECK(g.logp[i] == 0, "row %d: logp %g, expected 0 (the distribution is a point mass)", i, g.logp[i]);
            }
            for (int i = 0; i < ntie; i++)
                CHECK(g.tok[i] == lower[i], "row %d: a tie at the largest logit gave token %d, expected the lower id %d",
                      i, g.tok[i], lower[i]);
            free(l);
            free(u);
            free_draws(&c);
            free_draws(&g);
        }
}

// The filters of sampling.h at temperature 0.7 (and 1 with top-p), on both
// shapes: the GPU's token is the CPU's in at least 99% of rows (a uniform
// within rounding of a boundary between two tokens may fall either way), and
// where they agree the log-probabilities agree within 1e-6 relative (both
// compute in double; f32 probabilities would still be within 1e-7).
static void sample_at_temperature_with_top_k_and_top_p_draws_the_cpus_tokens_in_99_percent_of_rows(void) {
    const struct { smp_params p; const char *name; } ps[] = {
        {{0.7f, 1, 0}, "temperature 0.7"},          {{0.7f, 1, 50}, "temperature 0.7, top-k 50"},
        {{0.7f, 0.9f, 0}, "temperature 0.7, top-p 0.9"}, {{0.7f, 0.9f, 50}, "temperature 0.7, top-k 50, top-p 0.9"},
        {{1, 0.9f, 0}, "temperature 1, top-p 0.9"},   {{0.7f, 1, 1}, "temperature 0.7, top-k 1"}};
    for (size_t s = 0; s < 2; s++)
        for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
            const smp_params *p = &ps[k].p;
            int N = SAMPLE_SHAPES[s].N, V = SAMPLE_SHAPES[s].V, differ = 0, allowed = N / 100;
            float *l = normal((size_t)N * V, 2.0);
            double *u = uniforms(N), worst = 0;
            draws c = draw(CPU, l, u, p, N, V), g = draw(GPU, l, u, p, N, V);
            for (int i = 0; i < N; i++) {
                CHECK(g.tok[i] >= 0 && g.tok[i] < V && isfinite(g.logp[i]) && g.logp[i] <= 0,
                      "%s, N=%d V=%d, row %d: token %d, logp %g; expected a token below V and a finite logp <= 0",
                      ps[k].name, N, V, i, g.tok[i], g.logp[i]);
                if (p->top_k) {   // among the k largest
                    const float *row = l + (size_t)i * V;
                    uint32_t above = 0;
                    for (int j = 0; j < V; j++) above += row[j] > row[g.tok[i]];
                    CHECK(above < p->top_k, "%s, row %d: token %d has %u larger logits, top-k is %u", ps[k].name, i,
                          g.tok[i], above, p->top_k);
                }
                if (g.tok[i] != c.tok[i]) {
                    differ++;
                    continue;
                }
                worst = worse(worst, fabs(g.logp[i] - c.logp[i]) / fmax(1.0, fabs(c.logp[i])));
            }
            printf("# sample %s, N=%d V=%d: %d rows differ; logp relative error %.2e where tokens agree\n", ps[k].name, N,
                   V, differ, worst);
            CHECK(differ <= allowed, "%s, N=%d V=%d: %d rows drew another token than the CPU, at most %d (1%%) may",
                  ps[k].name, N, V, differ, allowed);
            CHECK(worst <= 1e-6, "%s, N=%d V=%d: logp differs from the CPU's by %g relative (of max(1, |logp|)), bound "
                  "1e-6", ps[k].name, N, V, worst);
            free(l);
            free(u);
            free_draws(&c);
            free_draws(&g);
        }
}

static void sample_on_the_gpu_repeats_bit_for_bit(void) {
    const smp_params ps[] = {{0.7f, 0.9f, 50}, {1, 1, 0}, {0, 1, 0}};
    for (size_t s = 0; s < 2; s++)
        for (size_t k = 0; k < 3; k++) {
            int N = SAMPLE_SHAPES[s].N, V = SAMPLE_SHAPES[s].V;
            float *l = normal((size_t)N * V, 2.0);
            double *u = uniforms(N);
            draws a = draw(GPU, l, u, &ps[k], N, V), b = draw(GPU, l, u, &ps[k], N, V);
            CHECK(memcmp(a.tok, b.tok, (size_t)N * sizeof(int32_t)) == 0 &&
                      memcmp(a.logp, b.logp, (size_t)N * sizeof(double)) == 0,
                  "N=%d V=%d temperature %g top-p %g top-k %u: two runs on the same logits and uniforms gave different "
                  "tokens or logp bits", N, V, ps[k].temperature, ps[k].top_p, ps[k].top_k);
            free(l);
            free(u);
            free_draws(&a);
            free_draws(&b);
        }
}

// ---- the whole model --------------------------------------------------------------------

// The built-in tiny model's shape (llama, grouped-query attention NH/NKV = 2,
// tied output layer, head size 32), and qwen2 with q/k/v biases, multi-head
// attention, an untied output layer, head size 48 and an odd vocabulary.
static int cfg_tiny(model_config *c, rl_err *err) { return cfg_load("models/tiny/config.json", c, err); }

static model_config cfg_qwen2(void) {
    return (model_config){.model_type = "qwen2", .hidden = 288, .inter = 200, .layers = 2, .heads = 6,
                          .kv_heads = 6, .head_dim = 48, .vocab = 257, .max_pos = 96, .rms_eps = 1e-6,
                          .rope_theta = 1e6, .tie_embeddings = 0, .qkv_bias = 1, .bos_id = -1, .eos_id = -1};
}

// Weight scales that make log-probs spread over many nats (checked below).
#define TINY_STD 0.08f
#define QWEN2_STD 0.07f

// A random model with weights at dt and activations at act (model_opts).
static model_t *build(const model_config *c, float std, rl_dtype dt, rl_dtype act, rl_device dev, rl_err *err) {
    model_opts o = {.dtype = dt, .device = dev, .act = act};
    return model_random(c, 17, std, &o, err);
}

// The index of the first parameter tensor whose values differ in bits between a and b, or -1.
static long param_difference(const model_t *a, const model_t *b) {
    for (size_t i = 0; i < model_ntensors(a); i++) {
        size_t n = model_tensor_at(a, i).n;
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        int same = model_tensor_get(a, MODEL_PARAM, i, x) == 0 && model_tensor_get(b, MODEL_PARAM, i, y) == 0 &&
                   memcmp(x, y, n * sizeof(float)) == 0;
        free(x);
        free(y);
        if (!same) return (long)i;
    }
    return -1;
}

#define NSEQ 5
typedef struct {
    uint32_t prompt[40], ids[40];
    size_t np, ni;
    float temp;
    float lp[3][40], ent[3][40];   // the CPU's, the GPU's, the CPU's at f32
} tseq;

static void make_seqs(tseq *s, int vocab) {
    for (int i = 0; i < NSEQ; i++) {
        s[i].np = 1 + rng_u64(&R) % 20;
        s[i].ni = 1 + rng_u64(&R) % 30;
        s[i].temp = i % 2 ? 0.7f : 1.0f;
        for (size_t j = 0; j < s[i].np; j++) s[i].prompt[j] = (uint32_t)(rng_u64(&R) % (uint64_t)vocab);
        for (size_t j = 0; j < s[i].ni; j++) s[i].ids[j] = (uint32_t)(rng_u64(&R) % (uint64_t)vocab);
    }
}

static void to_model_seqs(tseq *s, int k, model_seq *ms) {
    for (int i = 0; i < NSEQ; i++)
        ms[i] = (model_seq){s[i].prompt, s[i].np, s[i].ids, s[i].ni, s[i].temp, s[i].lp[k], s[i].ent[k]};
}

// The largest |x − cpu| of the log-probs and entropies of s (x = 1: the
// GPU's, 2: the CPU's f32 model's), and the range of the CPU's log-probs.
static void seq_diff(const tseq *s, int x, double *elp, double *eent, double *lo, double *hi) {
    *elp = *eent = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int i = 0; i < NSEQ; i++)
        for (size_t j = 0; j < s[i].ni; j++) {
            double a = fabs((double)s[i].lp[x][j] - s[i].lp[0][j]), b = fabs((double)s[i].ent[x][j] - s[i].ent[0][j]);
            *elp = worse(*elp, a);
            *eent = worse(*eent, b);
            *lo = fmin(*lo, s[i].lp[0][j]);
            *hi = fmax(*hi, s[i].lp[0][j]);
        }
}

// Builds the same random model on the CPU and the GPU (checking that the
// weights are the same bits) and scores sequences with both; the errors.
// At another dtype than f32, also the CPU's f32 model: how far the dtype
// itself moves the log-probs.
typedef struct {
    double elp, eent, lo, hi;   // GPU against CPU
    double eref;                // the CPU at dt against the CPU at f32
} score_cmp;

// head_f32: both with the output layer at f32 (model_opts.head_f32).
static int score_both(const model_config *c, float std, rl_dtype dt, rl_dtype act, int head_f32, score_cmp *r,
                      rl_err *err) {
    model_opts o = {.dtype = dt, .act = act, .head_f32 = head_f32, .device = DEV_CPU};
    model_t *mc = model_random(c, 17, std, &o, err), *mg = NULL;
    o.device = DEV_CUDA;
    if (mc) mg = model_random(c, 17, std, &o, err);
    model_t *mf = NULL;
    int rc = -1;
    if (!mg || ((dt != DT_F32 || act != DT_F32) && !(mf = build(c, std, DT_F32, DT_F32, DEV_CPU, err)))) goto out;
    if (strcmp(model_device(mg), "cuda") != 0) {
        err_set(err, "a model built for DEV_CUDA computes on '%s'", model_device(mg));
        goto out;
    }
    long d = param_difference(mc, mg);
    if (d >= 0) {
        err_set(err, "one seed gave different weights on the two backends: %s", model_tensor_at(mc, (size_t)d).name);
        goto out;
    }
    tseq s[NSEQ];
    model_seq ms[3][NSEQ];
    make_seqs(s, c->vocab);
    for (int k = 0; k < 3; k++) to_model_seqs(s, k, ms[k]);
    if (model_score(mc, ms[0], NSEQ, err) || model_score(mg, ms[1], NSEQ, err) ||
        (mf && model_score(mf, ms[2], NSEQ, err)))
        goto out;
    seq_diff(s, 1, &r->elp, &r->eent, &r->lo, &r->hi);
    r->eref = 0;
    if (mf) {
        double e, lo, hi;
        seq_diff(s, 2, &r->eref, &e, &lo, &hi);
    }
    rc = 0;
out:
    if (mc) model_free(mc);
    if (mg) model_free(mg);
    if (mf) model_free(mf);
    return rc;
}

// f32 through every layer in other summation orders: the log-probs move by
// a few 1e-6; 1e-4 nats is what the model tests allow between code paths.
static void model_f32_scores_match_cpu_within_1e_4_nats(void) {
    model_config cs[2];
    rl_err err;
    CHECK(cfg_tiny(&cs[0], &err) == 0, "%s", err.msg);
    cs[1] = cfg_qwen2();
    const float std[2] = {TINY_STD, QWEN2_STD};
    for (int k = 0; k < 2; k++) {
        score_cmp r;
        CHECK(score_both(&cs[k], std[k], DT_F32, DT_F32, 0, &r, &err) == 0, "%s: %s", cs[k].model_type, err.msg);
        printf("# %s f32: max |logp_gpu - logp_cpu| %.2e, |entropy| %.2e nats; log-probs from %.1f to %.1f\n",
               cs[k].model_type, r.elp, r.eent, r.lo, r.hi);
        CHECK(r.elp <= MODEL_TOL && r.eent <= MODEL_TOL,
              "%s: log-probs differ by up to %g nats, entropies by %g; bound 1e-4", cs[k].model_type, r.elp, r.eent);
        CHECK(r.hi - r.lo > 4, "%s: log-probs span only %g nats: too uniform for a meaningful comparison",
              cs[k].model_type, r.hi - r.lo);
    }
}

// The same model at bf16 on each backend: for products of many rows (this
// scoring) the GPU rounds the activations to bf16 too, the CPU does not. That
// moves log-probs about as much as rounding the weights to bf16 does: on
// this model the CPU's bf16 model is 2.5e-2 to 4.2e-2 nats from its f32
// model, and a CPU emulation of the GPU's rounding came 2.1e-2 to 3.0e-2 from
// the CPU's bf16 model (four sets of sequences; both grow with the weights'
// scale). The bound, 0.1 nats, is about three times that.
static void model_bf16_scores_match_cpus_bf16_model_within_0_1_nats(void) {
    model_config c;
    rl_err err;
    CHECK(cfg_tiny(&c, &err) == 0, "%s", err.msg);
    score_cmp r;
    CHECK(score_both(&c, TINY_STD, DT_BF16, DT_F32, 0, &r, &err) == 0, "%s", err.msg);
    printf("# llama bf16: max |logp_gpu - logp_cpu| %.2e, |entropy| %.2e nats (the CPU's bf16 model is %.2e from its "
           "f32 model); log-probs from %.1f to %.1f\n", r.elp, r.eent, r.eref, r.lo, r.hi);
    CHECK(r.elp <= MODEL_BF16_TOL && r.eent <= MODEL_BF16_TOL,
          "log-probs differ by up to %g nats, entropies by %g; bound 0.1", r.elp, r.eent);
}

// The sampler's precisions with bf16 activations (model.h model_opts): bf16,
// and W8A8 int8 and fp8. The GPU rounds as the CPU does and computes the
// same quantized products (int8 ones bit for bit), but the f32 operations
// between them sum in other orders, and a last-bit difference now and then
// moves an activation's bf16 rounding (the logits' too: one bf16 step of a
// logit between 8 and 16 is 1/16 nat) or, after it, a quantized code (fp8:
// 1/16 to 1/8 of the value). The CPU alone shows it: its AVX-512 and portable kernels give
// models 0.017 (bf16), 1e-6 (int8) and 0.14 (fp8) nats apart on the llama
// below; the GPU's kernels run on the CPU (an emulation) were 0.017, 0.031
// and 0.22 nats from the CPU (qwen2: 0.017, 1e-6, 0.085). Bounds: 0.1 nats,
// fp8 0.5 (its quantization alone moves log-probs by 0.5 to 0.7 nats here).
// With the output layer at f32 (rl-sample --head f32) each backend's head is
// its f32 product of the unrounded final norm, and the logits are no longer
// rounded: only the layers before differ, so the same bound.
static void model_bf16_activations_and_w8a8_score_within_0_1_nats_of_cpu_fp8_0_5(void) {
    const struct { rl_dtype dt; int head_f32; const char *name; double bound; } P[] = {
        {DT_BF16, 0, "bf16", 0.1},           {DT_I8, 0, "int8", 0.1},           {DT_FP8, 0, "fp8", 0.5},
        {DT_BF16, 1, "bf16 (f32 head)", 0.1}, {DT_I8, 1, "int8 (f32 head)", 0.1}};
    model_config cs[2];
    rl_err err;
    CHECK(cfg_tiny(&cs[0], &err) == 0, "%s", err.msg);
    cs[1] = cfg_qwen2();
    const float std[2] = {TINY_STD, QWEN2_STD};
    for (int k = 0; k < 2; k++)
        for (size_t p = 0; p < sizeof P / sizeof *P; p++) {
            score_cmp r;
            CHECK(score_both(&cs[k], std[k], P[p].dt, DT_BF16, P[p].head_f32, &r, &err) == 0, "%s %s: %s",
                  cs[k].model_type, P[p].name, err.msg);
            printf("# %s %s: max |logp_gpu - logp_cpu| %.2e, |entropy| %.2e nats (the CPU's model is %.2e from its "
                   "f32 model); log-probs from %.1f to %.1f\n", cs[k].model_type, P[p].name, r.elp, r.eent, r.eref,
                   r.lo, r.hi);
            CHECK(r.elp <= P[p].bound && r.eent <= P[p].bound,
                  "%s %s: log-probs differ by up to %g nats, entropies by %g; bound %g", cs[k].model_type, P[p].name,
                  r.elp, r.eent, P[p].bound);
        }
}

// dℓ/dlogp of scored token r: weights of both signs, and some 0; with *ctx
// set, dℓ/dH too (an entropy term), of both signs and some 0
static void dlogp_of_r(void *ctx, size_t r0, size_t rows, const float *logp, const float *ent, float *dlogp,
                       float *dent) {
    (void)logp;
    (void)ent;
    for (size_t i = 0; i < rows; i++) dlogp[i] = (float)((double)((r0 + i) * 37 % 11) - 5) / 5.0f;
    if (*(const int *)ctx && dent)
        for (size_t i = 0; i < rows; i++) dent[i] = (float)((double)((r0 + i) * 23 % 7) - 3) / 4.0f;
}

// The gradient passes back through every layer in f32 (and through atomic
// sums on the GPU): elements near 0 carry large relative errors, so each
// tensor is compared as a whole, ‖g_gpu − g_cpu‖ / ‖g_cpu‖ <= 1e-4.
// Each model once with a loss of log-probabilities alone, once with an
// entropy term as well, once with LoRA adapters (rank 4, every target, B
// drawn so that A's gradient is not zero) as the only parameters, the GPU's
// model recomputing its activations (--recompute).
static void model_backward_gradients_match_cpu_within_1e_4_of_each_tensors_norm(void) {
    model_config cs[2];
    rl_err err;
    CHECK(cfg_tiny(&cs[0], &err) == 0, "%s", err.msg);
    cs[1] = cfg_qwen2();
    const float std[2] = {TINY_STD, QWEN2_STD};
    for (int run = 0; run < 6; run++) {
        int k = run % 4 / 2, with_ent = run < 4 && run % 2, lora = run >= 4;
        model_t *m[2];
        lora_config lc = {.rank = 4, .alpha = 8, .targets = LORA_ALL};
        lora_adapter *a = lora ? lora_new(&lc, &cs[k]) : NULL;
        for (int t = 0; a && t < cs[k].layers * LORA_NT; t++) {
            int out = a->out[t % LORA_NT], in = a->in[t % LORA_NT];
            float *A = normal((size_t)4 * in, 0.1), *B = normal((size_t)out * 4, 0.1);
            memcpy(a->a[t], A, (size_t)4 * in * sizeof(float));
            memcpy(a->b[t], B, (size_t)out * 4 * sizeof(float));
            free(A);
            free(B);
        }
        for (int b = 0; b < 2; b++) {
            m[b] = build(&cs[k], std[k], DT_F32, DT_F32, b ? DEV_CUDA : DEV_CPU, &err);
            CHECK(m[b] && (!a || model_lora_attach(m[b], &lc, a, 0, &err) == 0) && model_train_init(m[b], &err) == 0,
                  "%s: %s", cs[k].model_type, err.msg);
            model_set_recompute(m[b], lora && b);
        }
        lora_free(a);
        tseq s[NSEQ];
        model_seq ms[2][NSEQ];
        make_seqs(s, cs[k].vocab);
        for (int b = 0; b < 2; b++) {
            to_model_seqs(s, b, ms[b]);
            CHECK(model_backward(m[b], ms[b], NSEQ, dlogp_of_r, &with_ent, &err) == 0, "%s: %s", cs[k].model_type,
                  err.msg);
        }
        double elp, eent, lo, hi;
        seq_diff(s, 1, &elp, &eent, &lo, &hi);
        CHECK(elp <= MODEL_TOL && eent <= MODEL_TOL,
              "%s: the backward pass's log-probs differ by %g nats, entropies by %g; bound 1e-4", cs[k].model_type, elp,
              eent);
        double worst = -1;
        const char *worst_name = "";
        size_t zero = 0;
        for (size_t i = 0; i < model_ntensors(m[0]); i++) {
            model_tensor t = model_tensor_at(m[0], i);
            float *gc = malloc(t.n * sizeof(float)), *gg = malloc(t.n * sizeof(float));
            CHECK(model_tensor_get(m[0], MODEL_GRAD, i, gc) == 0 && model_tensor_get(m[1], MODEL_GRAD, i, gg) == 0,
                  "%s: no gradient of %s", cs[k].model_type, t.name);
            double dd = 0, cc = 0;
            for (size_t j = 0; j < t.n; j++) {
                dd += ((double)gg[j] - gc[j]) * ((double)gg[j] - gc[j]);
                cc += (double)gc[j] * gc[j];
            }
            double e = cc > 0 ? sqrt(dd / cc) : dd > 0 ? INFINITY : 0;
            if (cc == 0) zero++;
            if (worst == worst && worse(worst, e) != worst) {   // a NaN, once in, stays
                worst = e;
                worst_name = t.name;
            }
            free(gc);
            free(gg);
        }
        double sc = model_grad_sumsq(m[0]), sg = model_grad_sumsq(m[1]), es = fabs(sg - sc) / sc;
        printf("# %s gradients%s%s: worst tensor %s, |g_gpu - g_cpu| / |g_cpu| = %.2e; sum of squares %.2e relative; "
               "log-probs %.2e nats\n", cs[k].model_type, with_ent ? " (with an entropy term)" : "",
               lora ? " (LoRA adapters; the GPU's recomputing)" : "", worst_name, worst,
               es, elp);
        CHECK(zero == 0, "%s: %zu tensors have a zero gradient on the CPU, so comparing them says nothing",
              cs[k].model_type, zero);
        CHECK(worst <= MODEL_TOL, "%s: %s has |g_gpu - g_cpu| / |g_cpu| = %g, the worst tensor; bound 1e-4",
              cs[k].model_type, worst_name, worst);
        CHECK(es <= MODEL_TOL, "%s: model_grad_sumsq %.10g on the GPU, %.10g on the CPU; bound 1e-4 relative",
              cs[k].model_type, sg, sc);
        model_free(m[0]);
        model_free(m[1]);
    }
}

// The largest logit's id (the lowest among equals) and its lead over the next.
static uint32_t argmax(const float *l, int V, double *margin) {
    int b = 0;
    for (int j = 1; j < V; j++)
        if (l[j] > l[b]) b = j;
    double second = -INFINITY;
    for (int j = 0; j < V; j++)
        if (j != b && l[j] > second) second = l[j];
    *margin = l[b] - second;
    return (uint32_t)b;
}

// Greedy decoding with the cache: prompts prefilled together (many rows),
// then one token per sequence per step. The CPU's tokens are the argmax of
// model_step's logits; the GPU draws them with model_step_sample. A token may
// differ only where the CPU's two largest logits are within 1e-4 (the
// backends' f32 difference); that sequence is compared no further.
static void model_greedy_decoding_with_the_cache_gives_the_cpus_tokens(void) {
    enum { NS = 4, STEPS = 16, MAXLEN = 64 };
    const size_t plen[NS] = {3, 7, 12, 20};
    model_config c;
    rl_err err;
    CHECK(cfg_tiny(&c, &err) == 0, "%s", err.msg);
    model_t *mc = build(&c, TINY_STD, DT_F32, DT_F32, DEV_CPU, &err);
    model_t *mg = mc ? build(&c, TINY_STD, DT_F32, DT_F32, DEV_CUDA, &err) : NULL;
    CHECK(mg, "%s", err.msg);
    CHECK(model_cache_init(mc, NS, MAXLEN, &err) == 0 && model_cache_init(mg, NS, MAXLEN, &err) == 0, "%s", err.msg);
    uint32_t prompts[NS][20], tc[NS], tg[NS];
    model_step_seq sc[NS], sg[NS];
    for (int i = 0; i < NS; i++) {
        for (size_t j = 0; j < plen[i]; j++) prompts[i][j] = (uint32_t)(rng_u64(&R) % (uint64_t)c.vocab);
        sc[i] = (model_step_seq){.slot = model_slot_acquire(mc), .ids = prompts[i], .n = plen[i]};
        sg[i] = (model_step_seq){.slot = model_slot_acquire(mg), .ids = prompts[i], .n = plen[i]};
        CHECK(sc[i].slot >= 0 && sg[i].slot >= 0, "no free slot");
    }
    const smp_params greedy = {0, 1, 0};
    const double u[NS] = {0.5, 0.5, 0.5, 0.5};   // not read when greedy
    float *logits = malloc((size_t)NS * c.vocab * sizeof(float));
    int diverged[NS] = {0}, compared = 0;
    double lowest = INFINITY;
    for (int step = 0; step < STEPS; step++) {
        double lg[NS], margin[NS];
        CHECK(model_step(mc, sc, NS, logits, &err) == 0, "%s", err.msg);
        CHECK(model_step_sample(mg, sg, NS, &greedy, u, tg, lg, &err) == 0, "%s", err.msg);
        for (int i = 0; i < NS; i++) {
            tc[i] = argmax(logits + (size_t)i * c.vocab, c.vocab, &margin[i]);
            CHECK(lg[i] == 0, "sequence %d, step %d: greedy logp %g, expected 0", i, step, lg[i]);
            if (diverged[i]) continue;
            if (tg[i] != tc[i]) {
                CHECK(margin[i] < MODEL_TOL, "sequence %d, step %d: token %u, the CPU's %u, whose logit leads the next "
                      "by %g; only a near-tie (< 1e-4) may differ", i, step, tg[i], tc[i], margin[i]);
                diverged[i] = 1;
                continue;
            }
            compared++;
            lowest = fmin(lowest, margin[i]);
        }
        for (int i = 0; i < NS; i++) {   // each backend goes on with its own tokens
            sc[i] = (model_step_seq){.slot = sc[i].slot, .ids = &tc[i], .n = 1};
            sg[i] = (model_step_seq){.slot = sg[i].slot, .ids = &tg[i], .n = 1};
        }
    }
    printf("# greedy decoding: %d of %d tokens equal, smallest lead of the largest logit %.2e\n", compared, NS * STEPS,
           lowest);
    CHECK(compared >= NS * STEPS * 9 / 10, "only %d of %d tokens compared: too many near-ties for a meaningful test",
          compared, NS * STEPS);
    free(logits);
    model_free(mc);
    model_free(mg);
}

// log_softmax of a row in double
static void log_softmax(const float *l, int V, double *out) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) mx = fmax(mx, l[j]);
    for (int j = 0; j < V; j++) s += exp(l[j] - mx);
    for (int j = 0; j < V; j++) out[j] = l[j] - mx - log(s);
}

// Decoding steps of at most 8 rows, where the GPU reads bf16 weights as they
// are (no rounding of the activations): a bf16 model agrees with the CPU's
// bf16 model as closely as f32 ones do, 1e-4 nats. Both are fed the same tokens.
static void model_bf16_decoding_in_steps_of_8_rows_or_fewer_matches_cpu_within_1e_4_nats(void) {
    enum { NS = 2, STEPS = 10, PLEN = 4 };
    model_config c;
    rl_err err;
    CHECK(cfg_tiny(&c, &err) == 0, "%s", err.msg);
    int V = c.vocab;
    model_t *m[2];
    model_step_seq st[2][NS];
    uint32_t prompts[NS][PLEN], next[NS];
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < PLEN; j++) prompts[i][j] = (uint32_t)(rng_u64(&R) % (uint64_t)V);
    for (int b = 0; b < 2; b++) {
        m[b] = build(&c, TINY_STD, DT_BF16, DT_F32, b ? DEV_CUDA : DEV_CPU, &err);
        CHECK(m[b] && model_cache_init(m[b], NS, 32, &err) == 0, "%s", err.msg);
        for (int i = 0; i < NS; i++)
            st[b][i] = (model_step_seq){.slot = model_slot_acquire(m[b]), .ids = prompts[i], .n = PLEN};
    }
    float *l[2] = {malloc((size_t)NS * V * sizeof(float)), malloc((size_t)NS * V * sizeof(float))};
    double *a = malloc((size_t)V * sizeof(double)), *b = malloc((size_t)V * sizeof(double)), worst = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int k = 0; k < 2; k++) CHECK(model_step(m[k], st[k], NS, l[k], &err) == 0, "%s", err.msg);
        for (int i = 0; i < NS; i++) {
            log_softmax(l[0] + (size_t)i * V, V, a);
            log_softmax(l[1] + (size_t)i * V, V, b);
            for (int j = 0; j < V; j++) worst = worse(worst, fabs(a[j] - b[j]));
            double margin;
            next[i] = argmax(l[0] + (size_t)i * V, V, &margin);
            for (int k = 0; k < 2; k++) st[k][i] = (model_step_seq){.slot = st[k][i].slot, .ids = &next[i], .n = 1};
        }
    }
    printf("# bf16 decoding, %d rows per step at most: max |log_softmax gpu - cpu| %.2e nats\n", NS * PLEN, worst);
    CHECK(worst <= MODEL_TOL, "log-probs of the next token differ by up to %g nats; bound 1e-4", worst);
    free(l[0]);
    free(l[1]);
    free(a);
    free(b);
    model_free(m[0]);
    model_free(m[1]);
}

// ---- the cases ---------------------------------------------------------------------------

typedef struct {
    const char *name;
    void (*fn)(void);
} test_case;
#define CASE(fn) {#fn, fn}

static const test_case CASES[] = {
    CASE(embed_gives_the_cpus_rows_exactly_at_every_weight_dtype),
    CASE(gather_and_scatter_rows_move_the_cpus_rows_exactly),
    CASE(add_and_zero_give_the_cpus_values_exactly),
    CASE(scale_gives_the_cpus_values_exactly),
    CASE(round_bf16_gives_the_cpus_bits_ties_nan_and_infinities_too),
    CASE(rmsnorm_matches_cpu_within_1e_5_also_in_place),
    CASE(matmul_f32_matches_cpu_within_1e_5_with_and_without_bias),
    CASE(matmul_with_RLPIPE_TF32_1_uses_tf32_within_5e_4_of_cpu),
    CASE(matmul_16bit_and_8bit_weights_at_1_to_8_rows_read_weights_exactly_within_1e_5),
    CASE(matmul_16bit_and_8bit_weights_at_64_rows_or_more_within_1e_2),
    CASE(matmul_with_int8_input_rows_gives_the_cpus_bits),
    CASE(matmul_with_fp8_input_rows_matches_cpu_within_1e_5_at_1_to_8_rows_5e_4_at_more),
    CASE(rope_matches_cpu_within_1e_5),
    CASE(rope_backward_matches_cpu_within_1e_5),
    CASE(swiglu_matches_cpu_within_1e_5_also_in_place),
    CASE(logprob_and_entropy_at_temperatures_match_cpu_within_1e_5),
    CASE(logprob_backward_matches_cpu_within_1e_5_and_rows_without_loss_are_0),
    CASE(logprob_backward_with_dent_matches_cpu_within_1e_5_and_rows_without_it_are_unchanged),
    CASE(matmul_dx_matches_cpu_within_1e_5_written_and_accumulated),
    CASE(matmul_dx_with_bf16_weights_matches_cpu_within_1e_2),
    CASE(matmul_dw_accumulates_like_cpu_within_1e_5_with_and_without_bias),
    CASE(rmsnorm_backward_accumulates_like_cpu_within_1e_5),
    CASE(swiglu_backward_matches_cpu_within_1e_5_also_over_dout),
    CASE(embed_backward_adds_repeated_ids_like_cpu_within_1e_5),
    CASE(attention_without_a_cache_matches_cpu_within_1e_5_with_lse),
    CASE(attention_with_a_cache_matches_cpu_within_1e_5_kv_rows_elsewhere),
    CASE(attention_backward_with_gqa_matches_cpu_within_1e_5),
    CASE(sumsq_matches_cpu_accumulated_in_double),
    CASE(adamw_three_steps_match_cpu_within_1e_6),
    CASE(sample_greedy_gives_the_cpus_tokens_the_lowest_id_of_a_tie_and_logp_0),
    CASE(sample_at_temperature_with_top_k_and_top_p_draws_the_cpus_tokens_in_99_percent_of_rows),
    CASE(sample_on_the_gpu_repeats_bit_for_bit),
    CASE(model_f32_scores_match_cpu_within_1e_4_nats),
    CASE(model_backward_gradients_match_cpu_within_1e_4_of_each_tensors_norm),
    CASE(model_greedy_decoding_with_the_cache_gives_the_cpus_tokens),
    CASE(model_bf16_scores_match_cpus_bf16_model_within_0_1_nats),
    CASE(model_bf16_activations_and_w8a8_score_within_0_1_nats_of_cpu_fp8_0_5),
    CASE(model_bf16_decoding_in_steps_of_8_rows_or_fewer_matches_cpu_within_1e_4_nats),
};
#define NCASES (sizeof CASES / sizeof *CASES)

int main(int argc, char **argv) {
    int run[NCASES];
    for (size_t i = 0; i < NCASES; i++) run[i] = argc == 1;
    for (int a = 1; a < argc; a++) {
        size_t i = 0;
        while (i < NCASES && strcmp(argv[a], CASES[i].name) != 0) i++;
        if (i == NCASES) {
            fprintf(stderr, "usage: test_cuda [CASE]...: no case named '%s'\n", argv[a]);
            return 2;
        }
        run[i] = 1;
    }
    // RLPIPE_TF32=1 is for the TF32 case alone, which sets it in a child of
    // its own: the other bounds are for exact f32 products.
    const char *tf = getenv("RLPIPE_TF32");
    int tf32_alone = argc == 2 && strcmp(argv[1], "matmul_with_RLPIPE_TF32_1_uses_tf32_within_5e_4_of_cpu") == 0;
    if (tf && strcmp(tf, "1") == 0 && !tf32_alone) {
        printf("# RLPIPE_TF32=1 left out: the f32 bounds are for exact f32 products\n");
        unsetenv("RLPIPE_TF32");
    }
    const char *why = "ops_cuda() gave no reason";
    CPU = ops_cpu();
    GPU = ops_cuda(&why);
    for (size_t i = 0; i < NCASES; i++) {
        if (!run[i]) continue;
        if (!GPU) {
            printf("SKIP %s: %s\n", CASES[i].name, why);
            continue;
        }
        check_case = CASES[i].name;
        check_case_failed = 0;
        rng_seed_stream(&R, 20250611, i);   // each case its own inputs, the same when run alone
        CASES[i].fn();
        if (check_case_failed) check_failed_cases++;
        else printf("PASS %s\n", check_case);
        fflush(stdout);
    }
    CHECK_DONE();
}
