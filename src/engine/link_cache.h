// LinkCache: the engine's per-peer transport links (Transport::Connect results), keyed by
// (transport, peer segment) and bound to the peer incarnation they were made for.
//
// A link lives while the cache or a task holds it: dropping it from the cache (closeSegment, a
// restarted peer, a failure, idleness) releases the connections, grant channels and mappings
// behind it once the last task that uses it lets go.
//
// Thread contract: thread-safe. Connect runs without the cache's lock held.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/mutex.h"
#include "core/segment_desc.h"
#include "transport/transport.h"

namespace ferry::engine {

class LinkCache {
 public:
  // `clock` is borrowed for the cache's life.
  explicit LinkCache(Clock* clock) : clock_(clock) {}

  // The cached link of `transport` to `peer`'s incarnation, or a new one from Connect. A link
  // made for another incarnation of the peer is replaced.
  Result<std::shared_ptr<PeerLink>> Get(Transport* transport, const SegmentDesc& peer);
  // The cached link only, never connecting: NotFound when Get would have to connect.
  Result<std::shared_ptr<PeerLink>> Find(Transport* transport, const SegmentDesc& peer);
  // Drops one link, but only the one made for `incarnation` (0: whichever is cached).
  void Drop(std::string_view transport, std::string_view peer, uint64_t incarnation = 0);
  // Drops every link to `peer` (all transports).
  void DropPeer(std::string_view peer);
  // Drops the links to `peer` made for an incarnation other than `incarnation`.
  void DropOtherIncarnations(std::string_view peer, uint64_t incarnation);
  // Drops the links not used (Get) for `idle` and held by nobody else (no task in flight).
  // Returns how many went.
  size_t DropIdle(std::chrono::milliseconds idle);
  void Clear();

  size_t size() const;

 private:
  struct Entry {
    uint64_t incarnation = 0;
    std::shared_ptr<PeerLink> link;
    Clock::TimePoint last_used{};
  };
  // Keyed by peer first, so that a peer's links are one range.
  using Key = std::pair<std::string, std::string>;  // (peer, transport)

  Clock* const clock_;
  mutable Mutex mu_;
  std::map<Key, Entry, std::less<>> links_ GUARDED_BY(mu_);
};

}  // namespace ferry::engine
