#include "bench/bench_buffer.h"

#include <cstring>
#include <utility>

namespace ferry::bench {

BenchBuffer::BenchBuffer(TransferEngine& engine, uint8_t* data, size_t size, bool managed,
                         PageBuffer pages)
    : engine_(engine), data_(data), size_(size), managed_(managed), pages_(std::move(pages)) {}

Result<std::unique_ptr<BenchBuffer>> BenchBuffer::Create(TransferEngine& engine, size_t size,
                                                         bool managed,
                                                         const std::string& managed_location) {
  if (managed) {
    Result<void*> addr = engine.allocateManagedBuffer(size, managed_location);
    if (!addr.ok()) {
      return addr.status().WithContext("allocateManagedBuffer(" + std::to_string(size) + ", " +
                                       managed_location + ")");
    }
    auto* data = static_cast<uint8_t*>(*addr);
    // Touch every page now, not in the measured loop; device memory is never the CPU's to touch.
    if (managed_location.rfind("cuda", 0) != 0) std::memset(data, 0, size);
    return std::unique_ptr<BenchBuffer>(new BenchBuffer(engine, data, size, true, PageBuffer()));
  }
  ASSIGN_OR_RETURN(PageBuffer pages, PageBuffer::Allocate(size));
  if (Status s = engine.registerLocalMemory(pages.data(), pages.size()); !s.ok()) {
    return s.WithContext("registerLocalMemory");
  }
  uint8_t* data = pages.data();
  return std::unique_ptr<BenchBuffer>(new BenchBuffer(engine, data, size, false, std::move(pages)));
}

BenchBuffer::~BenchBuffer() { Release().IgnoreError(); }

Status BenchBuffer::Release() {
  if (released_) return Status::Ok();
  released_ = true;
  if (managed_) return engine_.freeManagedBuffer(data_).WithContext("freeManagedBuffer");
  Status s = engine_.unregisterLocalMemory(data_);
  if (!s.ok()) return s.WithContext("unregisterLocalMemory");  // mapped until destruction
  pages_ = PageBuffer();  // unmapped only once the engine let go of it
  return Status::Ok();
}

}  // namespace ferry::bench
