// ShmCopier: how shm moves the bytes of granted slices for one peer (samehost::PeerCopier):
//  - "mapped" slices (inside a peer's AllocateShared buffer) with memcpy through this process's
//    mapping of the buffer, fetched once over the grant channel (SCM_RIGHTS) and cached per
//    (peer incarnation, buffer id);
//  - "cma" slices, and mapped ones whose buffer cannot be mapped, with process_vm_writev /
//    process_vm_readv into or from the peer's pid.
// The cache lives as long as the copier, that is as long as the link (samehost::CopyEngine
// destroys it with the link's state), so the mappings of a closed or restarted peer go with its
// link.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/mutex.h"
#include "transport/samehost/copy_engine.h"
#include "transport/shm/shm_encoding.h"

namespace ferry::shm {

// The most slices one grant round trip carries.
constexpr size_t kMaxBatch = 1024;

// Counters shared by the copiers of one transport (see ShmTransportStats).
struct ShmCounters {
  std::atomic<uint64_t> cma_slices{0};
  std::atomic<uint64_t> mapped_slices{0};
  std::atomic<uint64_t> fd_fetches{0};
  std::atomic<uint64_t> mappings_dropped{0};
  std::atomic<uint64_t> mappings_alive{0};  // RemoteMappings not yet unmapped
};

// A peer's shared buffer mapped MAP_SHARED into this process; unmapped on destruction.
// Thread contract: immutable after construction.
class RemoteMapping {
 public:
  RemoteMapping(uint8_t* base, size_t length, std::shared_ptr<ShmCounters> counters);
  ~RemoteMapping();
  RemoteMapping(const RemoteMapping&) = delete;
  RemoteMapping& operator=(const RemoteMapping&) = delete;
  uint8_t* base() const { return base_; }
  size_t length() const { return length_; }

 private:
  uint8_t* const base_;
  const size_t length_;
  const std::shared_ptr<ShmCounters> counters_;
};

// Thread contract: thread-safe (the engine's workers call it concurrently).
class ShmCopier final : public samehost::PeerCopier {
 public:
  // `name` names the peer in messages ("segment 'b' (pid 42)").
  ShmCopier(PeerAddress address, std::string name, std::shared_ptr<ShmCounters> counters);

  // The key decodes, and a mapped slice lies inside its buffer.
  Status Check(const Slice& slice) override;
  // The grant socket is answered by the pid the peer publishes, the one process_vm_* copies
  // into: PermissionDenied naming both pids otherwise (another process listening at the path
  // would grant accesses to memory it does not own).
  Status CheckPeer(const samehost::GrantConnection& connection) override;
  // Maps the buffers of granted mapped slices that are not mapped yet (FetchFd over
  // `connection`); a buffer that cannot be mapped is copied with process_vm_* instead.
  void PrepareCopies(std::span<Slice* const> granted, samehost::GrantConnection& connection,
                     samehost::Deadline deadline) override;
  void Copy(std::span<Slice* const> granted, std::span<Status> results) override;
  // Drops the cached mapping of a mapped slice the target called Stale or NotFound.
  void Refused(const Slice& slice, const Status& answer) override;

 private:
  using MappingKey = std::pair<uint64_t, uint64_t>;  // (peer incarnation, buffer id)

  std::shared_ptr<RemoteMapping> Find(const MappingKey& key, uint64_t min_length);
  Result<std::shared_ptr<RemoteMapping>> FetchAndMap(uint64_t buffer_id, uint64_t min_length,
                                                     samehost::GrantConnection& connection,
                                                     samehost::Deadline deadline);

  const PeerAddress address_;
  const std::string name_;
  const std::shared_ptr<ShmCounters> counters_;
  Mutex mu_;
  std::map<MappingKey, std::shared_ptr<RemoteMapping>> mappings_ GUARDED_BY(mu_);
};

}  // namespace ferry::shm
