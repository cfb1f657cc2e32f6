// cuda/attention.cu — causal attention with grouped key/value heads (ops.h),
// forward and backward, on CUDA cores in f32, deterministic (no atomics, every
// sum in a fixed order).
//
// A block takes one (row, head) and walks its keys (forward, dq) or its
// queries (dk, dv): each of its WARPS warps takes every WARPS-th one, U at a
// time so that their loads overlap; the lanes of a warp split the head's
// dimensions (dimension lane + 32 i, i < DPL), so a warp reads a key row
// coalesced and gets a dot product by shuffles. The warps' partial results
// meet in shared memory, summed in warp order.
//
// Forward: an online softmax per warp (running max m, sum l, accumulators),
// merged across warps. When there are too few (row, head) blocks to fill the
// GPU (decoding), each also splits its keys into S contiguous ranges, one
// block each, and a second kernel merges the ranges' (m, l, acc) in order.
// Backward, recomputing the probabilities from the forward's lse:
//   p = exp(s − lse), dp = dout·v, D = dout·out, ds = p (dp − D),
//   dq = Σ_t ds k / √HS, dk = Σ_(i,h) ds q / √HS, dv = Σ_(i,h) p dout,
// dq per (query row, head) over its keys, dk and dv per (key row, kv head)
// over the group's query heads and the queries that see the key, so each
// output has one writer.
//
// The row → sequence maps (SCR_MAP) let a block find its sequence in O(1)
// without the host reading seqs, which is in device memory.
#include <stdio.h>
#include <stdlib.h>

#include "model/cuda/cuda.h"

#define WARPS 4             // warps per block
#define THREADS (WARPS * 32)
#define U 4                 // keys (or queries) a warp takes at once
#define MAX_HS 256          // 32 lanes × 8 dimensions
#define MAX_SPLITS 32       // key ranges of one (row, head) in the forward
#define MIN_CHUNK 256       // keys per range at least: fewer are not worth a block

// ---- shared device functions

// The lane's dimensions (lane + 32 i) of a head's row, 0 past HS or when !ok
// (row is then not read).
template <int DPL>
__device__ __forceinline__ void lane_load(float (&x)[DPL], const float *__restrict__ row, int HS, bool ok) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        int d = lane + 32 * i;
        x[i] = ok && d < HS ? row[d] : 0.0f;
    }
}

template <int DPL>
__device__ __forceinline__ float lane_dot(const float (&a)[DPL], const float (&b)[DPL]) {
    float s = 0;
#pragma unroll
    for (int i = 0; i < DPL; i++) s = fmaf(a[i], b[i], s);
    return s;
}

// n sums over the warp at once (independent shuffles overlap). The xor
// butterfly leaves the same value, bit for bit, in every lane.
template <int n>
__device__ __forceinline__ void warp_sums(float (&x)[n]) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int j = 0; j < n; j++) x[j] += __shfl_xor_sync(0xffffffffu, x[j], o);
}

// Σ over the block's warps of each lane's accumulators, in warp order, into
// sh[0][d] for d < HS. sh: WARPS × (32 DPL) floats; the block synchronises.
template <int DPL>
__device__ __forceinline__ void block_sum_acc(const float (&acc)[DPL], float (*sh)[DPL * 32], int HS) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < DPL; i++) sh[w][lane + 32 * i] = acc[i];
    __syncthreads();
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float s = sh[0][d];
        for (int x = 1; x < WARPS; x++) s += sh[x][d];
        sh[0][d] = s;   // only this thread reads or writes column d
    }
    __syncthreads();
}

// Keys [t0, t1) of range `split` of S for a query that sees T keys: S
// contiguous ranges of at least MIN_CHUNK keys; the last ones may be empty.
__device__ __forceinline__ void split_range(int T, int split, int S, int *t0, int *t1) {
    long long chunk = (T + S - 1) / S;
    if (chunk < MIN_CHUNK) chunk = MIN_CHUNK;
    long long lo = split * chunk, hi = lo + chunk;
    *t0 = (int)(lo < T ? lo : T);
    *t1 = (int)(hi < T ? hi : T);
}

// ---- row → sequence maps

// qmap (N): the sequence of each query row; kvmap (N), when not NULL: the
// sequence of each key/value row (rows kv0 .. kv0 + pos0 + n − 1), both −1
// beforehand (memset). Rows outside [0, N) are not recorded.
// Grid: nseq blocks (one per sequence) of 256 threads striding its rows.
__global__ void attn_map_kernel(int *__restrict__ qmap, int *__restrict__ kvmap, const rl_attn_seq *__restrict__ seqs,
                                int N) {
    rl_attn_seq sq = seqs[blockIdx.x];
    for (int j = threadIdx.x; j < sq.n; j += blockDim.x) {
        int r = sq.q0 + j;
        if (r >= 0 && r < N) qmap[r] = (int)blockIdx.x;
    }
    if (!kvmap) return;
    for (int j = threadIdx.x; j < sq.pos0 + sq.n; j += blockDim.x) {
        int r = sq.kv0 + j;
        if (r >= 0 && r < N) kvmap[r] = (int)blockIdx.x;
    }
}

// map (N ints) at the start of SCR_MAP, and a second (N) after it when kv;
// `extra` bytes more after them, 256-byte aligned, at *rest.
static int *build_maps(const rl_attn_seq *seqs, int nseq, int N, int kv, size_t extra, void **rest) {
    size_t mbytes = ((size_t)(kv ? 2 : 1) * N * sizeof(int) + 255) / 256 * 256;
    char *p = (char *)cu_scratch(SCR_MAP, mbytes + extra);
    int *map = (int *)p;
    CU_CHECK(cudaMemsetAsync(map, 0xff, (size_t)(kv ? 2 : 1) * N * sizeof(int), 0));   // −1: no sequence
    attn_map_kernel<<<nseq, 256>>>(map, kv ? map + N : NULL, seqs, N);
    CU_LAUNCHED();
    if (rest) *rest = p + mbytes;
    return map;
}

// ---- forward

// out (N, NH, HS), lse (N, NH) or NULL; q (N, NH, HS); k, v rows (NKV, HS).
// Grid (N·NH, S): block x = (row, head) — later rows, which have more keys,
// first — block y = key range; THREADS threads. With S = 1 writes out and lse;
// otherwise the range's max m, sum l (part_ml, 2 floats) and unnormalised
// output (part_acc, HS floats) at ((row·NH + h)·S + split), for
// attn_merge_kernel. An empty range writes nothing.
template <int DPL>
__global__ void __launch_bounds__(THREADS)
    attn_fwd_kernel(float *__restrict__ out, float *__restrict__ lse, float *__restrict__ part_ml,
                    float *__restrict__ part_acc, const float *__restrict__ q, const float *__restrict__ k,
                    const float *__restrict__ v, const rl_attn_seq *__restrict__ seqs, const int *__restrict__ map,
                    int N, int NH, int NKV, int HS, float scale) {
    __shared__ float sh_m[WARPS], sh_l[WARPS], sh_acc[WARPS][DPL * 32];
    int b = (int)blockIdx.x, row = N - 1 - b / NH, h = b % NH, S = (int)gridDim.y, split = (int)blockIdx.y;
    int s = map[row];
    if (s < 0) return;   // a row of no sequence (not expected)
    rl_attn_seq sq = seqs[s];
    int T = sq.pos0 + (row - sq.q0) + 1, t0, t1;
    split_range(T, split, S, &t0, &t1);
    if (t0 >= t1) return;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, hk = h / (NH / NKV);
    size_t ks = (size_t)NKV * HS, qi = (size_t)row * NH + h;
    const float *K = k + (size_t)sq.kv0 * ks + (size_t)hk * HS, *V = v + (size_t)sq.kv0 * ks + (size_t)hk * HS;
    float qv[DPL], acc[DPL], m = -INFINITY, l = 0;
    lane_load<DPL>(qv, q + qi * HS, HS, true);
#pragma unroll
    for (int i = 0; i < DPL; i++) acc[i] = 0;
    // keys t, t + WARPS, ..., t + (U−1)·WARPS; t < t1 keeps the batch's max finite
    for (int t = t0 + w; t < t1; t += WARPS * U) {
        float sc[U], vv[U][DPL];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int tu = t + u * WARPS;
            float kk[DPL];
            lane_load<DPL>(kk, K + (size_t)tu * ks, HS, tu < t1);
            lane_load<DPL>(vv[u], V + (size_t)tu * ks, HS, tu < t1);
            sc[u] = lane_dot<DPL>(qv, kk);
        }
        warp_sums<U>(sc);
        float mx = m;
#pragma unroll
        for (int u = 0; u < U; u++) {
            sc[u] = t + u * WARPS < t1 ? sc[u] * scale : -INFINITY;
            mx = fmaxf(mx, sc[u]);
        }
        float c = expf(m - mx);   // 0 on the first batch (m = −∞)
        l *= c;
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[i] *= c;
#pragma unroll
        for (int u = 0; u < U; u++) {
            float p = expf(sc[u] - mx);   // 0 past t1
            l += p;
#pragma unroll
            for (int i = 0; i < DPL; i++) acc[i] = fmaf(p, vv[u][i], acc[i]);
        }
        m = mx;
    }
    // merge the warps: a warp without keys has m = −∞, l = 0, acc = 0, weight 0
    if (lane == 0) {
        sh_m[w] = m;
        sh_l[w] = l;
    }
#pragma unroll
    for (int i = 0; i < DPL; i++) sh_acc[w][lane + 32 * i] = acc[i];
    __syncthreads();
    float M = -INFINITY, L = 0, wt[WARPS];
#pragma unroll
    for (int x = 0; x < WARPS; x++) M = fmaxf(M, sh_m[x]);   // finite: the range has keys
#pragma unroll
    for (int x = 0; x < WARPS; x++) {
        wt[x] = expf(sh_m[x] - M);
        L += sh_l[x] * wt[x];
    }
    if (S == 1) {
        for (int d = threadIdx.x; d < HS; d += blockDim.x) {
            float a = 0;
#pragma unroll
            for (int x = 0; x < WARPS; x++) a = fmaf(sh_acc[x][d], wt[x], a);
            out[qi * HS + d] = a / L;
        }
        if (lse && threadIdx.x == 0) lse[qi] = M + logf(L);
    } else {
        size_t pi = qi * S + split;
        for (int d = threadIdx.x; d < HS; d += blockDim.x) {
            float a = 0;
#pragma unroll
            for (int x = 0; x < WARPS; x++) a = fmaf(sh_acc[x][d], wt[x], a);
            part_acc[pi * HS + d] = a;
        }
        if (threadIdx.x == 0) {
            part_ml[2 * pi] = M;
            part_ml[2 * pi + 1] = L;
        }
    }
}

// The S key ranges of attn_fwd_kernel merged, in range order, into out
// (N, NH, HS) and lse (N, NH) or NULL. Grid N·NH blocks, one per (row, head),
// of THREADS threads.
__global__ void __launch_bounds__(THREADS)
    attn_merge_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ part_ml,
                      const float *__restrict__ part_acc, const rl_attn_seq *__restrict__ seqs,
                      const int *__restrict__ map, int NH, int HS, int S) {
    __shared__ float sh_w[MAX_SPLITS];
    int b = (int)blockIdx.x, row = b / NH;
    int s = map[row];
    if (s < 0) return;
    rl_attn_seq sq = seqs[s];
    int T = sq.pos0 + (row - sq.q0) + 1, ns = 0;
    // the non-empty ranges are the first ns
    for (int x = 0; x < S; x++) {
        int t0, t1;
        split_range(T, x, S, &t0, &t1);
        if (t0 < t1) ns = x + 1;
    }
    size_t qi = (size_t)b, p0 = qi * S;   // b = row·NH + h
    float M = -INFINITY, L = 0;
    for (int x = 0; x < ns; x++) M = fmaxf(M, part_ml[2 * (p0 + x)]);
    if ((int)threadIdx.x < ns) sh_w[threadIdx.x] = expf(part_ml[2 * (p0 + threadIdx.x)] - M);
    __syncthreads();
    for (int x = 0; x < ns; x++) L += part_ml[2 * (p0 + x) + 1] * sh_w[x];
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float a = 0;
        for (int x = 0; x < ns; x++) a = fmaf(part_acc[(p0 + x) * HS + d], sh_w[x], a);
        out[qi * HS + d] = a / L;
    }
    if (lse && threadIdx.x == 0) lse[qi] = M + logf(L);
}

// ---- host side

// Dimensions per lane for head size HS: 1, 2, 4 or 8 (HS ≤ MAX_HS).
static int lane_dims(int HS) {
    if (HS > MAX_HS) {
        fprintf(stderr, "rlpipe: CUDA attention: head size %d above %d\n", HS, MAX_HS);
        abort();
    }
    return HS <= 32 ? 1 : HS <= 64 ? 2 : HS <= 128 ? 4 : 8;
}

// kernel<DPL> for head size HS on grid, THREADS threads, stream 0.
#define LAUNCH_DPL(HS, kernel, grid, ...)                                  \
    do {                                                                   \
        switch (lane_dims(HS)) {                                           \
        case 1: kernel<1><<<(grid), THREADS>>>(__VA_ARGS__); break;        \
        case 2: kernel<2><<<(grid), THREADS>>>(__VA_ARGS__); break;        \
        case 4: kernel<4><<<(grid), THREADS>>>(__VA_ARGS__); break;        \
        default: kernel<8><<<(grid), THREADS>>>(__VA_ARGS__); break;       \
        }                                                                  \
        CU_LAUNCHED();                                                     \
    } while (0)

// Multiprocessors of the device, asked once (a thread-safe static).
static int sm_count(void) {
    static const int n = [] {
        int dev, c;
        CU_CHECK(cudaGetDevice(&dev));
        CU_CHECK(cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev));
        return c;
    }();
    return n;
}

void cu_attention(float *out, float *lse, const float *q, const void *kv_k, const void *kv_v, rl_dtype kvt,
                  const rl_attn_seq *seqs, int nseq, int N, int NH, int NKV, int HS) {
    cu_kv_f32_only(kvt, "attention");
    const float *k = (const float *)kv_k, *v = (const float *)kv_v;
    if (N <= 0 || nseq <= 0) return;
    lane_dims(HS);   // aborts on a head too large, before any work is queued
    float scale = 1.0f / sqrtf((float)HS);
    // Key ranges per (row, head): enough blocks for about 4 per SM; the host
    // cannot see the sequences' lengths, so short ones leave ranges empty.
    size_t rows = (size_t)N * NH, target = 4 * (size_t)sm_count();
    int S = rows >= target ? 1 : (int)((target + rows - 1) / rows);
    if (S > MAX_SPLITS) S = MAX_SPLITS;
    size_t nparts = S > 1 ? rows * S : 0;
    void *rest;
    int *map = build_maps(seqs, nseq, N, 0, nparts * (2 + (size_t)HS) * sizeof(float), &rest);
    float *part_ml = S > 1 ? (float *)rest : NULL, *part_acc = S > 1 ? part_ml + 2 * nparts : NULL;
    dim3 grid((unsigned)rows, (unsigned)S);
    LAUNCH_DPL(HS, attn_fwd_kernel, grid, out, lse, part_ml, part_acc, q, k, v, seqs, map, N, NH, NKV, HS, scale);
    if (S > 1) {
        attn_merge_kernel<<<(unsigned)rows, THREADS>>>(out, lse, part_ml, part_acc, seqs, map, NH, HS, S);
        CU_LAUNCHED();
    }
}

// ---- backward

// dq (N, NH, HS) of one (query row, head) over its keys, and D = dout·out of
// it into Dbuf (N, NH) for attn_dkdv_kernel. Grid N·NH blocks (later rows
// first, as in the forward) of THREADS threads.
template <int DPL>
__global__ void __launch_bounds__(THREADS)
    attn_dq_kernel(float *__restrict__ dq, float *__restrict__ Dbuf, const float *__restrict__ dout,
                   const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                   const float *__restrict__ out, const float *__restrict__ lse, const rl_attn_seq *__restrict__ seqs,
                   const int *__restrict__ map, int N, int NH, int NKV, int HS, float scale) {
    __shared__ float sh[WARPS][DPL * 32];
    int b = (int)blockIdx.x, row = N - 1 - b / NH, h = b % NH;
    int s = map[row];
    if (s < 0) return;
    rl_attn_seq sq = seqs[s];
    int T = sq.pos0 + (row - sq.q0) + 1;
    int w = threadIdx.x >> 5, hk = h / (NH / NKV);
    size_t ks = (size_t)NKV * HS, qi = (size_t)row * NH + h;
    const float *K = k + (size_t)sq.kv0 * ks + (size_t)hk * HS, *V = v + (size_t)sq.kv0 * ks + (size_t)hk * HS;
    float qv[DPL], dov[DPL], ov[DPL], acc[DPL];
    lane_load<DPL>(qv, q + qi * HS, HS, true);
    lane_load<DPL>(dov, dout + qi * HS, HS, true);
    lane_load<DPL>(ov, out + qi * HS, HS, true);
    float D[1] = {lane_dot<DPL>(dov, ov)}, L = lse[qi];
    warp_sums<1>(D);   // every warp computes the same D
    if (threadIdx.x == 0) Dbuf[qi] = D[0];
#pragma unroll
    for (int i = 0; i < DPL; i++) acc[i] = 0;
    for (int t = w; t < T; t += WARPS * U) {
        float x[2 * U], kk[U][DPL];   // x: q·k of the U keys, then dout·v
#pragma unroll
        for (int u = 0; u < U; u++) {
            int tu = t + u * WARPS;
            float vv[DPL];
            lane_load<DPL>(kk[u], K + (size_t)tu * ks, HS, tu < T);
            lane_load<DPL>(vv, V + (size_t)tu * ks, HS, tu < T);
            x[u] = lane_dot<DPL>(qv, kk[u]);
            x[U + u] = lane_dot<DPL>(dov, vv);
        }
        warp_sums<2 * U>(x);
#pragma unroll
        for (int u = 0; u < U; u++) {
            // past T, ds = 0 outright: exp(0 − lse) may overflow
            float ds = t + u * WARPS < T ? expf(x[u] * scale - L) * (x[U + u] - D[0]) : 0.0f;
#pragma unroll
            for (int i = 0; i < DPL; i++) acc[i] = fmaf(ds, kk[u][i], acc[i]);
        }
    }
    block_sum_acc<DPL>(acc, sh, HS);
    for (int d = threadIdx.x; d < HS; d += blockDim.x) dq[qi * HS + d] = sh[0][d] * scale;
}

// dk, dv (N, NKV, HS) of one (key row, kv head): over the group's query heads
// and the queries of its sequence that see the key (position ≥ the key's),
// items (query j, head) taken in query order, heads within. D (N, NH) from
// attn_dq_kernel. Grid N·NKV blocks of THREADS threads.
template <int DPL>
__global__ void __launch_bounds__(THREADS)
    attn_dkdv_kernel(float *__restrict__ dk, float *__restrict__ dv, const float *__restrict__ Dbuf,
                     const float *__restrict__ dout, const float *__restrict__ q, const float *__restrict__ k,
                     const float *__restrict__ v, const float *__restrict__ lse, const rl_attn_seq *__restrict__ seqs,
                     const int *__restrict__ kvmap, int NH, int NKV, int HS, float scale) {
    __shared__ float shk[WARPS][DPL * 32], shv[WARPS][DPL * 32];
    int b = (int)blockIdx.x, row = b / NKV, hk = b % NKV;
    int s = kvmap[row];
    if (s < 0) return;
    rl_attn_seq sq = seqs[s];
    int G = NH / NKV, pos = row - sq.kv0;
    int j0 = pos > sq.pos0 ? pos - sq.pos0 : 0;   // first query that sees the key
    int items = G * (sq.n - j0);
    int w = threadIdx.x >> 5;
    size_t ki = (size_t)row * NKV + hk;
    float kv_k[DPL], kv_v[DPL], ak[DPL], av[DPL];
    lane_load<DPL>(kv_k, k + ki * HS, HS, true);
    lane_load<DPL>(kv_v, v + ki * HS, HS, true);
#pragma unroll
    for (int i = 0; i < DPL; i++) ak[i] = av[i] = 0;
    for (int e = w; e < items; e += WARPS * U) {
        float x[2 * U], qq[U][DPL], dd[U][DPL], Lu[U], Du[U];   // x: q·k of the U items, then dout·v
#pragma unroll
        for (int u = 0; u < U; u++) {
            int eu = e + u * WARPS;
            bool ok = eu < items;
            size_t qi = (size_t)(sq.q0 + j0 + eu / G) * NH + (size_t)hk * G + eu % G;
            lane_load<DPL>(qq[u], q + qi * HS, HS, ok);
            lane_load<DPL>(dd[u], dout + qi * HS, HS, ok);
            Lu[u] = ok ? lse[qi] : 0.0f;
            Du[u] = ok ? Dbuf[qi] : 0.0f;
            x[u] = lane_dot<DPL>(qq[u], kv_k);
            x[U + u] = lane_dot<DPL>(dd[u], kv_v);
        }
        warp_sums<2 * U>(x);
#pragma unroll
        for (int u = 0; u < U; u++) {
            bool ok = e + u * WARPS < items;
            float p = ok ? expf(x[u] * scale - Lu[u]) : 0.0f, ds = p * (x[U + u] - Du[u]);
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                av[i] = fmaf(p, dd[u][i], av[i]);
                ak[i] = fmaf(ds, qq[u][i], ak[i]);
            }
        }
    }
    block_sum_acc<DPL>(ak, shk, HS);
    block_sum_acc<DPL>(av, shv, HS);
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        dk[ki * HS + d] = shk[0][d] * scale;
        dv[ki * HS + d] = shv[0][d];
    }
}

void cu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                           const float *v, const float *out, const float *lse, const rl_attn_seq *seqs, int nseq,
                           int N, int NH, int NKV, int HS) {
    if (N <= 0 || nseq <= 0) return;
    lane_dims(HS);
    float scale = 1.0f / sqrtf((float)HS);
    int *qmap = build_maps(seqs, nseq, N, 1, 0, NULL), *kvmap = qmap + N;
    float *Dbuf = (float *)cu_scratch(SCR_ROWS, (size_t)N * NH * sizeof(float));
    LAUNCH_DPL(HS, attn_dq_kernel, (unsigned)((size_t)N * NH), dq, Dbuf, dout, q, k, v, out, lse, seqs, qmap, N,
               NH, NKV, HS, scale);
    LAUNCH_DPL(HS, attn_dkdv_kernel, (unsigned)((size_t)N * NKV), dk, dv, Dbuf, dout, q, k, v, lse, seqs, kvmap,
               NH, NKV, HS, scale);
}
