// TcpPeerLink: the tcp transport's per-peer state, a pool of persistent InitiatorConnections to
// one peer's data listener. Connections open lazily, on the first slice given to their slot; a
// closed one (broken, timed out) is replaced on next use. The slices of one Submit go in runs
// of consecutive slices, a run ending once it holds stripe_size bytes, each run to the
// least-loaded slot (ties broken round-robin): small slices travel together, coalesced into few
// sendmsg calls, while a large request spreads over up to connections_per_peer connections. A slice
// is never cut: each goes whole to one connection. The link's budget bounds the slices it holds at
// once.
//
// Thread contract: thread-safe; Submit may be called from many threads at once. Dropping the
// link releases its connections: slices not yet on the wire complete with Canceled, requests on
// the wire finish (answer, deadline or io_timeout), then each connection closes and frees its
// socket; nothing of the link stays behind once they did.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "transport/tcp/initiator_connection.h"
#include "transport/tcp/tcp_socket.h"
#include "transport/transport.h"

namespace ferry::tcp {

struct TcpRuntime;

class TcpPeerLink final : public PeerLink {
 public:
  // `peer_name` names the peer in failure messages ("segment 'a' at 10.0.0.1:4242").
  TcpPeerLink(std::shared_ptr<TcpRuntime> runtime, SocketAddress address, std::string peer_name);
  ~TcpPeerLink() override;
  TcpPeerLink(const TcpPeerLink&) = delete;
  TcpPeerLink& operator=(const TcpPeerLink&) = delete;

  // See TcpTransport::Submit for the contract.
  Status Submit(std::span<Slice* const> slices);

  const TcpRuntime* runtime() const { return runtime_.get(); }

 private:
  // Submit for slices that all move at least one byte.
  Status SubmitMoving(std::span<Slice* const> slices);
  // The open connection of `slot`, made (and started) when missing or closed; nullptr when the
  // runtime is stopping.
  std::shared_ptr<InitiatorConnection> ConnectionLocked(size_t slot) REQUIRES(mu_);
  // Chooses a slot for each slice, in runs of consecutive slices (a run ends once it holds
  // stripe_size bytes), each run to the least-loaded slot, ties round-robin.
  std::vector<std::vector<Slice*>> SpreadLocked(std::span<Slice* const> slices) REQUIRES(mu_);

  const std::shared_ptr<TcpRuntime> runtime_;
  const SocketAddress address_;
  const std::string peer_name_;
  const std::shared_ptr<LinkBudget> budget_;

  Mutex mu_;
  std::vector<std::shared_ptr<InitiatorConnection>> slots_ GUARDED_BY(mu_);
  size_t next_slot_ GUARDED_BY(mu_) = 0;
};

}  // namespace ferry::tcp
