#include "transport/cxl/cxl_allocator.h"

#include <fcntl.h>

#include <cerrno>
#include <string>

#include "common/log.h"

namespace ferry::cxl {
namespace {

// Lock races lost in a row (another engine locked a range between our probe and our lock)
// before Allocate gives up; each lost race moves past the winner's range, so this is a bound
// that sane use never reaches.
constexpr int kMaxLostRaces = 1024;

uint64_t AlignUp(uint64_t v) {
  return (v + CxlAllocator::kAlignment - 1) & ~(CxlAllocator::kAlignment - 1);
}

struct flock Range(short type, uint64_t offset, uint64_t length) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(offset);
  fl.l_len = static_cast<off_t>(length);
  return fl;  // l_pid stays 0, as OFD locks require
}

Status LockError(const CxlWindow& window, const char* what, int err) {
  return UnavailableError("cxl window '" + window.identity().path + "': " + what +
                          " (byte-range lock): " + ErrnoText(err));
}

}  // namespace

CxlAllocator::~CxlAllocator() {
  MutexLock lock(mu_);
  for (const auto& [offset, length] : allocations_) {
    struct flock fl = Range(F_UNLCK, offset, length);
    (void)fcntl(window_->fd(), F_OFD_SETLK, &fl);
  }
}

Result<void*> CxlAllocator::Allocate(uint64_t length) {
  const uint64_t size = window_->size();
  if (length == 0 || length > size || AlignUp(length) > size) {
    return InvalidArgumentError("cxl allocation of " + std::to_string(length) +
                                " bytes does not fit a window of " + std::to_string(size));
  }
  const uint64_t rounded = AlignUp(length);
  MutexLock lock(mu_);
  uint64_t candidate = 0;
  int lost_races = 0;
  while (candidate <= size && rounded <= size - candidate) {
    const auto own = FindOwnOverlapLocked(candidate, rounded);
    if (own != allocations_.end()) {
      candidate = AlignUp(own->first + own->second);
      continue;
    }
    struct flock probe = Range(F_WRLCK, candidate, rounded);
    if (fcntl(window_->fd(), F_OFD_GETLK, &probe) != 0) {
      return LockError(*window_, "probe", errno);
    }
    if (probe.l_type != F_UNLCK) {  // another engine holds [l_start, l_start + l_len)
      if (probe.l_len == 0) break;  // locked to the end of the file and beyond
      const auto held_end = static_cast<uint64_t>(probe.l_start + probe.l_len);
      candidate = AlignUp(held_end > candidate ? held_end : candidate + 1);
      continue;
    }
    struct flock take = Range(F_WRLCK, candidate, rounded);
    if (fcntl(window_->fd(), F_OFD_SETLK, &take) == 0) {
      allocations_.emplace(candidate, rounded);
      return static_cast<void*>(window_->base() + candidate);
    }
    const int err = errno;
    if ((err != EAGAIN && err != EACCES) || ++lost_races > kMaxLostRaces) {
      return LockError(*window_, "lock", err);
    }
  }
  return AgainError("cxl window '" + window_->identity().path + "' has no free range of " +
                    std::to_string(rounded) + " bytes");
}

Status CxlAllocator::Free(void* p) {
  const auto addr = reinterpret_cast<uint64_t>(p);
  const auto base = reinterpret_cast<uint64_t>(window_->base());
  MutexLock lock(mu_);
  const auto it = addr >= base ? allocations_.find(addr - base) : allocations_.end();
  if (it == allocations_.end()) {
    return NotFoundError("cxl FreeShared: no allocation of this transport at that address");
  }
  struct flock fl = Range(F_UNLCK, it->first, it->second);
  const int rc = fcntl(window_->fd(), F_OFD_SETLK, &fl);
  const int err = errno;
  allocations_.erase(it);
  if (rc != 0) {
    // The range stays locked (unusable by others) until this window closes; nothing worse.
    FERRY_LOG(kWarn) << "cxl window '" << window_->identity().path
                     << "': unlock on free: " << ErrnoText(err);
    return LockError(*window_, "unlock", err);
  }
  return Status::Ok();
}

uint64_t CxlAllocator::allocated_bytes() const {
  MutexLock lock(mu_);
  uint64_t total = 0;
  for (const auto& [offset, length] : allocations_) total += length;
  return total;
}

std::map<uint64_t, uint64_t>::const_iterator CxlAllocator::FindOwnOverlapLocked(
    uint64_t offset, uint64_t length) const {
  // The last allocation starting before offset + length overlaps iff it ends after offset.
  auto it = allocations_.lower_bound(offset + length);
  if (it == allocations_.begin()) return allocations_.end();
  --it;
  return it->first + it->second > offset ? it : allocations_.end();
}

}  // namespace ferry::cxl
