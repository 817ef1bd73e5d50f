// The messages of ferry's RPC service (MISSION.md 6): handshake / segment fetch, notify,
// liveness probe and transport set-up exchange. Each request and response has a Pack/Unpack
// pair. Unpacking is strict: truncated input, trailing bytes or an empty required field is
// InvalidArgument, and the output is produced only on success. Every multi-byte field is
// little-endian; strings are a u32 length followed by the bytes.
//
// Thread contract: pure functions and value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry {

// Frame `type` values. They are wire constants: never renumber or reuse one.
enum class RpcType : uint16_t {
  kGetSegmentDesc = 1,  // metadata key -> value bytes (serves P2PHANDSHAKE)
  kNotify = 2,          // NotifyRequest -> empty
  kProbe = 3,           // empty -> ProbeResponse
  kExchange = 4,        // ExchangeRequest -> transport-defined bytes
};
constexpr uint16_t ToWire(RpcType type) { return static_cast<uint16_t>(type); }

// --- kGetSegmentDesc -------------------------------------------------------------------------
// Request: the key's bytes, unframed (the whole payload). Response: the value's bytes; a peer
// without the key answers NotFound.
inline constexpr size_t kMaxKeyBytes = 4096;
std::string PackGetSegmentDescRequest(std::string_view key);
// The key; InvalidArgument when empty or longer than kMaxKeyBytes.
Result<std::string> UnpackGetSegmentDescRequest(std::string_view payload);

// --- kNotify ---------------------------------------------------------------------------------
// A notification for the engine's notify queue (read by the user with getNotifies).
struct NotifyRequest {
  std::string segment_name;  // the sender's segment; non-empty
  std::string notify;        // opaque user bytes; may be empty
  friend bool operator==(const NotifyRequest&, const NotifyRequest&) = default;
};
std::string Pack(const NotifyRequest& request);
Result<NotifyRequest> UnpackNotifyRequest(std::string_view payload);
// The response is empty: UnpackEmpty(payload, "notify response").

// --- kProbe ----------------------------------------------------------------------------------
// Request: empty (UnpackEmpty(payload, "probe request")). Response: who answers.
struct ProbeResponse {
  uint64_t incarnation = 0;  // the engine's incarnation id (new at every start)
  std::string name;          // the engine's segment name
  friend bool operator==(const ProbeResponse&, const ProbeResponse&) = default;
};
std::string Pack(const ProbeResponse& response);
Result<ProbeResponse> UnpackProbeResponse(std::string_view payload);

// --- kExchange -------------------------------------------------------------------------------
// Bytes for one transport's own connection set-up (e.g. RDMA QP numbers); the response is that
// transport's reply bytes, unframed.
struct ExchangeRequest {
  std::string transport;  // the transport's name ("rdma"); non-empty
  std::string bytes;      // the transport's request; may be empty
  friend bool operator==(const ExchangeRequest&, const ExchangeRequest&) = default;
};
std::string Pack(const ExchangeRequest& request);
Result<ExchangeRequest> UnpackExchangeRequest(std::string_view payload);

// OK when `payload` is empty; otherwise InvalidArgument naming `what`.
Status UnpackEmpty(std::string_view payload, std::string_view what);

}  // namespace ferry
