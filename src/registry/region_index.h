// RegionIndex: the registry's sorted, flat index of regions. Internal to src/registry.
//
// Lookups are a binary search over a contiguous array of start addresses, which keeps Pin fast
// at 100,000 regions (a node-based map costs a cache miss per level). Inserting or erasing one
// region moves the tail of the arrays; the *Many forms merge or compact in one pass, so batches
// stay linear.
//
// Thread contract: not thread-safe; LocalRegistry guards it with its shared mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer_desc.h"
#include "ferry/status.h"
#include "ferry/types.h"

namespace ferry {

// One transport's claim on a region.
struct TransportBinding {
  std::string transport;  // "tcp", "rdma", ...; non-empty
  std::string key;        // opaque bytes published as BufferDesc::keys[transport]
  // Runs at unregister, after pins drained, without registry locks held. May be empty.
  // An error is reported by Unregister, but the binding is removed regardless (no access can
  // reach the region any more).
  std::function<Status()> on_unregister;
};

struct RegionSpec {
  uint64_t addr = 0;
  uint64_t length = 0;
  Location location;  // resolved: Kind::kDetect is rejected
  bool remote_accessible = true;
  // Set when the region is a file window (registerLocalFile): its addresses name file bytes and
  // are never dereferenced. Published as BufferDesc::file.
  std::optional<FileWindow> file;
  TransportBinding binding;
};

namespace registry_internal {

struct Region;

// A revocable pin's registration (LocalRegistry::PinRevocable): told once when its region
// starts closing.
struct Revoker {
  Region* region = nullptr;
  std::function<void()> on_revoke;
  bool revoked = false;  // on_revoke has run
};

// A registered region. Address, length, location, remote_accessible and generation never
// change after creation; bindings change only under the registry's exclusive lock while the
// region is not being unregistered.
struct Region {
  // state: bit 63 = closing, bits 0..62 = pins held. Pins are taken under the registry's
  // shared lock and closing is set under its exclusive lock, so a pin never slips past a close.
  static constexpr uint64_t kClosing = uint64_t{1} << 63;
  static constexpr uint64_t kPinMask = kClosing - 1;

  uint64_t addr = 0;
  uint64_t length = 0;
  Location location;
  bool remote_accessible = true;
  uint64_t generation = 0;
  std::optional<FileWindow> file;  // RegionSpec::file
  std::vector<TransportBinding> bindings;
  bool unregistering = false;  // an Unregister call is between its start and its end
  // Revocable pins held on this region; guarded by the registry's revoke mutex.
  std::vector<Revoker*> revokers;
  std::atomic<uint64_t> state{0};

  uint64_t end() const { return addr + length; }
  bool closing() const { return (state.load(std::memory_order_acquire) & kClosing) != 0; }
  uint64_t pins() const { return state.load(std::memory_order_acquire) & kPinMask; }
  const TransportBinding* FindBinding(std::string_view transport) const {
    for (const TransportBinding& b : bindings) {
      if (b.transport == transport) return &b;
    }
    return nullptr;
  }
};

class RegionIndex {
 public:
  size_t size() const { return starts_.size(); }
  Region* at(size_t i) const { return regions_[i].get(); }

  // Index of the first region starting at or after addr (size() if none).
  size_t LowerBound(uint64_t addr) const;
  // The last region starting at or before addr, or nullptr. It may end before addr.
  Region* Floor(uint64_t addr) const;
  // The region containing addr, or nullptr.
  Region* Containing(uint64_t addr) const {
    Region* r = Floor(addr);
    return r != nullptr && r->end() > addr ? r : nullptr;
  }
  // The region starting exactly at addr, or nullptr.
  Region* Find(uint64_t addr) const;

  // Precondition for both: no overlap with existing regions (the registry checked).
  void Insert(std::unique_ptr<Region> region);
  // `sorted` is ordered by addr. One merge pass: O(size() + sorted.size()).
  void InsertMany(std::vector<std::unique_ptr<Region>> sorted);

  void Erase(uint64_t addr);
  // One compaction pass: O(size() + addrs.size() log addrs.size()).
  void EraseMany(std::vector<uint64_t> addrs);

 private:
  std::vector<uint64_t> starts_;  // sorted, parallel to regions_
  std::vector<std::unique_ptr<Region>> regions_;
};

}  // namespace registry_internal
}  // namespace ferry
