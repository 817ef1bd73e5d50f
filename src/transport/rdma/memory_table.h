// The rdma transport's registrations: one memory region (MR) per domain for each registered
// range, found by address for local descriptors and by id for the target's access checks.
//
// Thread contract: MemoryTable is thread-safe. A Registration's fields are written before it is
// inserted and read-only afterwards, except its use count, which the table guards.
#pragma once

#include <rdma/fi_domain.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "ferry/types.h"

namespace ferry::rdma {

struct Registration {
  uint64_t id = 0;  // unique within the transport, never reused
  uint64_t addr = 0;
  uint64_t length = 0;
  Location location;
  std::vector<fid_mr*> mrs;          // one per domain, by domain index; owned (fi_close)
  std::vector<void*> descs;          // fi_mr_desc per domain (may be null)
  std::vector<uint64_t> rkeys;       // fi_mr_key per domain
  std::vector<size_t> near_domains;  // domains on the memory's NUMA node; empty: no preference
};

class MemoryTable;

// Keeps a registration's local use count up while a slice uses it as its local side; released
// on destruction. Move-only.
class LocalUse {
 public:
  LocalUse() = default;
  LocalUse(MemoryTable* table, std::shared_ptr<const Registration> reg)
      : table_(table), reg_(std::move(reg)) {}
  LocalUse(LocalUse&& other) noexcept
      : table_(std::exchange(other.table_, nullptr)), reg_(std::move(other.reg_)) {}
  LocalUse& operator=(LocalUse&& other) noexcept;
  LocalUse(const LocalUse&) = delete;
  LocalUse& operator=(const LocalUse&) = delete;
  ~LocalUse() { Release(); }
  void Release();
  const Registration* get() const { return reg_.get(); }

 private:
  MemoryTable* table_ = nullptr;
  std::shared_ptr<const Registration> reg_;
};

class MemoryTable {
 public:
  MemoryTable() = default;
  MemoryTable(const MemoryTable&) = delete;
  MemoryTable& operator=(const MemoryTable&) = delete;

  // AlreadyExists when exactly [addr, addr + length) is registered already.
  Status Insert(std::shared_ptr<Registration> reg);
  // Takes the registration of exactly [addr, addr + length) out of the table (new lookups miss
  // it), or nullptr when there is none.
  std::shared_ptr<Registration> Remove(uint64_t addr, uint64_t length);
  // Waits until no LocalUse of `reg` is held, up to `deadline`; false on timeout.
  bool WaitUnused(const Registration* reg, std::chrono::steady_clock::time_point deadline);

  // The registration that covers [addr, addr + length), with its use count raised; an empty
  // LocalUse when none does.
  LocalUse AcquireCovering(uint64_t addr, uint64_t length);
  // Whether registration `id` is in the table.
  bool Alive(uint64_t id);
  // Empties the table (for teardown).
  std::vector<std::shared_ptr<Registration>> TakeAll();

 private:
  friend class LocalUse;
  void ReleaseUse(const Registration* reg);

  Mutex mu_;
  CondVar released_;
  // Keyed by (addr, length): ranges may nest or repeat with another length.
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<Registration>> by_range_ GUARDED_BY(mu_);
  std::map<uint64_t, const Registration*> by_id_ GUARDED_BY(mu_);
  std::map<const Registration*, int> uses_ GUARDED_BY(mu_);  // only non-zero counts
  uint64_t longest_ GUARDED_BY(mu_) = 0;                     // the longest length ever inserted
};

}  // namespace ferry::rdma
