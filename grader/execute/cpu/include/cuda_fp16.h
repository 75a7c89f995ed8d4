// cuda_fp16.h's basics for the CPU emulator (cuda_emu.h, included first): __half and __half2, the
// conversions, the arithmetic and the comparisons a kernel uses, with the GPU's results. A __half holds IEEE
// binary16 bits; each operation rounds its exact result to the nearest half, ties to even, as the GPU's
// __hadd, __hmul, __hdiv, __hfma (fused: one rounding) and __float2half do. They compute in double: a sum,
// product or multiply-add of halves is exact there, or (a tiny product added to a large half) so far from
// halfway between two halves that rounding it twice changes nothing; a quotient or square root rounded twice
// is still correctly rounded (53 >= 2 * 11 + 2 bits). The same implicit conversions and operators as the
// toolkit's header (from float, double and the integers, to float), so `h + 1.0f` is as ambiguous here as there.
#pragma once

#include <cmath>

struct __half_raw {
    unsigned short x;
};

namespace cuda_emu_fp16 {

constexpr unsigned short SIGN = 0x8000u, INFINITE = 0x7C00u, CANONICAL_NAN = 0x7FFFu;  // the GPU's NaN

// The half nearest to `value`, ties to even.
inline unsigned short round_to_half(double value) {
    unsigned short sign = std::signbit(value) ? SIGN : 0;
    double magnitude = std::fabs(value);
    if (std::isnan(value)) return CANONICAL_NAN;
    if (magnitude >= 65520.0) return sign | INFINITE;  // halfway past the largest half (65504), which is odd
    if (magnitude < 0x1p-14)  // subnormal: a multiple of 2^-24; 1024 of them make the smallest normal's bits
        return sign | (unsigned short)std::nearbyint(magnitude * 0x1p24);
    int exponent;
    std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
    double significand = std::nearbyint(std::ldexp(magnitude, 11 - exponent));  // in [1024, 2048]: 11 bits
    return sign | (unsigned short)(((exponent + 14) << 10) + (int)significand - 1024);  // 2048 carries over
}

inline double value_of(unsigned short bits) {
    double magnitude;
    unsigned exponent = (bits >> 10) & 0x1Fu, fraction = bits & 0x3FFu;
    if (exponent == 0x1Fu)
        magnitude = fraction ? NAN : INFINITY;
    else if (exponent == 0)
        magnitude = std::ldexp((double)fraction, -24);
    else
        magnitude = std::ldexp((double)(fraction | 0x400u), (int)exponent - 25);
    return bits & SIGN ? -magnitude : magnitude;
}

}  // namespace cuda_emu_fp16

struct __half {
    unsigned short __x;
    __half() = default;
    __half(const __half_raw &raw) : __x(raw.x) {}
    __half(float value) : __x(cuda_emu_fp16::round_to_half(value)) {}
    __half(double value) : __x(cuda_emu_fp16::round_to_half(value)) {}
    __half(short value) : __x(cuda_emu_fp16::round_to_half(value)) {}
    __half(unsigned short value) : __x(cuda_emu_fp16::round_to_half(value)) {}
    __half(int value) : __x(cuda_emu_fp16::round_to_half(value)) {}
    __half(unsigned int value) : __x(cuda_emu_fp16::round_to_half(value)) {}
    __half(long long value) : __x(cuda_emu_fp16::round_to_half((double)value)) {}
    __half(unsigned long long value) : __x(cuda_emu_fp16::round_to_half((double)value)) {}
    operator __half_raw() const { return {__x}; }
    operator float() const { return (float)cuda_emu_fp16::value_of(__x); }
};

struct __attribute__((aligned(4))) __half2 {
    __half x, y;
    __half2() = default;
    __half2(const __half &a, const __half &b) : x(a), y(b) {}
};

typedef __half half;
typedef __half2 half2;

// ---- conversions -------------------------------------------------------------------------------------
inline __half __ushort_as_half(unsigned short bits) { return __half_raw{bits}; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __short_as_half(short bits) { return __half_raw{(unsigned short)bits}; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline double cuda_emu_half_value(__half h) { return cuda_emu_fp16::value_of(h.__x); }
inline __half cuda_emu_half_of(double value) { return __ushort_as_half(cuda_emu_fp16::round_to_half(value)); }

inline __half __float2half(float value) { return cuda_emu_half_of(value); }
inline __half __float2half_rn(float value) { return cuda_emu_half_of(value); }
inline __half __double2half(double value) { return cuda_emu_half_of(value); }
inline float __half2float(__half h) { return (float)cuda_emu_half_value(h); }
inline __half __int2half_rn(int value) { return cuda_emu_half_of(value); }
inline __half __uint2half_rn(unsigned int value) { return cuda_emu_half_of(value); }
inline int __half2int_rz(__half h) { return std::isnan(cuda_emu_half_value(h)) ? 0 : (int)cuda_emu_half_value(h); }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
inline __half2 __float2half2_rn(float value) { return {__float2half(value), __float2half(value)}; }
inline __half2 __halves2half2(__half low, __half high) { return {low, high}; }
inline __half2 __half2half2(__half h) { return {h, h}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }

// ---- arithmetic --------------------------------------------------------------------------------------
inline __half __hadd(__half a, __half b) { return cuda_emu_half_of(cuda_emu_half_value(a) + cuda_emu_half_value(b)); }
inline __half __hsub(__half a, __half b) { return cuda_emu_half_of(cuda_emu_half_value(a) - cuda_emu_half_value(b)); }
inline __half __hmul(__half a, __half b) { return cuda_emu_half_of(cuda_emu_half_value(a) * cuda_emu_half_value(b)); }
inline __half __hdiv(__half a, __half b) { return cuda_emu_half_of(cuda_emu_half_value(a) / cuda_emu_half_value(b)); }
inline __half hsqrt(__half a) { return cuda_emu_half_of(std::sqrt(cuda_emu_half_value(a))); }
inline __half __hneg(__half a) { return __ushort_as_half(a.__x ^ cuda_emu_fp16::SIGN); }
inline __half __habs(__half a) { return __ushort_as_half(a.__x & ~cuda_emu_fp16::SIGN); }

inline __half __hfma(__half a, __half b, __half c) {
    return cuda_emu_half_of(cuda_emu_half_value(a) * cuda_emu_half_value(b) + cuda_emu_half_value(c));
}

inline __half2 __hadd2(__half2 a, __half2 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __half2 __hsub2(__half2 a, __half2 b) { return {__hsub(a.x, b.x), __hsub(a.y, b.y)}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
inline __half2 __h2div(__half2 a, __half2 b) { return {__hdiv(a.x, b.x), __hdiv(a.y, b.y)}; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }

// ---- comparisons: ordered ones are false where either side is NaN, unordered (…u) true ----------------------
inline bool __hisnan(__half a) { return std::isnan(cuda_emu_half_value(a)); }
inline int __hisinf(__half a) {
    double value = cuda_emu_half_value(a);
    return std::isinf(value) ? (value < 0 ? -1 : 1) : 0;
}
inline bool __heq(__half a, __half b) { return cuda_emu_half_value(a) == cuda_emu_half_value(b); }
inline bool __hlt(__half a, __half b) { return cuda_emu_half_value(a) < cuda_emu_half_value(b); }
inline bool __hne(__half a, __half b) { return __hlt(a, b) || __hlt(b, a); }
inline bool __hle(__half a, __half b) { return cuda_emu_half_value(a) <= cuda_emu_half_value(b); }
inline bool __hgt(__half a, __half b) { return cuda_emu_half_value(a) > cuda_emu_half_value(b); }
inline bool __hge(__half a, __half b) { return cuda_emu_half_value(a) >= cuda_emu_half_value(b); }
inline bool __hneu(__half a, __half b) { return !__heq(a, b); }

// The larger (smaller) of the two; of a NaN and a number, the number; +0 is larger than -0.
inline __half __hmax(__half a, __half b) {
    if (__hisnan(a) && __hisnan(b)) return __ushort_as_half(cuda_emu_fp16::CANONICAL_NAN);
    if (__hisnan(a) || __hisnan(b)) return __hisnan(a) ? b : a;
    if (__heq(a, b)) return (a.__x & cuda_emu_fp16::SIGN) ? b : a;
    return __hgt(a, b) ? a : b;
}
inline __half __hmin(__half a, __half b) {
    if (__hisnan(a) || __hisnan(b)) return __hmax(a, b);
    if (__heq(a, b)) return (a.__x & cuda_emu_fp16::SIGN) ? a : b;
    return __hlt(a, b) ? a : b;
}

// ---- operators, as the toolkit's header defines them ----------------------------------------------------
inline __half operator+(const __half &a, const __half &b) { return __hadd(a, b); }
inline __half operator-(const __half &a, const __half &b) { return __hsub(a, b); }
inline __half operator*(const __half &a, const __half &b) { return __hmul(a, b); }
inline __half operator/(const __half &a, const __half &b) { return __hdiv(a, b); }
inline __half &operator+=(__half &a, const __half &b) { return a = __hadd(a, b); }
inline __half &operator-=(__half &a, const __half &b) { return a = __hsub(a, b); }
inline __half &operator*=(__half &a, const __half &b) { return a = __hmul(a, b); }
inline __half &operator/=(__half &a, const __half &b) { return a = __hdiv(a, b); }
inline __half operator+(const __half &a) { return a; }
inline __half operator-(const __half &a) { return __hneg(a); }
inline bool operator==(const __half &a, const __half &b) { return __heq(a, b); }
inline bool operator!=(const __half &a, const __half &b) { return __hneu(a, b); }
inline bool operator<(const __half &a, const __half &b) { return __hlt(a, b); }
inline bool operator<=(const __half &a, const __half &b) { return __hle(a, b); }
inline bool operator>(const __half &a, const __half &b) { return __hgt(a, b); }
inline bool operator>=(const __half &a, const __half &b) { return __hge(a, b); }
inline __half2 operator+(const __half2 &a, const __half2 &b) { return __hadd2(a, b); }
inline __half2 operator-(const __half2 &a, const __half2 &b) { return __hsub2(a, b); }
inline __half2 operator*(const __half2 &a, const __half2 &b) { return __hmul2(a, b); }
inline __half2 operator/(const __half2 &a, const __half2 &b) { return __h2div(a, b); }
