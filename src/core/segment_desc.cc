#include "core/segment_desc.h"

#include <algorithm>

namespace ferry {

const BufferDesc* SegmentDesc::FindCovering(uint64_t addr, uint64_t length) const {
  // Last buffer starting at or before addr.
  auto it = std::upper_bound(buffers.begin(), buffers.end(), addr,
                             [](uint64_t a, const BufferDesc& b) { return a < b.addr; });
  if (it == buffers.begin()) return nullptr;
  --it;
  return it->Covers(addr, length) ? &*it : nullptr;
}

}  // namespace ferry
