#include "bench/pattern.h"

#include <bit>
#include <cstring>

namespace ferry::bench {
namespace {

static_assert(std::endian::native == std::endian::little, "patterns assume little-endian");

// splitmix64: a cheap, well-mixed function of the 8-byte word index.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Word(uint64_t seed, uint64_t word_index) { return Mix(seed ^ Mix(word_index)); }

uint8_t ByteAt(uint64_t seed, uint64_t offset) {
  return static_cast<uint8_t>(Word(seed, offset / 8) >> (8 * (offset % 8)));  // little-endian
}

}  // namespace

void FillPattern(uint64_t seed, uint64_t offset, void* dst, size_t length) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t i = 0;
  for (; i < length && (offset + i) % 8 != 0; ++i) out[i] = ByteAt(seed, offset + i);
  for (; i + 8 <= length; i += 8) {
    const uint64_t word = Word(seed, (offset + i) / 8);
    std::memcpy(out + i, &word, sizeof(word));
  }
  for (; i < length; ++i) out[i] = ByteAt(seed, offset + i);
}

std::optional<uint64_t> FindPatternMismatch(uint64_t seed, uint64_t offset, const void* src,
                                            size_t length) {
  const auto* in = static_cast<const uint8_t*>(src);
  size_t i = 0;
  for (; i < length && (offset + i) % 8 != 0; ++i) {
    if (in[i] != ByteAt(seed, offset + i)) return offset + i;
  }
  for (; i + 8 <= length; i += 8) {
    const uint64_t want = Word(seed, (offset + i) / 8);
    uint64_t got = 0;
    std::memcpy(&got, in + i, sizeof(got));
    if (got != want) break;  // the byte loop below names the first differing byte
  }
  for (; i < length; ++i) {
    if (in[i] != ByteAt(seed, offset + i)) return offset + i;
  }
  return std::nullopt;
}

}  // namespace ferry::bench
