#include "rpc/messages.h"

#include "common/wire_codec.h"

namespace ferry {

namespace {

Status RequireNonEmpty(std::string_view value, std::string_view what, std::string_view field) {
  if (!value.empty()) return Status::Ok();
  return InvalidArgumentError(std::string(what) + ": empty " + std::string(field));
}

}  // namespace

std::string PackGetSegmentDescRequest(std::string_view key) { return std::string(key); }

Result<std::string> UnpackGetSegmentDescRequest(std::string_view payload) {
  RETURN_IF_ERROR(RequireNonEmpty(payload, "get-segment-desc request", "key"));
  if (payload.size() > kMaxKeyBytes) {
    return InvalidArgumentError("get-segment-desc request: key of " +
                                std::to_string(payload.size()) + " bytes exceeds " +
                                std::to_string(kMaxKeyBytes));
  }
  return std::string(payload);
}

std::string Pack(const NotifyRequest& request) {
  std::string out;
  WireWriter w(&out);
  w.PutString(request.segment_name);
  w.PutString(request.notify);
  return out;
}

Result<NotifyRequest> UnpackNotifyRequest(std::string_view payload) {
  constexpr std::string_view kWhat = "notify request";
  WireReader r(payload, kWhat);
  NotifyRequest out;
  RETURN_IF_ERROR(r.GetString("segment_name", &out.segment_name));
  RETURN_IF_ERROR(r.GetString("notify", &out.notify));
  RETURN_IF_ERROR(r.Finish());
  RETURN_IF_ERROR(RequireNonEmpty(out.segment_name, kWhat, "segment_name"));
  return out;
}

std::string Pack(const ProbeResponse& response) {
  std::string out;
  WireWriter w(&out);
  w.PutU64(response.incarnation);
  w.PutString(response.name);
  return out;
}

Result<ProbeResponse> UnpackProbeResponse(std::string_view payload) {
  WireReader r(payload, "probe response");
  ProbeResponse out;
  RETURN_IF_ERROR(r.GetU64("incarnation", &out.incarnation));
  RETURN_IF_ERROR(r.GetString("name", &out.name));
  RETURN_IF_ERROR(r.Finish());
  return out;
}

std::string Pack(const ExchangeRequest& request) {
  std::string out;
  WireWriter w(&out);
  w.PutString(request.transport);
  w.PutString(request.bytes);
  return out;
}

Result<ExchangeRequest> UnpackExchangeRequest(std::string_view payload) {
  constexpr std::string_view kWhat = "exchange request";
  WireReader r(payload, kWhat);
  ExchangeRequest out;
  RETURN_IF_ERROR(r.GetString("transport", &out.transport));
  RETURN_IF_ERROR(r.GetString("bytes", &out.bytes));
  RETURN_IF_ERROR(r.Finish());
  RETURN_IF_ERROR(RequireNonEmpty(out.transport, kWhat, "transport"));
  return out;
}

Status UnpackEmpty(std::string_view payload, std::string_view what) {
  if (payload.empty()) return Status::Ok();
  return InvalidArgumentError(std::string(what) + ": expected an empty payload, got " +
                              std::to_string(payload.size()) + " bytes");
}

}  // namespace ferry
