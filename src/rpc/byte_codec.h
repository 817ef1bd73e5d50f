// Little-endian byte packing for ferry's RPC wire formats (DESIGN.md, Contracts: frames are
// little-endian). Every value is packed byte by byte, so the result never depends on the host's
// endianness, alignment or struct layout.
//
// Thread contract: ByteWriter and ByteReader are thread-compatible value types; the free
// functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::rpc {

// Writes `v` as 2/4/8 little-endian bytes at `out`, which must have room for them.
inline void StoreLe16(char* out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void StoreLe32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void StoreLe64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Reads 2/4/8 little-endian bytes at `in`, which must hold them.
inline uint16_t LoadLe16(const char* in) {
  uint16_t v = 0;
  for (int i = 1; i >= 0; --i) v = static_cast<uint16_t>((v << 8) | static_cast<uint8_t>(in[i]));
  return v;
}
inline uint32_t LoadLe32(const char* in) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}
inline uint64_t LoadLe64(const char* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

// Appends little-endian fields to a string it owns. Strings are written as a u32 length followed
// by the bytes; the caller keeps every string under 4 GiB (RPC frames are far smaller).
class ByteWriter {
 public:
  void PutU8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void PutU16(uint16_t v) { Append<2>(v, StoreLe16); }
  void PutU32(uint32_t v) { Append<4>(v, StoreLe32); }
  void PutU64(uint64_t v) { Append<8>(v, StoreLe64); }
  // u32 length, then the bytes.
  void PutString(std::string_view s) {
    PutU32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  // The bytes as they are, without a length (a trailing field that runs to the end).
  void PutRaw(std::string_view s) { out_.append(s); }

  // The bytes written so far; the writer is left empty.
  std::string Take() { return std::move(out_); }

 private:
  template <size_t N, typename T, typename Store>
  void Append(T v, Store store) {
    char buf[N];
    store(buf, v);
    out_.append(buf, N);
  }

  std::string out_;
};

// Reads little-endian fields from bytes it borrows (they must outlive the reader). Every Get
// fails with InvalidArgument, naming `what` and the field, when too few bytes remain; the value
// out-parameter is written only on success. Finish() fails when bytes are left over, so decoding
// is strict at both ends.
class ByteReader {
 public:
  // `what` names the message in errors ("notify request"); it must outlive the reader.
  ByteReader(std::string_view bytes, std::string_view what) : in_(bytes), what_(what) {}

  Status GetU8(std::string_view field, uint8_t* v);
  Status GetU16(std::string_view field, uint16_t* v);
  Status GetU32(std::string_view field, uint32_t* v);
  Status GetU64(std::string_view field, uint64_t* v);
  // A u32 length, then that many bytes.
  Status GetString(std::string_view field, std::string* v);
  // Every remaining byte (a trailing raw field); never fails.
  std::string_view TakeRest();
  // OK when every byte was consumed.
  Status Finish() const;

  size_t remaining() const { return in_.size(); }

 private:
  Status Truncated(std::string_view field, size_t need) const;

  std::string_view in_;
  std::string_view what_;
};

}  // namespace ferry::rpc
