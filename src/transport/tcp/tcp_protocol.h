// The tcp transport's data protocol (ferry's own; DESIGN.md, "RPC and data frames").
//
// One TCP connection carries a stream of requests from the initiator and, in the same order, one
// response per request from the target. All integers are little-endian. Every frame starts with a
// magic and the protocol version; a peer of another version is a bad frame.
//
// Clock hello, 16 bytes, either way (version 2):
//   0  u32 magic         kHelloMagic ("FTHL", initiator -> target) or
//                        kHelloReplyMagic ("FTHR", target -> initiator)
//   4  u8  version       kProtocolVersion
//   5  u8  reserved      0
//   6  u16 reserved      0
//   8  u64 clock         the sender's steady clock, nanoseconds since its epoch
// The first frame on a connection is the initiator's hello; the target answers it with its
// clock. The initiator may send another hello later, only with no request unanswered, and sends
// nothing after a hello until the reply came. From (sent at t1, target clock tt, received at t2)
// the initiator estimates the target's clock (ClockMapping below).
//
// Request, 56 bytes, then for a WRITE exactly `length` payload bytes:
//   0  u32 magic         kRequestMagic ("FTRQ")
//   4  u8  version       kProtocolVersion
//   5  u8  op            0 = READ (target -> initiator), 1 = WRITE (initiator -> target)
//   6  u16 reserved      0
//   8  u64 request_id    chosen by the initiator, strictly increasing per connection
//   16 u64 remote_addr   target address, as published in the target's BufferDesc
//   24 u64 length        1..kMaxPayloadBytes
//   32 u64 incarnation   the target incarnation the initiator planned against
//   40 u64 generation    the generation of the covering BufferDesc in the plan
//   48 u64 deadline      in the TARGET's steady clock (ns); kNoDeadline: none. The initiator
//                        maps its slice deadline early by the mapping's error bound, so the
//                        target errs on refusing early, never on accepting late.
//
// Response, 24 bytes, then `message_length` bytes of message, then `payload_length` bytes:
//   0  u32 magic           kResponseMagic ("FTRS")
//   4  u8  version         kProtocolVersion
//   5  u8  status          a StatusCode (WireStatus below); 0 = OK
//   6  u16 message_length  0..kMaxMessageBytes; the error's message (empty when OK)
//   8  u64 request_id      echoes the request; responses come in request order
//   16 u64 payload_length  READ that succeeded: the request's length; otherwise 0
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
// A frame that breaks these rules (magic, version, reserved bits, op, length or message bounds,
// an unknown status, an out-of-order request id, a payload length that does not fit the request,
// a request before the first hello, bytes after a hello before its reply) is a bad frame: the
// receiver counts it and closes the connection, failing what was in flight.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "ferry/status.h"

namespace ferry::tcp {

inline constexpr uint32_t kRequestMagic = 0x51525446;     // bytes "FTRQ"
inline constexpr uint32_t kResponseMagic = 0x53525446;    // bytes "FTRS"
inline constexpr uint32_t kHelloMagic = 0x4c485446;       // bytes "FTHL"
inline constexpr uint32_t kHelloReplyMagic = 0x52485446;  // bytes "FTHR"
// 2: the clock hello and the request deadline.
inline constexpr uint8_t kProtocolVersion = 2;
inline constexpr size_t kHelloSize = 16;
inline constexpr size_t kRequestHeaderSize = 56;
inline constexpr size_t kResponseHeaderSize = 24;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
inline constexpr size_t kMaxMessageBytes = 1024;
inline constexpr uint64_t kNoDeadline = std::numeric_limits<uint64_t>::max();

enum class WireOp : uint8_t { kRead = 0, kWrite = 1 };

struct RequestHeader {
  WireOp op = WireOp::kWrite;
  uint64_t request_id = 0;
  uint64_t remote_addr = 0;
  uint64_t length = 0;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  uint64_t deadline = kNoDeadline;  // target steady clock, ns
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

// Whether `bytes` (at least 4 of them) start with `magic`.
bool StartsWithMagic(std::span<const uint8_t> bytes, uint32_t magic);

// A hello (kHelloMagic) or its reply (kHelloReplyMagic) carrying `clock_ns`.
using HelloBytes = std::span<uint8_t, kHelloSize>;
void EncodeHello(uint32_t magic, uint64_t clock_ns, HelloBytes out);
// Strict decode of a frame that must carry `magic`; InvalidArgument naming the broken field.
Status DecodeHello(std::span<const uint8_t, kHelloSize> in, uint32_t magic, uint64_t* clock_ns);

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
