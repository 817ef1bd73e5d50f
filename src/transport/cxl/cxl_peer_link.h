// CxlPeerLink: the cxl transport's per-peer state: the peer's endpoint (its window identity,
// where it maps the window, its grant socket) and a pool of idle grant connections to it.
// Connections open on first use; a broken one is dropped, never returned to the pool.
//
// Thread contract: thread-safe. Must be owned by a shared_ptr (Connect makes it so): a queued
// batch holds the link alive until it has moved.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "transport/cxl/cxl_wire.h"
#include "transport/samehost/grant_channel.h"
#include "transport/transport.h"

namespace ferry::cxl {

class CxlPeerLink final : public PeerLink, public std::enable_shared_from_this<CxlPeerLink> {
 public:
  // Idle connections kept per link; more are closed when returned.
  static constexpr size_t kMaxIdleConnections = 16;

  // `owner_id` is the CxlRuntime::id of the transport that made the link; `peer_name` names the
  // peer in failure messages ("segment 'a'").
  CxlPeerLink(uint64_t owner_id, Endpoint peer, std::string peer_name)
      : owner_id_(owner_id), peer_(std::move(peer)), peer_name_(std::move(peer_name)) {}

  uint64_t owner_id() const { return owner_id_; }
  const Endpoint& peer() const { return peer_; }
  const std::string& peer_name() const { return peer_name_; }

  // An idle connection to the peer's grant server, or nullptr when there is none.
  std::unique_ptr<samehost::GrantConnection> TakeIdleConnection();
  // A new connection to the peer's grant server (bounded by `timeout`). Unavailable / Timeout
  // when it cannot be reached.
  Result<std::unique_ptr<samehost::GrantConnection>> OpenConnection(
      std::chrono::milliseconds timeout);
  // Gives a connection back for reuse; a broken one is closed instead.
  void ReturnConnection(std::unique_ptr<samehost::GrantConnection> connection);

 private:
  const uint64_t owner_id_;
  const Endpoint peer_;
  const std::string peer_name_;
  Mutex mu_;
  std::vector<std::unique_ptr<samehost::GrantConnection>> idle_ GUARDED_BY(mu_);
};

}  // namespace ferry::cxl
