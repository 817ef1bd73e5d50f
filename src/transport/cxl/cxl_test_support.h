// Test support for the cxl transport's tests: a window file in /dev/shm with a unique name,
// removed when the test ends, and small helpers. Not part of the library.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "transport/conformance/test_context.h"

namespace ferry::cxl::testing {

using transport_testing::SliceBatch;
using transport_testing::TestContext;

constexpr uint64_t kMiB = uint64_t{1} << 20;

inline uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }  // NOLINT

inline void Fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 31 + (i >> 9));
}

// An empty file in /dev/shm named after this process and a counter; unlinked on destruction.
class TempWindowFile {
 public:
  TempWindowFile() {
    static std::atomic<int> counter{0};
    path_ = "/dev/shm/ferry-cxl-test-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter.fetch_add(1)) + ".window";
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
  }
  ~TempWindowFile() { ::unlink(path_.c_str()); }
  TempWindowFile(const TempWindowFile&) = delete;
  TempWindowFile& operator=(const TempWindowFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ferry::cxl::testing
