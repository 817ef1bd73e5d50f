// The cxl transport's published bytes: the endpoint (SegmentDesc::transports["cxl"]) and the
// per-buffer key (BufferDesc::keys["cxl"]). Little-endian (common/wire_codec.h), versioned,
// decoded strictly: a wrong length, version, magic or out-of-range field is InvalidArgument,
// never a partial value.
//
// Endpoint v1: "FCXE" u8 version=1, u64 window_size, u64 st_dev, u64 st_ino, u64 base (the
//   publisher's mapping address), u16 n + n bytes window path, u16 m + m bytes grant socket path.
// Key v1:      "FCXK" u8 version=1, u64 offset, u64 length  (the region is
//   [base + offset, base + offset + length) in the publisher's address space).
//
// Thread contract: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"
#include "transport/cxl/cxl_window.h"

namespace ferry::cxl {

struct Endpoint {
  WindowIdentity window;
  uint64_t base = 0;       // where the publisher maps the window
  std::string grant_path;  // the publisher's samehost::GrantServer socket
};

// A registered region as a window range.
struct RegionKey {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Limits the decoder enforces.
inline constexpr size_t kMaxWindowPath = 4096;
inline constexpr size_t kMaxGrantPath = 107;  // sun_path less its terminating NUL

std::string EncodeEndpoint(const Endpoint& endpoint);
// InvalidArgument naming the bad field. Checks: sizes and paths within limits, window size > 0,
// base != 0 and base + size does not wrap, both paths non-empty.
Result<Endpoint> DecodeEndpoint(std::string_view bytes);

std::string EncodeKey(const RegionKey& key);
// InvalidArgument naming the bad field. Checks: length > 0 and offset + length does not wrap.
Result<RegionKey> DecodeKey(std::string_view bytes);

}  // namespace ferry::cxl
