// cuda/train.cu — the backward operations of the CUDA backend but matmul's
// and attention's, and the optimizer. As in kernels.cu they mirror the CPU
// backend (cpu/cpu.c, cpu/train.c, cpu/kernels.c), __fmul_rn and friends
// keeping nvcc from fusing a rounded product into an FMA where the CPU rounds
// it. No atomics: every sum has a fixed order, so results repeat bit for bit;
// sums over rows (dg of rmsnorm, embed_backward) are a thread per column.
#include "model/cuda/cuda.h"

#define THREADS 256          // rows and elementwise kernels
#define ROW_THREADS 512      // logprob_backward: rows as long as the vocabulary
#define DG_ROWS 64           // rmsnorm_backward: rows per partial sum of dg, at least
#define DG_PARTS 1024        // and the most partial sums per column
#define CHAIN 8              // embed_backward: rows of a chain loaded together

// ---- logprob_backward ---------------------------------------------------------

// logits (N, V) in, replaced by their gradient; target, inv_temp, dlogp (N)
// and dent (N, or NULL) in; one block per row. As cpu.c: row i becomes
// c·(onehot(target) − e / Σ e) with c = dlogp[i]·s and e = exp((l − max)·s),
// written as e·(−c / Σ e), the target's plus c; Σ e is summed in double and
// rounded to f32 as the CPU's f32 sum is. Rows with c = 0 and no entropy
// term (no loss) become zeros. With an entropy term, d = dent[i]·s ≠ 0, the
// row becomes p ⊙ (−c − d·(z + (H − lse))) + c·onehot, p = e·(1 / Σ e),
// z = (l − max)·s and H − lse = −Σ e z / Σ e (summed in double). Each thread
// writes only the elements it read.
static __global__ void logprob_backward_kernel(float *logits, const int32_t *target, const float *inv_temp,
                                               const float *dlogp, const float *dent, int N, int V) {
    __shared__ float shf[32];
    __shared__ double shd[32];
    for (size_t i = blockIdx.x; i < (size_t)N; i += gridDim.x) {
        float *l = logits + i * V;
        float it = inv_temp[i], c = dlogp[i] * it, d = dent ? dent[i] * it : 0;
        if (c == 0 && d == 0) {
            for (int j = threadIdx.x; j < V; j += blockDim.x) l[j] = 0;
            continue;
        }
        float mx = -INFINITY;
        for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, l[j]);
        mx = cu_block_max(mx, shf);
        double s = 0, ez = 0;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float z = (l[j] - mx) * it, e = expf(z);
            s += e;
            if (d != 0) ez += (double)e * z;
        }
        float sum = (float)cu_block_sum(s, shd);
        int t = target[i];
        if (d != 0) {
            float h_lse = (float)(-cu_block_sum(ez, shd) / (double)sum), inv = (float)(1 / (double)sum);
            for (int j = threadIdx.x; j < V; j += blockDim.x) {
                float z = (l[j] - mx) * it, p = __fmul_rn(expf(z), inv);
                float g = __fmul_rn(p, __fsub_rn(-c, __fmul_rn(d, __fadd_rn(z, h_lse))));
                l[j] = j == t ? __fadd_rn(g, c) : g;
            }
            continue;
        }
        float f = -c / sum;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float g = __fmul_rn(expf((l[j] - mx) * it), f);
            l[j] = j == t ? __fadd_rn(g, c) : g;
        }
    }
}

void cu_logprob_backward(float *logits, const int32_t *target, const float *inv_temp, const float *dlogp,
                         const float *dent, int N, int V) {
    if (N <= 0 || V <= 0) return;
    logprob_backward_kernel<<<cu_blocks(N, 1), ROW_THREADS>>>(logits, target, inv_temp, dlogp, dent, N, V);
    CU_LAUNCHED();
}

// ---- rmsnorm_backward -----------------------------------------------------------
// out = x·r·g with r = (mean(x²) + eps)^(−1/2):
//   dx_c += r·g_c·dout_c − r³·x_c·(Σ_j dout_j g_j x_j) / C;   dg_c += Σ_n dout_nc x_nc r_n
// dx a block per row (keeping r), then dg in partial sums over DG_ROWS rows
// and a sum of the partials in order.

// dout, x (N, C), g (C) in; dx (N, C) +=, r (N) out (1/rms of each row); one
// block per row.
static __global__ void rmsnorm_dx_kernel(float *dx, float *r, const float *dout, const float *x, const float *g,
                                         int N, int C, float eps) {
    __shared__ float sh[32];
    for (size_t i = blockIdx.x; i < (size_t)N; i += gridDim.x) {
        const float *xi = x + i * C, *di = dout + i * C;
        float *dxi = dx + i * C;
        float ss = 0, s = 0;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            ss += xi[c] * xi[c];
            s += di[c] * g[c] * xi[c];
        }
        ss = cu_block_sum(ss, sh);
        s = cu_block_sum(s, sh);
        float ri = 1.0f / sqrtf(ss / (float)C + eps), k = ri * ri * ri * s / (float)C;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float t = __fsub_rn(__fmul_rn(__fmul_rn(ri, g[c]), di[c]), __fmul_rn(k, xi[c]));
            dxi[c] = __fadd_rn(dxi[c], t);
        }
        if (threadIdx.x == 0) r[i] = ri;
    }
}

// dout, x (N, C), r (N) in; part (P, C) out, row p: Σ dout·x·r over rows
// [p·R, p·R + R) in order, as the CPU sums all rows; grid (columns / THREADS, P),
// a thread per column.
static __global__ void rmsnorm_dg_kernel(float *__restrict__ part, const float *__restrict__ dout,
                                         const float *__restrict__ x, const float *__restrict__ r, int N, int C,
                                         int R) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int n0 = blockIdx.y * R, n1 = n0 + R < N ? n0 + R : N;
    float acc = 0;
    for (int n = n0; n < n1; n++) {
        size_t o = (size_t)n * C + c;
        acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(dout[o], x[o]), r[n]));
    }
    part[(size_t)blockIdx.y * C + c] = acc;
}

// part (P, C) in; dg (C) += the sum of its rows, in order; a thread per column
static __global__ void colsum_kernel(float *dg, const float *__restrict__ part, int P, int C) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
        float acc = part[c];
        for (int p = 1; p < P; p++) acc += part[(size_t)p * C + c];
        dg[c] += acc;
    }
}

void cu_rmsnorm_backward(float *dx, float *dg, const float *dout, const float *x, const float *g, int N, int C,
                         float eps) {
    if (N <= 0 || C <= 0) return;
    float *r = (float *)cu_scratch(SCR_ROWS, (size_t)N * sizeof(float));
    rmsnorm_dx_kernel<<<cu_blocks(N, 1), THREADS>>>(dx, r, dout, x, g, N, C, eps);
    CU_LAUNCHED();
    if (!dg) return;   // a frozen norm weight
    // R rows per partial: enough partials to fill the GPU, few enough to keep scratch small
    int R = (N + DG_PARTS - 1) / DG_PARTS;
    if (R < DG_ROWS) R = DG_ROWS;
    int P = (N + R - 1) / R;
    float *part = (float *)cu_scratch(SCR_REDUCE, (size_t)P * C * sizeof(float));
    dim3 grid((unsigned)((C + THREADS - 1) / THREADS), (unsigned)P);
    rmsnorm_dg_kernel<<<grid, THREADS>>>(part, dout, x, r, N, C, R);
    CU_LAUNCHED();
    colsum_kernel<<<cu_blocks(C, THREADS), THREADS>>>(dg, part, P, C);
    CU_LAUNCHED();
}

// ---- swiglu_backward ------------------------------------------------------------

// dout, gate, up (n) in; dgate, dup (n) out, either may equal dout: all
// three inputs of an element are read before its outputs are written;
// grid-stride over elements. silu'(g) = σ(g)·(1 + g·(1 − σ(g))).
static __global__ void swiglu_backward_kernel(float *dgate, float *dup, const float *dout, const float *gate,
                                              const float *up, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i], d = dout[i], u = up[i], sig = 1.0f / (1.0f + expf(-g));
        float dsilu = __fmul_rn(sig, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig))));
        float du = __fmul_rn(__fmul_rn(d, g), sig), dg = __fmul_rn(__fmul_rn(d, u), dsilu);
        dup[i] = du;
        dgate[i] = dg;
    }
}

void cu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,
                        int F) {
    size_t n = (size_t)(N > 0 ? N : 0) * (size_t)(F > 0 ? F : 0);
    if (n == 0) return;
    swiglu_backward_kernel<<<cu_blocks(n, THREADS), THREADS>>>(dgate, dup, dout, gate, up, n);
    CU_LAUNCHED();
}

// ---- embed_backward -------------------------------------------------------------
// The rows of each id are linked in order (next), and the first row of each
// id (later = 0) adds the whole chain to its table row, column by column, in
// row order: the CPU's order of additions, so the result is the CPU's bits,
// and table rows are written by one thread each.

// ids (N) in; next (N) out: the next row with the same id, or -1; later (N),
// zeroed before: 1 at rows that follow another of their id. A thread per
// row, scanning the rows after it a tile (in shared memory) at a time until
// every thread of the block found its next.
static __global__ void embed_links_kernel(int32_t *next, int32_t *later, const int32_t *ids, int N) {
    __shared__ int32_t tile[THREADS];
    for (size_t base = (size_t)blockIdx.x * THREADS; base < (size_t)N; base += (size_t)gridDim.x * THREADS) {
        size_t i = base + threadIdx.x;
        int32_t id = i < (size_t)N ? ids[i] : 0, nx = -1;
        int open = i < (size_t)N;
        // __syncthreads_or first: every thread reaches it, and it ends the reads of the last tile
        for (size_t t0 = base; __syncthreads_or(open) && t0 < (size_t)N; t0 += THREADS) {
            size_t j = t0 + threadIdx.x;
            tile[threadIdx.x] = j < (size_t)N ? ids[j] : 0;
            __syncthreads();
            int n = (size_t)N - t0 < THREADS ? (int)((size_t)N - t0) : THREADS;
            for (int k = 0; open && k < n; k++)
                if (t0 + k > i && tile[k] == id) {
                    nx = (int32_t)(t0 + k);
                    open = 0;
                }
        }
        if (i < (size_t)N) {
            next[i] = nx;
            if (nx >= 0) later[nx] = 1;
        }
    }
}

// dout (N, C), ids, next, later (N) in; dtable (V, C) +=; grid-stride over
// blocks of (row, THREADS columns), a thread per column of a first row,
// walking its chain. The rows of a chain are found CHAIN at a time so that
// their loads overlap; they are added in order.
static __global__ void embed_backward_kernel(float *dtable, const float *__restrict__ dout,
                                             const int32_t *__restrict__ ids, const int32_t *__restrict__ next,
                                             const int32_t *__restrict__ later, int N, int C) {
    size_t nchunk = ((size_t)C + THREADS - 1) / THREADS;
    for (size_t b = blockIdx.x; b < (size_t)N * nchunk; b += gridDim.x) {
        int i = (int)(b / nchunk), c = (int)(b % nchunk) * THREADS + threadIdx.x;
        if (later[i] || c >= C) continue;
        float *t = dtable + (size_t)ids[i] * C + c;
        float acc = *t;
        for (int j = i; j >= 0;) {
            int js[CHAIN];
            float d[CHAIN];
#pragma unroll
            for (int q = 0; q < CHAIN; q++) {
                js[q] = j;
                if (j >= 0) j = next[j];
            }
#pragma unroll
            for (int q = 0; q < CHAIN; q++) d[q] = js[q] >= 0 ? dout[(size_t)js[q] * C + c] : 0.0f;
#pragma unroll
            for (int q = 0; q < CHAIN; q++)
                if (js[q] >= 0) acc += d[q];
        }
        *t = acc;
    }
}

void cu_embed_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int32_t *next = (int32_t *)cu_scratch(SCR_ROWS, 2 * (size_t)N * sizeof(int32_t)), *later = next + N;
    CU_CHECK(cudaMemsetAsync(later, 0, (size_t)N * sizeof(int32_t), 0));
    embed_links_kernel<<<cu_blocks(N, THREADS), THREADS>>>(next, later, ids, N);
    CU_LAUNCHED();
    size_t blocks = (size_t)N * (((size_t)C + THREADS - 1) / THREADS);
    embed_backward_kernel<<<cu_blocks(blocks, 1), THREADS>>>(dtable, dout, ids, next, later, N, C);
    CU_LAUNCHED();
}

// ---- zero, sumsq, adamw ---------------------------------------------------------

void cu_zero(float *x, size_t n) {
    if (n == 0) return;
    CU_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), 0));   // all-zero bits are 0.0f
}

#define SUMSQ_BLOCKS 1024    // the most partial sums; their number depends on n only

// x (n) in; part (gridDim.x) out: each block's Σ x² in double; grid-stride over elements
static __global__ void sumsq_kernel(double *part, const float *x, size_t n) {
    __shared__ double sh[32];
    double s = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = x[i];
        s += v * v;
    }
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// The partials are summed here, in order, after the copy (which waits for the kernel).
double cu_sumsq(const float *x, size_t n) {
    if (n == 0) return 0;
    unsigned nb = cu_blocks(n, THREADS);
    if (nb > SUMSQ_BLOCKS) nb = SUMSQ_BLOCKS;
    double *part = (double *)cu_scratch(SCR_REDUCE, nb * sizeof(double));
    double host[SUMSQ_BLOCKS];
    sumsq_kernel<<<nb, THREADS>>>(part, x, n);
    CU_LAUNCHED();
    CU_CHECK(cudaMemcpy(host, part, nb * sizeof(double), cudaMemcpyDeviceToHost));
    double s = 0;
    for (unsigned b = 0; b < nb; b++) s += host[b];
    return s;
}

// p, g, m, v (n): p, m, v updated in place; grid-stride over elements. The
// order of cpu/kernels_internal.h adamw_one, every rounding as there: torch.lerp as one
// fused multiply-add from the nearer end, the other products rounded.
static __global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, rl_adamw_f32 h) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = __fmul_rn(g[i], h.gscale), pd = __fmul_rn(p[i], h.decay), mi = m[i];
        mi = h.lerp_w < 0.5f ? fmaf(h.lerp_w, __fsub_rn(gi, mi), mi)
                             : fmaf(__fsub_rn(h.lerp_w, 1.0f), __fsub_rn(gi, mi), gi);
        float vi = __fadd_rn(__fmul_rn(v[i], h.beta2), __fmul_rn(__fmul_rn(h.one_minus_beta2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), h.bc2_sqrt), h.eps);
        p[i] = __fadd_rn(pd, __fdiv_rn(__fmul_rn(h.neg_step, mi), denom));
        m[i] = mi;
        v[i] = vi;
    }
}

void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, const rl_adamw *h) {
    if (n == 0) return;
    adamw_kernel<<<cu_blocks(n, THREADS), THREADS>>>(p, g, m, v, n, adamw_f32(h));
    CU_LAUNCHED();
}
