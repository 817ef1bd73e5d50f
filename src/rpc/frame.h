// ferry's RPC frame (DESIGN.md, Contracts across process boundaries): a fixed 32-byte
// little-endian header followed by `payload_len` payload bytes.
//
//   offset size field
//        0    4 magic       0x31595246 ("FRY1" as bytes F R Y 1)
//        4    2 version     2
//        6    2 type        message type (rpc/messages.h)
//        8    8 request_id  chosen by the caller (from 1); echoed in the response
//       16    2 flags       bit0 = response, bit1 = error; other bits must be 0
//       18    2 reserved    must be 0
//       20    4 payload_len payload bytes that follow; never above the receiver's limit
//       24    4 payload_crc CRC32C (common/crc32c.h) of the payload bytes
//       28    4 header_crc  CRC32C of bytes 0..27
//
// Version 2 added the two checksums; a version-1 peer and a version-2 peer do not talk (each
// refuses the other's frames as bad). A header whose checksum, magic, version, reserved field or
// flags are wrong, or whose payload_len is above the limit, is never trusted; neither is a
// payload whose checksum differs: the receiver closes the connection. Corrupted bytes are thus
// never acted on, and a call they hit fails with a reason naming the checksum.
//
// An error response (flags response|error) carries {code u8 (common/wire_status.h), message}.
// An error response with request_id 0 is a closing notice: the server's last word on a
// connection whose client sent a bad frame (why, as the error), after which it closes.
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
inline constexpr uint16_t kFrameVersion = 2;
inline constexpr size_t kFrameHeaderSize = 32;
// Enough of a header to see its magic and version (FramePrefixError).
inline constexpr size_t kFramePrefixSize = 6;
inline constexpr size_t kDefaultMaxFrameBytes = size_t{64} << 20;
// The largest payload a frame can describe (payload_len is a u32).
inline constexpr size_t kMaxEncodablePayload = 0xffffffffu;
// The request_id of a closing notice; calls never use it.
inline constexpr uint64_t kNoticeRequestId = 0;

inline constexpr uint16_t kFlagResponse = 1u << 0;
inline constexpr uint16_t kFlagError = 1u << 1;
inline constexpr uint16_t kKnownFlags = kFlagResponse | kFlagError;

// The variable fields of a header; magic, version, reserved and header_crc are implied.
struct FrameHeader {
  uint16_t type = 0;
  uint64_t request_id = 0;
  uint16_t flags = 0;
  uint32_t payload_len = 0;
  uint32_t payload_crc = 0;  // CRC32C of the payload (EncodeFrame sets it)

  bool is_response() const { return (flags & kFlagResponse) != 0; }
  bool is_error() const { return (flags & kFlagError) != 0; }
  bool is_notice() const { return is_error() && request_id == kNoticeRequestId; }
  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

// Writes the 32 header bytes of `header` (its header_crc computed here) to `out`, which must
// have room for kFrameHeaderSize.
void EncodeFrameHeader(const FrameHeader& header, char* out);

// Decodes exactly kFrameHeaderSize bytes. InvalidArgument, naming the field, when the size is
// wrong, the magic or header checksum differs, the version or reserved field is not this
// build's, unknown flag bits are set, an error flag comes without the response flag, or
// payload_len > max_payload_bytes. Allocates nothing for the payload.
Result<FrameHeader> DecodeFrameHeader(std::string_view bytes, size_t max_payload_bytes);

// Checks the magic and version in the first kFramePrefixSize bytes of a header (`prefix` may be
// longer), so a receiver refuses a peer of another version (whose header may be shorter) without
// waiting for a whole header: InvalidArgument naming what differs, else OK.
Status FramePrefixError(std::string_view prefix);

// InvalidArgument ("payload checksum mismatch") unless `payload` matches header.payload_crc.
Status VerifyFramePayload(const FrameHeader& header, std::string_view payload);

// A whole frame: header (payload_len and payload_crc set from `payload`) then payload.
// InvalidArgument when the payload is longer than kMaxEncodablePayload.
Result<std::string> EncodeFrame(FrameHeader header, std::string_view payload);

// The payload of an error response for a non-OK `status`: its code, then its message (cut to
// kMaxErrorMessageBytes). An OK status is a caller bug and is sent as kInternal.
inline constexpr size_t kMaxErrorMessageBytes = 16 * 1024;
std::string EncodeErrorPayload(const Status& status);

// The Status an error response carries. Never OK: an empty payload, code 0 or a code this
// build does not know becomes kInternal, with the peer's message kept for the log.
Status DecodeErrorPayload(std::string_view payload);

// A closing notice (an error response with kNoticeRequestId) saying `why`.
std::string EncodeClosingNotice(const Status& why);

}  // namespace ferry::rpc
