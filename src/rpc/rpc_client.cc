#include "rpc/rpc_client.h"

#include <algorithm>

#include "common/peer_auth.h"
#include "rpc/connection_pool.h"
#include "rpc/frame.h"
#include "rpc/socket_io.h"

namespace ferry {
namespace {

std::string Describe(const HostPort& peer, uint16_t type) {
  return "rpc type " + std::to_string(type) + " to " + peer.ToString();
}

}  // namespace

RpcClient::RpcClient(const RpcClientOptions& options)
    : options_(options),
      pool_(std::make_unique<rpc::ConnectionPool>(options.max_idle_connections_per_peer,
                                                  options.idle_timeout)) {}

RpcClient::~RpcClient() = default;

void RpcClient::CloseIdleConnections() { pool_->Clear(); }

void RpcClient::CloseIdleConnections(const HostPort& peer) { pool_->Clear(peer.ToString()); }

void RpcClient::CloseExpiredConnections() { pool_->Prune(std::chrono::steady_clock::now()); }

size_t RpcClient::idle_connections() const { return pool_->idle_count(); }

Result<UniqueFd> RpcClient::Acquire(const HostPort& peer, const std::string& key,
                                    Deadline deadline) {
  const Deadline now = std::chrono::steady_clock::now();
  UniqueFd pooled = pool_->Take(key, now);
  if (pooled.valid()) return pooled;
  ASSIGN_OR_RETURN(UniqueFd fd,
                   rpc::ConnectTcp(peer, std::min(deadline, now + options_.connect_timeout)));
  if (options_.auth_secret.empty()) return fd;
  ASSIGN_OR_RETURN(auth::Handshake handshake,
                   auth::Handshake::Client(auth::Channel::kRpc, options_.auth_secret, key));
  Status authenticated = auth::RunHandshake(handshake, fd.get(), deadline);
  if (authenticated.code() == StatusCode::kTimeout) {
    return TimeoutError("authentication with rpc peer " + key + " did not finish in time");
  }
  RETURN_IF_ERROR(authenticated);
  return fd;
}

Result<std::string> RpcClient::Call(const HostPort& peer, uint16_t type, std::string_view payload,
                                    std::chrono::milliseconds timeout) {
  const std::string what = Describe(peer, type);
  if (timeout.count() <= 0) return InvalidArgumentError(what + ": timeout must be positive");
  if (payload.size() > options_.max_frame_bytes) {
    return InvalidArgumentError(what + ": payload of " + std::to_string(payload.size()) +
                                " bytes exceeds max_frame_bytes");
  }
  const Deadline deadline = std::chrono::steady_clock::now() + timeout;
  rpc::FrameHeader header;
  header.type = type;
  header.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
  ASSIGN_OR_RETURN(std::string frame, rpc::EncodeFrame(header, payload));

  const std::string key = peer.ToString();
  Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt > 0 && std::chrono::steady_clock::now() >= deadline) break;
    Result<UniqueFd> conn = Acquire(peer, key, deadline);
    if (!conn.ok()) {
      last = conn.status();  // nothing was sent
      if (last.code() == StatusCode::kPermissionDenied || last.code() == StatusCode::kTimeout) {
        break;  // another connection would meet the same refusal / the deadline has passed
      }
      continue;
    }
    Status sent = rpc::SendAll(conn->get(), frame, deadline);
    if (sent.ok()) {
      // The whole request is out: from here on nothing is retried.
      return AwaitResponse(std::move(conn).value(), key, type, header.request_id, deadline);
    }
    // Not completely written, so the server cannot have run it; the connection is dropped.
    if (sent.code() == StatusCode::kTimeout) {
      return TimeoutError(what + ": request not sent within " + std::to_string(timeout.count()) +
                          " ms");
    }
    last = UnavailableError(sent.message());
  }
  return last.WithContext(what);
}

Result<std::string> RpcClient::AwaitResponse(UniqueFd fd, const std::string& key, uint16_t type,
                                             uint64_t request_id, Deadline deadline) {
  const std::string what = "rpc type " + std::to_string(type) + " to " + key;
  auto io_error = [&](const Status& s) -> Status {
    if (s.code() == StatusCode::kTimeout) return TimeoutError(what + ": no response in time");
    return UnavailableError(what +
                            ": connection lost after the request was sent (it may have "
                            "been processed): " +
                            s.message());
  };
  auto bad_frame = [&](const std::string& why) -> Status {
    bad_frames_.fetch_add(1, std::memory_order_relaxed);
    return UnavailableError(what + ": bad response frame: " + why);
  };

  char header_bytes[rpc::kFrameHeaderSize];
  if (Status s = rpc::RecvExact(fd.get(), header_bytes, sizeof(header_bytes), deadline); !s.ok()) {
    return io_error(s);
  }
  // A server that requires authentication (or found ours wrong) answers with a refusal here.
  if (Status refused = auth::RefusalIn(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(header_bytes),  // NOLINT
                                   sizeof(header_bytes)),
          key);
      !refused.ok()) {
    return refused.WithContext(what);
  }
  Result<rpc::FrameHeader> header = rpc::DecodeFrameHeader(
      std::string_view(header_bytes, sizeof(header_bytes)), options_.max_frame_bytes);
  if (!header.ok()) return bad_frame(header.status().message());
  if (!header->is_response()) return bad_frame("a request where a response was expected");
  // A closing notice instead of the response: the server found our request frame bad (for
  // instance corrupted in transit) and closes; the notice says why.
  const bool notice = header->is_notice();
  if (!notice && (header->request_id != request_id || header->type != type)) {
    return bad_frame("response to request " + std::to_string(header->request_id) + " type " +
                     std::to_string(header->type) + ", expected " + std::to_string(request_id));
  }
  // The length is within max_frame_bytes (checked above), but memory still follows the bytes
  // that arrive, not the length the peer claims: a peer that announces a large frame and stalls
  // makes this hold little.
  constexpr size_t kFirstChunk = 64 * 1024;
  std::string payload;
  while (payload.size() < header->payload_len) {
    const size_t have = payload.size();
    const size_t want = std::min<size_t>(header->payload_len, std::max(kFirstChunk, 2 * have));
    payload.resize(want);
    if (Status s = rpc::RecvExact(fd.get(), payload.data() + have, want - have, deadline);
        !s.ok()) {
      return io_error(s);
    }
  }
  // Corrupted bytes are never returned; the connection is dropped with them.
  if (Status intact = rpc::VerifyFramePayload(*header, payload); !intact.ok()) {
    return bad_frame(intact.message());
  }
  if (notice) {
    return UnavailableError(what + ": " + rpc::DecodeErrorPayload(payload).message() +
                            " (the request was not run)");
  }
  pool_->Give(key, std::move(fd), std::chrono::steady_clock::now());
  if (header->is_error()) return rpc::DecodeErrorPayload(payload);
  return payload;
}

}  // namespace ferry
