// CxlWindow: one process's mapping of a shared memory window (a DAX device such as /dev/dax0.0,
// or any mappable file such as one in /dev/shm), plus the identity peers compare to know they
// map the SAME window.
//
// Every engine on the host maps the window at its own address; a byte is named across
// processes by its offset from the window's start. Offsets are what cxl keys carry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "ferry/status.h"

namespace ferry::cxl {

// What makes two mappings the same window: the file (device and inode numbers, as stat(2)
// reports them) and the mapped size. The path is for messages only: two paths may name one
// window, and one path may name different windows in different mount namespaces.
struct WindowIdentity {
  std::string path;
  uint64_t size = 0;
  uint64_t device = 0;  // st_dev
  uint64_t inode = 0;   // st_ino
  // True when both name the same file (device, inode) and map the same size.
  bool SameWindowAs(const WindowIdentity& other) const {
    return device == other.device && inode == other.inode && size == other.size;
  }
};

// Owns an open fd of the window and a MAP_SHARED mapping of its first `size` bytes; both are
// released by the destructor. Thread contract: immutable after Open, safe from any thread.
class CxlWindow {
 public:
  // Opens `path` read-write and maps `size` bytes of it (0: the whole file or device).
  //  - a regular file shorter than `size` is grown with ftruncate; an empty file with size 0
  //    is InvalidArgument;
  //  - a DAX character device is never grown: its size comes from sysfs, and a `size` larger
  //    than the device is InvalidArgument;
  //  - the mapping asks for MAP_SHARED_VALIDATE | MAP_SYNC first (writes reach the media
  //    without msync on DAX) and falls back to plain MAP_SHARED where that is not supported.
  // Errors: InvalidArgument (empty path, bad size, not a regular file or character device),
  // NotFound (no such path), PermissionDenied, Unavailable (mmap failed), each naming the path.
  static Result<std::unique_ptr<CxlWindow>> Open(const std::string& path, uint64_t size);
  ~CxlWindow();
  CxlWindow(const CxlWindow&) = delete;
  CxlWindow& operator=(const CxlWindow&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t size() const { return identity_.size; }
  const WindowIdentity& identity() const { return identity_; }
  // The open fd (for byte-range locks); owned by this window.
  int fd() const { return fd_; }
  // True when the mapping was made with MAP_SYNC.
  bool synchronous() const { return synchronous_; }

  // True when [addr, addr + length) lies inside this mapping; length 0 is never inside.
  bool Contains(uint64_t addr, uint64_t length) const;
  // The offset of `addr`, which Contains.
  uint64_t OffsetOf(uint64_t addr) const { return addr - reinterpret_cast<uint64_t>(base_); }

 private:
  CxlWindow(int fd, uint8_t* base, WindowIdentity identity, bool synchronous)
      : fd_(fd), base_(base), identity_(std::move(identity)), synchronous_(synchronous) {}

  const int fd_;
  uint8_t* const base_;
  const WindowIdentity identity_;
  const bool synchronous_;
};

}  // namespace ferry::cxl
