// cpu/pack.c — pack.h: the panel layout, and the table of the matrices
// packed so far.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/cpu/mem.h"
#include "model/cpu/pack.h"
#include "model/cpu/pool.h"
#include "util.h"

void pack_panels(uint16_t *panels, const uint16_t *w, int M, int K, int p0, int p1) {
    size_t KP = (size_t)(K + 1) / 2, pe = panel_elems(K);
    for (int p = p0; p < p1; p++) {
        uint16_t *P = panels + (size_t)p * pe;
        memset(P, 0, pe * sizeof *P);
        int rows = M - p * PANEL_ROWS < PANEL_ROWS ? M - p * PANEL_ROWS : PANEL_ROWS;
        for (int i = 0; i < rows; i++) {   // row by row: reads in order, writes in one panel (L1)
            const uint16_t *r = w + (size_t)(p * PANEL_ROWS + i) * K;
            for (size_t q = 0; q < KP; q++) {
                P[q * 32 + 2 * i] = r[2 * q];
                if (2 * q + 1 < (size_t)K) P[q * 32 + 2 * i + 1] = r[2 * q + 1];
            }
        }
    }
}

typedef struct {
    const void *data;   // the matrix packed: its rows as stored
    size_t bytes;       // rows · cols · 2
    int rows, cols;
    uint16_t *panels;
} packed;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static packed *tab;
static size_t ntab, captab;

typedef struct {
    uint16_t *panels;
    const rl_mat *W;
} pack_args;

static void pack_part(void *ctx, int lo, int hi) {
    const pack_args *a = ctx;
    pack_panels(a->panels, a->W->data, a->W->rows, a->W->cols, lo, hi);
}

// Read at every product, so that a program (a test, a benchmark) can turn
// them off and on.
static int panels_allowed(void) {
    const char *e = getenv("RLPIPE_CPU_PANELS");
    return !(e && strcmp(e, "0") == 0);
}

const uint16_t *cpu_panels(const rl_mat *W) {
    if (!panels_allowed() || W->dtype != DT_BF16) return NULL;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ntab; i++)
        if (tab[i].data == W->data && tab[i].rows == W->rows && tab[i].cols == W->cols) {
            uint16_t *p = tab[i].panels;
            pthread_mutex_unlock(&mu);
            return p;
        }
    pthread_mutex_unlock(&mu);
    int np = (W->rows + PANEL_ROWS - 1) / PANEL_ROWS;
    pack_args a = {.panels = cpu_mem_alloc((size_t)np * panel_elems(W->cols) * sizeof(uint16_t)), .W = W};
    pool_for(np, 1, 8, pack_part, &a);
    pthread_mutex_lock(&mu);
    if (ntab == captab) {
        captab = captab ? 2 * captab : 64;
        tab = xrealloc(tab, captab * sizeof *tab);
    }
    tab[ntab++] = (packed){W->data, (size_t)W->rows * W->cols * 2, W->rows, W->cols, a.panels};
    pthread_mutex_unlock(&mu);
    return a.panels;
}

void cpu_panels_forget(const void *p, size_t bytes) {
    const char *lo = p, *hi = lo + bytes;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ntab;) {
        const char *d = tab[i].data;
        if (d < hi && lo < d + tab[i].bytes) {
            cpu_mem_free(tab[i].panels);
            tab[i] = tab[--ntab];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&mu);
}
