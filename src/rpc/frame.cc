#include "rpc/frame.h"

#include "rpc/byte_codec.h"

namespace ferry::rpc {

void EncodeFrameHeader(const FrameHeader& header, char* out) {
  StoreLe32(out + 0, kFrameMagic);
  StoreLe16(out + 4, kFrameVersion);
  StoreLe16(out + 6, header.type);
  StoreLe64(out + 8, header.request_id);
  StoreLe16(out + 16, header.flags);
  StoreLe16(out + 18, 0);
  StoreLe32(out + 20, header.payload_len);
}

Result<FrameHeader> DecodeFrameHeader(std::string_view bytes, size_t max_payload_bytes) {
  if (bytes.size() != kFrameHeaderSize) {
    return InvalidArgumentError("rpc frame header must be 24 bytes, got " +
                                std::to_string(bytes.size()));
  }
  const char* p = bytes.data();
  if (const uint32_t magic = LoadLe32(p); magic != kFrameMagic) {
    return InvalidArgumentError("rpc frame: bad magic " + std::to_string(magic));
  }
  if (const uint16_t version = LoadLe16(p + 4); version != kFrameVersion) {
    return InvalidArgumentError("rpc frame: unsupported version " + std::to_string(version) +
                                " (this build speaks " + std::to_string(kFrameVersion) + ")");
  }
  if (const uint16_t reserved = LoadLe16(p + 18); reserved != 0) {
    return InvalidArgumentError("rpc frame: reserved field is " + std::to_string(reserved));
  }
  FrameHeader h;
  h.type = LoadLe16(p + 6);
  h.request_id = LoadLe64(p + 8);
  h.flags = LoadLe16(p + 16);
  h.payload_len = LoadLe32(p + 20);
  if ((h.flags & ~kKnownFlags) != 0) {
    return InvalidArgumentError("rpc frame: unknown flags " + std::to_string(h.flags));
  }
  if (h.is_error() && !h.is_response()) {
    return InvalidArgumentError("rpc frame: error flag on a request");
  }
  if (h.payload_len > max_payload_bytes) {
    return InvalidArgumentError("rpc frame: payload of " + std::to_string(h.payload_len) +
                                " bytes exceeds the limit of " + std::to_string(max_payload_bytes));
  }
  return h;
}

Result<std::string> EncodeFrame(FrameHeader header, std::string_view payload) {
  if (payload.size() > kMaxEncodablePayload) {
    return InvalidArgumentError("rpc payload of " + std::to_string(payload.size()) +
                                " bytes cannot be framed");
  }
  header.payload_len = static_cast<uint32_t>(payload.size());
  std::string frame(kFrameHeaderSize, '\0');
  EncodeFrameHeader(header, frame.data());
  frame.append(payload);
  return frame;
}

std::string EncodeErrorPayload(const Status& status) {
  const StatusCode code = status.ok() ? StatusCode::kInternal : status.code();
  std::string_view message =
      status.ok() ? "error response built from an OK status" : std::string_view(status.message());
  if (message.size() > kMaxErrorMessageBytes) message = message.substr(0, kMaxErrorMessageBytes);
  std::string out;
  out.reserve(1 + message.size());
  out.push_back(static_cast<char>(code));
  out.append(message);
  return out;
}

Status DecodeErrorPayload(std::string_view payload) {
  if (payload.empty()) return InternalError("peer sent an error response without a status code");
  const auto raw = static_cast<uint8_t>(payload[0]);
  std::string message(payload.substr(1));
  if (raw == 0 || raw > static_cast<uint8_t>(StatusCode::kInternal)) {
    return InternalError("peer sent an error with unknown status code " + std::to_string(raw) +
                         ": " + message);
  }
  return Status(static_cast<StatusCode>(raw), std::move(message));
}

}  // namespace ferry::rpc
