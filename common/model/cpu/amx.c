// cpu/amx.c — amx.h: bf16 panels multiplied on AMX tiles.
//
// Eight tile registers, all 16 rows of 64 bytes: C0..C3 the f32 sums of two
// row tiles by two panels (32 input rows × 32 outputs), A0 and A1 two row
// tiles of inputs (16 rows × 16 pairs), B0 and B1 16 steps of two panels.
// The inputs are first copied to bf16 rows padded with zeros to whole tiles
// (rows to a multiple of 16, pairs to a multiple of 16); a panel's last
// steps, when its pairs are not a multiple of 16, are copied to a zeroed
// tile, so nothing is read past a panel.
#include "model/cpu/amx.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "model/cpu/kernels.h"
#include "model/cpu/pack.h"
#include "util.h"

#define AMX __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-bf16")))

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
        // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE
        int has = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1);
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

// Each thread's bf16 copy of a block of input rows, and its size in elements
static __thread uint16_t *amx_xb;
static __thread size_t amx_xb_n;

// Rows x (nb, K) into xb (rows, ldx) as bf16, zero past K and below nb;
// 0 when some x is not a bf16 value.
static int rows_to_bf16(uint16_t *xb, size_t ldx, int rows, const float *x, int nb, int K) {
    for (int n = 0; n < nb; n++) {
        uint16_t *d = xb + (size_t)n * ldx;
        if (!cpu_exact_bf16(d, x + (size_t)n * K, (size_t)K)) return 0;
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

AMX int amx_gemm_panels_bf16(float *out, size_t ldo, const float *x, int N, const uint16_t *panels, int M,
                             int K) {
    int KP = (K + 1) / 2, chunks = (KP + TILE_PAIRS - 1) / TILE_PAIRS, whole = KP / TILE_PAIRS;
    int np = (M + PANEL_ROWS - 1) / PANEL_ROWS, most = N < AMX_NB ? N : AMX_NB;
    int rows_most = (most + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
    size_t ldx = (size_t)chunks * TILE_PAIRS * 2, pe = (size_t)KP * 32;   // a panel's elements
    if ((size_t)rows_most * ldx > amx_xb_n) {
        free(amx_xb);
        amx_xb = xmalloc((size_t)rows_most * ldx * sizeof *amx_xb);
        amx_xb_n = (size_t)rows_most * ldx;
    }
    _Alignas(64) uint16_t tail[2][TILE_ROWS * 32];   // the panels' last steps, padded with zeros
    _Alignas(64) float part[TILE_ROWS * PANEL_ROWS];  // a tile cut at out's last row or column
    tile_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = TILE_ROWS;
    _tile_loadconfig(&cfg);
    int ok = 1;
    for (int n0 = 0; n0 < N && ok; n0 += most) {
        int nb = N - n0 < most ? N - n0 : most, rows = (nb + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
        if (!rows_to_bf16(amx_xb, ldx, rows, x + (size_t)n0 * K, nb, K)) {
            ok = 0;
            break;
        }
        for (int p = 0; p < np; p += 2) {
            int two = p + 1 < np;   // a second panel beside the first
            const uint16_t *P0 = panels + (size_t)p * pe, *P1 = two ? P0 + pe : P0;
            if (whole < chunks) {
                size_t bytes = (size_t)(KP - whole * TILE_PAIRS) * 64;
                memset(tail, 0, sizeof tail);
                memcpy(tail[0], P0 + (size_t)whole * TILE_PAIRS * 32, bytes);
                if (two) memcpy(tail[1], P1 + (size_t)whole * TILE_PAIRS * 32, bytes);
            }
            int c0 = M - p * PANEL_ROWS < PANEL_ROWS ? M - p * PANEL_ROWS : PANEL_ROWS;
            int c1 = !two ? 0 : M - (p + 1) * PANEL_ROWS < PANEL_ROWS ? M - (p + 1) * PANEL_ROWS : PANEL_ROWS;
            for (int r = 0; r < rows; r += 2 * TILE_ROWS) {
                int tworow = r + TILE_ROWS < rows;   // a second row tile below the first
                const uint16_t *A0 = amx_xb + (size_t)r * ldx, *A1 = A0 + TILE_ROWS * ldx;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int c = 0; c < chunks; c++) {
                    size_t at = (size_t)c * TILE_PAIRS * 32;
                    _tile_loadd(4, A0 + (size_t)c * TILE_PAIRS * 2, ldx * 2);
                    _tile_loadd(6, c < whole ? P0 + at : tail[0], 64);
                    _tile_dpbf16ps(0, 4, 6);
                    if (two) {
                        _tile_loadd(7, c < whole ? P1 + at : tail[1], 64);
                        _tile_dpbf16ps(1, 4, 7);
                    }
                    if (tworow) {
                        _tile_loadd(5, A1 + (size_t)c * TILE_PAIRS * 2, ldx * 2);
                        _tile_dpbf16ps(2, 5, 6);
                        if (two) _tile_dpbf16ps(3, 5, 7);
                    }
                }
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
#else
int amx_available(void) { return 0; }
int amx_gemm_panels_bf16(float *out, size_t ldo, const float *x, int N, const uint16_t *panels, int M, int K) {
    (void)out, (void)ldo, (void)x, (void)N, (void)panels, (void)M, (void)K;
    return 0;
}
#endif
