// The CUDA C++ dialect of hand-written kernels, as plain C++ for g++ (tests/cuda_emulator.py).
//
// g++ force-includes this header (-include) before the kernel source. It turns the CUDA
// keywords into C++ (__global__, __device__, __host__ and __launch_bounds__ vanish,
// __shared__ becomes a static variable), declares the built-in index variables that the
// scheduler (runtime.cpp) sets for the running thread, and provides the device functions
// kernels call: barriers, warp shuffles, atomics, math intrinsics, min/max.
//
// Every CUDA thread is a fiber; the scheduler runs one at a time, so atomics are plain
// read-modify-writes and nothing ever interleaves inside an expression. What a fiber sees
// of another's writes is decided only by the barriers (__syncthreads, the warp functions)
// and by the order the scheduler resumes fibers in (forward or reverse).
//
// Shared memory: every __shared__ variable lives in the ELF section "emu_shared", which the
// runtime fills with 0xff bytes (NaN as float/double/half/bfloat16, -1 as an integer) when a
// block starts: on a GPU shared memory holds garbage at that point, so a kernel that reads
// it before writing it gets NaNs here instead of a previous block's values. Only statically
// sized shared arrays: `extern __shared__` (dynamic shared memory) is not supported.
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cstddef>
#include <type_traits>
#include <utility>

#define EMU_HIDDEN __attribute__((visibility("hidden")))
#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------------------------------
// Keywords
// ---------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// One copy per module; the runtime refills it with 0xff bytes at the start of each block.
// (The kernel translation unit is compiled with -fno-weak, so the shared variables of inline
// and template functions are not COMDAT and may share the section with the others.)
#define __shared__ static __attribute__((section("emu_shared")))
// __restrict__ is a g++ keyword already. __noinline__ is left alone: libstdc++ spells its
// own attribute __attribute__((__noinline__)), which a macro of that name would break.

// ---------------------------------------------------------------------------------------
// Built-in variables and vector types
// ---------------------------------------------------------------------------------------
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
      : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// Set by the scheduler before it resumes a fiber: each fiber sees its own values.
extern EMU_HIDDEN uint3 threadIdx;
extern EMU_HIDDEN uint3 blockIdx;
extern EMU_HIDDEN dim3 blockDim;
extern EMU_HIDDEN dim3 gridDim;
static const int warpSize = 32;

struct int2 {
  int x, y;
};
struct uint2 {
  unsigned int x, y;
};
struct int3 {
  int x, y, z;
};
struct float3 {
  float x, y, z;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
struct alignas(16) double2 {
  double x, y;
};
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline uint2 make_uint2(unsigned int x, unsigned int y) { return uint2{x, y}; }
static inline int3 make_int3(int x, int y, int z) { return int3{x, y, z}; }
static inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) {
  return uint3{x, y, z};
}
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline float4 make_float4(float x, float y, float z, float w) {
  return float4{x, y, z, w};
}
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
  return uint4{x, y, z, w};
}
static inline double2 make_double2(double x, double y) { return double2{x, y}; }

// ---------------------------------------------------------------------------------------
// The runtime's entry points (runtime.cpp), for the functions below
// ---------------------------------------------------------------------------------------
extern "C" {
// Waits until every thread of the block has arrived (a switch back to the scheduler).
EMU_HIDDEN void emu_rt_syncthreads(void);
// Deposits `value` for this thread's lane, waits until every thread of the warp has done
// the same, and returns the warp's 32 deposited values (index: lane).
EMU_HIDDEN const unsigned long long* emu_rt_warp_exchange(unsigned long long value);
EMU_HIDDEN int emu_rt_lane(void);        // this thread's lane in its warp, 0..31
EMU_HIDDEN int emu_rt_warp_lanes(void);  // threads in this thread's warp (< 32 in a partial one)
}

// ---------------------------------------------------------------------------------------
// Barriers and fences
// ---------------------------------------------------------------------------------------
#define EMU_COMPILER_FENCE() __asm__ __volatile__("" ::: "memory")

static inline void __syncthreads(void) {
  EMU_COMPILER_FENCE();
  emu_rt_syncthreads();
  EMU_COMPILER_FENCE();
}
static inline void __threadfence(void) { EMU_COMPILER_FENCE(); }
static inline void __threadfence_block(void) { EMU_COMPILER_FENCE(); }
static inline void __threadfence_system(void) { EMU_COMPILER_FENCE(); }

// ---------------------------------------------------------------------------------------
// Warp functions. Every thread of the warp must call them (the mask is not read): a warp
// whose threads reach different warp functions, or some of which have returned or wait at
// __syncthreads, is reported as an error by the scheduler.
// ---------------------------------------------------------------------------------------
template <typename T>
static inline unsigned long long emu_to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp shuffles take values of at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
static inline T emu_from_bits(unsigned long long bits) {
  T v;
  memcpy(&v, &bits, sizeof(T));
  return v;
}
// The value of lane `src`, or the caller's own when `src` is outside the warp's threads.
template <typename T>
static inline T emu_shuffle(T var, int src, bool in_range) {
  const unsigned long long* lanes = emu_rt_warp_exchange(emu_to_bits(var));
  if (!in_range || src < 0 || src >= emu_rt_warp_lanes()) return var;
  EMU_COMPILER_FENCE();
  return emu_from_bits<T>(lanes[src]);
}

static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  EMU_COMPILER_FENCE();
  emu_rt_warp_exchange(0);
  EMU_COMPILER_FENCE();
}
template <typename T>
static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32) {
  (void)mask;
  const int lane = emu_rt_lane();
  return emu_shuffle(var, (lane & ~(width - 1)) + (srcLane & (width - 1)), true);
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32) {
  (void)mask;
  const int lane = emu_rt_lane();
  const int src = lane ^ laneMask;
  // a lane may read earlier groups of `width` lanes, not later ones (it gets its own value)
  return emu_shuffle(var, src, src < (lane / width + 1) * width);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T var, unsigned int delta, int width = 32) {
  (void)mask;
  const int lane = emu_rt_lane();
  return emu_shuffle(var, lane + (int)delta, (lane & (width - 1)) + (int)delta < width);
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T var, unsigned int delta, int width = 32) {
  (void)mask;
  const int lane = emu_rt_lane();
  return emu_shuffle(var, lane - (int)delta, (lane & (width - 1)) >= (int)delta);
}
static inline unsigned __ballot_sync(unsigned mask, int predicate) {
  (void)mask;
  const unsigned long long* lanes = emu_rt_warp_exchange(predicate != 0);
  unsigned bits = 0;
  for (int i = 0; i < emu_rt_warp_lanes(); ++i) bits |= lanes[i] ? 1u << i : 0u;
  return bits;
}
static inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}
static inline int __all_sync(unsigned mask, int predicate) {
  const int n = emu_rt_warp_lanes();
  const unsigned all = n == 32 ? 0xffffffffu : (1u << n) - 1;
  return __ballot_sync(mask, predicate) == all;
}

// ---------------------------------------------------------------------------------------
// The tensor cores' mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (inline
// PTX on a GPU, which g++ cannot compile): a kernel that defines it as a function for the
// GPU uses this one here when TL_EMULATED_MMA is defined (nn/flash_attention.cu). d += a b for
// the warp: A 16 × 16 row-major, B 16 × 8 column-major, D 16 × 8 float, each lane's registers
// in PTX's layout (lane = 4 g + t; each 32-bit register holds two 16-bit values, the lower
// index in the lower half):
//   a[0]: A[g][2t, 2t+1]  a[1]: A[g+8][2t, 2t+1]  a[2]: A[g][2t+8, 2t+9]  a[3]: A[g+8][2t+8, 2t+9]
//   b[0]: B[2t, 2t+1][g]  b[1]: B[2t+8, 2t+9][g]
//   d[0], d[1]: D[g][2t, 2t+1]  d[2], d[3]: D[g+8][2t, 2t+1]
// The lanes exchange their registers (three warp exchanges), each computes its four sums in
// float, k in order (the tensor cores' order is their own: results agree to float rounding).
// ---------------------------------------------------------------------------------------
#define TL_EMULATED_MMA 1
template <bool bf16>
static inline float emu_half_bits(unsigned bits) {
  bits &= 0xffffu;
  if (bf16) {
    const unsigned wide = bits << 16;
    float f;
    memcpy(&f, &wide, 4);
    return f;
  }
  const unsigned short narrow = (unsigned short)bits;
  _Float16 h;
  memcpy(&h, &narrow, 2);
  return (float)h;
}
template <bool bf16>
static inline void emu_mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  unsigned long long regs[3][32];
  const unsigned long long mine[3] = {
      a[0] | (unsigned long long)a[1] << 32, a[2] | (unsigned long long)a[3] << 32,
      b[0] | (unsigned long long)b[1] << 32};
  for (int x = 0; x < 3; ++x) {
    const unsigned long long* all = emu_rt_warp_exchange(mine[x]);
    for (int lane = 0; lane < 32; ++lane) regs[x][lane] = all[lane];
  }
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const unsigned ra[4] = {(unsigned)regs[0][lane], (unsigned)(regs[0][lane] >> 32),
                            (unsigned)regs[1][lane], (unsigned)(regs[1][lane] >> 32)};
    const unsigned rb[2] = {(unsigned)regs[2][lane], (unsigned)(regs[2][lane] >> 32)};
    for (int half = 0; half < 2; ++half) {
      A[g][2 * t + half] = emu_half_bits<bf16>(ra[0] >> (16 * half));
      A[g + 8][2 * t + half] = emu_half_bits<bf16>(ra[1] >> (16 * half));
      A[g][2 * t + 8 + half] = emu_half_bits<bf16>(ra[2] >> (16 * half));
      A[g + 8][2 * t + 8 + half] = emu_half_bits<bf16>(ra[3] >> (16 * half));
      B[2 * t + half][g] = emu_half_bits<bf16>(rb[0] >> (16 * half));
      B[2 * t + 8 + half][g] = emu_half_bits<bf16>(rb[1] >> (16 * half));
    }
  }
  const int lane = emu_rt_lane(), g = lane >> 2, t = lane & 3;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int e = 0; e < 4; ++e) {
    float sum = d[e];
    for (int k = 0; k < 16; ++k) sum += A[rows[e]][k] * B[k][cols[e]];
    d[e] = sum;
  }
}

// ---------------------------------------------------------------------------------------
// Atomics: fibers never interleave inside a function, so a read-modify-write is atomic.
// ---------------------------------------------------------------------------------------
#define EMU_ATOMIC(name, T, expr)           \
  static inline T name(T* address, T val) { \
    T old = *address;                       \
    *address = (expr);                      \
    return old;                             \
  }
EMU_ATOMIC(atomicAdd, int, old + val)
EMU_ATOMIC(atomicAdd, unsigned int, old + val)
EMU_ATOMIC(atomicAdd, unsigned long long, old + val)
EMU_ATOMIC(atomicAdd, float, old + val)
EMU_ATOMIC(atomicAdd, double, old + val)
EMU_ATOMIC(atomicSub, int, old - val)
EMU_ATOMIC(atomicSub, unsigned int, old - val)
EMU_ATOMIC(atomicExch, int, val)
EMU_ATOMIC(atomicExch, unsigned int, val)
EMU_ATOMIC(atomicExch, unsigned long long, val)
EMU_ATOMIC(atomicExch, float, val)
EMU_ATOMIC(atomicMax, int, old > val ? old : val)
EMU_ATOMIC(atomicMax, unsigned int, old > val ? old : val)
EMU_ATOMIC(atomicMax, long long, old > val ? old : val)
EMU_ATOMIC(atomicMax, unsigned long long, old > val ? old : val)
EMU_ATOMIC(atomicMin, int, old < val ? old : val)
EMU_ATOMIC(atomicMin, unsigned int, old < val ? old : val)
EMU_ATOMIC(atomicMin, long long, old < val ? old : val)
EMU_ATOMIC(atomicMin, unsigned long long, old < val ? old : val)
EMU_ATOMIC(atomicAnd, int, old & val)
EMU_ATOMIC(atomicAnd, unsigned int, old & val)
EMU_ATOMIC(atomicAnd, unsigned long long, old & val)
EMU_ATOMIC(atomicOr, int, old | val)
EMU_ATOMIC(atomicOr, unsigned int, old | val)
EMU_ATOMIC(atomicOr, unsigned long long, old | val)
EMU_ATOMIC(atomicXor, int, old ^ val)
EMU_ATOMIC(atomicXor, unsigned int, old ^ val)
EMU_ATOMIC(atomicXor, unsigned long long, old ^ val)
#undef EMU_ATOMIC
#define EMU_ATOMIC_CAS(T)                                        \
  static inline T atomicCAS(T* address, T compare, T val) {      \
    T old = *address;                                            \
    if (old == compare) *address = val;                          \
    return old;                                                  \
  }
EMU_ATOMIC_CAS(int)
EMU_ATOMIC_CAS(unsigned int)
EMU_ATOMIC_CAS(unsigned long long)
EMU_ATOMIC_CAS(unsigned short)
#undef EMU_ATOMIC_CAS

// ---------------------------------------------------------------------------------------
// Math. <math.h> gives expf, exp, logf, sqrtf, fmaxf, fabsf, INFINITY, NAN, ... and, in
// C++, the float overloads of exp, log, sqrt, fmax, ... as CUDA has them. These are glibc's
// functions: a GPU's expf, logf, tanhf, ... may differ from them in the last bits.
// ---------------------------------------------------------------------------------------
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
// glibc declares __expf, __logf, ... itself (its internal names): macros, not functions.
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __log10f(x) log10f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf(x, y)
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fadd_rn(float x, float y) { return x + y; }
static inline float __fmul_rn(float x, float y) { return x * y; }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
static inline float __int_as_float(int x) { return emu_from_bits<float>((unsigned int)x); }
static inline int __float_as_int(float x) { return (int)(unsigned int)emu_to_bits(x); }
static inline float __uint_as_float(unsigned int x) { return emu_from_bits<float>(x); }
static inline unsigned int __float_as_uint(float x) { return (unsigned int)emu_to_bits(x); }
static inline double __longlong_as_double(long long x) { return emu_from_bits<double>(x); }
static inline long long __double_as_longlong(double x) { return (long long)emu_to_bits(x); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline float __int2float_rn(int x) { return (float)x; }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
static inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
template <typename T>
static inline T __ldg(const T* p) {
  return *p;
}

// CUDA's integer and floating min/max: global overloads (not templates, so that they do not
// clash with std::min/std::max under `using namespace std`), with CUDA's mixed-sign ones.
#define EMU_MINMAX(R, A, B)                                      \
  static inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; } \
  static inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
EMU_MINMAX(int, int, int)
EMU_MINMAX(unsigned int, unsigned int, unsigned int)
EMU_MINMAX(unsigned int, int, unsigned int)
EMU_MINMAX(unsigned int, unsigned int, int)
EMU_MINMAX(long, long, long)
EMU_MINMAX(unsigned long, unsigned long, unsigned long)
EMU_MINMAX(unsigned long, long, unsigned long)
EMU_MINMAX(unsigned long, unsigned long, long)
EMU_MINMAX(long long, long long, long long)
EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
EMU_MINMAX(unsigned long long, long long, unsigned long long)
EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef EMU_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(float a, double b) { return fmin(a, b); }
static inline double max(float a, double b) { return fmax(a, b); }
static inline double min(double a, float b) { return fmin(a, b); }
static inline double max(double a, float b) { return fmax(a, b); }

// ---------------------------------------------------------------------------------------
// Calling a kernel of any signature (used by the wrappers tests/cuda_emulator.py appends
// after the kernel source): the parameters' types come from template deduction.
// ---------------------------------------------------------------------------------------
template <typename... A, std::size_t... I>
static inline void emu_call_impl(void (*f)(A...), void** args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_reference_t<A>*>(args[I])...);
}
template <typename... A>
static inline void emu_call(void (*f)(A...), void** args) {
  emu_call_impl(f, args, std::index_sequence_for<A...>{});
}

// 'p' pointer, 'f' floating point, 'i' signed / 'u' unsigned integer, 'b' bool, 'v' void,
// 'o' anything else (a struct such as __half or float4)
template <typename T>
static constexpr char emu_kind() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_pointer<U>::value) return 'p';
  else if constexpr (std::is_same<U, bool>::value) return 'b';
  else if constexpr (std::is_floating_point<U>::value) return 'f';
  else if constexpr (std::is_integral<U>::value) return std::is_signed<U>::value ? 'i' : 'u';
  else if constexpr (std::is_void<U>::value) return 'v';
  else return 'o';
}
template <typename T>
static constexpr int emu_size() {
  if constexpr (std::is_void<T>::value) return 0;
  else return (int)sizeof(T);
}
// "... [with T = const float*]": the type's name as g++ spells it, for error messages
template <typename T>
static const char* emu_type_name() {
  return __PRETTY_FUNCTION__;
}
// Describes f's parameters: for each, its size, kind, type name, and for a pointer the
// size and kind of what it points to. Returns the number of parameters.
template <typename... A>
static int emu_describe(void (*)(A...), int* sizes, char* kinds, int* pointee_sizes,
                        char* pointee_kinds, const char** names, int capacity) {
  const int n = (int)sizeof...(A);
  const int s[] = {0, emu_size<A>()...};
  const char k[] = {0, emu_kind<A>()...};
  const int ps[] = {0, emu_size<std::remove_pointer_t<A>>()...};
  const char pk[] = {0, emu_kind<std::remove_pointer_t<A>>()...};
  const char* nm[] = {nullptr, emu_type_name<A>()...};
  for (int i = 0; i < n && i < capacity; ++i) {
    sizes[i] = s[i + 1];
    kinds[i] = k[i + 1];
    pointee_sizes[i] = ps[i + 1];
    pointee_kinds[i] = pk[i + 1];
    names[i] = nm[i + 1];
  }
  return n;
}
