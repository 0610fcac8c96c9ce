// Attention on a GPU without the (T_q, T_k) scores in memory: the CUDA runner of AttentionFn's
// formula (nn/attention.py gives it; docs/derivations_nn.md, section 9, derives it).
//
// For one head, with s the scale, B an additive bias, M the scaled dropout keep-mask:
//
//     S = s Q Kᵀ + B (masked entries -∞),   A = softmax_rows(S),   Y = (A ⊙ M) V
//     dV = (A ⊙ M)ᵀ G,  dA = (G Vᵀ) ⊙ M,  D = rowsum(G ⊙ Y),  dS = A ⊙ (dA - D),
//     dQ = s dS K,  dK = s dSᵀ Q,  dB = dS.
//
// The forward walks each query row's keys a tile at a time and keeps three running values:
// m, the largest score so far; l = Σ exp(S_ij - m); o = Σ exp(S_ij - m) M_ij v_j. When a tile
// raises the maximum from m to m', l and o are multiplied by exp(m - m') (the "online softmax"
// of Milakov & Gimelshein 2018, as FlashAttention uses it, Dao et al. 2022). At the end
// Y = o / l, and the row's statistics m and 1/l are kept: the backward recomputes each tile's
// A_ij = exp(S_ij - m_i) / l_i from them instead of reading a stored pattern.
//
// The backward is two kernels, so that no two threads add into one number (no atomics; the
// sums are in a fixed order and the results are the same on every run):
//   attention_backward_dq:   a thread per query row i: D_i = g_i · y_i, then dq_i = s Σ_j dS_ij k_j;
//   attention_backward_dkdv: a thread per key row j: dv_j = Σ_i A_ij M_ij g_i, dk_j = s Σ_i dS_ij q_i
//                            (and dB_ij = dS_ij when the bias needs a gradient), the sums
//                            over the queries of every head that reads key/value head hk.
// Each recomputes S_ij and dA_ij for its own rows (the price of no atomics: the products are
// computed twice, once per kernel).
//
// Two forms of each kernel, the same sums: the ones above, a thread per row on the CUDA cores
// (any type and width), and at the end of the file the `_mma` ones for float16 and bfloat16
// with widths that are multiples of 16, a warp per 16 rows with every product on the tensor
// cores (TENSOR_CORES; the runner picks one form per compiled module).
//
// Compiled per input type and head size (nn/flash_attention.py passes them as -D options,
// ELEMENT, ACCUMULATOR, HEAD_DIM, VALUE_DIM, TILE_ROWS, named here):
//   T: the element type of q, k, v and g (float, double, __half, __nv_bfloat16);
//   ACC: the type every sum is taken in (double for double, float otherwise: half inputs are
//        widened as they are read, and the output and gradients rounded once as they are
//        written; the output is also kept in ACC for the backward's D);
//   D, DV: the widths of a query/key head and of a value head; TILE: threads per block, and
//   rows per tile of the other side (a power of two ≤ 32, chosen to fit shared memory).
// Grouped-query attention: H query heads share H / G key/value heads, query head h reading
// key/value head h / G (G = 1: a key/value head each; G = H: multi-query attention).
// Layouts: q (B, T_q, H, D), k (B, T_k, H / G, D), v (B, T_k, H / G, DV), g (B, T_q, H, DV),
// each given by its element strides (batch, time, head) with a contiguous last axis; the
// bias, the mask and the dropout mask by four strides (batch, head, query, key), 0 where
// broadcast; y and y_out (the output in T), dq, dk and dv contiguous (B, T, heads, ·); the
// statistics m, 1/l and D contiguous (B, H, T_q).
// The grid: blockIdx.x is (batch, head), b H + h (key/value heads for attention_backward_dkdv;
// up to 2³¹ - 1 of them: the y and z axes stop at 65,535), blockIdx.y the block's tile of rows.
// Causal masking: query i sees key j iff 0 ≤ i + (T_k - T_q) - j < window (window < 0: none).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

using T = ELEMENT;
using ACC = ACCUMULATOR;
constexpr int D = HEAD_DIM, DV = VALUE_DIM, TILE = TILE_ROWS;
#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ double widen(double x) { return x; }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(double* p, double x) { *p = x; }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }

// May query i see key j? (causal: not a later key, and within the sliding window)
__device__ __forceinline__ bool sees(long long i, long long j, long long offset, int causal,
                                     long long window) {
  if (!causal) return true;
  const long long back = i + offset - j;
  return back >= 0 && (window < 0 || back < window);
}

// The keys [lo, hi) that query rows [r0, r1) may see.
__device__ __forceinline__ void key_range(long long r0, long long r1, long long T_k,
                                          long long offset, int causal, long long window,
                                          long long* lo, long long* hi) {
  *lo = 0;
  *hi = T_k;
  if (!causal) return;
  *hi = min(T_k, max(0LL, r1 - 1 + offset + 1));
  if (window >= 0) *lo = max(0LL, r0 + offset - window + 1);
}

// a · b over N numbers, in four interleaved sums: four independent chains of multiply-adds
// that a GPU overlaps, where one chain waits for each product in turn.
template <int N>
__device__ __forceinline__ ACC dot(const ACC* a, const ACC* b) {
  ACC s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int c = 0;
  for (; c + 4 <= N; c += 4) {
    s0 += a[c] * b[c];
    s1 += a[c + 1] * b[c + 1];
    s2 += a[c + 2] * b[c + 2];
    s3 += a[c + 3] * b[c + 3];
  }
  for (; c < N; ++c) s0 += a[c] * b[c];
  return (s0 + s1) + (s2 + s3);
}

// The queries [lo, hi) that may see keys [c0, c1): i + offset ≥ c0, and within the window.
__device__ __forceinline__ void query_range(long long c0, long long c1, long long T_q,
                                            long long offset, int causal, long long window,
                                            long long* lo, long long* hi) {
  *lo = 0;
  *hi = T_q;
  if (!causal) return;
  *lo = max(0LL, c0 - offset);
  if (window >= 0) *hi = max(0LL, min(T_q, c1 - 1 - offset + window));
}

// One entry (b, h, i, j) of a (B, H, T_q, T_k) array given by four strides.
#define AT(p, st, b, h, i, j) (p)[(b) * (st)[0] + (h) * (st)[1] + (i) * (st)[2] + (j) * (st)[3]]

// May query i of head h attend to key j? (the causal rule and the mask)
__device__ __forceinline__ bool admitted(long long b, long long h, long long i, long long j,
                                         long long offset, int causal, long long window,
                                         const unsigned char* mask, const long long* ms) {
  return sees(i, j, offset, causal, window) && (!mask || AT(mask, ms, b, h, i, j));
}

// The score s q_i · k_j + B_ij of an allowed pair, or -∞ for a masked one (qs is s q_i).
__device__ __forceinline__ ACC score(const ACC* qs, const ACC* kj, long long b, long long h,
                                     long long i, long long j, long long offset, int causal,
                                     long long window, const ACC* bias, const long long* bs,
                                     const unsigned char* mask, const long long* ms) {
  if (!admitted(b, h, i, j, offset, causal, window, mask, ms)) return -INFINITY;
  const ACC s = dot<D>(qs, kj);
  return bias ? s + AT(bias, bs, b, h, i, j) : s;
}

// Rows [j0, j0 + TILE) of a (B, T, H, W) array into a shared tile (zeros past T), as ACC.
template <int W, typename E>
__device__ __forceinline__ void load_tile(ACC (*tile)[W], const E* a, long long b, long long h,
                                          const long long* st, long long j0, long long T,
                                          ACC factor) {
  for (int e = threadIdx.x; e < TILE * W; e += TILE) {
    const int r = e / W, c = e % W;
    const long long j = j0 + r;
    tile[r][c] = j < T ? widen(a[b * st[0] + j * st[1] + h * st[2] + c]) * factor : ACC(0);
  }
}

extern "C" __global__ void attention_forward(
    const T* q, const T* k, const T* v, const ACC* bias, const unsigned char* mask,
    const ACC* drop, ACC* y, T* y_out, ACC* stat_m, ACC* stat_inv_l, long long T_q, long long T_k,
    long long H, long long G, ACC scale, int causal, long long window, long long qb, long long qt,
    long long qh, long long kb, long long kt, long long kh, long long vb, long long vt,
    long long vh, long long bias_b, long long bias_h, long long bias_i, long long bias_j,
    long long mask_b, long long mask_h, long long mask_i, long long mask_j, long long drop_b,
    long long drop_h, long long drop_i, long long drop_j) {
  __shared__ ACC K_tile[TILE][D];
  __shared__ ACC V_tile[TILE][DV];
  const long long ks_[3] = {kb, kt, kh}, vs_[3] = {vb, vt, vh};
  const long long bs[4] = {bias_b, bias_h, bias_i, bias_j};
  const long long ms[4] = {mask_b, mask_h, mask_i, mask_j};
  const long long ds[4] = {drop_b, drop_h, drop_i, drop_j};
  const long long b = blockIdx.x / H, h = blockIdx.x % H, r0 = (long long)blockIdx.y * TILE;
  const long long hk = h / G;  // the key/value head this query head reads
  const long long i = r0 + threadIdx.x, offset = T_k - T_q;
  const bool row = i < T_q;
  ACC qs[D], o[DV], m = -INFINITY, l = 0;
  for (int c = 0; c < D; ++c) qs[c] = row ? widen(q[b * qb + i * qt + h * qh + c]) * scale : 0;
  for (int c = 0; c < DV; ++c) o[c] = 0;
  long long lo, hi;
  key_range(r0, min(r0 + TILE, T_q), T_k, offset, causal, window, &lo, &hi);
  for (long long j0 = lo; j0 < hi; j0 += TILE) {
    load_tile<D>(K_tile, k, b, hk, ks_, j0, hi, ACC(1));
    load_tile<DV>(V_tile, v, b, hk, vs_, j0, hi, ACC(1));
    __syncthreads();
    if (row) {
      ACC S[TILE], top = m;  // this tile's scores; the row's maximum with them
      for (int r = 0; r < TILE; ++r) {
        const long long j = j0 + r;
        S[r] = j < hi ? score(qs, K_tile[r], b, h, i, j, offset, causal, window, bias, bs,
                              mask, ms)
                      : -INFINITY;
        top = S[r] > top ? S[r] : top;  // (a NaN score reaches l and o through its exp)
      }
      if (top > m) {  // rescale what was summed under the old maximum
        const ACC c = exp_of(m - top);
        l *= c;
        for (int e = 0; e < DV; ++e) o[e] *= c;
        m = top;
      }
      for (int r = 0; r < TILE; ++r) {
        if (S[r] == -INFINITY) continue;  // masked (or a bias of -∞): A_ij = 0
        ACC p = exp_of(S[r] - m);
        l += p;
        if (drop) p *= AT(drop, ds, b, h, i, j0 + r);
        for (int e = 0; e < DV; ++e) o[e] += p * V_tile[r][e];
      }
    }
    __syncthreads();
  }
  if (!row) return;
  const ACC inv_l = l > 0 ? ACC(1) / l : ACC(0);  // a row that sees no key: Y = 0, not NaN
  const long long at = ((b * T_q + i) * H + h) * DV;
  for (int e = 0; e < DV; ++e) {
    y[at + e] = o[e] * inv_l;
    store(y_out + at + e, o[e] * inv_l);
  }
  stat_m[(b * H + h) * T_q + i] = m;
  stat_inv_l[(b * H + h) * T_q + i] = inv_l;
}

extern "C" __global__ void attention_backward_dq(
    const T* q, const T* k, const T* v, const T* g, const ACC* bias, const unsigned char* mask,
    const ACC* drop, const ACC* y, const ACC* stat_m, const ACC* stat_inv_l, ACC* delta, T* dq,
    long long T_q, long long T_k, long long H, long long G, ACC scale, int causal, long long window,
    long long qb, long long qt, long long qh, long long kb, long long kt, long long kh,
    long long vb, long long vt, long long vh, long long gb, long long gt, long long gh,
    long long bias_b, long long bias_h, long long bias_i, long long bias_j, long long mask_b,
    long long mask_h, long long mask_i, long long mask_j, long long drop_b, long long drop_h,
    long long drop_i, long long drop_j) {
  __shared__ ACC K_tile[TILE][D];
  __shared__ ACC V_tile[TILE][DV];
  const long long ks_[3] = {kb, kt, kh}, vs_[3] = {vb, vt, vh};
  const long long bs[4] = {bias_b, bias_h, bias_i, bias_j};
  const long long ms[4] = {mask_b, mask_h, mask_i, mask_j};
  const long long ds[4] = {drop_b, drop_h, drop_i, drop_j};
  const long long b = blockIdx.x / H, h = blockIdx.x % H, r0 = (long long)blockIdx.y * TILE;
  const long long hk = h / G;  // the key/value head this query head reads
  const long long i = r0 + threadIdx.x, offset = T_k - T_q;
  const bool row = i < T_q;
  ACC qs[D], gi[DV], grad[D], Di = 0, m = 0, inv_l = 0;
  for (int c = 0; c < D; ++c) {
    qs[c] = row ? widen(q[b * qb + i * qt + h * qh + c]) * scale : 0;
    grad[c] = 0;
  }
  if (row) {
    const ACC* yi = y + ((b * T_q + i) * H + h) * DV;
    for (int e = 0; e < DV; ++e) {
      gi[e] = widen(g[b * gb + i * gt + h * gh + e]);
      Di += gi[e] * yi[e];
    }
    delta[(b * H + h) * T_q + i] = Di;  // for attention_backward_dkdv
    m = stat_m[(b * H + h) * T_q + i];
    inv_l = stat_inv_l[(b * H + h) * T_q + i];
  }
  long long lo, hi;
  key_range(r0, min(r0 + TILE, T_q), T_k, offset, causal, window, &lo, &hi);
  for (long long j0 = lo; j0 < hi; j0 += TILE) {
    load_tile<D>(K_tile, k, b, hk, ks_, j0, hi, ACC(1));
    load_tile<DV>(V_tile, v, b, hk, vs_, j0, hi, ACC(1));
    __syncthreads();
    if (row && inv_l > 0) {
      for (int r = 0; r < TILE && j0 + r < hi; ++r) {
        const long long j = j0 + r;
        const ACC S = score(qs, K_tile[r], b, h, i, j, offset, causal, window, bias, bs, mask, ms);
        if (S == -INFINITY) continue;
        const ACC A = exp_of(S - m) * inv_l;
        ACC dA = dot<DV>(gi, V_tile[r]);
        if (drop) dA *= AT(drop, ds, b, h, i, j);
        const ACC dS = A * (dA - Di);
        for (int c = 0; c < D; ++c) grad[c] += dS * K_tile[r][c];
      }
    }
    __syncthreads();
  }
  if (!row) return;
  T* out = dq + ((b * T_q + i) * H + h) * D;
  for (int c = 0; c < D; ++c) store(out + c, grad[c] * scale);
}

extern "C" __global__ void attention_backward_dkdv(
    const T* q, const T* k, const T* v, const T* g, const ACC* bias, const unsigned char* mask,
    const ACC* drop, const ACC* stat_m, const ACC* stat_inv_l, const ACC* delta, T* dk, T* dv,
    ACC* dbias, long long T_q, long long T_k, long long H, long long G, ACC scale, int causal,
    long long window, long long qb, long long qt, long long qh, long long kb, long long kt,
    long long kh, long long vb, long long vt, long long vh, long long gb, long long gt,
    long long gh, long long bias_b, long long bias_h, long long bias_i, long long bias_j,
    long long mask_b, long long mask_h, long long mask_i, long long mask_j, long long drop_b,
    long long drop_h, long long drop_i, long long drop_j) {
  // This block's keys and values, one row a thread (a column of padding: no bank conflicts
  // when each thread reads its own row); the query-side rows a tile at a time.
  __shared__ ACC K_rows[TILE][D + 1];
  __shared__ ACC V_rows[TILE][DV + 1];
  __shared__ ACC Q_tile[TILE][D];
  __shared__ ACC G_tile[TILE][DV];
  __shared__ ACC m_tile[TILE], inv_l_tile[TILE], D_tile[TILE];
  const long long qs_[3] = {qb, qt, qh}, gs_[3] = {gb, gt, gh};
  const long long bs[4] = {bias_b, bias_h, bias_i, bias_j};
  const long long ms[4] = {mask_b, mask_h, mask_i, mask_j};
  const long long ds[4] = {drop_b, drop_h, drop_i, drop_j};
  const long long H_kv = H / G, b = blockIdx.x / H_kv, hk = blockIdx.x % H_kv;
  const long long c0 = (long long)blockIdx.y * TILE, j = c0 + threadIdx.x, offset = T_k - T_q;
  const bool col = j < T_k;
  for (int c = 0; c < D; ++c)
    K_rows[threadIdx.x][c] = col ? widen(k[b * kb + j * kt + hk * kh + c]) : ACC(0);
  for (int e = 0; e < DV; ++e)
    V_rows[threadIdx.x][e] = col ? widen(v[b * vb + j * vt + hk * vh + e]) : ACC(0);
  ACC grad_k[D], grad_v[DV];
  for (int c = 0; c < D; ++c) grad_k[c] = 0;
  for (int e = 0; e < DV; ++e) grad_v[e] = 0;
  long long lo, hi;
  query_range(c0, min(c0 + TILE, T_k), T_q, offset, causal, window, &lo, &hi);
  for (long long h = hk * G; h < (hk + 1) * G; ++h)  // the query heads that read this head
  for (long long i0 = lo; i0 < hi; i0 += TILE) {
    load_tile<D>(Q_tile, q, b, h, qs_, i0, hi, scale);  // s q_i
    load_tile<DV>(G_tile, g, b, h, gs_, i0, hi, ACC(1));
    if (i0 + threadIdx.x < hi) {
      const long long at = (b * H + h) * T_q + i0 + threadIdx.x;
      m_tile[threadIdx.x] = stat_m[at];
      inv_l_tile[threadIdx.x] = stat_inv_l[at];
      D_tile[threadIdx.x] = delta[at];
    }
    __syncthreads();
    if (col) {
      for (int r = 0; r < TILE && i0 + r < hi; ++r) {
        const long long i = i0 + r;
        if (inv_l_tile[r] == 0) continue;  // a row that sees no key
        const ACC S = score(Q_tile[r], K_rows[threadIdx.x], b, h, i, j, offset, causal, window,
                            bias, bs, mask, ms);
        if (S == -INFINITY) continue;
        const ACC A = exp_of(S - m_tile[r]) * inv_l_tile[r];
        const ACC M = drop ? AT(drop, ds, b, h, i, j) : ACC(1);
        const ACC dA = dot<DV>(G_tile[r], V_rows[threadIdx.x]);
        for (int e = 0; e < DV; ++e) grad_v[e] += A * M * G_tile[r][e];
        const ACC dS = A * (dA * M - D_tile[r]);
        for (int c = 0; c < D; ++c) grad_k[c] += dS * Q_tile[r][c];  // Q_tile holds s q_i
        if (dbias) dbias[((b * H + h) * T_q + i) * T_k + j] = dS;
      }
    }
    __syncthreads();
  }
  if (!col) return;
  T* out_k = dk + ((b * T_k + j) * H_kv + hk) * D;
  T* out_v = dv + ((b * T_k + j) * H_kv + hk) * DV;
  for (int c = 0; c < D; ++c) store(out_k + c, grad_k[c]);
  for (int e = 0; e < DV; ++e) store(out_v + e, grad_v[e]);
}


#if TENSOR_CORES
// ------------------------------------------------------------ the forward on tensor cores
// For float16 and bfloat16 inputs whose head widths are multiples of 16 (nn/flash_attention.py
// chooses it once per module): the same online softmax, with each tile's two products,
// S = Q Kᵀ and O += P V, on the tensor cores (mma.sync.m16n8k16: float sums). A block is
// WARPS warps of 16 query rows each; a key tile is KEYS keys. Everything of a row lives in
// registers, in the layout the instruction gives (mma_16816 below): lane 4g + t holds rows g
// and g + 8 of its warp's 16, columns 2t and 2t + 1 of each group of 8, so a row's maximum
// and sum are over the 4 lanes g·4 .. g·4 + 3 (two shuffles), and S's registers are P's as
// the left operand of P V without a trip through memory (FlashAttention-2's arrangement,
// Dao 2023). P = exp(S - m) M is rounded to T for that product, as FlashAttention does; l
// sums the unrounded p.
#if MMA_BF16
#define MMA_TYPES "bf16.bf16"
#else
#define MMA_TYPES "f16.f16"
#endif
#ifdef TL_EMULATED_MMA  // tests/cuda_emulator.h: the same instruction, run on the CPU
#define mma_16816 emu_mma_16816<MMA_BF16>
#else
// d += a b for the warp: A 16 × 16 (row-major), B 16 × 8 (column-major), D 16 × 8 float. Lane
// 4g + t holds a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9],
// a[3] = A[g+8][2t+8, 2t+9]; b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]; d[0], d[1] =
// D[g][2t, 2t+1], d[2], d[3] = D[g+8][2t, 2t+1] (two 16-bit values a register, the lower
// index in the lower half): the PTX ISA's fragments for mma.m16n8k16.
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4],
                                          const unsigned (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPES ".f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

constexpr int WARPS = 4, ROWS = 16 * WARPS, KEYS = MMA_KEYS;
constexpr int LD = D + 8, LDV = DV + 8;  // padded rows of the shared tiles (fewer bank clashes)

// two adjacent T of shared memory as one register (the lower index in the lower half)
__device__ __forceinline__ unsigned pair_at(const T* p) { return *(const unsigned*)p; }
// two T values, rounded from float, as one register
__device__ __forceinline__ unsigned pair_of(float lo, float hi) {
  T two[2];
  store(two, lo);
  store(two + 1, hi);
  unsigned r;
  memcpy(&r, two, 4);
  return r;
}
__device__ __forceinline__ unsigned pair_of(T lo, T hi) {
  T two[2] = {lo, hi};
  unsigned r;
  memcpy(&r, two, 4);
  return r;
}

// The operands of mma_16816 from shared tiles (row length ld) and from registers; lane 4g + t.
// A (16 × 16) from rows 0..15 and columns 0..15 at p:
__device__ __forceinline__ void frag_a(unsigned (&a)[4], const T* p, int ld, int g, int t) {
  a[0] = pair_at(p + g * ld + 2 * t);
  a[1] = pair_at(p + (g + 8) * ld + 2 * t);
  a[2] = pair_at(p + g * ld + 2 * t + 8);
  a[3] = pair_at(p + (g + 8) * ld + 2 * t + 8);
}
// B (16 × 8) whose 8 columns are 8 rows at p (Kᵀ from K's rows: B[k][n] = p[n ld + k]):
__device__ __forceinline__ void frag_b_rows(unsigned (&b)[2], const T* p, int ld, int g, int t) {
  b[0] = pair_at(p + g * ld + 2 * t);
  b[1] = pair_at(p + g * ld + 2 * t + 8);
}
// B (16 × 8) whose 16 rows are 16 rows at p (V from V's rows: B[k][n] = p[k ld + n]):
__device__ __forceinline__ void frag_b_cols(unsigned (&b)[2], const T* p, int ld, int g, int t) {
  const T* c = p + 2 * t * ld + g;
  b[0] = pair_of(c[0], c[ld]);
  b[1] = pair_of(c[8 * ld], c[9 * ld]);
}
// A (16 × 16) from two accumulator tiles of 16 × 8 (columns 0..7 and 8..15), rounded to T:
// an accumulator's registers are laid out as the left operand wants them.
__device__ __forceinline__ void frag_a_of(unsigned (&a)[4], const float (&lo)[4],
                                          const float (&hi)[4]) {
  a[0] = pair_of(lo[0], lo[1]);
  a[1] = pair_of(lo[2], lo[3]);
  a[2] = pair_of(hi[0], hi[1]);
  a[3] = pair_of(hi[2], hi[3]);
}
// out (16 × N) = A Bᵀ: A the warp's 16 rows of width W (left operands, W/16 of them), B the N
// rows of width W at p (S = Q Kᵀ from K's rows, dA = G Vᵀ from V's, ...)
template <int N, int W>
__device__ __forceinline__ void times_rows(float (&out)[N / 8][4], const unsigned (&a)[W / 16][4],
                                           const T* p, int ld, int g, int t) {
  for (int n = 0; n < N / 8; ++n) {
    out[n][0] = out[n][1] = out[n][2] = out[n][3] = 0.f;
    for (int kk = 0; kk < W / 16; ++kk) {
      unsigned b[2];
      frag_b_rows(b, p + n * 8 * ld + kk * 16, ld, g, t);
      mma_16816(out[n], a[kk], b);
    }
  }
}
// out (16 × W) += X B: X (16 × N) an accumulator tile, rounded to T, and B the N rows of
// width W at p (O += P V, dQ += dS K, ...)
template <int N, int W>
__device__ __forceinline__ void add_times_cols(float (&out)[W / 8][4], const float (&x)[N / 8][4],
                                               const T* p, int ld, int g, int t) {
  for (int kc = 0; kc < N / 16; ++kc) {
    unsigned a[4];
    frag_a_of(a, x[2 * kc], x[2 * kc + 1]);
    for (int n = 0; n < W / 8; ++n) {
      unsigned b[2];
      frag_b_cols(b, p + kc * 16 * ld + n * 8, ld, g, t);
      mma_16816(out[n], a, b);
    }
  }
}
// Rows [r0, r0 + n) of a (B, T, heads, W) array into a shared tile (row length ld), zeros
// from row `end` on; by every thread of the block.
template <int W>
__device__ __forceinline__ void stage(T* tile, int ld, const T* a, long long b, long long h,
                                      long long sb, long long st, long long sh, long long r0,
                                      int n, long long end) {
  for (int e = threadIdx.x; e < n * W; e += blockDim.x) {
    const int r = e / W, c = e % W;
    if (r0 + r < end) tile[r * ld + c] = a[b * sb + (r0 + r) * st + h * sh + c];
    else store(tile + r * ld + c, 0.f);
  }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS) attention_forward_mma(
    const T* q, const T* k, const T* v, const ACC* bias, const unsigned char* mask,
    const ACC* drop, ACC* y, T* y_out, ACC* stat_m, ACC* stat_inv_l, long long T_q, long long T_k,
    long long H, long long G, ACC scale, int causal, long long window, long long qb, long long qt,
    long long qh, long long kb, long long kt, long long kh, long long vb, long long vt,
    long long vh, long long bias_b, long long bias_h, long long bias_i, long long bias_j,
    long long mask_b, long long mask_h, long long mask_i, long long mask_j, long long drop_b,
    long long drop_h, long long drop_i, long long drop_j) {
  __shared__ __align__(16) T Q_s[ROWS * LD];
  __shared__ __align__(16) T K_s[KEYS * LD];
  __shared__ __align__(16) T V_s[KEYS * LDV];
  const long long bs[4] = {bias_b, bias_h, bias_i, bias_j};
  const long long ms[4] = {mask_b, mask_h, mask_i, mask_j};
  const long long ds[4] = {drop_b, drop_h, drop_i, drop_j};
  const int threads = 32 * WARPS, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const long long b = blockIdx.x / H, h = blockIdx.x % H, hk = h / G;
  const long long r0 = (long long)blockIdx.y * ROWS, offset = T_k - T_q;
  const long long rows[2] = {r0 + warp * 16 + g, r0 + warp * 16 + g + 8};  // this lane's rows
  stage<D>(Q_s, LD, q, b, h, qb, qt, qh, r0, ROWS, T_q);
  __syncthreads();
  unsigned Q_f[D / 16][4];  // the warp's 16 rows as left operands, 16 columns at a time
  for (int kk = 0; kk < D / 16; ++kk) frag_a(Q_f[kk], Q_s + warp * 16 * LD + kk * 16, LD, g, t);
  float O[DV / 8][4];  // rows g, g+8; columns 8n + 2t, 8n + 2t + 1
  for (int n = 0; n < DV / 8; ++n) O[n][0] = O[n][1] = O[n][2] = O[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  long long lo, hi;
  key_range(r0, min(r0 + ROWS, T_q), T_k, offset, causal, window, &lo, &hi);
  for (long long j0 = lo; j0 < hi; j0 += KEYS) {
    __syncthreads();  // every warp is done with the last tile
    stage<D>(K_s, LD, k, b, hk, kb, kt, kh, j0, KEYS, hi);
    stage<DV>(V_s, LDV, v, b, hk, vb, vt, vh, j0, KEYS, hi);
    __syncthreads();
    float S[KEYS / 8][4];  // S = Q Kᵀ: 8 keys at a time, Kᵀ's columns being K's rows
    times_rows<KEYS, D>(S, Q_f, K_s, LD, g, t);
    float top[2] = {m[0], m[1]};  // the rows' maxima with this tile
    for (int n = 0; n < KEYS / 8; ++n)
      for (int e = 0; e < 4; ++e) {
        const long long i = rows[e / 2], j = j0 + n * 8 + 2 * t + e % 2;
        float s = -INFINITY;
        if (i < T_q && j < hi && admitted(b, h, i, j, offset, causal, window, mask, ms)) {
          s = S[n][e] * scale;
          if (bias) s += AT(bias, bs, b, h, i, j);
        }
        S[n][e] = s;
        top[e / 2] = s > top[e / 2] ? s : top[e / 2];  // (a NaN reaches l and O through exp)
      }
    float rescale[2], sum[2] = {0.f, 0.f};
    for (int x = 0; x < 2; ++x) {  // over the row's four lanes
      top[x] = fmaxf(top[x], __shfl_xor_sync(0xffffffffu, top[x], 1));
      top[x] = fmaxf(top[x], __shfl_xor_sync(0xffffffffu, top[x], 2));
      rescale[x] = top[x] > m[x] ? exp_of(m[x] - top[x]) : 1.f;
      m[x] = top[x] > m[x] ? top[x] : m[x];
    }
    for (int n = 0; n < KEYS / 8; ++n)
      for (int e = 0; e < 4; ++e) {
        const long long i = rows[e / 2], j = j0 + n * 8 + 2 * t + e % 2;
        float p = S[n][e] == -INFINITY ? 0.f : exp_of(S[n][e] - m[e / 2]);
        sum[e / 2] += p;
        if (drop && p != 0) p *= AT(drop, ds, b, h, i, j);
        S[n][e] = p;  // S becomes P
      }
    for (int x = 0; x < 2; ++x) {
      sum[x] += __shfl_xor_sync(0xffffffffu, sum[x], 1);
      sum[x] += __shfl_xor_sync(0xffffffffu, sum[x], 2);
      l[x] = l[x] * rescale[x] + sum[x];
    }
    for (int n = 0; n < DV / 8; ++n) {  // O's rows × exp(m_old - m), then O += P V
      O[n][0] *= rescale[0];
      O[n][1] *= rescale[0];
      O[n][2] *= rescale[1];
      O[n][3] *= rescale[1];
    }
    add_times_cols<KEYS, DV>(O, S, V_s, LDV, g, t);  // O += P V, P rounded to T
  }
  const float inv_l[2] = {l[0] > 0 ? 1.f / l[0] : 0.f, l[1] > 0 ? 1.f / l[1] : 0.f};
  for (int x = 0; x < 2; ++x) {
    const long long i = rows[x];
    if (i >= T_q) continue;
    for (int n = 0; n < DV / 8; ++n)
      for (int e = 0; e < 2; ++e) {
        const float out = O[n][2 * x + e] * inv_l[x];
        const long long at = ((b * T_q + i) * H + h) * DV + n * 8 + 2 * t + e;
        y[at] = out;
        store(y_out + at, out);
      }
    if (t == 0) {
      stat_m[(b * H + h) * T_q + i] = m[x];
      stat_inv_l[(b * H + h) * T_q + i] = inv_l[x];
    }
  }
}

// ------------------------------------------------------------ the backward on tensor cores
// The two kernels of the backward with their products on the tensor cores, for the same
// inputs (nn/flash_attention.py chooses them once per module, where their tiles fit). Blocks
// of WARPS warps; each warp owns 16 rows of its side (queries for dq, keys for dk and dv) and
// walks the other side BACK_TILE rows at a time. dS is rounded to T for its products with K
// and Q, as FlashAttention-2 does; every sum is in float.
constexpr int BACK_TILE = MMA_BACKWARD_TILE;

extern "C" __global__ void __launch_bounds__(32 * WARPS) attention_backward_dq_mma(
    const T* q, const T* k, const T* v, const T* g, const ACC* bias, const unsigned char* mask,
    const ACC* drop, const ACC* y, const ACC* stat_m, const ACC* stat_inv_l, ACC* delta, T* dq,
    long long T_q, long long T_k, long long H, long long G, ACC scale, int causal,
    long long window, long long qb, long long qt, long long qh, long long kb, long long kt,
    long long kh, long long vb, long long vt, long long vh, long long gb, long long gt,
    long long gh, long long bias_b, long long bias_h, long long bias_i, long long bias_j,
    long long mask_b, long long mask_h, long long mask_i, long long mask_j, long long drop_b,
    long long drop_h, long long drop_i, long long drop_j) {
  __shared__ __align__(16) T Q_s[ROWS * LD];
  __shared__ __align__(16) T G_s[ROWS * LDV];
  __shared__ __align__(16) T K_s[BACK_TILE * LD];
  __shared__ __align__(16) T V_s[BACK_TILE * LDV];
  const long long bs[4] = {bias_b, bias_h, bias_i, bias_j};
  const long long ms[4] = {mask_b, mask_h, mask_i, mask_j};
  const long long ds[4] = {drop_b, drop_h, drop_i, drop_j};
  const int warp = threadIdx.x / 32, lg = threadIdx.x % 32 / 4, lt = threadIdx.x % 4;
  const long long b = blockIdx.x / H, h = blockIdx.x % H, hk = h / G;
  const long long r0 = (long long)blockIdx.y * ROWS, offset = T_k - T_q;
  const long long rows[2] = {r0 + warp * 16 + lg, r0 + warp * 16 + lg + 8};  // this lane's
  stage<D>(Q_s, LD, q, b, h, qb, qt, qh, r0, ROWS, T_q);
  stage<DV>(G_s, LDV, g, b, h, gb, gt, gh, r0, ROWS, T_q);
  __syncthreads();
  for (int r = threadIdx.x; r < ROWS && r0 + r < T_q; r += blockDim.x) {  // D_i = g_i · y_i
    const ACC* yi = y + ((b * T_q + r0 + r) * H + h) * DV;
    float Di = 0;
    for (int e = 0; e < DV; ++e) Di += widen(G_s[r * LDV + e]) * yi[e];
    delta[(b * H + h) * T_q + r0 + r] = Di;  // for attention_backward_dkdv, and below
  }
  __syncthreads();
  float m[2] = {0.f, 0.f}, inv_l[2] = {0.f, 0.f}, Di[2] = {0.f, 0.f};
  for (int x = 0; x < 2; ++x)
    if (rows[x] < T_q) {
      const long long at = (b * H + h) * T_q + rows[x];
      m[x] = stat_m[at];
      inv_l[x] = stat_inv_l[at];
      Di[x] = delta[at];
    }
  unsigned Q_f[D / 16][4], G_f[DV / 16][4];
  for (int kk = 0; kk < D / 16; ++kk) frag_a(Q_f[kk], Q_s + warp * 16 * LD + kk * 16, LD, lg, lt);
  for (int kk = 0; kk < DV / 16; ++kk)
    frag_a(G_f[kk], G_s + warp * 16 * LDV + kk * 16, LDV, lg, lt);
  float dQ[D / 8][4];
  for (int n = 0; n < D / 8; ++n) dQ[n][0] = dQ[n][1] = dQ[n][2] = dQ[n][3] = 0.f;
  long long lo, hi;
  key_range(r0, min(r0 + ROWS, T_q), T_k, offset, causal, window, &lo, &hi);
  for (long long j0 = lo; j0 < hi; j0 += BACK_TILE) {
    __syncthreads();
    stage<D>(K_s, LD, k, b, hk, kb, kt, kh, j0, BACK_TILE, hi);
    stage<DV>(V_s, LDV, v, b, hk, vb, vt, vh, j0, BACK_TILE, hi);
    __syncthreads();
    float S[BACK_TILE / 8][4], dA[BACK_TILE / 8][4];
    times_rows<BACK_TILE, D>(S, Q_f, K_s, LD, lg, lt);     // S = Q Kᵀ
    times_rows<BACK_TILE, DV>(dA, G_f, V_s, LDV, lg, lt);  // dA = G Vᵀ
    for (int n = 0; n < BACK_TILE / 8; ++n)  // S becomes dS = A (dA M - D)
      for (int e = 0; e < 4; ++e) {
        const int x = e / 2;
        const long long i = rows[x], j = j0 + n * 8 + 2 * lt + e % 2;
        float dS = 0.f;
        if (i < T_q && j < hi && inv_l[x] > 0 &&
            admitted(b, h, i, j, offset, causal, window, mask, ms)) {
          float s = S[n][e] * scale;
          if (bias) s += AT(bias, bs, b, h, i, j);
          if (s != -INFINITY) {
            const float M = drop ? AT(drop, ds, b, h, i, j) : 1.f;
            dS = exp_of(s - m[x]) * inv_l[x] * (dA[n][e] * M - Di[x]);
          }
        }
        S[n][e] = dS;
      }
    add_times_cols<BACK_TILE, D>(dQ, S, K_s, LD, lg, lt);  // dQ += dS K (× s at the end)
  }
  for (int x = 0; x < 2; ++x) {
    if (rows[x] >= T_q) continue;
    T* out = dq + ((b * T_q + rows[x]) * H + h) * D;
    for (int n = 0; n < D / 8; ++n)
      for (int e = 0; e < 2; ++e) store(out + n * 8 + 2 * lt + e, dQ[n][2 * x + e] * scale);
  }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS) attention_backward_dkdv_mma(
    const T* q, const T* k, const T* v, const T* g, const ACC* bias, const unsigned char* mask,
    const ACC* drop, const ACC* stat_m, const ACC* stat_inv_l, const ACC* delta, T* dk, T* dv,
    ACC* dbias, long long T_q, long long T_k, long long H, long long G, ACC scale, int causal,
    long long window, long long qb, long long qt, long long qh, long long kb, long long kt,
    long long kh, long long vb, long long vt, long long vh, long long gb, long long gt,
    long long gh, long long bias_b, long long bias_h, long long bias_i, long long bias_j,
    long long mask_b, long long mask_h, long long mask_i, long long mask_j, long long drop_b,
    long long drop_h, long long drop_i, long long drop_j) {
  __shared__ __align__(16) T K_s[ROWS * LD];
  __shared__ __align__(16) T V_s[ROWS * LDV];
  __shared__ __align__(16) T Q_s[BACK_TILE * LD];
  __shared__ __align__(16) T G_s[BACK_TILE * LDV];
  __shared__ float m_s[BACK_TILE], inv_l_s[BACK_TILE], D_s[BACK_TILE];
  const long long bs[4] = {bias_b, bias_h, bias_i, bias_j};
  const long long ms[4] = {mask_b, mask_h, mask_i, mask_j};
  const long long ds[4] = {drop_b, drop_h, drop_i, drop_j};
  const int warp = threadIdx.x / 32, lg = threadIdx.x % 32 / 4, lt = threadIdx.x % 4;
  const long long H_kv = H / G, b = blockIdx.x / H_kv, hk = blockIdx.x % H_kv;
  const long long c0 = (long long)blockIdx.y * ROWS, offset = T_k - T_q;
  const long long keys[2] = {c0 + warp * 16 + lg, c0 + warp * 16 + lg + 8};  // this lane's
  stage<D>(K_s, LD, k, b, hk, kb, kt, kh, c0, ROWS, T_k);
  stage<DV>(V_s, LDV, v, b, hk, vb, vt, vh, c0, ROWS, T_k);
  __syncthreads();
  unsigned K_f[D / 16][4], V_f[DV / 16][4];
  for (int kk = 0; kk < D / 16; ++kk) frag_a(K_f[kk], K_s + warp * 16 * LD + kk * 16, LD, lg, lt);
  for (int kk = 0; kk < DV / 16; ++kk)
    frag_a(V_f[kk], V_s + warp * 16 * LDV + kk * 16, LDV, lg, lt);
  float dK[D / 8][4], dV[DV / 8][4];
  for (int n = 0; n < D / 8; ++n) dK[n][0] = dK[n][1] = dK[n][2] = dK[n][3] = 0.f;
  for (int n = 0; n < DV / 8; ++n) dV[n][0] = dV[n][1] = dV[n][2] = dV[n][3] = 0.f;
  long long lo, hi;
  query_range(c0, min(c0 + ROWS, T_k), T_q, offset, causal, window, &lo, &hi);
  for (long long h = hk * G; h < (hk + 1) * G; ++h)  // the query heads that read this head
    for (long long i0 = lo; i0 < hi; i0 += BACK_TILE) {
      __syncthreads();
      stage<D>(Q_s, LD, q, b, h, qb, qt, qh, i0, BACK_TILE, hi);
      stage<DV>(G_s, LDV, g, b, h, gb, gt, gh, i0, BACK_TILE, hi);
      for (int r = threadIdx.x; r < BACK_TILE; r += blockDim.x) {
        const long long at = (b * H + h) * T_q + i0 + r;
        const bool in = i0 + r < hi;
        m_s[r] = in ? stat_m[at] : 0.f;
        inv_l_s[r] = in ? stat_inv_l[at] : 0.f;
        D_s[r] = in ? delta[at] : 0.f;
      }
      __syncthreads();
      float St[BACK_TILE / 8][4], dAt[BACK_TILE / 8][4];
      times_rows<BACK_TILE, D>(St, K_f, Q_s, LD, lg, lt);     // Sᵀ = K Qᵀ
      times_rows<BACK_TILE, DV>(dAt, V_f, G_s, LDV, lg, lt);  // dAᵀ = V Gᵀ
      for (int n = 0; n < BACK_TILE / 8; ++n)  // St becomes (A ⊙ M)ᵀ, dAt becomes dSᵀ
        for (int e = 0; e < 4; ++e) {
          const int r = n * 8 + 2 * lt + e % 2;
          const long long j = keys[e / 2], i = i0 + r;
          float AM = 0.f, dS = 0.f;
          if (j < T_k && i < hi && inv_l_s[r] > 0 &&
              admitted(b, h, i, j, offset, causal, window, mask, ms)) {
            float s = St[n][e] * scale;
            if (bias) s += AT(bias, bs, b, h, i, j);
            if (s != -INFINITY) {
              const float A = exp_of(s - m_s[r]) * inv_l_s[r];
              const float M = drop ? AT(drop, ds, b, h, i, j) : 1.f;
              AM = A * M;
              dS = A * (dAt[n][e] * M - D_s[r]);
              if (dbias) dbias[((b * H + h) * T_q + i) * T_k + j] = dS;
            }
          }
          St[n][e] = AM;
          dAt[n][e] = dS;
        }
      add_times_cols<BACK_TILE, DV>(dV, St, G_s, LDV, lg, lt);  // dV += (A ⊙ M)ᵀ G
      add_times_cols<BACK_TILE, D>(dK, dAt, Q_s, LD, lg, lt);   // dK += dSᵀ Q (× s at the end)
    }
  for (int x = 0; x < 2; ++x) {
    if (keys[x] >= T_k) continue;
    T* out_k = dk + ((b * T_k + keys[x]) * H_kv + hk) * D;
    T* out_v = dv + ((b * T_k + keys[x]) * H_kv + hk) * DV;
    for (int e = 0; e < 2; ++e) {
      for (int n = 0; n < D / 8; ++n) store(out_k + n * 8 + 2 * lt + e, dK[n][2 * x + e] * scale);
      for (int n = 0; n < DV / 8; ++n) store(out_v + n * 8 + 2 * lt + e, dV[n][2 * x + e]);
    }
  }
}
#endif
