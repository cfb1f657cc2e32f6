// cpu/pack.c — pack.h: the panel layouts (and the int8 products' packing
// they share), and the table of the matrices packed so far.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/mem.h"
#include "model/cpu/pack.h"
#include "model/cpu/pool.h"
#include "util.h"

void pack4_i8(int8_t *p, const int8_t *w, size_t ldw, int rows, int K, int lanes) {
    int K4 = (K + 3) & ~3, whole = K >> 2;
    size_t step = (size_t)4 * lanes;
    memset(p, 0, (size_t)K4 * lanes);
    for (int r = 0; r < rows; r++) {
        const int8_t *wr = w + r * ldw;
        for (int k4 = 0; k4 < whole; k4++) memcpy(p + (size_t)k4 * step + r * 4, wr + 4 * k4, 4);
        for (int k = 4 * whole; k < K; k++) p[(size_t)whole * step + r * 4 + (k & 3)] = wr[k];
    }
}

void pack_panels(void *panels, const void *w, rl_dtype dt, int M, int K, int p0, int p1) {
    size_t pb = panel_bytes(dt, K);
    for (int p = p0; p < p1; p++) {
        char *P = (char *)panels + (size_t)p * pb;
        int rows = M - p * PANEL_ROWS < PANEL_ROWS ? M - p * PANEL_ROWS : PANEL_ROWS;
        if (dt == DT_I8) {   // the layout of the int8 products' own packing (which clears the panel)
            pack4_i8((int8_t *)P, (const int8_t *)w + (size_t)p * PANEL_ROWS * K, (size_t)K, rows, K, PANEL_ROWS);
            continue;
        }
        memset(P, 0, pb);
        for (int i = 0; i < rows; i++) {   // row by row: reads in order, writes in one panel (L1)
            size_t row = (size_t)(p * PANEL_ROWS + i) * K;
            if (dt == DT_F32) {
                const float *r = (const float *)w + row;
                float *Pf = (float *)P;
                for (int k = 0; k < K; k++) Pf[(size_t)k * PANEL_ROWS + i] = r[k];
                continue;
            }
            const uint16_t *r = (const uint16_t *)w + row;
            uint16_t *Pb = (uint16_t *)P;
            for (int k = 0; k < K; k++) Pb[(size_t)(k / 2) * 32 + 2 * i + (k & 1)] = r[k];
        }
    }
}

void pack_panels_t(float *panels, const float *a, size_t lda, int R, int C, int p0, int p1) {
    for (int p = p0; p < p1; p++) {
        float *P = panels + (size_t)p * R * PANEL_ROWS;
        int c0 = p * PANEL_ROWS, n = C - c0 < PANEL_ROWS ? C - c0 : PANEL_ROWS;
        for (int r = 0; r < R; r++) {
            memcpy(P + (size_t)r * PANEL_ROWS, a + (size_t)r * lda + c0, (size_t)n * sizeof(float));
            if (n < PANEL_ROWS) memset(P + (size_t)r * PANEL_ROWS + n, 0, (size_t)(PANEL_ROWS - n) * sizeof(float));
        }
    }
}

typedef struct {
    const void *data;   // the matrix packed: its rows as stored
    size_t bytes;       // rows · cols · its element's size
    int rows, cols;
    rl_dtype dtype;
    void *panels;
    size_t pbytes;      // the panels' bytes
} packed;

// Panel buffers forgotten by an upload, kept for the next panels of their
// size: a sampler's weights are written at every update and packed again,
// and fresh memory costs a page fault and a cleared page (0.7 s of CPU for
// the 540 MB of SmolLM2's f32 panels, measured by perf).
typedef struct {
    void *p;
    size_t bytes;
} spare;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static packed *tab;
static size_t ntab, captab;
static spare *spares;
static size_t nspares, capspares;

// A buffer of bytes for panels: a spare one of that size, else a new one.
// Called under mu.
static void *take_buffer(size_t bytes) {
    for (size_t i = 0; i < nspares; i++)
        if (spares[i].bytes == bytes) {
            void *p = spares[i].p;
            spares[i] = spares[--nspares];
            return p;
        }
    return cpu_mem_alloc(bytes);
}

typedef struct {
    void *panels;
    const rl_mat *W;
} pack_args;

// Keeps the buffer p of bytes as a spare. Called under mu.
static void keep_spare(void *p, size_t bytes) {
    GROW(spares, capspares, nspares + 1, 64);
    spares[nspares++] = (spare){p, bytes};
}

static void pack_part(void *ctx, int lo, int hi) {
    const pack_args *a = ctx;
    pack_panels(a->panels, a->W->data, a->W->dtype, a->W->rows, a->W->cols, lo, hi);
}

int cpu_panels_allowed(void) {
    const char *e = getenv("RLPIPE_CPU_PANELS");
    return !(e && strcmp(e, "0") == 0);
}

static int packable(const rl_mat *W) {
    return cpu_panels_allowed() && (W->dtype == DT_BF16 || W->dtype == DT_F32 || W->dtype == DT_I8);
}

static size_t panels_size(const rl_mat *W) {
    return (size_t)((W->rows + PANEL_ROWS - 1) / PANEL_ROWS) * panel_bytes(W->dtype, W->cols);
}

// W packed now (spread over the threads) into a buffer of panels' size
static void *pack_new(const rl_mat *W) {
    pthread_mutex_lock(&mu);
    pack_args a = {.panels = take_buffer(panels_size(W)), .W = W};
    pthread_mutex_unlock(&mu);
    // every byte: each panel is cleared as it is packed
    pool_for((W->rows + PANEL_ROWS - 1) / PANEL_ROWS, 1, 8, pack_part, &a);
    return a.panels;
}

void *cpu_panels_once(const rl_mat *W) { return packable(W) ? pack_new(W) : NULL; }

void cpu_panels_release(void *panels, const rl_mat *W) {
    if (!panels) return;
    pthread_mutex_lock(&mu);
    keep_spare(panels, panels_size(W));
    pthread_mutex_unlock(&mu);
}

const void *cpu_panels_kept(const rl_mat *W) {
    if (!W->fixed || !packable(W)) return NULL;
    void *p = NULL;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ntab && !p; i++)
        if (tab[i].data == W->data && tab[i].rows == W->rows && tab[i].cols == W->cols && tab[i].dtype == W->dtype)
            p = tab[i].panels;
    pthread_mutex_unlock(&mu);
    return p;
}

const void *cpu_panels(const rl_mat *W) {
    if (!W->fixed || !packable(W)) return NULL;
    const void *kept = cpu_panels_kept(W);
    if (kept) return kept;
    void *p = pack_new(W);
    pthread_mutex_lock(&mu);
    GROW(tab, captab, ntab + 1, 64);
    tab[ntab++] = (packed){W->data, (size_t)W->rows * W->cols * dt_size(W->dtype), W->rows, W->cols, W->dtype,
                           p, panels_size(W)};
    pthread_mutex_unlock(&mu);
    return p;
}

void cpu_panels_forget(const void *p, size_t bytes, int freed) {
    const char *lo = p, *hi = lo + bytes;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ntab;) {
        const char *d = tab[i].data;
        if (d < hi && lo < d + tab[i].bytes) {
            if (freed) {
                cpu_mem_free(tab[i].panels);
            } else {
                keep_spare(tab[i].panels, tab[i].pbytes);
            }
            tab[i] = tab[--ntab];
        } else {
            i++;
        }
    }
    if (freed) {   // the weights are going: so are the spares kept for them
        for (size_t i = 0; i < nspares; i++) cpu_mem_free(spares[i].p);
        nspares = 0;
    }
    pthread_mutex_unlock(&mu);
}
