#include "rpc/frame.h"

#include "common/crc32c.h"
#include "common/wire_codec.h"
#include "common/wire_status.h"

namespace ferry::rpc {
namespace {

constexpr size_t kHeaderCrcOffset = 28;

}  // namespace

void EncodeFrameHeader(const FrameHeader& header, char* out) {
  StoreLe32(out + 0, kFrameMagic);
  StoreLe16(out + 4, kFrameVersion);
  StoreLe16(out + 6, header.type);
  StoreLe64(out + 8, header.request_id);
  StoreLe16(out + 16, header.flags);
  StoreLe16(out + 18, 0);
  StoreLe32(out + 20, header.payload_len);
  StoreLe32(out + 24, header.payload_crc);
  StoreLe32(out + kHeaderCrcOffset, Crc32c(out, kHeaderCrcOffset));
}

Status FramePrefixError(std::string_view prefix) {
  if (prefix.size() >= 4 && LoadLe32(prefix.data()) != kFrameMagic) {
    return InvalidArgumentError("rpc frame: bad magic " + Hex32(LoadLe32(prefix.data())) +
                                " (not a ferry rpc peer, or corrupted in transit)");
  }
  if (prefix.size() >= kFramePrefixSize) {
    if (const uint16_t version = LoadLe16(prefix.data() + 4); version != kFrameVersion) {
      return InvalidArgumentError("rpc frame: unsupported version " + std::to_string(version) +
                                  " (this build speaks " + std::to_string(kFrameVersion) +
                                  "; a peer of another version, or corrupted in transit)");
    }
  }
  return Status::Ok();
}

Result<FrameHeader> DecodeFrameHeader(std::string_view bytes, size_t max_payload_bytes) {
  if (bytes.size() != kFrameHeaderSize) {
    return InvalidArgumentError("rpc frame header must be " + std::to_string(kFrameHeaderSize) +
                                " bytes, got " + std::to_string(bytes.size()));
  }
  const char* p = bytes.data();
  if (const uint32_t magic = LoadLe32(p); magic != kFrameMagic) {
    return InvalidArgumentError("rpc frame: bad magic " + Hex32(magic));
  }
  // The checksum first: no field of a corrupted header is believed, not even its version.
  const uint32_t sent_crc = LoadLe32(p + kHeaderCrcOffset);
  if (const uint32_t crc = Crc32c(p, kHeaderCrcOffset); crc != sent_crc) {
    std::string why = "rpc frame: " + Crc32cMismatchText("header", sent_crc, crc);
    if (const uint16_t version = LoadLe16(p + 4); version != kFrameVersion) {
      why += ", or a peer speaking version " + std::to_string(version) + " (this build speaks " +
             std::to_string(kFrameVersion) + ")";
    }
    return InvalidArgumentError(why);
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
  h.payload_crc = LoadLe32(p + 24);
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

Status VerifyFramePayload(const FrameHeader& header, std::string_view payload) {
  const uint32_t crc = Crc32c(payload);
  if (crc == header.payload_crc) return Status::Ok();
  return InvalidArgumentError(
      "rpc frame: " + Crc32cMismatchText("payload", header.payload_crc, crc) + " (" +
      std::to_string(payload.size()) + " bytes)");
}

Result<std::string> EncodeFrame(FrameHeader header, std::string_view payload) {
  if (payload.size() > kMaxEncodablePayload) {
    return InvalidArgumentError("rpc payload of " + std::to_string(payload.size()) +
                                " bytes cannot be framed");
  }
  header.payload_len = static_cast<uint32_t>(payload.size());
  header.payload_crc = Crc32c(payload);
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
  WireWriter w(&out);
  w.PutU8(StatusCodeToWire(code));
  w.PutBytes(message);
  return out;
}

Status DecodeErrorPayload(std::string_view payload) {
  WireReader r(payload, "rpc error response");
  uint8_t raw = 0;
  if (!r.GetU8("status code", &raw).ok()) {
    return InternalError("peer sent an error response without a status code");
  }
  std::string message(r.TakeRest());
  const std::optional<StatusCode> code = StatusCodeFromWire(raw);
  if (!code.has_value() || *code == StatusCode::kOk) {
    return InternalError("peer sent an error with unknown status code " + std::to_string(raw) +
                         ": " + message);
  }
  return Status(*code, std::move(message));
}

std::string EncodeClosingNotice(const Status& why) {
  FrameHeader header;
  header.request_id = kNoticeRequestId;
  header.flags = kFlagResponse | kFlagError;
  // An error payload is at most 1 + kMaxErrorMessageBytes bytes: it always fits a frame.
  return EncodeFrame(header, EncodeErrorPayload(why)).value();
}

}  // namespace ferry::rpc
