// ferry's one little-endian codec (DESIGN.md, Contracts: frames are little-endian; STYLE.md 17:
// one codec per layer). Every wire and every binary key ferry writes — rpc frames and messages,
// the tcp data protocol, the same-host grant channel, the cxl endpoint and key — packs its
// integers with these, byte by byte, so the bytes never depend on the host's endianness,
// alignment or struct layout.
//
//   StoreLe16/32/64, LoadLe16/32/64  fixed-offset fields of a fixed-size header
//   WireWriter                       appends fields to a string
//   WireReader                       reads fields front to back, bounded: never past the end
//
// Thread contract: the free functions are pure; WireWriter and WireReader are thread-compatible
// value types that borrow what they write to / read from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry {

// Writes `v` as 2/4/8 little-endian bytes at `out`, which must have room for them.
inline void StoreLe16(void* out, uint16_t v) {
  auto* p = static_cast<unsigned char*>(out);
  for (int i = 0; i < 2; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void StoreLe32(void* out, uint32_t v) {
  auto* p = static_cast<unsigned char*>(out);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void StoreLe64(void* out, uint64_t v) {
  auto* p = static_cast<unsigned char*>(out);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// Reads 2/4/8 little-endian bytes at `in`, which must hold them.
inline uint16_t LoadLe16(const void* in) {
  const auto* p = static_cast<const unsigned char*>(in);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
inline uint32_t LoadLe32(const void* in) {
  const auto* p = static_cast<const unsigned char*>(in);
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t LoadLe64(const void* in) {
  const auto* p = static_cast<const unsigned char*>(in);
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Appends little-endian fields to a string it borrows (which must outlive the writer); what the
// string held before is kept. Strings written with PutString carry a u32 length; the caller
// keeps them under 4 GiB (every ferry frame is far smaller).
class WireWriter {
 public:
  explicit WireWriter(std::string* out) : out_(out) {}

  void PutU8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void PutU16(uint16_t v) { Append<2>(v); }
  void PutU32(uint32_t v) { Append<4>(v); }
  void PutU64(uint64_t v) { Append<8>(v); }
  // The bytes as they are, without a length (fixed-size fields, or a field that runs to the end).
  void PutBytes(std::string_view bytes) { out_->append(bytes); }
  // A u32 length, then the bytes.
  void PutString(std::string_view s) {
    PutU32(static_cast<uint32_t>(s.size()));
    out_->append(s);
  }

 private:
  template <size_t N, typename T>
  void Append(T v) {
    char buf[N];
    if constexpr (N == 2) StoreLe16(buf, v);
    if constexpr (N == 4) StoreLe32(buf, v);
    if constexpr (N == 8) StoreLe64(buf, v);
    out_->append(buf, N);
  }

  std::string* out_;
};

// Reads little-endian fields from bytes it borrows (they must outlive the reader). Every Get
// checks the bytes left before it reads: too few is InvalidArgument naming `what` and the field,
// and the reader stays where it was. An out-parameter is written only on success. Finish()
// fails when bytes are left over, so a decoder can be strict at both ends.
class WireReader {
 public:
  // `what` names the message in errors ("notify request"); it must outlive the reader.
  WireReader(std::string_view bytes, std::string_view what) : in_(bytes), what_(what) {}
  WireReader(std::span<const uint8_t> bytes, std::string_view what)
      : in_(reinterpret_cast<const char*>(bytes.data()), bytes.size()), what_(what) {}  // NOLINT

  Status GetU8(std::string_view field, uint8_t* v);
  Status GetU16(std::string_view field, uint16_t* v);
  Status GetU32(std::string_view field, uint32_t* v);
  Status GetU64(std::string_view field, uint64_t* v);
  // Exactly `n` bytes, as a view into the borrowed input.
  Status GetBytes(std::string_view field, size_t n, std::string_view* v);
  // A u32 length, then that many bytes; a length above `max_length` is InvalidArgument.
  Status GetString(std::string_view field, std::string* v, size_t max_length = SIZE_MAX);
  // Every remaining byte (a trailing field that runs to the end); never fails.
  std::string_view TakeRest();
  // OK when every byte was consumed.
  Status Finish() const;

  size_t remaining() const { return in_.size(); }

 private:
  Status Truncated(std::string_view field, size_t need) const;

  std::string_view in_;
  std::string_view what_;
};

}  // namespace ferry
