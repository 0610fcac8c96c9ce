// Stand-in for NVIDIA's cuda_bf16.h (the CUDA emulator, tests/cuda_emulator.py):
// __nv_bfloat16 as 2 bytes (the top half of a float32), so that a kernel reads and writes
// ml_dtypes.bfloat16 arrays.
//
// float -> bfloat16 rounds to nearest even (overflow gives infinity; subnormals are exact
// truncations of float subnormals, as on the GPU); a NaN becomes the canonical NaN 0x7fff,
// as the GPU's cvt.rn.bf16.f32 makes it. Arithmetic computes in float and rounds once.
// Not here: __nv_bfloat162 and its vector intrinsics.
#pragma once

#include <string.h>

static inline unsigned short emu_float_to_bfloat16_bits(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round the dropped 16 bits to nearest even
  return (unsigned short)(u >> 16);
}

static inline unsigned short emu_float_to_bfloat16_bits_rz(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
  return (unsigned short)(u >> 16);
}

static inline float emu_bfloat16_bits_to_float(unsigned short b) {
  const unsigned int u = (unsigned int)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

struct __nv_bfloat16 {
  unsigned short __x;  // the top 16 bits of a float32

  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(emu_float_to_bfloat16_bits(f)) {}
  __nv_bfloat16(double d) : __x(emu_float_to_bfloat16_bits((float)d)) {}  // via float
  __nv_bfloat16(int i) : __x(emu_float_to_bfloat16_bits((float)i)) {}
  __nv_bfloat16(unsigned int i) : __x(emu_float_to_bfloat16_bits((float)i)) {}
  __nv_bfloat16(long long i) : __x(emu_float_to_bfloat16_bits((float)i)) {}
  __nv_bfloat16(unsigned long long i) : __x(emu_float_to_bfloat16_bits((float)i)) {}
  operator float() const { return emu_bfloat16_bits_to_float(__x); }
};
static_assert(sizeof(__nv_bfloat16) == 2, "__nv_bfloat16 is 2 bytes, as ml_dtypes.bfloat16");
typedef __nv_bfloat16 nv_bfloat16;

static inline float __bfloat162float(__nv_bfloat16 b) { return emu_bfloat16_bits_to_float(b.__x); }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) {
  __nv_bfloat16 b;
  b.__x = x;
  return b;
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __float2bfloat16(float f) {
  return __ushort_as_bfloat16(emu_float_to_bfloat16_bits(f));
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rz(float f) {
  return __ushort_as_bfloat16(emu_float_to_bfloat16_bits_rz(f));
}
static inline __nv_bfloat16 __double2bfloat16(double d) { return __float2bfloat16((float)d); }

static inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16((float)a + (float)b);
}
static inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16((float)a - (float)b);
}
static inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16((float)a * (float)b);
}
static inline __nv_bfloat16 __hdiv(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16((float)a / (float)b);
}
static inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { return __ushort_as_bfloat16(a.__x ^ 0x8000u); }
static inline __nv_bfloat16 __habs(__nv_bfloat16 a) { return __ushort_as_bfloat16(a.__x & 0x7fffu); }
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __float2bfloat16(fmaf((float)a, (float)b, (float)c));
}
static inline bool __hisnan(__nv_bfloat16 a) { return (a.__x & 0x7fffu) > 0x7f80u; }
static inline int __hisinf(__nv_bfloat16 a) {
  return (a.__x & 0x7fffu) == 0x7f80u ? ((a.__x & 0x8000u) ? -1 : 1) : 0;
}
static inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16(fmaxf(a, b));
}
static inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16(fminf(a, b));
}

#define EMU_BF16_BINARY(op, fn)                                                        \
  static inline __nv_bfloat16 operator op(const __nv_bfloat16& a, const __nv_bfloat16& b) { \
    return fn(a, b);                                                                    \
  }                                                                                     \
  static inline __nv_bfloat16& operator op##=(__nv_bfloat16& a, const __nv_bfloat16& b) {  \
    return a = fn(a, b);                                                                \
  }
EMU_BF16_BINARY(+, __hadd)
EMU_BF16_BINARY(-, __hsub)
EMU_BF16_BINARY(*, __hmul)
EMU_BF16_BINARY(/, __hdiv)
#undef EMU_BF16_BINARY
static inline __nv_bfloat16 operator-(const __nv_bfloat16& a) { return __hneg(a); }
#define EMU_BF16_COMPARE(op)                                                   \
  static inline bool operator op(const __nv_bfloat16& a, const __nv_bfloat16& b) { \
    return (float)a op (float)b;                                               \
  }
EMU_BF16_COMPARE(==)
EMU_BF16_COMPARE(!=)
EMU_BF16_COMPARE(<)
EMU_BF16_COMPARE(>)
EMU_BF16_COMPARE(<=)
EMU_BF16_COMPARE(>=)
#undef EMU_BF16_COMPARE
