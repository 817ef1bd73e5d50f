// Fuzzes the tcp transport's frame headers (transport/tcp/tcp_protocol.h): the request header a
// target reads, the response header an initiator reads, the clock hello both read, and the clock
// mapping an initiator derives from a hello's reply.
//
// Input: one selector byte (below; with kSeal set, the harness first writes the right
// header_crc into the header's last 4 bytes, so that mutations reach the field checks behind
// the checksum), then the frame bytes (the first N are used; too few: nothing to do) or, for
// the clock mapping, four or five little-endian 64-bit numbers.
// Contracts checked, beyond "no crash, no UB": an accepted header encodes back to exactly its
// bytes and stays within the protocol's bounds, and its prefix passes FramePrefixError; a
// refused one is InvalidArgument and leaves the output untouched; a mapped deadline never moves
// later than the offset alone puts it, keeps the order of deadlines (to within one drift step)
// and keeps "no deadline".
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "common/crc32c.h"
#include "common/wire_codec.h"
#include "fuzz_check.h"
#include "transport/tcp/tcp_protocol.h"

namespace ferry::tcp {
namespace {

enum Selector : uint8_t {
  kRequest = 0,
  kResponse,
  kHello,
  kHelloReply,
  kClockMapping,
  kSelectorCount,
};
constexpr uint8_t kSeal = 0x80;

// The first N input bytes as a header, with its last 4 bytes (header_crc) made right when `seal`.
template <size_t N>
std::array<uint8_t, N> Header(std::span<const uint8_t> in, bool seal) {
  std::array<uint8_t, N> h{};
  std::copy_n(in.begin(), N, h.begin());
  if (seal) StoreLe32(h.data() + N - 4, Crc32c(h.data(), N - 4));
  return h;
}

void CheckRefused(const Status& s) {
  FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument, s.ToString());
}

void FuzzRequest(std::span<const uint8_t, kRequestHeaderSize> in) {
  RequestHeader out;
  out.request_id = 0x5a5a;  // a sentinel: a refused frame must not touch it
  const Status s = DecodeRequestHeader(in, &out);
  if (!s.ok()) {
    CheckRefused(s);
    FUZZ_CHECK(out.request_id == 0x5a5a, "a refused request wrote its output");
    return;
  }
  FUZZ_CHECK(out.length >= 1 && out.length <= kMaxPayloadBytes, "length out of bounds");
  FUZZ_CHECK(out.op == WireOp::kRead || out.op == WireOp::kWrite, "unknown op");
  std::array<uint8_t, kRequestHeaderSize> encoded{};
  EncodeRequestHeader(out, encoded);
  FUZZ_CHECK(std::equal(encoded.begin(), encoded.end(), in.begin()),
             "request does not encode back to its bytes");
  FUZZ_CHECK(StartsWithMagic(in, kRequestMagic), "accepted without the request magic");
  FUZZ_CHECK(FramePrefixError(in, kRequestMagic, kHelloMagic).ok(), "prefix refused");
}

void FuzzResponse(std::span<const uint8_t, kResponseHeaderSize> in) {
  ResponseHeader out;
  out.request_id = 0x5a5a;
  const Status s = DecodeResponseHeader(in, &out);
  if (!s.ok()) {
    CheckRefused(s);
    FUZZ_CHECK(out.request_id == 0x5a5a, "a refused response wrote its output");
    return;
  }
  FUZZ_CHECK(out.message_length <= kMaxMessageBytes, "message length out of bounds");
  FUZZ_CHECK(out.payload_length <= kMaxPayloadBytes, "payload length out of bounds");
  FUZZ_CHECK(out.code == StatusCode::kOk || out.payload_length == 0, "payload with an error");
  FUZZ_CHECK(!out.is_notice() || (out.code != StatusCode::kOk && out.payload_length == 0),
             "a closing notice without an error, or with a payload");
  std::array<uint8_t, kResponseHeaderSize> encoded{};
  EncodeResponseHeader(out, encoded);
  FUZZ_CHECK(std::equal(encoded.begin(), encoded.end(), in.begin()),
             "response does not encode back to its bytes");
  FUZZ_CHECK(FramePrefixError(in, kResponseMagic, kHelloReplyMagic).ok(), "prefix refused");
}

void FuzzHello(std::span<const uint8_t, kHelloSize> in, uint32_t magic) {
  uint64_t clock = 0x5a5a;
  const Status s = DecodeHello(in, magic, &clock);
  if (!s.ok()) {
    CheckRefused(s);
    FUZZ_CHECK(clock == 0x5a5a, "a refused hello wrote its output");
    return;
  }
  std::array<uint8_t, kHelloSize> encoded{};
  EncodeHello(magic, clock, encoded);
  FUZZ_CHECK(std::equal(encoded.begin(), encoded.end(), in.begin()),
             "hello does not encode back to its bytes");
  FUZZ_CHECK(FramePrefixError(in, magic, magic == kHelloMagic ? kRequestMagic : kResponseMagic)
                 .ok(),
             "prefix refused");
}

uint64_t Le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void FuzzClockMapping(std::span<const uint8_t> in) {
  if (in.size() < 32) return;
  using Clock = std::chrono::steady_clock;
  using std::chrono::nanoseconds;
  // Local steady clocks count from boot: 0..2^62 ns, and a reply never arrives before its hello.
  const auto sent_ns = static_cast<int64_t>(Le64(in.data()) >> 2);
  const auto received_ns = std::max(sent_ns, static_cast<int64_t>(Le64(in.data() + 8) >> 2));
  const uint64_t target_ns = Le64(in.data() + 16);  // the peer's: any value
  const auto d1 = static_cast<int64_t>(Le64(in.data() + 24));
  const int64_t d2 = in.size() >= 40 ? static_cast<int64_t>(Le64(in.data() + 32)) : d1;
  const ClockMapping m = ClockMapping::FromRoundTrip(Clock::time_point(nanoseconds(sent_ns)),
                                                     target_ns,
                                                     Clock::time_point(nanoseconds(received_ns)));
  FUZZ_CHECK(m.error_ns >= 0, "negative error bound");
  FUZZ_CHECK(m.TargetDeadline(Clock::time_point::max()) == kNoDeadline, "lost 'no deadline'");
  const int64_t lo = std::min(d1, d2);
  const int64_t hi = std::max(d1, d2);
  if (hi == std::numeric_limits<int64_t>::max()) return;  // time_point::max(): checked above
  const uint64_t mapped_lo = m.TargetDeadline(Clock::time_point(nanoseconds(lo)));
  const uint64_t mapped_hi = m.TargetDeadline(Clock::time_point(nanoseconds(hi)));
  // The drift allowance grows in steps of kClockDriftPpm ns per whole millisecond of distance,
  // so a later deadline may map up to one step earlier, never more.
  FUZZ_CHECK(mapped_lo <= mapped_hi ||
                 mapped_lo - mapped_hi <= static_cast<uint64_t>(ClockMapping::kClockDriftPpm),
             "mapping reorders deadlines");
  FUZZ_CHECK(mapped_hi < kNoDeadline, "a deadline mapped to 'no deadline'");
  int64_t shifted = 0;
  if (!__builtin_add_overflow(hi, m.offset_ns, &shifted)) {
    FUZZ_CHECK(mapped_hi <= static_cast<uint64_t>(std::max<int64_t>(shifted, 0)),
               "mapped deadline later than the offset alone puts it");
  }
}

}  // namespace
}  // namespace ferry::tcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::tcp;
  if (size == 0) return 0;
  const std::span<const uint8_t> in(data + 1, size - 1);
  const bool seal = (data[0] & kSeal) != 0;
  switch ((data[0] & ~kSeal) % kSelectorCount) {
    case kRequest:
      if (in.size() >= kRequestHeaderSize) FuzzRequest(Header<kRequestHeaderSize>(in, seal));
      break;
    case kResponse:
      if (in.size() >= kResponseHeaderSize) FuzzResponse(Header<kResponseHeaderSize>(in, seal));
      break;
    case kHello:
      if (in.size() >= kHelloSize) FuzzHello(Header<kHelloSize>(in, seal), kHelloMagic);
      break;
    case kHelloReply:
      if (in.size() >= kHelloSize) FuzzHello(Header<kHelloSize>(in, seal), kHelloReplyMagic);
      break;
    case kClockMapping:
      FuzzClockMapping(in);
      break;
    default:
      break;
  }
  return 0;
}
