// RpcClient: calls peers' RpcServers (rpc/rpc_server.h) over a small pool of persistent TCP
// connections per peer.
//
// Errors of Call():
//  - Unavailable: the peer could not be asked (unresolvable, refused, unreachable, connect
//    timed out), or the connection broke after the request was sent (it may have been run);
//    also when the peer answers with a frame that fails validation (a checksum mismatch:
//    corrupted in transit), or with a closing notice because our request frame failed its
//    validation (then it was not run; the message says why, e.g. a checksum mismatch).
//  - Timeout: the request was sent and no answer arrived before the call's deadline.
//  - InvalidArgument: a bad timeout or a payload above max_frame_bytes (nothing is sent).
//  - PermissionDenied: authentication failed (common/peer_auth.h): the peer holds another
//    secret, requires one this client lacks, or has none while this client requires it. Nothing
//    was sent; never retried.
//  - any other code: the peer's handler returned that Status (same code and message).
//
// Retry rule: a call is retried at most once, on a fresh connection, and only when the request
// frame was never completely written (connect failed, or the send failed part-way), because a
// server runs a request only after reading its whole frame. Once the whole frame is written no
// failure is retried — the request may have been processed — and the error goes to the caller.
// Pooled connections are checked before reuse (see ConnectionPool), so a peer that closed an
// idle connection or restarted costs no retry.
//
// A connection that fails, times out, or returns anything unexpected is closed, never pooled:
// a late response can never be read as the answer to a later call. Responses are also matched
// by request id and type.
//
// Thread contract: thread-safe; Call() may be used from many threads at once. Destroying the
// client while calls are in flight is a bug.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/host_port.h"
#include "ferry/status.h"

namespace ferry {

class UniqueFd;
namespace rpc {
class ConnectionPool;
}  // namespace rpc

struct RpcClientOptions {
  std::chrono::milliseconds connect_timeout{3000};  // also bounded by each call's deadline
  size_t max_idle_connections_per_peer = 4;
  // Pooled connections idle longer than this are closed instead of reused; keep it below the
  // servers' idle_timeout (60 s by default).
  std::chrono::milliseconds idle_timeout{30000};
  size_t max_frame_bytes = size_t{64} << 20;  // for requests and responses
  // Cluster secret (see RpcServerOptions::auth_secret): when set, each new connection proves it
  // and checks the server's proof before its first request, within the call's deadline. Empty:
  // no authentication (a server that requires it is reported as PermissionDenied).
  std::string auth_secret;
};

class RpcClient {
 public:
  explicit RpcClient(const RpcClientOptions& options = {});
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Sends `payload` as a request of `type` to `peer` (a name or IP literal; resolved with
  // getaddrinfo) and waits for its response payload, all within `timeout`. See the errors and
  // the retry rule above. Name resolution is the system resolver's and is bounded by it, not by
  // `timeout`.
  Result<std::string> Call(const HostPort& peer, uint16_t type, std::string_view payload,
                           std::chrono::milliseconds timeout);

  // Closes every idle pooled connection.
  void CloseIdleConnections();
  // Closes the idle pooled connections to `peer` (a segment closed, a peer gone).
  void CloseIdleConnections(const HostPort& peer);
  // Closes pooled connections idle longer than options.idle_timeout (they would not be reused).
  void CloseExpiredConnections();
  // Idle pooled connections, all peers together.
  size_t idle_connections() const;
  // Responses that failed validation (each closed its connection).
  uint64_t bad_frames() const { return bad_frames_.load(std::memory_order_relaxed); }

 private:
  using Deadline = std::chrono::steady_clock::time_point;

  // A pooled or new (authenticated, with a secret) connection to `peer`. Unavailable when
  // connecting fails; PermissionDenied when the authentication does.
  Result<UniqueFd> Acquire(const HostPort& peer, const std::string& key, Deadline deadline);
  // Reads the response to `request_id` on `fd`, pooling `fd` again after a clean exchange.
  Result<std::string> AwaitResponse(UniqueFd fd, const std::string& key, uint16_t type,
                                    uint64_t request_id, Deadline deadline);

  const RpcClientOptions options_;
  const std::unique_ptr<rpc::ConnectionPool> pool_;
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<uint64_t> bad_frames_{0};
};

}  // namespace ferry
