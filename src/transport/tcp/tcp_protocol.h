// The tcp transport's data protocol (ferry's own; DESIGN.md, "RPC and data frames").
//
// One TCP connection carries a stream of requests from the initiator and, in the same order, one
// response per request from the target. All integers are little-endian (common/wire_codec.h).
// Every frame starts with a magic and the protocol version; a peer of another version is a bad
// frame. Every header ends with header_crc, the CRC32C (common/crc32c.h) of the header bytes
// before it, and payloads carry a CRC32C too, so bytes corrupted in transit are caught rather
// than acted on or reported as transferred (below).
//
// Version 3 added the checksums (2: the clock hello and the request deadline). Peers of
// different versions do not talk: each refuses the other's first frame as bad (the target judges
// a frame's magic and version on its first 5 bytes, before a whole header of this version came).
//
// Clock hello, 24 bytes, either way:
//   0  u32 magic         kHelloMagic ("FTHL", initiator -> target) or
//                        kHelloReplyMagic ("FTHR", target -> initiator)
//   4  u8  version       kProtocolVersion
//   5  u8  reserved      0
//   6  u16 reserved      0
//   8  u64 clock         the sender's steady clock, nanoseconds since its epoch
//   16 u32 reserved      0
//   20 u32 header_crc    CRC32C of bytes 0..19
// The first frame on a connection is the initiator's hello; the target answers it with its
// clock. The initiator may send another hello later, only with no request unanswered, and sends
// nothing after a hello until the reply came. From (sent at t1, target clock tt, received at t2)
// the initiator estimates the target's clock (ClockMapping below).
//
// Request, 64 bytes, then for a WRITE exactly `length` payload bytes:
//   0  u32 magic         kRequestMagic ("FTRQ")
//   4  u8  version       kProtocolVersion
//   5  u8  op            0 = READ (target -> initiator), 1 = WRITE (initiator -> target)
//   6  u8  flags         bit0 kFlagPayloadChecksum: the payload is checksummed (a WRITE's
//                        payload_crc covers it; a READ's response body_crc must cover it);
//                        other bits 0
//   7  u8  reserved      0
//   8  u64 request_id    chosen by the initiator (from 1), strictly increasing per connection
//   16 u64 remote_addr   target address, as published in the target's BufferDesc
//   24 u64 length        1..kMaxPayloadBytes
//   32 u64 incarnation   the target incarnation the initiator planned against
//   40 u64 generation    the generation of the covering BufferDesc in the plan
//   48 u64 deadline      in the TARGET's steady clock (ns); kNoDeadline: none. The initiator
//                        maps its slice deadline early by the mapping's error bound, so the
//                        target errs on refusing early, never on accepting late.
//   56 u32 payload_crc   a WRITE with kFlagPayloadChecksum: CRC32C of its payload; else 0
//   60 u32 header_crc    CRC32C of bytes 0..59
//
// Response, 32 bytes, then `message_length` bytes of message, then `payload_length` bytes:
//   0  u32 magic           kResponseMagic ("FTRS")
//   4  u8  version         kProtocolVersion
//   5  u8  status          common/wire_status.h's number; 0 = OK
//   6  u16 message_length  0..kMaxMessageBytes; the error's message (empty when OK)
//   8  u64 request_id      echoes the request; responses come in request order. 0: a closing
//                          notice (below)
//   16 u64 payload_length  READ that succeeded: the request's length; otherwise 0
//   24 u32 body_crc        CRC32C of the message bytes, followed by the payload bytes when the
//                          request had kFlagPayloadChecksum
//   28 u32 header_crc      CRC32C of bytes 0..27
//
// Checksums (the engine's tcp_payload_checksum option decides kFlagPayloadChecksum; headers and
// messages are always checked): a receiver verifies a header's checksum before it believes any
// field, and a payload's as it lands. A mismatch is a bad frame, so the connection closes and
// what it held fails with a reason naming the checksum (Unavailable: the engine's retry rules
// apply). A READ's payload lands in the initiator's memory before its checksum can be checked:
// on a mismatch the slice FAILS, never completes. A WRITE's payload lands in the target's memory
// the same way: on a mismatch the target answers with a closing notice, so the slice FAILS
// (a failed WRITE may have written part of its range, as any failed WRITE may).
//
// Closing notice: a response with request_id 0 and a non-OK status, no payload. The target
// sends it when it found a bad frame (a checksum mismatch, a broken field), with the reason as
// its message, stops reading, and closes once the initiator hangs up (or after io_timeout). The
// initiator fails every slice the connection holds with that reason. It may come in place of a
// hello reply.
//
// Target rules: a request whose deadline its clock has reached when the header arrives is refused
// with Timeout before anything is pinned or moved; a WRITE whose deadline passes while its
// payload streams in stops landing (the rest is discarded) and is answered Timeout. An initiator
// that closes or half-closes its side has given up on everything it sent: the target abandons
// the connection without applying what it has not started. Otherwise the access is checked with
// TransportContext::PinRemoteAccess before a byte moves. A WRITE's payload is received straight
// into the pinned memory and answered only once all of it is there. A rejected (or expired)
// WRITE's payload is still received and discarded (the connection stays in step, so pipelined
// neighbours are unaffected) and nothing is written; the response carries the rejection's
// status. A READ's payload is sent straight from the pinned memory; the
// pin is held until the last byte is handed to the kernel.
//
// A frame that breaks these rules (a checksum, magic, version, reserved bits, flags, op, length
// or message bounds, an unknown status, an out-of-order request id, a payload length that does
// not fit the request, a request before the first hello, bytes after a hello before its reply)
// is a bad frame: the receiver counts it and closes the connection, failing what was in flight
// (the target says why first, in a closing notice).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::tcp {

inline constexpr uint32_t kRequestMagic = 0x51525446;     // bytes "FTRQ"
inline constexpr uint32_t kResponseMagic = 0x53525446;    // bytes "FTRS"
inline constexpr uint32_t kHelloMagic = 0x4c485446;       // bytes "FTHL"
inline constexpr uint32_t kHelloReplyMagic = 0x52485446;  // bytes "FTHR"
// 2: the clock hello and the request deadline. 3: checksums.
inline constexpr uint8_t kProtocolVersion = 3;
inline constexpr size_t kHelloSize = 24;
inline constexpr size_t kRequestHeaderSize = 64;
inline constexpr size_t kResponseHeaderSize = 32;
// Enough of any frame to judge its magic and version (FramePrefixError).
inline constexpr size_t kFramePrefixSize = 5;
inline constexpr uint8_t kFlagPayloadChecksum = 1u << 0;
// The request_id of a closing notice; requests never use it.
inline constexpr uint64_t kNoticeRequestId = 0;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
inline constexpr size_t kMaxMessageBytes = 1024;
inline constexpr uint64_t kNoDeadline = std::numeric_limits<uint64_t>::max();

enum class WireOp : uint8_t { kRead = 0, kWrite = 1 };

struct RequestHeader {
  WireOp op = WireOp::kWrite;
  bool payload_checksum = true;  // kFlagPayloadChecksum
  uint64_t request_id = 0;
  uint64_t remote_addr = 0;
  uint64_t length = 0;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  uint64_t deadline = kNoDeadline;  // target steady clock, ns
  uint32_t payload_crc = 0;         // a checksummed WRITE's; 0 otherwise
};

struct ResponseHeader {
  uint64_t request_id = 0;
  StatusCode code = StatusCode::kOk;
  uint16_t message_length = 0;
  uint64_t payload_length = 0;
  uint32_t body_crc = 0;

  bool is_notice() const { return request_id == kNoticeRequestId; }
};

using RequestBytes = std::span<uint8_t, kRequestHeaderSize>;
using ResponseBytes = std::span<uint8_t, kResponseHeaderSize>;

// Writes `header` (its header_crc computed here) into `out`. The caller keeps the header within
// bounds (length, op) and sets payload_crc for a checksummed WRITE.
void EncodeRequestHeader(const RequestHeader& header, RequestBytes out);
// Strict decode, checksum first; InvalidArgument naming the broken field ("header checksum
// mismatch" for corruption) on a bad frame (`out` untouched then).
Status DecodeRequestHeader(std::span<const uint8_t, kRequestHeaderSize> in, RequestHeader* out);

// Writes `header` (its header_crc computed here) into `out`; message_length must be
// <= kMaxMessageBytes.
void EncodeResponseHeader(const ResponseHeader& header, ResponseBytes out);
// Strict decode, checksum first; InvalidArgument naming the broken field on a bad frame (`out`
// untouched then). A closing notice must carry an error and no payload.
Status DecodeResponseHeader(std::span<const uint8_t, kResponseHeaderSize> in, ResponseHeader* out);

// Whether `bytes` (at least 4 of them) start with `magic`.
bool StartsWithMagic(std::span<const uint8_t> bytes, uint32_t magic);

// Judges the first bytes of a frame (any number; kFramePrefixSize suffice): InvalidArgument
// when its magic is neither `magic` nor `other_magic`, or its version is not this build's.
// Lets a receiver refuse a peer of another version, whose frames may be shorter, at once.
Status FramePrefixError(std::span<const uint8_t> prefix, uint32_t magic, uint32_t other_magic);

// A hello (kHelloMagic) or its reply (kHelloReplyMagic) carrying `clock_ns`.
using HelloBytes = std::span<uint8_t, kHelloSize>;
void EncodeHello(uint32_t magic, uint64_t clock_ns, HelloBytes out);
// Strict decode of a frame that must carry `magic`, checksum first; InvalidArgument naming the
// broken field.
Status DecodeHello(std::span<const uint8_t, kHelloSize> in, uint32_t magic, uint64_t* clock_ns);

// The message of the bad frame a payload or body checksum mismatch is: names `what`, both
// checksums and "corrupted in transit".
std::string ChecksumMismatch(std::string_view what, uint32_t sent, uint32_t computed);

// This host's steady clock in nanoseconds since its epoch (what a hello carries).
uint64_t SteadyNanos(std::chrono::steady_clock::time_point t);
inline uint64_t SteadyNowNanos() { return SteadyNanos(std::chrono::steady_clock::now()); }

// The initiator's estimate of a target's steady clock from one hello round trip: the hello left
// at `sent`, the target read its clock as `target_ns`, the reply arrived at `received`. Then
// target = local + offset_ns within +-error_ns (the target read its clock somewhere in
// [sent, received]). Clocks also run at slightly different rates, so a deadline far from the
// measurement is mapped earlier by kClockDriftPpm of that distance. Thread-compatible value.
struct ClockMapping {
  static constexpr int64_t kClockDriftPpm = 100;

  static ClockMapping FromRoundTrip(std::chrono::steady_clock::time_point sent, uint64_t target_ns,
                                    std::chrono::steady_clock::time_point received);
  // `deadline` in the target's clock, early by the error bound and the drift allowance, so the
  // target refuses early rather than accepting late. kNoDeadline for time_point::max(); 0 (the
  // target refuses at once) when it maps before the target's epoch; saturates below kNoDeadline.
  uint64_t TargetDeadline(std::chrono::steady_clock::time_point deadline) const;

  int64_t offset_ns = 0;
  int64_t error_ns = 0;
  std::chrono::steady_clock::time_point measured_at{};
};

// The first kMaxMessageBytes bytes of `message` (what a response can carry).
std::string_view ClampMessage(std::string_view message);

}  // namespace ferry::tcp
