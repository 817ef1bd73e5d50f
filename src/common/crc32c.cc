#include "common/crc32c.h"

#include <array>
#include <cstring>

#include "common/wire_codec.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#define FERRY_CRC32C_X86 1
#else
#define FERRY_CRC32C_X86 0
#endif

namespace ferry {
namespace crc32c_internal {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected Castagnoli

// ---- portable: slicing-by-8 ------------------------------------------------------------------

// table[k][b]: the CRC register after byte b followed by k zero bytes, from a zero register.
using SliceTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr SliceTables MakeSliceTables() {
  SliceTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) != 0 ? (c >> 1) ^ kPolynomial : c >> 1;
    t[0][b] = c;
  }
  for (size_t b = 0; b < 256; ++b) {
    for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}

constexpr SliceTables kSlice = MakeSliceTables();

#if FERRY_CRC32C_X86

// ---- hardware: three interleaved crc32 streams -------------------------------------------------
//
// The crc32 instruction has a latency of three cycles and a throughput of one per cycle, so three
// independent streams over three adjacent blocks keep it busy. The CRC register is linear over
// GF(2): the register after "A then B" is (the register after A, advanced over |B| zero bytes)
// xor (the register after B started from zero). Advancing over a fixed number of zero bytes is a
// 32x32 bit matrix, applied here byte by byte through four 256-entry tables. (The method is the
// one of Mark Adler's crc32c.c, after Intel's paper on the crc32 instruction.)

constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;

using Matrix = std::array<uint32_t, 32>;  // column i: the image of bit i
using ShiftTables = std::array<std::array<uint32_t, 256>, 4>;

uint32_t Times(const Matrix& m, uint32_t v) {
  uint32_t sum = 0;
  for (size_t i = 0; v != 0; ++i, v >>= 1) {
    if ((v & 1) != 0) sum ^= m[i];
  }
  return sum;
}

Matrix Square(const Matrix& m) {
  Matrix out{};
  for (size_t i = 0; i < 32; ++i) out[i] = Times(m, m[i]);
  return out;
}

// The matrix that advances a register over `bytes` zero bytes; `bytes` is a power of two.
Matrix ZeroBytesOperator(size_t bytes) {
  Matrix op{};  // one zero bit
  op[0] = kPolynomial;
  for (size_t i = 1; i < 32; ++i) op[i] = uint32_t{1} << (i - 1);
  op = Square(Square(Square(op)));  // one zero byte
  for (size_t n = bytes; n > 1; n >>= 1) op = Square(op);
  return op;
}

ShiftTables MakeShiftTables(size_t bytes) {
  const Matrix op = ZeroBytesOperator(bytes);
  ShiftTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    for (size_t k = 0; k < 4; ++k) t[k][b] = Times(op, b << (8 * k));
  }
  return t;
}

struct HardwareTables {
  ShiftTables long_shift = MakeShiftTables(kLongBlock);
  ShiftTables short_shift = MakeShiftTables(kShortBlock);
};

const HardwareTables& Tables() {
  static const HardwareTables tables;
  return tables;
}

uint32_t Shift(const ShiftTables& t, uint32_t crc) {
  return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
}

uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));  // x86 is little-endian, as crc32 consumes it
  return v;
}

// Runs `block`-byte triples through three streams while at least one triple is left.
__attribute__((target("sse4.2"))) uint32_t Triples(uint32_t crc, const unsigned char** data,
                                                   size_t* n, size_t block,
                                                   const ShiftTables& shift) {
  const unsigned char* p = *data;
  uint64_t c0 = crc;
  while (*n >= 3 * block) {
    uint64_t c1 = 0;
    uint64_t c2 = 0;
    const unsigned char* const end = p + block;
    do {
      c0 = _mm_crc32_u64(c0, Load64(p));
      c1 = _mm_crc32_u64(c1, Load64(p + block));
      c2 = _mm_crc32_u64(c2, Load64(p + 2 * block));
      p += 8;
    } while (p < end);
    c0 = Shift(shift, static_cast<uint32_t>(c0)) ^ c1;
    c0 = Shift(shift, static_cast<uint32_t>(c0)) ^ c2;
    p += 2 * block;
    *n -= 3 * block;
  }
  *data = p;
  return static_cast<uint32_t>(c0);
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const unsigned char* p,
                                                       size_t n) {
  uint32_t c = ~crc;
  // Up to seven leading bytes bring `p` to an 8-byte boundary.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {  // NOLINT
    c = _mm_crc32_u8(c, *p++);
    --n;
  }
  if (n >= 3 * kShortBlock) {
    const HardwareTables& tables = Tables();
    c = Triples(c, &p, &n, kLongBlock, tables.long_shift);
    c = Triples(c, &p, &n, kShortBlock, tables.short_shift);
  }
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) c64 = _mm_crc32_u64(c64, Load64(p));
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return ~c;
}

#endif  // FERRY_CRC32C_X86

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);

ExtendFn Choose() { return HardwareAvailable() ? &ExtendHardware : &ExtendPortable; }

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t w = LoadLe64(p) ^ c;
    c = kSlice[7][w & 0xff] ^ kSlice[6][(w >> 8) & 0xff] ^ kSlice[5][(w >> 16) & 0xff] ^
        kSlice[4][(w >> 24) & 0xff] ^ kSlice[3][(w >> 32) & 0xff] ^ kSlice[2][(w >> 40) & 0xff] ^
        kSlice[1][(w >> 48) & 0xff] ^ kSlice[0][w >> 56];
  }
  for (; n > 0; --n) c = kSlice[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n) {
#if FERRY_CRC32C_X86
  return ExtendSse42(crc, static_cast<const unsigned char*>(data), n);
#else
  return ExtendPortable(crc, data, n);
#endif
}

bool HardwareAvailable() {
#if FERRY_CRC32C_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") != 0;
#else
  return false;
#endif
}

}  // namespace crc32c_internal

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  static const crc32c_internal::ExtendFn extend = crc32c_internal::Choose();
  return extend(crc, data, n);
}

std::string Hex32(uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "0x00000000";
  for (int i = 0; i < 8; ++i) out[9 - i] = kDigits[(v >> (4 * i)) & 0xf];
  return out;
}

std::string Crc32cMismatchText(std::string_view what, uint32_t sent, uint32_t computed) {
  return std::string(what) + " checksum mismatch (sent " + Hex32(sent) + ", computed " +
         Hex32(computed) + "): corrupted in transit";
}

}  // namespace ferry

#undef FERRY_CRC32C_X86  // a unity build compiles other files after this one
