// The tcp transport's data protocol (ferry's own; DESIGN.md, "RPC and data frames").
//
// One TCP connection carries a stream of requests from the initiator and, in the same order, one
// response per request from the target. All integers are little-endian. Every frame starts with a
// magic and the protocol version; a peer of another version is a bad frame.
//
// Request, 48 bytes, then for a WRITE exactly `length` payload bytes:
//   0  u32 magic         kRequestMagic ("FTRQ")
//   4  u8  version       kProtocolVersion
//   5  u8  op            0 = READ (target -> initiator), 1 = WRITE (initiator -> target)
//   6  u16 reserved      0
//   8  u64 request_id    chosen by the initiator, strictly increasing per connection
//   16 u64 remote_addr   target address, as published in the target's BufferDesc
//   24 u64 length        1..kMaxPayloadBytes
//   32 u64 incarnation   the target incarnation the initiator planned against
//   40 u64 generation    the generation of the covering BufferDesc in the plan
//
// Response, 24 bytes, then `message_length` bytes of message, then `payload_length` bytes:
//   0  u32 magic           kResponseMagic ("FTRS")
//   4  u8  version         kProtocolVersion
//   5  u8  status          a StatusCode (WireStatus below); 0 = OK
//   6  u16 message_length  0..kMaxMessageBytes; the error's message (empty when OK)
//   8  u64 request_id      echoes the request; responses come in request order
//   16 u64 payload_length  READ that succeeded: the request's length; otherwise 0
//
// Target rules: the access is checked with TransportContext::PinRemoteAccess before a byte
// moves. A WRITE's payload is received straight into the pinned memory and answered only once
// all of it is there. A rejected WRITE's payload is still received and discarded (the connection
// stays in step, so pipelined neighbours are unaffected) and nothing is written; the response
// carries the rejection's status. A READ's payload is sent straight from the pinned memory; the
// pin is held until the last byte is handed to the kernel.
//
// A frame that breaks these rules (magic, version, reserved bits, op, length or message bounds,
// an unknown status, an out-of-order request id, a payload length that does not fit the request)
// is a bad frame: the receiver counts it and closes the connection, failing what was in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "ferry/status.h"

namespace ferry::tcp {

inline constexpr uint32_t kRequestMagic = 0x51525446;   // bytes "FTRQ"
inline constexpr uint32_t kResponseMagic = 0x53525446;  // bytes "FTRS"
inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kRequestHeaderSize = 48;
inline constexpr size_t kResponseHeaderSize = 24;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
inline constexpr size_t kMaxMessageBytes = 1024;

enum class WireOp : uint8_t { kRead = 0, kWrite = 1 };

struct RequestHeader {
  WireOp op = WireOp::kWrite;
  uint64_t request_id = 0;
  uint64_t remote_addr = 0;
  uint64_t length = 0;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
};

struct ResponseHeader {
  uint64_t request_id = 0;
  StatusCode code = StatusCode::kOk;
  uint16_t message_length = 0;
  uint64_t payload_length = 0;
};

using RequestBytes = std::span<uint8_t, kRequestHeaderSize>;
using ResponseBytes = std::span<uint8_t, kResponseHeaderSize>;

// Writes `header` into `out`. The caller keeps the header within bounds (length, op).
void EncodeRequestHeader(const RequestHeader& header, RequestBytes out);
// Strict decode; InvalidArgument naming the broken field on a bad frame (`out` untouched then).
Status DecodeRequestHeader(std::span<const uint8_t, kRequestHeaderSize> in, RequestHeader* out);

// Writes `header` into `out`; message_length must be <= kMaxMessageBytes.
void EncodeResponseHeader(const ResponseHeader& header, ResponseBytes out);
// Strict decode; InvalidArgument naming the broken field on a bad frame (`out` untouched then).
Status DecodeResponseHeader(std::span<const uint8_t, kResponseHeaderSize> in, ResponseHeader* out);

// The first kMaxMessageBytes bytes of `message` (what a response can carry).
std::string_view ClampMessage(std::string_view message);

}  // namespace ferry::tcp
