#include "registry/region_index.h"

#include <algorithm>

namespace ferry::registry_internal {

size_t RegionIndex::LowerBound(uint64_t addr) const {
  return static_cast<size_t>(std::lower_bound(starts_.begin(), starts_.end(), addr) -
                             starts_.begin());
}

Region* RegionIndex::Floor(uint64_t addr) const {
  // Branch-light binary search for the last start <= addr.
  const uint64_t* base = starts_.data();
  size_t n = starts_.size();
  if (n == 0 || base[0] > addr) return nullptr;
  while (n > 1) {
    const size_t half = n / 2;
    base = base[half] <= addr ? base + half : base;
    n -= half;
  }
  return regions_[static_cast<size_t>(base - starts_.data())].get();
}

Region* RegionIndex::Find(uint64_t addr) const {
  const size_t i = LowerBound(addr);
  return i < starts_.size() && starts_[i] == addr ? regions_[i].get() : nullptr;
}

void RegionIndex::Insert(std::unique_ptr<Region> region) {
  const size_t i = LowerBound(region->addr);
  starts_.insert(starts_.begin() + static_cast<ptrdiff_t>(i), region->addr);
  regions_.insert(regions_.begin() + static_cast<ptrdiff_t>(i), std::move(region));
}

void RegionIndex::InsertMany(std::vector<std::unique_ptr<Region>> sorted) {
  if (sorted.size() <= 4) {
    for (auto& r : sorted) Insert(std::move(r));
    return;
  }
  std::vector<uint64_t> starts;
  std::vector<std::unique_ptr<Region>> regions;
  starts.reserve(starts_.size() + sorted.size());
  regions.reserve(starts_.size() + sorted.size());
  size_t i = 0;
  size_t j = 0;
  while (i < regions_.size() || j < sorted.size()) {
    const bool take_old =
        j == sorted.size() || (i < regions_.size() && starts_[i] < sorted[j]->addr);
    std::unique_ptr<Region>& next = take_old ? regions_[i++] : sorted[j++];
    starts.push_back(next->addr);
    regions.push_back(std::move(next));
  }
  starts_ = std::move(starts);
  regions_ = std::move(regions);
}

void RegionIndex::Erase(uint64_t addr) {
  const size_t i = LowerBound(addr);
  if (i == starts_.size() || starts_[i] != addr) return;
  starts_.erase(starts_.begin() + static_cast<ptrdiff_t>(i));
  regions_.erase(regions_.begin() + static_cast<ptrdiff_t>(i));
}

void RegionIndex::EraseMany(std::vector<uint64_t> addrs) {
  if (addrs.size() <= 4) {
    for (uint64_t a : addrs) Erase(a);
    return;
  }
  std::sort(addrs.begin(), addrs.end());
  size_t out = 0;
  for (size_t i = 0; i < starts_.size(); ++i) {
    if (std::binary_search(addrs.begin(), addrs.end(), starts_[i])) continue;
    starts_[out] = starts_[i];
    regions_[out] = std::move(regions_[i]);
    ++out;
  }
  starts_.resize(out);
  regions_.resize(out);
}

}  // namespace ferry::registry_internal
