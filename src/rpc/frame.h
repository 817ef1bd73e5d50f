// ferry's RPC frame (DESIGN.md, Contracts across process boundaries): a fixed 24-byte
// little-endian header followed by `payload_len` payload bytes.
//
//   offset size field
//        0    4 magic       0x31595246 ("FRY1" as bytes F R Y 1)
//        4    2 version     1
//        6    2 type        message type (rpc/messages.h)
//        8    8 request_id  chosen by the caller; echoed in the response
//       16    2 flags       bit0 = response, bit1 = error; other bits must be 0
//       18    2 reserved    must be 0
//       20    4 payload_len payload bytes that follow; never above the receiver's limit
//
// An error response (flags response|error) carries {code u8 (ferry::StatusCode), message bytes}.
// A header that fails DecodeFrameHeader is never trusted: the receiver closes the connection.
//
// Thread contract: pure functions and value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::rpc {

inline constexpr uint32_t kFrameMagic = 0x31595246;
inline constexpr uint16_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderSize = 24;
inline constexpr size_t kDefaultMaxFrameBytes = size_t{64} << 20;
// The largest payload a frame can describe (payload_len is a u32).
inline constexpr size_t kMaxEncodablePayload = 0xffffffffu;

inline constexpr uint16_t kFlagResponse = 1u << 0;
inline constexpr uint16_t kFlagError = 1u << 1;
inline constexpr uint16_t kKnownFlags = kFlagResponse | kFlagError;

// The variable fields of a header; magic, version and reserved are implied.
struct FrameHeader {
  uint16_t type = 0;
  uint64_t request_id = 0;
  uint16_t flags = 0;
  uint32_t payload_len = 0;

  bool is_response() const { return (flags & kFlagResponse) != 0; }
  bool is_error() const { return (flags & kFlagError) != 0; }
  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

// Writes the 24 header bytes of `header` to `out` (which must have room for kFrameHeaderSize).
void EncodeFrameHeader(const FrameHeader& header, char* out);

// Decodes exactly kFrameHeaderSize bytes. InvalidArgument, naming the field, when the size is
// wrong, magic/version/reserved differ, unknown flag bits are set, an error flag comes without
// the response flag, or payload_len > max_payload_bytes. Allocates nothing for the payload.
Result<FrameHeader> DecodeFrameHeader(std::string_view bytes, size_t max_payload_bytes);

// A whole frame: header (with payload_len set from `payload`) then payload. InvalidArgument when
// the payload is longer than kMaxEncodablePayload.
Result<std::string> EncodeFrame(FrameHeader header, std::string_view payload);

// The payload of an error response for a non-OK `status`: its code, then its message (cut to
// kMaxErrorMessageBytes). An OK status is a caller bug and is sent as kInternal.
inline constexpr size_t kMaxErrorMessageBytes = 16 * 1024;
std::string EncodeErrorPayload(const Status& status);

// The Status an error response carries. Never OK: an empty payload, code 0 or a code this
// build does not know becomes kInternal, with the peer's message kept for the log.
Status DecodeErrorPayload(std::string_view payload);

}  // namespace ferry::rpc
