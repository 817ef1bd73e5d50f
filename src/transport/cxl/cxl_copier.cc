#include "transport/cxl/cxl_copier.h"

#include <cstring>
#include <string>

#include "transport/cxl/cxl_runtime.h"

namespace ferry::cxl {
namespace {

std::string RangeText(uint64_t addr, uint64_t length) {
  return "[" + std::to_string(addr) + ", +" + std::to_string(length) + ")";
}

}  // namespace

Result<uint64_t> CxlCopier::RemoteOffset(const Slice& s) const {
  const CxlWindow& window = *window_->window;
  if (!window.Contains(s.local_addr, s.length)) {
    return InvalidArgumentError("cxl: local range " + RangeText(s.local_addr, s.length) +
                                " is not inside this engine's mapping of the window");
  }
  Result<RegionKey> key = DecodeKey(s.remote_key);
  if (!key.ok()) return key.status();
  if (key->offset > peer_.window.size || key->length > peer_.window.size - key->offset) {
    return InvalidArgumentError("cxl key " + RangeText(key->offset, key->length) +
                                " leaves the window");
  }
  const uint64_t region = peer_.base + key->offset;  // no wrap: DecodeEndpoint checked base+size
  if (s.remote_addr < region || s.remote_addr - region > key->length ||
      s.length > key->length - (s.remote_addr - region)) {
    return InvalidArgumentError("cxl: remote range " + RangeText(s.remote_addr, s.length) +
                                " leaves its buffer " + RangeText(region, key->length));
  }
  return s.remote_addr - peer_.base;
}

Status CxlCopier::Check(const Slice& slice) { return RemoteOffset(slice).status(); }

void CxlCopier::Copy(std::span<Slice* const> granted, std::span<Status> results) {
  const CxlWindow& window = *window_->window;
  for (size_t k = 0; k < granted.size(); ++k) {
    const Slice& s = *granted[k];
    Result<uint64_t> offset = RemoteOffset(s);  // passed Check; cheap arithmetic
    if (!offset.ok()) {
      results[k] = offset.status();
      continue;
    }
    uint8_t* remote = window.base() + *offset;
    auto* local = reinterpret_cast<uint8_t*>(s.local_addr);  // NOLINT: a checked window address
    // memmove: both ends are in one window, so they may overlap.
    if (s.op == OpCode::kWrite) {
      std::memmove(remote, local, s.length);
    } else {
      std::memmove(local, remote, s.length);
    }
    results[k] = Status::Ok();
  }
}

}  // namespace ferry::cxl
