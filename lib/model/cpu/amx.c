// cpu/amx.c — amx.h: bf16 and int8 panels multiplied on AMX tiles.
//
// Eight tile registers, all 16 rows of 64 bytes: C0..C3 the f32 (bf16) or
// int32 (int8) sums of two row tiles by two panels (32 input rows × 32
// outputs), A0 and A1 two row tiles of inputs (16 rows × 64 bytes: 16 pairs
// of bf16, 64 int8), B0 and B1 16 steps of two panels (pack.h). The inputs
// are first copied to rows padded with zeros to whole tiles (rows to a
// multiple of 16, inputs to a multiple of a tile's); a panel's last steps,
// when its steps are not a multiple of 16, are copied to a zeroed tile, so
// nothing is read past a panel.
#include "model/cpu/amx.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "model/cpu/bf16.h"
#include "model/cpu/pack.h"
#include "util.h"

#define AMX __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-bf16,amx-int8")))

// Linux's request for the tiles' state (arch/x86/include/uapi/asm/prctl.h)
enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

enum {
    TILE_ROWS = 16,    // input rows (A) and steps (B) of a tile
    TILE_PAIRS = 16,   // pairs of inputs along a tile (64 bytes a row)
    AMX_NB = 192,      // input rows a block: NB × K bf16 stay in L2 while the panels pass
};

int amx_available(void) {
    static int ok = -1;
    if (ok < 0) {
        unsigned a, b, c, d;
        // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE, bit 25 AMX-INT8
        int has = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1) && (d >> 25 & 1);
        ok = has && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return ok;
}

// The tile configuration (palette 1): every register 16 rows × 64 bytes
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

// Each thread's copy of a block of input rows (bf16 or int8, padded to whole
// tiles), and of the int8 weights packed; their sizes in bytes
static __thread void *amx_x, *amx_w;
static __thread size_t amx_x_n, amx_w_n;

// *buf, grown to at least bytes
static void *amx_buffer(void **buf, size_t *have, size_t bytes) {
    if (bytes > *have) {
        free(*buf);
        *buf = xmalloc(bytes);
        *have = bytes;
    }
    return *buf;
}

// This thread's tiles shaped for the kernels below (their state is cleared)
AMX static void tiles_configure(void) {
    tile_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = TILE_ROWS;
    _tile_loadconfig(&cfg);
}

// The last steps of panels P0 and, when two, P1 (bytes of them from byte
// from) into tail's two tiles, zero after them
static void tails_copy(char (*tail)[TILE_ROWS * 64], const char *P0, const char *P1, int two, size_t from,
                       size_t bytes) {
    memset(tail, 0, 2 * TILE_ROWS * 64);
    memcpy(tail[0], P0 + from, bytes);
    if (two) memcpy(tail[1], P1 + from, bytes);
}

// C0..C3 = the row tiles at A0 and A1 (LDA bytes a row, ASTEP elements a
// chunk) by chunks of the panels P0 and P1 (BSTEP elements a chunk; from
// chunk WHOLE on, the tiles in TAIL), summed over CHUNKS chunks by DP
// (_tile_dpbf16ps or _tile_dpbssd); the second row tile only when TWOROW,
// the second panel only when TWO.
#define TILES_2X2(DP, A0, A1, LDA, ASTEP, P0, P1, BSTEP, TAIL, WHOLE, CHUNKS, TWO, TWOROW) \
    do {                                                                                 \
        _tile_zero(0);                                                                   \
        _tile_zero(1);                                                                   \
        _tile_zero(2);                                                                   \
        _tile_zero(3);                                                                   \
        for (int c_ = 0; c_ < (CHUNKS); c_++) {                                          \
            size_t at_ = (size_t)c_ * (BSTEP);                                           \
            _tile_loadd(4, (A0) + (size_t)c_ * (ASTEP), LDA);                            \
            _tile_loadd(6, c_ < (WHOLE) ? (const void *)((P0) + at_) : (TAIL)[0], 64);   \
            DP(0, 4, 6);                                                                 \
            if (TWO) {                                                                   \
                _tile_loadd(7, c_ < (WHOLE) ? (const void *)((P1) + at_) : (TAIL)[1], 64); \
                DP(1, 4, 7);                                                             \
            }                                                                            \
            if (TWOROW) {                                                                \
                _tile_loadd(5, (A1) + (size_t)c_ * (ASTEP), LDA);                        \
                DP(2, 5, 6);                                                             \
                if (TWO) DP(3, 5, 7);                                                    \
            }                                                                            \
        }                                                                                \
    } while (0)

// Rows x (nb, K) into xb (rows, ldx) as bf16, zero past K and below nb;
// 0 when some x is not a bf16 value.
static int rows_to_bf16(uint16_t *xb, size_t ldx, int rows, const float *x, int nb, int K) {
    for (int n = 0; n < nb; n++) {
        uint16_t *d = xb + (size_t)n * ldx;
        if (!bf16_exact(d, x + (size_t)n * K, (size_t)K)) return 0;
        memset(d + K, 0, (ldx - (size_t)K) * sizeof *d);
    }
    memset(xb + (size_t)nb * ldx, 0, (size_t)(rows - nb) * ldx * sizeof *xb);
    return 1;
}

// Tile c (16 rows, row stride 16 floats) to out's rows [0, nr) and columns
// [0, nc) (+ nothing past them): straight from the register when whole.
#define STORE_TILE(c, out, ldo, nr, nc)                                           \
    do {                                                                          \
        if ((nr) == TILE_ROWS && (nc) == PANEL_ROWS) {                            \
            _tile_stored(c, out, (ldo) * sizeof(float));                          \
        } else {                                                                  \
            _tile_stored(c, part, PANEL_ROWS * sizeof(float));                    \
            for (int j = 0; j < (nr); j++)                                        \
                memcpy((out) + j * (ldo), part + j * PANEL_ROWS, (nc) * sizeof(float)); \
        }                                                                         \
    } while (0)

// bf16: the input rows copied as bf16 in blocks padded to whole tiles (or
// 0 returned when one is not a bf16 value), against the panels as they are.
AMX int amx_gemm_panels_bf16(float *out, size_t ldo, const float *x, int N, const uint16_t *panels, int M,
                             int K) {
    int KP = (K + 1) / 2, chunks = (KP + TILE_PAIRS - 1) / TILE_PAIRS, whole = KP / TILE_PAIRS;
    int np = (M + PANEL_ROWS - 1) / PANEL_ROWS, most = N < AMX_NB ? N : AMX_NB;
    int rows_most = (most + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
    size_t ldx = (size_t)chunks * TILE_PAIRS * 2, pe = (size_t)KP * 32;   // a panel's elements
    uint16_t *xb = amx_buffer(&amx_x, &amx_x_n, (size_t)rows_most * ldx * sizeof *xb);
    _Alignas(64) char tail[2][TILE_ROWS * 64];        // the panels' last steps, padded with zeros
    _Alignas(64) float part[TILE_ROWS * PANEL_ROWS];  // a tile cut at out's last row or column
    tiles_configure();
    int ok = 1;
    for (int n0 = 0; n0 < N && ok; n0 += most) {
        int nb = N - n0 < most ? N - n0 : most, rows = (nb + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
        if (!rows_to_bf16(xb, ldx, rows, x + (size_t)n0 * K, nb, K)) {
            ok = 0;
            break;
        }
        for (int p = 0; p < np; p += 2) {
            int two = p + 1 < np;   // a second panel beside the first
            const uint16_t *P0 = panels + (size_t)p * pe, *P1 = two ? P0 + pe : P0;
            if (whole < chunks)
                tails_copy(tail, (const char *)P0, (const char *)P1, two, (size_t)whole * TILE_PAIRS * 64,
                           (size_t)(KP - whole * TILE_PAIRS) * 64);
            int c0 = M - p * PANEL_ROWS < PANEL_ROWS ? M - p * PANEL_ROWS : PANEL_ROWS;
            int c1 = !two ? 0 : M - (p + 1) * PANEL_ROWS < PANEL_ROWS ? M - (p + 1) * PANEL_ROWS : PANEL_ROWS;
            for (int r = 0; r < rows; r += 2 * TILE_ROWS) {
                int tworow = r + TILE_ROWS < rows;   // a second row tile below the first
                const uint16_t *A0 = xb + (size_t)r * ldx, *A1 = A0 + TILE_ROWS * ldx;
                TILES_2X2(_tile_dpbf16ps, A0, A1, ldx * 2, TILE_PAIRS * 2, P0, P1, TILE_PAIRS * 32, tail, whole,
                          chunks, two, tworow);
                float *o = out + (size_t)(n0 + r) * ldo + (size_t)p * PANEL_ROWS;
                int r0 = nb - r < TILE_ROWS ? nb - r : TILE_ROWS;
                STORE_TILE(0, o, ldo, r0, c0);
                if (two) STORE_TILE(1, o + PANEL_ROWS, ldo, r0, c1);
                if (tworow) {
                    int r1 = nb - r - TILE_ROWS < TILE_ROWS ? nb - r - TILE_ROWS : TILE_ROWS;
                    STORE_TILE(2, o + TILE_ROWS * ldo, ldo, r1, c0);
                    if (two) STORE_TILE(3, o + TILE_ROWS * ldo + PANEL_ROWS, ldo, r1, c1);
                }
            }
        }
    }
    _tile_release();
    return ok;
}

// int8: from w's panels (pack.h: 64 bytes a step of 4 inputs), or, without
// them, from w packed into a buffer of the thread's; the input rows copied
// in blocks padded to whole tiles. tdpbssd sums signed bytes exactly in
// int32, and each output is scaled as the VNNI build scales it:
// ((float)sum · sw) · sx.
AMX void amx_gemm_i8(float *out, size_t ldo, const int8_t *x, const float *sx, int N, const int8_t *w,
                     const void *panels, const float *sw, int M, int K) {
    int KQ = (K + 3) / 4, chunks = (KQ + TILE_ROWS - 1) / TILE_ROWS, whole = KQ / TILE_ROWS;
    int K64 = chunks * 64, np = (M + PANEL_ROWS - 1) / PANEL_ROWS;
    int most = N < AMX_NB ? N : AMX_NB, rows_most = (most + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
    size_t pb = panel_bytes(DT_I8, K);
    if (!panels) {
        panels = amx_buffer(&amx_w, &amx_w_n, (size_t)np * pb);
        pack_panels((void *)panels, w, DT_I8, M, K, 0, np);
    }
    int8_t *xa = amx_buffer(&amx_x, &amx_x_n, (size_t)rows_most * K64);
    _Alignas(64) char tail[2][TILE_ROWS * 64];   // the panels' last steps, padded with zeros
    _Alignas(64) int32_t sums[4][TILE_ROWS * PANEL_ROWS];
    tiles_configure();
    for (int n0 = 0; n0 < N; n0 += most) {
        int nb = N - n0 < most ? N - n0 : most, rows = (nb + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
        for (int n = 0; n < nb; n++) {
            memcpy(xa + (size_t)n * K64, x + (size_t)(n0 + n) * K, (size_t)K);
            memset(xa + (size_t)n * K64 + K, 0, (size_t)(K64 - K));
        }
        memset(xa + (size_t)nb * K64, 0, (size_t)(rows - nb) * K64);
        for (int p = 0; p < np; p += 2) {
            int two = p + 1 < np;
            const int8_t *P0 = (const int8_t *)panels + p * pb, *P1 = two ? P0 + pb : P0;
            if (whole < chunks)
                tails_copy(tail, (const char *)P0, (const char *)P1, two, (size_t)whole * TILE_ROWS * 64,
                           (size_t)(KQ - whole * TILE_ROWS) * 64);
            for (int r = 0; r < rows; r += 2 * TILE_ROWS) {
                int tworow = r + TILE_ROWS < rows;
                const int8_t *A0 = xa + (size_t)r * K64, *A1 = A0 + TILE_ROWS * (size_t)K64;
                TILES_2X2(_tile_dpbssd, A0, A1, K64, 64, P0, P1, TILE_ROWS * 64, tail, whole, chunks, two, tworow);
                _tile_stored(0, sums[0], 64);
                _tile_stored(1, sums[1], 64);
                _tile_stored(2, sums[2], 64);
                _tile_stored(3, sums[3], 64);
                for (int h = 0; h < 1 + tworow; h++)   // the row tile
                    for (int q = 0; q < 1 + two; q++) {   // the panel
                        int m0 = (p + q) * PANEL_ROWS, nr = nb - r - h * TILE_ROWS;
                        int nc = M - m0 < PANEL_ROWS ? M - m0 : PANEL_ROWS;
                        __mmask16 k = (__mmask16)((1u << nc) - 1);
                        __m512 s = _mm512_maskz_loadu_ps(k, sw + m0);
                        for (int j = 0; j < nr && j < TILE_ROWS; j++) {
                            int n = n0 + r + h * TILE_ROWS + j;
                            __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(sums[2 * h + q] + j * PANEL_ROWS));
                            v = _mm512_mul_ps(_mm512_mul_ps(v, s), _mm512_set1_ps(sx[n]));
                            _mm512_mask_storeu_ps(out + (size_t)n * ldo + m0, k, v);
                        }
                    }
            }
        }
    }
    _tile_release();
}

#else
int amx_available(void) { return 0; }
int amx_gemm_panels_bf16(float *out, size_t ldo, const float *x, int N, const uint16_t *panels, int M, int K) {
    (void)out, (void)ldo, (void)x, (void)N, (void)panels, (void)M, (void)K;
    return 0;
}
void amx_gemm_i8(float *out, size_t ldo, const int8_t *x, const float *sx, int N, const int8_t *w,
                 const void *panels, const float *sw, int M, int K) {
    (void)out, (void)ldo, (void)x, (void)sx, (void)N, (void)w, (void)panels, (void)sw, (void)M, (void)K;
}
#endif
