// cuda/sample.cu — sample: a token from each row of logits, drawn as
// smp_draw_u (sampling.c) draws it, and its log-probability.
//
// A block per row. Greedy is an argmax. Otherwise prob_i = exp((l_i − max) ·
// inv_t) is computed with the CPU sampler's own float arithmetic (exp_neg4:
// same operations, nothing fused), so every probability has the CPU's bits.
// Without top-k/top-p the walk over ids ascending is the CPU's too, bit for
// bit: its sums of blocks of 256 values (four float lanes, then double), the
// running sum over blocks in order, then one block value by value; so token
// and log-probability match the CPU's (log itself aside, within an ulp).
// With top-k/top-p, cub sorts the probabilities (descending, ids ascending
// among equals); the sums over the sorted order are in double, each thread a
// contiguous chunk and a fixed-order scan of the chunk sums, and the one
// thread whose chunk holds the target walks it value by value: the rule is
// the CPU's, the order of additions not (bits ~1e-16 apart).
#include <limits.h>

#include <cub/cub.cuh>

#include "model/cuda/cuda.h"

#define THREADS 1024               // per row: the chunks of a 128k vocabulary are ~128 values
#define SORT_ELEMS (1u << 21)      // candidates sorted per cub call (rows · V): bounds the scratch
#define BLOCK 256                  // sampling.c's BLOCK: values per block sum of the plain walk

// The block's shared state for scans and walks.
typedef struct {
    double incl[THREADS];   // running sum up to the end of each thread's chunk
    double wsum[32];        // per warp, then scanned over warps
    double dres;            // a double result broadcast by one thread
    int first;              // block_first
    int ires;               // an int result broadcast by one thread
} scan_smem;

// exp(x) for x <= 0 exactly as sampling.c's exp_neg4 computes each lane (an
// argument below −87 counts as −87, so no probability is 0): x = n ln2 + r,
// a degree-6 polynomial in r, 2^n through the exponent bits. The _rn
// intrinsics keep nvcc from fusing any product and sum into an FMA, which
// the CPU (SSE2) does not do either.
static __device__ __forceinline__ float exp_neg(float x) {
    x = x < -87.0f ? -87.0f : x;   // NaN stays NaN, as on the CPU
    float n = __fsub_rn(__fadd_rn(__fmul_rn(x, 1.44269504f), 12582912.0f), 12582912.0f);   // round(x / ln2)
    float r = __fsub_rn(__fsub_rn(x, __fmul_rn(n, 0.693145752f)), __fmul_rn(n, 1.42860677e-6f));
    float p = __fadd_rn(8.33333377e-3f, __fmul_rn(r, 1.38888892e-3f));
    p = __fadd_rn(4.16666679e-2f, __fmul_rn(r, p));
    p = __fadd_rn(1.66666672e-1f, __fmul_rn(r, p));
    p = __fadd_rn(0.5f, __fmul_rn(r, p));
    p = __fadd_rn(1.0f, __fmul_rn(r, p));
    p = __fadd_rn(1.0f, __fmul_rn(r, p));
    return __fmul_rn(p, __int_as_float(((int)n + 127) << 23));
}

// The unnormalised probability of logit l, the CPU's bits: exp((l − max) · inv_t).
static __device__ __forceinline__ float prob_of(float l, float zmax, float inv_t) {
    return exp_neg(__fmul_rn(__fsub_rn(l, zmax), inv_t));
}

// The largest of x (V), to every thread.
static __device__ float row_max(const float *x, int V, float *sh) {
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, x[i]);
    return cu_block_max(m, sh);
}

// Thread t's chunk [lo, hi) of [0, n): contiguous, ascending with t.
static __device__ __forceinline__ int chunk_len(int n) { return (n + (int)blockDim.x - 1) / (int)blockDim.x; }
static __device__ __forceinline__ int chunk_lo(int n, int t) {
    long long lo = (long long)t * chunk_len(n);
    return lo < n ? (int)lo : n;
}

// Inclusive scan of one double per thread into sm->incl, in a fixed order
// (a shuffle scan per warp, then one over the warp totals): the same bits
// every run. Returns the total to every thread.
static __device__ double block_scan(double s, scan_smem *sm) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        double t = __shfl_up_sync(0xffffffffu, s, o);
        if (lane >= o) s += t;
    }
    if (lane == 31) sm->wsum[w] = s;
    __syncthreads();
    if (w == 0) {
        double v = lane < nw ? sm->wsum[lane] : 0.0;
        for (int o = 1; o < 32; o <<= 1) {
            double t = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += t;
        }
        if (lane < nw) sm->wsum[lane] = v;
    }
    __syncthreads();
    if (w > 0) s += sm->wsum[w - 1];
    sm->incl[threadIdx.x] = s;
    __syncthreads();
    return sm->incl[blockDim.x - 1];
}

// Σ val(i) over [0, n) (values >= 0), each thread its chunk in order, then
// block_scan: sm->incl holds each chunk's running sum. Returns the total.
template <class F> static __device__ double scan_values(F val, int n, scan_smem *sm) {
    int lo = chunk_lo(n, threadIdx.x), hi = chunk_lo(n, threadIdx.x + 1);
    double s = 0;
    for (int i = lo; i < hi; i++) s += val(i);
    return block_scan(s, sm);
}

// The lowest thread whose cond holds, or −1, to every thread.
static __device__ int block_first(bool cond, scan_smem *sm) {
    __syncthreads();   // sm->first may still be read by a previous call
    if (threadIdx.x == 0) sm->first = INT_MAX;
    __syncthreads();
    if (cond) atomicMin(&sm->first, (int)threadIdx.x);   // a minimum: the same whatever the order
    __syncthreads();
    return sm->first == INT_MAX ? -1 : sm->first;
}

// smp_draw_u's walk over val(0..n) from position lo, cum being the running
// sum before lo: the first position at which the running sum of the nonzero
// values exceeds target; else the last nonzero one (from lo on, else before
// lo); 0 when all are 0. One thread.
template <class F> static __device__ int walk(F val, int lo, int n, double cum, double target) {
    int pos = -1;
    for (int i = lo; i < n; i++) {   // rounding may carry the walk past the chunk
        float p = val(i);
        if (p <= 0) continue;
        cum += p;
        pos = i;
        if (cum > target) break;
    }
    for (int i = lo - 1; pos < 0 && i >= 0; i--)
        if (val(i) > 0) pos = i;
    return pos < 0 ? 0 : pos;
}

// The position drawn from val(0..n) for target u · (their total), given
// sm->incl from scan_values over the same n: the walk starts at the first
// chunk whose running sum exceeds target (its predecessor's is then at most
// target), or the last chunk if rounding leaves none. To every thread.
template <class F> static __device__ int draw(F val, int n, double target, scan_smem *sm) {
    int lo = chunk_lo(n, threadIdx.x), hi = chunk_lo(n, threadIdx.x + 1);
    int t = block_first(lo < hi && sm->incl[threadIdx.x] > target, sm);
    if (t < 0) t = (n - 1) / chunk_len(n);
    if ((int)threadIdx.x == t) sm->ires = walk(val, lo, n, t ? sm->incl[t - 1] : 0.0, target);
    __syncthreads();
    return sm->ires;
}

// (v, i) better than (bv, bi) for argmax: larger, or equal with a lower id.
static __device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// logits (N, V) in; tok (N) = the argmax of each row (the lowest id among
// equal maxima), logp (N) = 0: temperature 0. A block per row.
static __global__ void __launch_bounds__(THREADS) greedy_kernel(int32_t *tok, double *logp, const float *logits,
                                                                int N, int V) {
    __shared__ float sv[32];
    __shared__ int si[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (size_t r = blockIdx.x; r < (size_t)N; r += gridDim.x) {
        const float *x = logits + r * V;
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            if (better(x[i], i, bv, bi)) bv = x[i], bi = i;   // ids ascend: keeps the first maximum
        for (int o = 16; o > 0; o >>= 1) {
            float v = __shfl_xor_sync(0xffffffffu, bv, o);
            int i = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(v, i, bv, bi)) bv = v, bi = i;
        }
        __syncthreads();   // sv, si may still be read for the previous row
        if (lane == 0) sv[w] = bv, si[w] = bi;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int j = 1; j < nw; j++)
                if (better(sv[j], si[j], bv, bi)) bv = sv[j], bi = si[j];
            tok[r] = bi == INT_MAX ? 0 : bi;   // INT_MAX: every logit NaN
            logp[r] = 0;
        }
    }
}

// logits (N, V), u (N) in; tok (N), logp (N) out: temperature > 0, no top-k
// or top-p, smp_draw_u's walk over ids ascending with its very sums. A block
// per row; dynamic shared memory: the row's block sums, ceil(V / BLOCK)
// doubles. Four consecutive threads sum one block as the CPU's four vector
// lanes do (lane j: values j, j + 4, ... of the whole quads, in float), the
// first adds the lanes in double in lane order and then the last 1..3 values.
// Thread 0 then runs the CPU's loops: the total over blocks in order, the
// block where the running sum passes u · total, and the walk in that block
// (its values computed by all threads first; past it, should rounding carry
// the walk on, and back before it, recomputed one by one).
static __global__ void __launch_bounds__(THREADS) plain_kernel(int32_t *tok, double *logp, const float *logits,
                                                               const double *u, float inv_t, int N, int V) {
    extern __shared__ double bsum[];
    __shared__ float sh[32];
    __shared__ float pb[BLOCK];
    __shared__ int sb;
    __shared__ double stotal, scum, starget;
    int nb = (V + BLOCK - 1) / BLOCK, j = threadIdx.x & 3;
    for (size_t r = blockIdx.x; r < (size_t)N; r += gridDim.x) {
        const float *x = logits + r * V;
        float zmax = row_max(x, V, sh);
        for (int q0 = 0; q0 < 4 * nb; q0 += blockDim.x) {   // the same trips for every thread: shuffles below
            int q = q0 + threadIdx.x, b = q >> 2;
            int n = b < nb ? (V - b * BLOCK < BLOCK ? V - b * BLOCK : BLOCK) : 0, quads = n / 4;
            const float *xb = x + (size_t)b * BLOCK;
            float acc = 0.0f;
            for (int t = 0; t < quads; t++) acc = __fadd_rn(acc, prob_of(xb[4 * t + j], zmax, inv_t));
            float a1 = __shfl_down_sync(0xffffffffu, acc, 1);
            float a2 = __shfl_down_sync(0xffffffffu, acc, 2);
            float a3 = __shfl_down_sync(0xffffffffu, acc, 3);
            if (j == 0 && b < nb) {
                double s = (double)acc + (double)a1 + (double)a2 + (double)a3;
                for (int i = 4 * quads; i < n; i++) s += prob_of(xb[i], zmax, inv_t);
                bsum[b] = s;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double total = 0;
            for (int b = 0; b < nb; b++) total += bsum[b];
            double target = u[r] * total, cum = 0;
            int b = 0;
            while (b < nb - 1 && cum + bsum[b] <= target) cum += bsum[b++];
            sb = b, stotal = total, scum = cum, starget = target;
        }
        __syncthreads();
        int b0 = sb * BLOCK;
        int i0 = b0 + (int)threadIdx.x;
        if (threadIdx.x < BLOCK && i0 < V) pb[threadIdx.x] = prob_of(x[i0], zmax, inv_t);
        __syncthreads();
        if (threadIdx.x == 0) {
            double cum = scum, target = starget, total = stotal;
            int t = 0, found = 0;
            for (int i = b0; i < V; i++) {
                float p = i - b0 < BLOCK ? pb[i - b0] : prob_of(x[i], zmax, inv_t);
                if (p <= 0) continue;
                cum += p;
                t = i;
                found = 1;
                if (cum > target) break;
            }
            for (int i = b0 - 1; !found && i >= 0; i--)   // only zeros from block sb on
                if (prob_of(x[i], zmax, inv_t) > 0) t = i, found = 1;
            tok[r] = t;
            logp[r] = log((double)prob_of(x[t], zmax, inv_t)) - log(total);
        }
        __syncthreads();   // bsum, pb, sb are rewritten for the next row
    }
}

// logits rows [0, rows) (V) in; key[r][i] = r · 2^32 + ~bits(prob_i) and
// id[r][i] = i: sorted ascending, the keys keep rows apart and order each
// row by probability descending (positive floats order as their bits), and
// the stable sort keeps ids ascending among equal probabilities. A block per row.
static __global__ void __launch_bounds__(THREADS) keys_kernel(unsigned long long *key, int32_t *id,
                                                              const float *logits, float inv_t, int rows, int V) {
    __shared__ float sh[32];
    for (size_t r = blockIdx.x; r < (size_t)rows; r += gridDim.x) {
        const float *x = logits + r * V;
        float zmax = row_max(x, V, sh);
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            unsigned bits = __float_as_uint(prob_of(x[i], zmax, inv_t));
            key[r * V + i] = ((unsigned long long)r << 32) | (unsigned)~bits;
            id[r * V + i] = i;
        }
    }
}

// key, id (rows, V) sorted by keys_kernel's keys, u (rows) in; tok (rows),
// logp (rows) out. Top-k keeps the first k candidates; top-p (top_p < 1)
// then the shortest prefix whose mass reaches top_p times theirs (at least
// one); the walk is over what is kept. A block per row.
static __global__ void __launch_bounds__(THREADS) sorted_kernel(int32_t *tok, double *logp,
                                                                const unsigned long long *key, const int32_t *id,
                                                                const double *u, int rows, int V, int k,
                                                                float top_p) {
    __shared__ scan_smem sm;
    for (size_t r = blockIdx.x; r < (size_t)rows; r += gridDim.x) {
        const unsigned long long *kr = key + r * V;
        auto val = [=](int i) { return __uint_as_float(~(unsigned)kr[i]); };
        int n = k;
        double total = scan_values(val, n, &sm);
        if (top_p < 1.0f) {
            // CPU: while (keep < n && (keep == 0 || mass < need)) mass += p[keep++].
            // The first chunk whose running sum reaches need holds the cut
            // (its predecessor's is below need); none: everything is kept.
            double need = (double)top_p * total;
            int lo = chunk_lo(n, threadIdx.x), hi = chunk_lo(n, threadIdx.x + 1);
            int t = block_first(lo < hi && sm.incl[threadIdx.x] >= need, &sm);
            if (t < 0) {
                if (threadIdx.x == 0) sm.ires = n, sm.dres = total;
            } else if ((int)threadIdx.x == t) {
                double mass = t ? sm.incl[t - 1] : 0.0;
                int keep = lo;
                while (keep < n && (keep == 0 || mass < need)) mass += val(keep++);
                sm.ires = keep, sm.dres = mass;
            }
            __syncthreads();
            n = sm.ires;
            total = sm.dres;
            scan_values(val, n, &sm);   // running sums of the kept prefix for the walk; its total is `total`
        }
        int pos = draw(val, n, u[r] * total, &sm);
        if (threadIdx.x == 0) {
            tok[r] = id[r * V + pos];
            logp[r] = log((double)val(pos)) - log(total);
        }
    }
}

// b rounded up to a multiple of 256: the next part of a scratch buffer starts aligned.
static size_t align_up(size_t b) { return (b + 255) & ~(size_t)255; }

// cub's temporary storage for sorting n keys of end_bit bits with their ids.
static size_t sort_temp_bytes(int n, int end_bit) {
    size_t bytes = 0;
    CU_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const unsigned long long *)nullptr,
                                             (unsigned long long *)nullptr, (const int32_t *)nullptr,
                                             (int32_t *)nullptr, n, 0, end_bit, (cudaStream_t)0));
    return bytes;
}

void cu_sample(int32_t *tok, double *logp, const float *logits, const smp_params *p, const double *u, int N, int V) {
    if (N <= 0 || V <= 0) return;
    if (p->temperature <= 0) {
        greedy_kernel<<<cu_blocks(N, 1), THREADS>>>(tok, logp, logits, N, V);
        CU_LAUNCHED();
        return;
    }
    float inv_t = (float)(1.0 / (double)p->temperature);
    int top_k = p->top_k > 0 && p->top_k < (uint32_t)V;
    if (!top_k && !(p->top_p < 1.0f)) {
        size_t bytes = (size_t)((V + BLOCK - 1) / BLOCK) * sizeof(double);
        if (bytes > 48 * 1024) {   // the default limit of dynamic shared memory: V above 1.5 million
            CU_CHECK(cudaFuncSetAttribute(plain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        }
        plain_kernel<<<cu_blocks(N, 1), THREADS, bytes>>>(tok, logp, logits, u, inv_t, N, V);
        CU_LAUNCHED();
        return;
    }

    // Rows are sorted G at a time (G · V candidates at most SORT_ELEMS, at
    // least one row) in one scratch buffer: keys and ids in and out, then
    // cub's temporary storage.
    int G = (unsigned)V >= SORT_ELEMS ? 1 : (int)(SORT_ELEMS / (unsigned)V);
    if (G > N) G = N;
    int row_bits = 0;
    while ((1u << row_bits) < (unsigned)G) row_bits++;
    int end_bit = 32 + row_bits;   // keys_kernel's keys: 32 bits of probability under the row
    size_t n = (size_t)G * V, last = (size_t)(N - (N - 1) / G * G) * V;
    size_t temp = sort_temp_bytes((int)n, end_bit), temp_last = sort_temp_bytes((int)last, end_bit);
    if (temp_last > temp) temp = temp_last;
    size_t kb = align_up(n * sizeof(unsigned long long)), ib = align_up(n * sizeof(int32_t));
    char *s = (char *)cu_scratch(SCR_SAMPLE, 2 * kb + 2 * ib + temp);
    unsigned long long *key_in = (unsigned long long *)s, *key_out = (unsigned long long *)(s + kb);
    int32_t *id_in = (int32_t *)(s + 2 * kb), *id_out = (int32_t *)(s + 2 * kb + ib);
    void *tmp = s + 2 * kb + 2 * ib;

    int k = top_k ? (int)p->top_k : V;
    for (int r0 = 0; r0 < N; r0 += G) {
        int rows = N - r0 < G ? N - r0 : G;
        keys_kernel<<<cu_blocks(rows, 1), THREADS>>>(key_in, id_in, logits + (size_t)r0 * V, inv_t, rows, V);
        CU_LAUNCHED();
        size_t bytes = temp;
        CU_CHECK(cub::DeviceRadixSort::SortPairs(tmp, bytes, key_in, key_out, id_in, id_out, rows * V, 0, end_bit,
                                                 (cudaStream_t)0));
        sorted_kernel<<<cu_blocks(rows, 1), THREADS>>>(tok + r0, logp + r0, key_out, id_out, u + r0, rows, V, k,
                                                      p->top_p);
        CU_LAUNCHED();
    }
}
