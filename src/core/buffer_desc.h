// BufferDesc: the published description of one registered region (DESIGN.md, Contracts).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ferry/types.h"

namespace ferry {

// True when [a, a + n) lies entirely inside [base, base + size) (n may be 0 for an empty access
// at a point inside or at the end); base + size must not wrap.
constexpr bool RangeCovers(uint64_t base, uint64_t size, uint64_t a, uint64_t n) {
  return a >= base && a <= base + size && n <= base + size - a;
}

// Thread contract: value type.
struct BufferDesc {
  uint64_t addr = 0;        // start address in the owner's address space (or a backend offset)
  uint64_t length = 0;      // bytes; > 0 and addr + length does not wrap
  Location location;        // never Kind::kDetect once published
  uint64_t generation = 0;  // registry generation of this registration; > 0
  bool remote_accessible = true;
  // Opaque per-transport bytes (rkeys, IPC handles, window offsets), keyed by transport name.
  // A region registered for several transports appears once, with one entry per transport.
  std::map<std::string, std::string> keys;

  uint64_t end() const { return addr + length; }
  // True when [a, a + n) lies entirely inside this buffer (n may be 0 for an empty access at a
  // point inside or at the end of the buffer).
  bool Covers(uint64_t a, uint64_t n) const { return RangeCovers(addr, length, a, n); }

  friend bool operator==(const BufferDesc&, const BufferDesc&) = default;
};

}  // namespace ferry
