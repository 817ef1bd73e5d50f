// BufferDesc: the published description of one registered region (DESIGN.md, Contracts).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "ferry/types.h"

namespace ferry {

// True when [a, a + n) lies entirely inside [base, base + size) (n may be 0 for an empty access
// at a point inside or at the end); base + size must not wrap.
constexpr bool RangeCovers(uint64_t base, uint64_t size, uint64_t a, uint64_t n) {
  return a >= base && a <= base + size && n <= base + size - a;
}

// A buffer that is a window of a file or block device instead of memory (issue 14): the buffer's
// address range [addr, addr + length) is a name for the file bytes [offset, offset + length);
// it is never dereferenced. The identity is the owner's view at registration; a peer that opens
// the file itself (the file transport) checks it before its first access.
// Thread contract: value type.
struct FileWindow {
  uint64_t device = 0;  // st_dev of the file on the owner's host (numbers are per kernel)
  uint64_t inode = 0;   // st_ino
  uint64_t size = 0;    // file (or device) size in bytes at registration; >= offset + length
  uint64_t offset = 0;  // the window's first byte in the file
  // Per-host local paths of the same file (a shared volume mounted on several hosts), keyed by
  // host name (HostIdentity::hostname); the owner's own entry is always there. 1..64 entries.
  std::map<std::string, std::string> paths;

  friend bool operator==(const FileWindow&, const FileWindow&) = default;
};

// Thread contract: value type.
struct BufferDesc {
  uint64_t addr = 0;        // start address in the owner's address space (or a backend offset)
  uint64_t length = 0;      // bytes; > 0 and addr + length does not wrap
  Location location;        // never Kind::kDetect once published
  uint64_t generation = 0;  // registry generation of this registration; > 0
  bool remote_accessible = true;
  // Opaque per-transport bytes (rkeys, IPC handles, window offsets), keyed by transport name.
  // A region registered for several transports appears once, with one entry per transport.
  std::map<std::string, std::string> keys;
  // Set for a file buffer (registerLocalFile); empty for memory.
  std::optional<FileWindow> file;

  uint64_t end() const { return addr + length; }
  // True when [a, a + n) lies entirely inside this buffer (n may be 0 for an empty access at a
  // point inside or at the end of the buffer).
  bool Covers(uint64_t a, uint64_t n) const { return RangeCovers(addr, length, a, n); }

  friend bool operator==(const BufferDesc&, const BufferDesc&) = default;
};

}  // namespace ferry
