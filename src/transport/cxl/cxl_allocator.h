// CxlAllocator: first-fit allocation of buffers inside a CxlWindow, shared safely by every
// engine that maps the window.
//
// The window has no header and no allocator state of its own: each allocation is an exclusive
// open-file-description byte-range lock (fcntl F_OFD_SETLK) on the window's bytes it covers.
// The kernel's lock table is thus the window's allocation map: another engine (another
// process, or another CxlWindow in this process: each holds its own open file description)
// never gets an overlapping range, and the locks of an engine that dies vanish with its fd, so
// a crash leaks nothing. Two device nodes of one DAX device (e.g. in a container's /dev) are
// different inodes: engines must name the window by one path for the locks to meet.
//
// Thread contract: thread-safe. The window is borrowed and must outlive the allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "common/mutex.h"
#include "ferry/status.h"
#include "transport/cxl/cxl_window.h"

namespace ferry::cxl {

class CxlAllocator {
 public:
  // Allocations start at multiples of this and are rounded up to it (a cache line).
  static constexpr uint64_t kAlignment = 64;

  explicit CxlAllocator(const CxlWindow* window) : window_(window) {}
  // Releases every allocation still held.
  ~CxlAllocator();
  CxlAllocator(const CxlAllocator&) = delete;
  CxlAllocator& operator=(const CxlAllocator&) = delete;

  // `length` bytes inside the window, at the lowest free offset found. InvalidArgument for a
  // length of 0 or beyond the window; Again when no free range is large enough (another
  // engine may free one); Unavailable when the window's file refuses byte-range locks.
  Result<void*> Allocate(uint64_t length);
  // Frees what Allocate returned. NotFound when `p` is not an allocation of this allocator.
  Status Free(void* p);

  // Bytes held by this allocator's allocations, rounded as allocated (tests, diagnostics).
  uint64_t allocated_bytes() const;

 private:
  // Lowest own allocation that overlaps [offset, offset + length), or end().
  std::map<uint64_t, uint64_t>::const_iterator FindOwnOverlapLocked(uint64_t offset,
                                                                    uint64_t length) const
      REQUIRES(mu_);

  const CxlWindow* const window_;
  mutable Mutex mu_;
  std::map<uint64_t, uint64_t> allocations_ GUARDED_BY(mu_);  // offset -> rounded length
};

}  // namespace ferry::cxl
