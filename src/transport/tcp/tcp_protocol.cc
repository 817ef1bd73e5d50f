#include "transport/tcp/tcp_protocol.h"

#include <algorithm>
#include <array>
#include <climits>
#include <string>

namespace ferry::tcp {
namespace {

// Wire numbers of the status codes, fixed here so that reordering StatusCode cannot change the
// protocol. The index is the wire value.
constexpr std::array<StatusCode, 13> kWireStatus = {
    StatusCode::kOk,
    StatusCode::kInvalidArgument,
    StatusCode::kNotFound,
    StatusCode::kAlreadyExists,
    StatusCode::kOverlap,
    StatusCode::kStale,
    StatusCode::kAgain,
    StatusCode::kBusy,
    StatusCode::kTimeout,
    StatusCode::kUnavailable,
    StatusCode::kPermissionDenied,
    StatusCode::kCanceled,
    StatusCode::kInternal,
};

uint8_t StatusToWire(StatusCode code) {
  for (size_t i = 0; i < kWireStatus.size(); ++i) {
    if (kWireStatus[i] == code) return static_cast<uint8_t>(i);
  }
  return static_cast<uint8_t>(kWireStatus.size() - 1);  // kInternal
}

void Put16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Status Bad(std::string what) { return InvalidArgumentError("tcp bad frame: " + what); }

}  // namespace

void EncodeRequestHeader(const RequestHeader& h, RequestBytes out) {
  uint8_t* p = out.data();
  Put32(p, kRequestMagic);
  p[4] = kProtocolVersion;
  p[5] = static_cast<uint8_t>(h.op);
  Put16(p + 6, 0);
  Put64(p + 8, h.request_id);
  Put64(p + 16, h.remote_addr);
  Put64(p + 24, h.length);
  Put64(p + 32, h.incarnation);
  Put64(p + 40, h.generation);
  Put64(p + 48, h.deadline);
}

Status DecodeRequestHeader(std::span<const uint8_t, kRequestHeaderSize> in, RequestHeader* out) {
  const uint8_t* p = in.data();
  if (Get32(p) != kRequestMagic) return Bad("request magic");
  if (p[4] != kProtocolVersion) return Bad("request version " + std::to_string(p[4]));
  if (p[5] > static_cast<uint8_t>(WireOp::kWrite)) return Bad("op " + std::to_string(p[5]));
  if (Get16(p + 6) != 0) return Bad("reserved bits set");
  RequestHeader h;
  h.op = static_cast<WireOp>(p[5]);
  h.request_id = Get64(p + 8);
  h.remote_addr = Get64(p + 16);
  h.length = Get64(p + 24);
  h.incarnation = Get64(p + 32);
  h.generation = Get64(p + 40);
  h.deadline = Get64(p + 48);
  if (h.length == 0 || h.length > kMaxPayloadBytes) {
    return Bad("length " + std::to_string(h.length));
  }
  *out = h;
  return Status::Ok();
}

void EncodeResponseHeader(const ResponseHeader& h, ResponseBytes out) {
  uint8_t* p = out.data();
  Put32(p, kResponseMagic);
  p[4] = kProtocolVersion;
  p[5] = StatusToWire(h.code);
  Put16(p + 6, h.message_length);
  Put64(p + 8, h.request_id);
  Put64(p + 16, h.payload_length);
}

Status DecodeResponseHeader(std::span<const uint8_t, kResponseHeaderSize> in, ResponseHeader* out) {
  const uint8_t* p = in.data();
  if (Get32(p) != kResponseMagic) return Bad("response magic");
  if (p[4] != kProtocolVersion) return Bad("response version " + std::to_string(p[4]));
  if (p[5] >= kWireStatus.size()) return Bad("status " + std::to_string(p[5]));
  ResponseHeader h;
  h.code = kWireStatus[p[5]];
  h.message_length = Get16(p + 6);
  h.request_id = Get64(p + 8);
  h.payload_length = Get64(p + 16);
  if (h.message_length > kMaxMessageBytes) {
    return Bad("message length " + std::to_string(h.message_length));
  }
  if (h.payload_length > kMaxPayloadBytes) {
    return Bad("payload length " + std::to_string(h.payload_length));
  }
  if (h.code != StatusCode::kOk && h.payload_length != 0) return Bad("payload with an error");
  *out = h;
  return Status::Ok();
}

bool StartsWithMagic(std::span<const uint8_t> bytes, uint32_t magic) {
  return bytes.size() >= 4 && Get32(bytes.data()) == magic;
}

void EncodeHello(uint32_t magic, uint64_t clock_ns, HelloBytes out) {
  uint8_t* p = out.data();
  Put32(p, magic);
  p[4] = kProtocolVersion;
  p[5] = 0;
  Put16(p + 6, 0);
  Put64(p + 8, clock_ns);
}

Status DecodeHello(std::span<const uint8_t, kHelloSize> in, uint32_t magic, uint64_t* clock_ns) {
  const uint8_t* p = in.data();
  if (Get32(p) != magic) return Bad(magic == kHelloMagic ? "hello magic" : "hello reply magic");
  if (p[4] != kProtocolVersion) return Bad("hello version " + std::to_string(p[4]));
  if (p[5] != 0 || Get16(p + 6) != 0) return Bad("hello reserved bits set");
  *clock_ns = Get64(p + 8);
  return Status::Ok();
}

uint64_t SteadyNanos(std::chrono::steady_clock::time_point t) {
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return ns < 0 ? 0 : static_cast<uint64_t>(ns);
}

ClockMapping ClockMapping::FromRoundTrip(std::chrono::steady_clock::time_point sent,
                                         uint64_t target_ns,
                                         std::chrono::steady_clock::time_point received) {
  using std::chrono::nanoseconds;
  const int64_t t1 = std::chrono::duration_cast<nanoseconds>(sent.time_since_epoch()).count();
  const int64_t t2 = std::chrono::duration_cast<nanoseconds>(received.time_since_epoch()).count();
  // Both clocks count from their boot, far below 2^62 ns (146 years): no overflow below.
  const auto tt = static_cast<int64_t>(std::min<uint64_t>(target_ns, uint64_t{1} << 62));
  ClockMapping m;
  const int64_t span = t2 > t1 ? t2 - t1 : 0;
  m.offset_ns = tt - (t1 + span / 2);
  m.error_ns = span - span / 2;  // rounds up: never under the true bound
  m.measured_at = received;
  return m;
}

uint64_t ClockMapping::TargetDeadline(std::chrono::steady_clock::time_point deadline) const {
  using std::chrono::nanoseconds;
  if (deadline == std::chrono::steady_clock::time_point::max()) return kNoDeadline;
  const int64_t d = std::chrono::duration_cast<nanoseconds>(deadline.time_since_epoch()).count();
  const int64_t at =
      std::chrono::duration_cast<nanoseconds>(measured_at.time_since_epoch()).count();
  int64_t distance = 0;
  if (__builtin_sub_overflow(d, at, &distance)) distance = d > at ? INT64_MAX : 0;
  const int64_t drift = distance > 0 ? distance / 1'000'000 * kClockDriftPpm : 0;
  int64_t mapped = 0;
  if (__builtin_add_overflow(d, offset_ns, &mapped)) {
    return offset_ns > 0 ? kNoDeadline - 1 : 0;
  }
  if (__builtin_sub_overflow(mapped, error_ns, &mapped) ||
      __builtin_sub_overflow(mapped, drift, &mapped)) {
    return 0;  // only a mapping far below the epoch overflows downwards
  }
  return mapped <= 0 ? 0 : static_cast<uint64_t>(mapped);
}

std::string_view ClampMessage(std::string_view message) {
  return message.substr(0, kMaxMessageBytes);
}

}  // namespace ferry::tcp
