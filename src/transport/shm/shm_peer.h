// ShmPeer: what an shm initiator keeps per peer incarnation: the peer's address, one grant
// connection per worker, and the peer's shared buffers mapped into this process.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "transport/samehost/grant_channel.h"
#include "transport/shm/shm_encoding.h"

namespace ferry::shm {

// A peer's shared buffer mapped MAP_SHARED into this process; unmapped on destruction.
// Thread contract: immutable after construction.
class RemoteMapping {
 public:
  RemoteMapping(uint8_t* base, size_t length) : base_(base), length_(length) {}
  ~RemoteMapping();
  RemoteMapping(const RemoteMapping&) = delete;
  RemoteMapping& operator=(const RemoteMapping&) = delete;
  uint8_t* base() const { return base_; }
  size_t length() const { return length_; }

 private:
  uint8_t* const base_;
  const size_t length_;
};

// Thread contract: Connection/DropConnection(worker) are called only by that worker's thread;
// the mapping cache is thread-safe.
class ShmPeer {
 public:
  // `name` names the peer in messages ("segment 'b' (pid 42)").
  ShmPeer(PeerAddress address, std::string name, size_t workers, std::chrono::milliseconds timeout);

  const PeerAddress& address() const { return address_; }
  const std::string& name() const { return name_; }

  // Worker `worker`'s grant connection, opened when missing or broken; Unavailable / Timeout
  // (naming the peer) when it cannot be opened. Borrowed until DropConnection(worker).
  Result<samehost::GrantConnection*> Connection(size_t worker);
  void DropConnection(size_t worker);

  // The mapping of shared buffer `buffer_id` of the peer's `incarnation`, at least
  // `min_length` bytes, fetched over `conn` (and cached) when missing. `*fetched` says whether
  // this call fetched it.
  Result<std::shared_ptr<RemoteMapping>> Mapping(uint64_t incarnation, uint64_t buffer_id,
                                                 uint64_t min_length,
                                                 samehost::GrantConnection* conn, bool* fetched);
  // Drops a cached mapping (the target said Stale/NotFound for it); true if one was cached.
  bool DropMapping(uint64_t incarnation, uint64_t buffer_id);

 private:
  Result<std::shared_ptr<RemoteMapping>> FetchAndMap(uint64_t buffer_id, uint64_t min_length,
                                                     samehost::GrantConnection* conn);

  const PeerAddress address_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  // Slot i belongs to worker i's thread alone.
  std::vector<std::unique_ptr<samehost::GrantConnection>> connections_;
  Mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<RemoteMapping>> mappings_ GUARDED_BY(mu_);
};

}  // namespace ferry::shm
