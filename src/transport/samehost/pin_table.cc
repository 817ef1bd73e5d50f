#include "transport/samehost/pin_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/log.h"

namespace ferry::samehost::pins {

Result<std::unique_ptr<SharedWords>> SharedWords::Create(const char* name, size_t count,
                                                         bool peers_read_only) {
  if (count == 0 || count > kMaxEntries) {
    return InvalidArgumentError("pin table of " + std::to_string(count) + " words (1.." +
                                std::to_string(kMaxEntries) + ")");
  }
  const size_t bytes = count * sizeof(uint64_t);
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return UnavailableError(std::string(name) + " memfd: " + ErrnoText(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return UnavailableError(std::string(name) + " ftruncate: " + ErrnoText(errno));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    return UnavailableError(std::string(name) + " mmap: " + ErrnoText(errno));
  }
  // F_SEAL_FUTURE_WRITE leaves the mapping just made writable and refuses every later one.
  const int seals =
      F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | (peers_read_only ? F_SEAL_FUTURE_WRITE : 0);
  if (::fcntl(fd.get(), F_ADD_SEALS, seals) != 0) {
    const std::string what = std::string(name) + " seals: " + ErrnoText(errno);
    ::munmap(base, bytes);
    return UnavailableError(what);
  }
  return std::unique_ptr<SharedWords>(
      new SharedWords(static_cast<std::atomic<uint64_t>*>(base), count, std::move(fd)));
}

Result<std::unique_ptr<SharedWords>> SharedWords::Map(int fd, size_t count, bool writable) {
  if (count == 0 || count > kMaxEntries) {
    return InvalidArgumentError("a pin table of " + std::to_string(count) + " words");
  }
  const size_t bytes = count * sizeof(uint64_t);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return UnavailableError("pin table fstat: " + ErrnoText(errno));
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (static_cast<size_t>(st.st_size) != bytes || seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return InvalidArgumentError("the peer's pin table is not a sealed file of " +
                                std::to_string(bytes) + " bytes");
  }
  void* base =
      ::mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return UnavailableError("pin table mmap: " + ErrnoText(errno));
  return std::unique_ptr<SharedWords>(
      new SharedWords(static_cast<std::atomic<uint64_t>*>(base), count, UniqueFd()));
}

SharedWords::~SharedWords() {
  if (::munmap(words_, count_ * sizeof(uint64_t)) != 0) {
    FERRY_LOG(kWarn) << "pin table munmap: " << ErrnoText(errno);
  }
}

}  // namespace ferry::samehost::pins
