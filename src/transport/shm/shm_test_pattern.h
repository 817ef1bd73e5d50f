// Test-only helpers shared by the shm tests and shm_test_peer: a deterministic byte pattern and
// a hash to compare memory across processes. Not part of the library.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::shm_test {

inline void FillPattern(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    p[i] = static_cast<uint8_t>(seed * 131 + i * 31 + (i >> 9));
  }
}

// FNV-1a, 64 bits.
inline uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace ferry::shm_test
