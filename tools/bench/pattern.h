// The byte patterns --check writes and verifies. A pattern is a pure function of (seed, offset):
// the byte at `offset` of a buffer is the same wherever and whenever it is computed, so the
// initiator can check a block it read from the target knowing only where the block lies there.
//
// Thread contract: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace ferry::bench {

// The seed a target started with --check fills its buffer with.
inline constexpr uint64_t kTargetPatternSeed = 0x5eed'f1e1'dbee'f001;

// Writes the pattern of `seed` for offsets [offset, offset + length) to `dst`.
void FillPattern(uint64_t seed, uint64_t offset, void* dst, size_t length);

// The first offset in [offset, offset + length) where `src` differs from the pattern of `seed`,
// or nullopt when every byte matches.
std::optional<uint64_t> FindPatternMismatch(uint64_t seed, uint64_t offset, const void* src,
                                            size_t length);

}  // namespace ferry::bench
