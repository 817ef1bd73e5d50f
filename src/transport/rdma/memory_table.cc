#include "transport/rdma/memory_table.h"

#include <algorithm>
#include <limits>

namespace ferry::rdma {

LocalUse& LocalUse::operator=(LocalUse&& other) noexcept {
  if (this != &other) {
    Release();
    table_ = std::exchange(other.table_, nullptr);
    reg_ = std::move(other.reg_);
  }
  return *this;
}

void LocalUse::Release() {
  if (table_ != nullptr) std::exchange(table_, nullptr)->ReleaseUse(reg_.get());
  reg_.reset();
}

Status MemoryTable::Insert(std::shared_ptr<Registration> reg) {
  MutexLock lock(mu_);
  const auto key = std::make_pair(reg->addr, reg->length);
  if (by_range_.count(key) != 0) {
    return AlreadyExistsError("rdma: range is registered already");
  }
  by_id_[reg->id] = reg.get();
  longest_ = std::max(longest_, reg->length);
  by_range_.emplace(key, std::move(reg));
  return Status::Ok();
}

std::shared_ptr<Registration> MemoryTable::Remove(uint64_t addr, uint64_t length) {
  MutexLock lock(mu_);
  auto it = by_range_.find(std::make_pair(addr, length));
  if (it == by_range_.end()) return nullptr;
  std::shared_ptr<Registration> reg = std::move(it->second);
  by_range_.erase(it);
  by_id_.erase(reg->id);
  return reg;
}

bool MemoryTable::WaitUnused(const Registration* reg,
                             std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(mu_);
  while (uses_.count(reg) != 0) {
    if (!released_.WaitUntil(mu_, deadline) && std::chrono::steady_clock::now() >= deadline) {
      return uses_.count(reg) == 0;
    }
  }
  return true;
}

LocalUse MemoryTable::AcquireCovering(uint64_t addr, uint64_t length) {
  if (addr + length < addr) return LocalUse();
  MutexLock lock(mu_);
  // Candidates start at or before addr; walk back from the last of them. Registrations are
  // normally disjoint, so the first candidate decides.
  auto it = by_range_.upper_bound(std::make_pair(addr, std::numeric_limits<uint64_t>::max()));
  while (it != by_range_.begin()) {
    --it;
    const Registration& reg = *it->second;
    if (addr - reg.addr >= longest_) break;  // nothing earlier reaches addr
    if (addr >= reg.addr && addr + length <= reg.addr + reg.length) {
      ++uses_[&reg];
      return LocalUse(this, it->second);
    }
  }
  return LocalUse();
}

bool MemoryTable::Alive(uint64_t id) {
  MutexLock lock(mu_);
  return by_id_.count(id) != 0;
}

std::vector<std::shared_ptr<Registration>> MemoryTable::TakeAll() {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<Registration>> out;
  for (auto& [key, reg] : by_range_) out.push_back(std::move(reg));
  by_range_.clear();
  by_id_.clear();
  return out;
}

void MemoryTable::ReleaseUse(const Registration* reg) {
  MutexLock lock(mu_);
  auto it = uses_.find(reg);
  if (it == uses_.end()) return;
  if (--it->second == 0) {
    uses_.erase(it);
    released_.NotifyAll();
  }
}

}  // namespace ferry::rdma
