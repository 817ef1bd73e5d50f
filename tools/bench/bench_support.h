// Process plumbing shared by ferry-bench's two modes: page-aligned buffers and waiting for a
// stop signal without a signal handler.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "ferry/status.h"

namespace ferry::bench {

// Owns an anonymous, page-aligned mapping of `size()` bytes (transparent huge pages requested),
// touched at allocation so the measured loop never takes a first-touch fault.
// Thread contract: move-only owner; the bytes may be used from any thread while it lives.
class PageBuffer {
 public:
  // Errors: InvalidArgument for zero bytes; Unavailable (with errno text) when mmap fails.
  static Result<PageBuffer> Allocate(size_t size);
  // An empty buffer that owns nothing (data() is null).
  PageBuffer() = default;

  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  ~PageBuffer();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  PageBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  void Release();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Blocks SIGINT and SIGTERM in the constructing thread so that they are only ever consumed by
// WaitFor. Construct it in main() before any thread starts (the engine's threads included):
// threads inherit the blocked mask, so no other thread is killed by the signal.
// Thread contract: WaitFor from the constructing thread only.
class StopSignals {
 public:
  StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Waits up to `timeout` for SIGINT or SIGTERM. True when one arrived (now or before).
  bool WaitFor(std::chrono::milliseconds timeout);

 private:
  bool signaled_ = false;
};

}  // namespace ferry::bench
