// RpcServer: the engine's RPC service (MISSION.md 6) — handshake / segment fetch, notify,
// probe and transport exchange requests from peers, framed as in rpc/frame.h.
//
// Model: one I/O thread polls the listener and every connection; complete requests run on a
// pool of `worker_threads` handler threads. A connection carries any number of requests, one
// at a time, answered in order; a stalled or slow peer delays only its own connection. A frame
// that fails validation closes its connection and is counted in bad_frames(); it never reaches
// a handler. A request for a type without a handler is answered with InvalidArgument and the
// connection stays open.
//
// Thread contract: thread-safe. RegisterHandler before Start(); Start() and Stop() are
// idempotent; a stopped server does not restart. Handlers run concurrently on the worker
// threads (two requests on one connection never overlap) and must be thread-safe, must not
// throw (an escaping exception becomes an Internal error response) and should return quickly:
// Stop() waits for running handlers to return (so a handler must never call Stop() itself).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "common/net_address.h"
#include "ferry/status.h"
#include "rpc/peer_info.h"

namespace ferry {

namespace rpc {
class ServerLoop;
class WorkerPool;
struct InboundRequest;
}  // namespace rpc

struct RpcServerOptions {
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;            // 0: the kernel picks a free port (see port())
  uint16_t port_range_end = 0;  // when set: the first free port in [port, port_range_end]
  // With port 0: the first free port of this range (the engine's port_range); unbounded: the
  // kernel picks. An explicit port (and port_range_end) wins over it.
  PortRange fallback_ports;
  size_t max_frame_bytes = size_t{64} << 20;      // larger request payloads close the connection
  std::chrono::milliseconds io_timeout{10000};    // a started frame or a response must progress
  std::chrono::milliseconds idle_timeout{60000};  // an idle connection is closed after this
  size_t max_connections = 256;  // more are accepted and closed at once (the peer sees EOF)
  size_t worker_threads = 4;     // handler threads
  // Cluster secret (common/peer_auth.h): when set, every connection must pass the mutual
  // HMAC challenge before its first request, within io_timeout; a peer that fails it (or sends
  // none) is refused, reads and runs nothing, and is logged once per address. Empty: no
  // authentication, but a peer that asks for it is refused too. Empty or >= 16 bytes.
  std::string auth_secret;
};

class RpcServer {
 public:
  // Returns the response payload (sent as a response frame) or an error (sent as an error
  // response carrying the Status's code and message). `payload` and `peer` are borrowed for
  // the call only.
  using Handler =
      std::function<Result<std::string>(std::string_view payload, const PeerInfo& peer)>;

  // Validates `options` (InvalidArgument) and binds the listening socket, so port() is known
  // before Start(); peers that connect before Start() wait in the backlog. Unavailable when no
  // port is free, PermissionDenied for a privileged one.
  static Result<std::unique_ptr<RpcServer>> Create(const RpcServerOptions& options);
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Serves `type` with `handler`. Busy once Start() ran; AlreadyExists for a type that has one;
  // InvalidArgument for an empty handler.
  Status RegisterHandler(uint16_t type, Handler handler);

  // Starts serving. Busy after Stop(); Internal when threads cannot be started.
  Status Start();
  // Closes the listener and every connection (peers waiting for an answer see the connection
  // close), drops requests not yet started, waits for running handlers to return and joins
  // every thread.
  void Stop();

  // The bound port.
  uint16_t port() const { return port_; }

  // Frames that failed validation (each closed its connection).
  uint64_t bad_frames() const;
  // Connections accepted and served; connections refused for max_connections are not counted.
  uint64_t connections_accepted() const;
  // Connections closed at once because max_connections were open.
  uint64_t connections_rejected() const;
  // Connections open now.
  size_t open_connections() const;
  // Connections refused by the authentication (auth_secret), each closed before any request.
  uint64_t auth_refusals() const;

 private:
  RpcServer(const RpcServerOptions& options, uint16_t port);

  // Loop thread: queues a request for the workers; false when stopping.
  bool Dispatch(const PeerInfo& peer, rpc::InboundRequest request);
  // Worker thread: runs the handler and posts the encoded response.
  void Serve(const PeerInfo& peer, const rpc::InboundRequest& request);
  Result<std::string> CallHandler(uint16_t type, std::string_view payload, const PeerInfo& peer);

  const RpcServerOptions options_;
  const uint16_t port_;
  // Written only before Start(), read by workers after it (the thread start orders them).
  std::map<uint16_t, Handler> handlers_;
  std::unique_ptr<rpc::ServerLoop> loop_;
  std::unique_ptr<rpc::WorkerPool> pool_;  // destroyed before loop_, which its jobs use

  Mutex mu_;
  bool started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
};

}  // namespace ferry
