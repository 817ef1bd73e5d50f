// The registered buffer a ferry-bench mode moves bytes to or from: plain pages (PageBuffer)
// registered with registerLocalMemory, or, under --managed, memory from allocateManagedBuffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "bench/bench_support.h"
#include "ferry/status.h"
#include "ferry/transfer_engine.h"

namespace ferry::bench {

// Owns one registered buffer of an engine it borrows: the engine must outlive it (declare the
// engine first). Every page is touched at creation, so the measured loop takes no first-touch
// fault.
// Thread contract: Release and the destructor from the owning thread; the bytes may be used from
// any thread until then.
class BenchBuffer {
 public:
  // Allocates `size` zeroed bytes and registers them with `engine` (after its init): as plain
  // pages, or with allocateManagedBuffer(size, managed_location) when `managed` (device memory
  // for "cuda:<n>": not zeroed, and data() must not be dereferenced).
  // Errors: what the allocation or the registration returned.
  static Result<std::unique_ptr<BenchBuffer>> Create(TransferEngine& engine, size_t size,
                                                     bool managed,
                                                     const std::string& managed_location);

  BenchBuffer(const BenchBuffer&) = delete;
  BenchBuffer& operator=(const BenchBuffer&) = delete;
  // Releases the buffer; an error is ignored (call Release first to see it).
  ~BenchBuffer();

  // Unregisters and frees the buffer (freeManagedBuffer, or unregisterLocalMemory and unmap).
  // Idempotent: later calls return Ok. Errors: the engine's (plain pages the engine refused to
  // unregister stay mapped until the destructor).
  Status Release();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool managed() const { return managed_; }

 private:
  BenchBuffer(TransferEngine& engine, uint8_t* data, size_t size, bool managed, PageBuffer pages);

  TransferEngine& engine_;
  uint8_t* data_;
  size_t size_;
  bool managed_;
  PageBuffer pages_;  // the plain pages; empty when managed
  bool released_ = false;
};

}  // namespace ferry::bench
