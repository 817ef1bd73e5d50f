#include "transport/shm/shm_allocations.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "common/log.h"

namespace ferry::shm {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// MFD_HUGE_2MB from <linux/memfd.h> (log2 of the page size << MFD_HUGE_SHIFT), which clashes
// with glibc's <sys/mman.h>.
constexpr unsigned kMfdHuge2Mb = 21u << 26;

struct Mapped {
  int fd = -1;
  void* addr = nullptr;
  size_t map_length = 0;
};

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A memfd of `length` bytes mapped shared; errno-bearing failure text in `error`.
std::optional<Mapped> MakeMapped(size_t length, unsigned flags, size_t page, std::string* error) {
  const int fd = ::memfd_create("ferry-shm", flags);
  if (fd < 0) {
    *error = "memfd_create: " + ErrnoText(errno);
    return std::nullopt;
  }
  const size_t map_length = RoundUp(length, page);
  if (::ftruncate(fd, static_cast<off_t>(map_length)) != 0) {
    *error = "ftruncate: " + ErrnoText(errno);
    ::close(fd);
    return std::nullopt;
  }
  void* addr = ::mmap(nullptr, map_length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) {
    *error = "mmap: " + ErrnoText(errno);
    ::close(fd);
    return std::nullopt;
  }
  return Mapped{fd, addr, map_length};
}

}  // namespace

SharedAllocations::~SharedAllocations() {
  MutexLock lock(mu_);
  for (const auto& [addr, buffer] : by_addr_) Release(buffer);
  by_addr_.clear();
  addr_of_id_.clear();
}

void SharedAllocations::Release(const Buffer& buffer) {
  if (::munmap(buffer.addr, buffer.map_length) != 0) {
    FERRY_LOG(kWarn) << "shm munmap of buffer " << buffer.id << ": " << ErrnoText(errno);
  }
  ::close(buffer.fd);
}

Result<void*> SharedAllocations::Allocate(size_t length, const Location& location) {
  if (length == 0) return InvalidArgumentError("shm AllocateShared: length must be > 0");
  if (location.is_device()) {
    return InvalidArgumentError("shm allocates host memory only, not " + location.ToString());
  }
  std::string error;
  std::optional<Mapped> mapped;
  bool huge = false;
  if (length % kHugePage == 0) {
    // Hugetlb reserves the pages at mmap time, so a shortage fails here rather than faulting.
    mapped = MakeMapped(length, MFD_CLOEXEC | MFD_HUGETLB | kMfdHuge2Mb, kHugePage, &error);
    huge = mapped.has_value();
  }
  if (!mapped) {
    const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    mapped = MakeMapped(length, MFD_CLOEXEC, page, &error);
    if (!mapped)
      return UnavailableError("shm AllocateShared(" + std::to_string(length) + "): " + error);
    // Transparent huge pages for shmem are advisory; a kernel without them says EINVAL.
    (void)::madvise(mapped->addr, mapped->map_length, MADV_HUGEPAGE);
  }
  MutexLock lock(mu_);
  Buffer buffer{next_id_++, mapped->fd, mapped->addr, length, mapped->map_length, huge};
  const auto key = reinterpret_cast<uint64_t>(buffer.addr);
  addr_of_id_[buffer.id] = key;
  by_addr_[key] = buffer;
  return buffer.addr;
}

Status SharedAllocations::Free(void* addr) {
  Buffer buffer;
  {
    MutexLock lock(mu_);
    auto it = by_addr_.find(reinterpret_cast<uint64_t>(addr));
    if (it == by_addr_.end()) {
      return NotFoundError("shm FreeShared: no shared allocation starts at this address");
    }
    buffer = it->second;
    addr_of_id_.erase(buffer.id);
    by_addr_.erase(it);
  }
  Release(buffer);
  return Status::Ok();
}

std::optional<SharedPlace> SharedAllocations::Find(uint64_t addr, uint64_t length) {
  MutexLock lock(mu_);
  auto it = by_addr_.upper_bound(addr);
  if (it == by_addr_.begin()) return std::nullopt;
  --it;
  const Buffer& b = it->second;
  const uint64_t offset = addr - it->first;
  if (offset >= b.length || length > b.length - offset) return std::nullopt;
  return SharedPlace{b.id, offset, b.length};
}

Result<int> SharedAllocations::DupFd(uint64_t id) {
  MutexLock lock(mu_);
  auto it = addr_of_id_.find(id);
  if (it == addr_of_id_.end()) return NotFoundError("no shared buffer " + std::to_string(id));
  auto buffer = by_addr_.find(it->second);
  if (buffer == by_addr_.end()) return InternalError("shm allocation tables disagree");
  const int fd = ::fcntl(buffer->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return UnavailableError("dup of shared buffer fd: " + ErrnoText(errno));
  return fd;
}

size_t SharedAllocations::size() {
  MutexLock lock(mu_);
  return by_addr_.size();
}

bool SharedAllocations::huge_pages(uint64_t id) {
  MutexLock lock(mu_);
  auto it = addr_of_id_.find(id);
  if (it == addr_of_id_.end()) return false;
  auto buffer = by_addr_.find(it->second);
  return buffer != by_addr_.end() && buffer->second.huge;
}

}  // namespace ferry::shm
