#include "transport/tcp/tcp_protocol.h"

#include <array>
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

std::string_view ClampMessage(std::string_view message) {
  return message.substr(0, kMaxMessageBytes);
}

}  // namespace ferry::tcp
