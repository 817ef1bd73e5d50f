// ServerLoop: the RPC server's I/O thread. One poll() loop owns the listening socket and every
// accepted connection (ServerConnection), reads request frames without blocking, hands complete
// requests to a dispatch function, and writes the responses posted back to it. A stalled or
// slow peer only ever delays its own connection.
//
// Thread contract: thread-safe. Owns one thread between Start() and Stop() (both idempotent; a
// stopped loop does not restart). The dispatch function runs on that thread and must not block.
// PostResponse may be called from any thread, also after Stop() (the response is dropped).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/peer_auth.h"
#include "ferry/status.h"
#include "rpc/server_connection.h"

namespace ferry::rpc {

class ServerLoop {
 public:
  // Takes a complete request from `peer`. Returns false when it cannot take it (the server is
  // stopping); the connection is then closed. Must not block.
  using DispatchFn = std::function<bool(const PeerInfo& peer, InboundRequest request)>;

  struct Options {
    ConnectionLimits limits;
    size_t max_connections = 256;  // connections beyond this are accepted and closed at once
    std::string auth_secret;       // see RpcServerOptions::auth_secret (validated)
  };

  // Takes ownership of `listener`, a listening non-blocking socket.
  ServerLoop(UniqueFd listener, const Options& options, DispatchFn dispatch);
  ~ServerLoop() { Stop(); }
  ServerLoop(const ServerLoop&) = delete;
  ServerLoop& operator=(const ServerLoop&) = delete;

  // Starts the loop thread. Internal when the OS refuses a pipe or thread; Busy after Stop().
  Status Start();
  // Closes the listener and every connection and joins the thread. Returns within one loop
  // iteration (the loop never blocks on a peer).
  void Stop();

  // Sends `frame` on the connection `connection_id` (which must be waiting for its response);
  // dropped when that connection is gone.
  void PostResponse(uint64_t connection_id, std::string frame);

  uint64_t bad_frames() const { return bad_frames_.load(std::memory_order_relaxed); }
  uint64_t connections_accepted() const { return accepted_.load(std::memory_order_relaxed); }
  uint64_t connections_rejected() const { return rejected_.load(std::memory_order_relaxed); }
  size_t open_connections() const { return open_.load(std::memory_order_relaxed); }
  uint64_t auth_refusals() const { return refusals_.count(); }

 private:
  using Outcome = ServerConnection::Outcome;

  void Run();
  void Wake();
  void DrainWakePipe();
  void TakeResponses(Deadline now);
  void AcceptReady(Deadline now);
  void ServeReady(uint64_t id, short revents, Deadline now);
  // Acts on what a connection's I/O produced; may close it.
  void Handle(uint64_t id, Outcome outcome, InboundRequest* request, const std::string& error);
  void CloseExpired(Deadline now);
  void Close(uint64_t id);

  const Options options_;
  const DispatchFn dispatch_;
  UniqueFd listener_;
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  std::atomic<bool> stop_{false};

  // Loop thread only.
  std::map<uint64_t, std::unique_ptr<ServerConnection>> connections_;
  uint64_t next_connection_id_ = 1;
  Deadline accept_paused_until_{};

  Mutex mu_;
  std::vector<std::pair<uint64_t, std::string>> responses_ GUARDED_BY(mu_);
  CondVar stop_cv_;  // with mu_: Stop() wakes a loop backing off after a poll failure

  std::atomic<uint64_t> bad_frames_{0};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<size_t> open_{0};  // connections_.size(), readable from any thread
  auth::RefusalLog refusals_;    // connections that failed authentication

  Mutex lifecycle_mu_;
  bool started_ GUARDED_BY(lifecycle_mu_) = false;
  bool stopped_ GUARDED_BY(lifecycle_mu_) = false;
  std::thread thread_;  // started/joined under lifecycle_mu_
};

}  // namespace ferry::rpc
