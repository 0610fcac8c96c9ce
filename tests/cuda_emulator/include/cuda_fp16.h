// Stand-in for NVIDIA's cuda_fp16.h (the CUDA emulator, tests/cuda_emulator.py): __half as
// 2 bytes of IEEE binary16, so that a kernel reads and writes NumPy float16 arrays.
//
// Conversions round to nearest even, with subnormals, infinities and overflow to infinity
// as IEEE (and a GPU) has them; a NaN becomes the canonical NaN 0x7fff, as the GPU's
// cvt.rn.f16.f32 makes it. Arithmetic on __half computes in float and rounds once, which
// for + - * / gives the correctly rounded binary16 result, as the GPU's half instructions do.
// Not here: __half2 and its vector intrinsics.
#pragma once

#include <string.h>

static inline unsigned short emu_float_to_half_bits(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  const unsigned int sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return 0x7fff;                        // NaN
  if (u >= 0x47800000u) return (unsigned short)(sign | 0x7c00u);  // >= 65536: infinity
  if (u < 0x38800000u) {
    // below 2^-14: a subnormal half (or zero). Adding 0.5 aligns the 10 mantissa bits of
    // the result at the bottom of a float whose exponent is that of 0.5; the float
    // addition rounds to nearest even (exact: no fused operation, -ffp-contract=off).
    float magic;
    const unsigned int magic_bits = 126u << 23;  // 0.5
    memcpy(&magic, &magic_bits, 4);
    float g;
    memcpy(&g, &u, 4);
    g += magic;
    unsigned int r;
    memcpy(&r, &g, 4);
    return (unsigned short)(sign | (r - magic_bits));
  }
  // normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even
  // (a carry out of the mantissa increments the exponent; 65520 and up become infinity)
  const unsigned int odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;  // (15 - 127) << 23, plus the rounding bias
  return (unsigned short)(sign | (u >> 13));
}

static inline float emu_half_bits_to_float(unsigned short h) {
  const unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
  const unsigned int exponent = (h >> 10) & 0x1fu;
  const unsigned int mantissa = h & 0x3ffu;
  unsigned int u;
  if (exponent == 0x1f) {  // infinity or NaN (the payload kept)
    u = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    u = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float f = (float)mantissa * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

struct __half {
  unsigned short __x;  // the binary16 bits

  __half() = default;
  __half(float f) : __x(emu_float_to_half_bits(f)) {}
  __half(double d) : __x(emu_float_to_half_bits((float)d)) {}  // via float (may round twice)
  __half(int i) : __x(emu_float_to_half_bits((float)i)) {}
  __half(unsigned int i) : __x(emu_float_to_half_bits((float)i)) {}
  __half(long long i) : __x(emu_float_to_half_bits((float)i)) {}
  __half(unsigned long long i) : __x(emu_float_to_half_bits((float)i)) {}
  operator float() const { return emu_half_bits_to_float(__x); }
};
static_assert(sizeof(__half) == 2, "__half is 2 bytes, as NumPy's float16");
typedef __half half;

static inline float __half2float(__half h) { return emu_half_bits_to_float(h.__x); }
static inline __half __float2half(float f) {
  __half h;
  h.__x = emu_float_to_half_bits(f);
  return h;
}
static inline __half __float2half_rn(float f) { return __float2half(f); }
static inline __half __double2half(double d) { return __float2half((float)d); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __half __ushort_as_half(unsigned short x) {
  __half h;
  h.__x = x;
  return h;
}
static inline __half __short_as_half(short x) { return __ushort_as_half((unsigned short)x); }

static inline __half __hadd(__half a, __half b) { return __float2half((float)a + (float)b); }
static inline __half __hsub(__half a, __half b) { return __float2half((float)a - (float)b); }
static inline __half __hmul(__half a, __half b) { return __float2half((float)a * (float)b); }
static inline __half __hdiv(__half a, __half b) { return __float2half((float)a / (float)b); }
static inline __half __hneg(__half a) { return __ushort_as_half(a.__x ^ 0x8000u); }
static inline __half __habs(__half a) { return __ushort_as_half(a.__x & 0x7fffu); }
static inline __half __hfma(__half a, __half b, __half c) {
  return __float2half(fmaf((float)a, (float)b, (float)c));  // exact product in float
}
static inline bool __hisnan(__half a) { return (a.__x & 0x7fffu) > 0x7c00u; }
static inline int __hisinf(__half a) {
  return (a.__x & 0x7fffu) == 0x7c00u ? ((a.__x & 0x8000u) ? -1 : 1) : 0;
}
static inline __half __hmax(__half a, __half b) { return __float2half(fmaxf(a, b)); }
static inline __half __hmin(__half a, __half b) { return __float2half(fminf(a, b)); }

static inline __half operator+(const __half& a, const __half& b) { return __hadd(a, b); }
static inline __half operator-(const __half& a, const __half& b) { return __hsub(a, b); }
static inline __half operator*(const __half& a, const __half& b) { return __hmul(a, b); }
static inline __half operator/(const __half& a, const __half& b) { return __hdiv(a, b); }
static inline __half operator-(const __half& a) { return __hneg(a); }
static inline __half& operator+=(__half& a, const __half& b) { return a = a + b; }
static inline __half& operator-=(__half& a, const __half& b) { return a = a - b; }
static inline __half& operator*=(__half& a, const __half& b) { return a = a * b; }
static inline __half& operator/=(__half& a, const __half& b) { return a = a / b; }
static inline bool operator==(const __half& a, const __half& b) { return (float)a == (float)b; }
static inline bool operator!=(const __half& a, const __half& b) { return (float)a != (float)b; }
static inline bool operator<(const __half& a, const __half& b) { return (float)a < (float)b; }
static inline bool operator>(const __half& a, const __half& b) { return (float)a > (float)b; }
static inline bool operator<=(const __half& a, const __half& b) { return (float)a <= (float)b; }
static inline bool operator>=(const __half& a, const __half& b) { return (float)a >= (float)b; }
