#include "transport/tcp/tcp_protocol.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <string>

#include "common/crc32c.h"
#include "common/wire_codec.h"
#include "common/wire_status.h"

namespace ferry::tcp {
namespace {

constexpr size_t kHelloCrcAt = kHelloSize - 4;
constexpr size_t kRequestCrcAt = kRequestHeaderSize - 4;
constexpr size_t kResponseCrcAt = kResponseHeaderSize - 4;

Status Bad(std::string what) { return InvalidArgumentError("tcp bad frame: " + what); }

// The header checksum of the `crc_at` bytes before it, checked before any field is believed.
Status CheckHeaderCrc(const uint8_t* p, size_t crc_at, std::string_view what) {
  const uint32_t sent = LoadLe32(p + crc_at);
  const uint32_t computed = Crc32c(p, crc_at);
  if (sent == computed) return Status::Ok();
  std::string why = Crc32cMismatchText(std::string(what) + " header", sent, computed);
  if (p[4] != kProtocolVersion) {
    why += ", or a peer speaking version " + std::to_string(p[4]) + " (this build speaks " +
           std::to_string(kProtocolVersion) + ")";
  }
  return Bad(why);
}

void Seal(uint8_t* p, size_t crc_at) { StoreLe32(p + crc_at, Crc32c(p, crc_at)); }

}  // namespace

void EncodeRequestHeader(const RequestHeader& h, RequestBytes out) {
  uint8_t* p = out.data();
  StoreLe32(p, kRequestMagic);
  p[4] = kProtocolVersion;
  p[5] = static_cast<uint8_t>(h.op);
  p[6] = h.payload_checksum ? kFlagPayloadChecksum : 0;
  p[7] = 0;
  StoreLe64(p + 8, h.request_id);
  StoreLe64(p + 16, h.remote_addr);
  StoreLe64(p + 24, h.length);
  StoreLe64(p + 32, h.incarnation);
  StoreLe64(p + 40, h.generation);
  StoreLe64(p + 48, h.deadline);
  StoreLe32(p + 56, h.payload_crc);
  Seal(p, kRequestCrcAt);
}

Status DecodeRequestHeader(std::span<const uint8_t, kRequestHeaderSize> in, RequestHeader* out) {
  const uint8_t* p = in.data();
  if (LoadLe32(p) != kRequestMagic) return Bad("request magic");
  RETURN_IF_ERROR(CheckHeaderCrc(p, kRequestCrcAt, "request"));
  if (p[4] != kProtocolVersion) return Bad("request version " + std::to_string(p[4]));
  if (p[5] > static_cast<uint8_t>(WireOp::kWrite)) return Bad("op " + std::to_string(p[5]));
  if ((p[6] & ~kFlagPayloadChecksum) != 0) return Bad("request flags " + std::to_string(p[6]));
  if (p[7] != 0) return Bad("reserved bits set");
  RequestHeader h;
  h.op = static_cast<WireOp>(p[5]);
  h.payload_checksum = (p[6] & kFlagPayloadChecksum) != 0;
  h.request_id = LoadLe64(p + 8);
  h.remote_addr = LoadLe64(p + 16);
  h.length = LoadLe64(p + 24);
  h.incarnation = LoadLe64(p + 32);
  h.generation = LoadLe64(p + 40);
  h.deadline = LoadLe64(p + 48);
  h.payload_crc = LoadLe32(p + 56);
  if (h.length == 0 || h.length > kMaxPayloadBytes) {
    return Bad("length " + std::to_string(h.length));
  }
  if (h.payload_crc != 0 && !(h.op == WireOp::kWrite && h.payload_checksum)) {
    return Bad("payload checksum on a request without a checksummed payload");
  }
  *out = h;
  return Status::Ok();
}

void EncodeResponseHeader(const ResponseHeader& h, ResponseBytes out) {
  uint8_t* p = out.data();
  StoreLe32(p, kResponseMagic);
  p[4] = kProtocolVersion;
  p[5] = StatusCodeToWire(h.code);
  StoreLe16(p + 6, h.message_length);
  StoreLe64(p + 8, h.request_id);
  StoreLe64(p + 16, h.payload_length);
  StoreLe32(p + 24, h.body_crc);
  Seal(p, kResponseCrcAt);
}

Status DecodeResponseHeader(std::span<const uint8_t, kResponseHeaderSize> in, ResponseHeader* out) {
  const uint8_t* p = in.data();
  if (LoadLe32(p) != kResponseMagic) return Bad("response magic");
  RETURN_IF_ERROR(CheckHeaderCrc(p, kResponseCrcAt, "response"));
  if (p[4] != kProtocolVersion) return Bad("response version " + std::to_string(p[4]));
  const std::optional<StatusCode> code = StatusCodeFromWire(p[5]);
  if (!code.has_value()) return Bad("status " + std::to_string(p[5]));
  ResponseHeader h;
  h.code = *code;
  h.message_length = LoadLe16(p + 6);
  h.request_id = LoadLe64(p + 8);
  h.payload_length = LoadLe64(p + 16);
  h.body_crc = LoadLe32(p + 24);
  if (h.message_length > kMaxMessageBytes) {
    return Bad("message length " + std::to_string(h.message_length));
  }
  if (h.payload_length > kMaxPayloadBytes) {
    return Bad("payload length " + std::to_string(h.payload_length));
  }
  if (h.code != StatusCode::kOk && h.payload_length != 0) return Bad("payload with an error");
  if (h.is_notice() && h.code == StatusCode::kOk) return Bad("closing notice without an error");
  *out = h;
  return Status::Ok();
}

bool StartsWithMagic(std::span<const uint8_t> bytes, uint32_t magic) {
  return bytes.size() >= 4 && LoadLe32(bytes.data()) == magic;
}

Status FramePrefixError(std::span<const uint8_t> prefix, uint32_t magic, uint32_t other_magic) {
  if (prefix.size() >= 4 && !StartsWithMagic(prefix, magic) &&
      !StartsWithMagic(prefix, other_magic)) {
    return Bad("unknown frame magic " + Hex32(LoadLe32(prefix.data())) +
               " (not a ferry tcp peer, or corrupted in transit)");
  }
  if (prefix.size() >= kFramePrefixSize && prefix[4] != kProtocolVersion) {
    return Bad("protocol version " + std::to_string(prefix[4]) + " (this build speaks " +
               std::to_string(kProtocolVersion) +
               "; a peer of another version, or corrupted in transit)");
  }
  return Status::Ok();
}

void EncodeHello(uint32_t magic, uint64_t clock_ns, HelloBytes out) {
  uint8_t* p = out.data();
  StoreLe32(p, magic);
  p[4] = kProtocolVersion;
  p[5] = 0;
  StoreLe16(p + 6, 0);
  StoreLe64(p + 8, clock_ns);
  StoreLe32(p + 16, 0);
  Seal(p, kHelloCrcAt);
}

Status DecodeHello(std::span<const uint8_t, kHelloSize> in, uint32_t magic, uint64_t* clock_ns) {
  const uint8_t* p = in.data();
  if (LoadLe32(p) != magic) return Bad(magic == kHelloMagic ? "hello magic" : "hello reply magic");
  RETURN_IF_ERROR(CheckHeaderCrc(p, kHelloCrcAt, "hello"));
  if (p[4] != kProtocolVersion) return Bad("hello version " + std::to_string(p[4]));
  if (p[5] != 0 || LoadLe16(p + 6) != 0 || LoadLe32(p + 16) != 0) {
    return Bad("hello reserved bits set");
  }
  *clock_ns = LoadLe64(p + 8);
  return Status::Ok();
}

std::string ChecksumMismatch(std::string_view what, uint32_t sent, uint32_t computed) {
  return "tcp bad frame: " + Crc32cMismatchText(what, sent, computed);
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
