// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final xor all ones),
// the checksum ferry's rpc and tcp frames carry so that bytes corrupted in transit are caught
// instead of written (DESIGN.md, "RPC and data frames"). CRC32C("123456789") = 0xE3069283.
//
// On x86-64 CPUs with SSE4.2 (detected once, at the first call) the crc32 instruction computes
// it over three interleaved streams; elsewhere a portable slicing-by-8 table does. Both give the
// same value for every input.
//
//   uint32_t crc = Crc32c(header, 60);
//   uint32_t crc = 0;                         // incrementally, as the bytes arrive
//   crc = Crc32cExtend(crc, chunk, n);        // ... == Crc32c of all the chunks in order
//
// Thread contract: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {

// The CRC-32C of `crc`'s bytes followed by [data, data + n): Crc32cExtend(0, d, n) == Crc32c(d, n)
// and Crc32cExtend(Crc32c(a), b) == Crc32c(a then b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
inline uint32_t Crc32c(std::string_view bytes) { return Crc32c(bytes.data(), bytes.size()); }

// "0x1234abcd": how wire values (magics, checksums) appear in error messages.
std::string Hex32(uint32_t v);
// "<what> checksum mismatch (sent 0x..., computed 0x...): corrupted in transit", the one
// wording every wire uses for a checksum that does not match.
std::string Crc32cMismatchText(std::string_view what, uint32_t sent, uint32_t computed);

namespace crc32c_internal {
// The two implementations behind Crc32cExtend, for tests and benchmarks.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);
// Only when HardwareAvailable().
uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n);
bool HardwareAvailable();
}  // namespace crc32c_internal

}  // namespace ferry
