// SharedAllocations: the memfd-backed buffers of one ShmTransport (AllocateShared/FreeShared),
// looked up by address (RegisterMemory's key) and by id (the grant server's FetchFd).
//
// Thread contract: thread-safe. Ids are never reused within a process, so a peer's cached
// mapping of a freed buffer can never be taken for a newer one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "common/mutex.h"
#include "ferry/status.h"
#include "ferry/types.h"

namespace ferry::shm {

// Where a range lies inside a shared buffer.
struct SharedPlace {
  uint64_t buffer_id = 0;
  uint64_t offset = 0;         // of the range's start within the buffer
  uint64_t buffer_length = 0;  // the length asked of Allocate
};

class SharedAllocations {
 public:
  SharedAllocations() = default;
  ~SharedAllocations();  // frees whatever is left
  SharedAllocations(const SharedAllocations&) = delete;
  SharedAllocations& operator=(const SharedAllocations&) = delete;

  // See ShmTransport::AllocateShared / FreeShared.
  Result<void*> Allocate(size_t length, const Location& location);
  Status Free(void* addr);

  // The buffer holding all of [addr, addr + length), if any.
  std::optional<SharedPlace> Find(uint64_t addr, uint64_t length);
  // A dup of buffer `id`'s fd (close-on-exec), owned by the caller; NotFound when freed.
  Result<int> DupFd(uint64_t id);
  // How many buffers are allocated and whether `id` was backed by huge pages (tests).
  size_t size();
  bool huge_pages(uint64_t id);

 private:
  struct Buffer {
    uint64_t id = 0;
    int fd = -1;
    void* addr = nullptr;
    size_t length = 0;      // asked for
    size_t map_length = 0;  // mapped (rounded up to the page size)
    bool huge = false;
  };
  static void Release(const Buffer& buffer);

  Mutex mu_;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Buffer> by_addr_ GUARDED_BY(mu_);  // keyed by start address
  std::map<uint64_t, uint64_t> addr_of_id_ GUARDED_BY(mu_);
};

}  // namespace ferry::shm
