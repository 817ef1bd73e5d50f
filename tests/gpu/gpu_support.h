// What the tests of tests/gpu share: whether this machine has a CUDA device (and why not), the
// directory of the test binaries (found from /proc/self/exe, so that binaries carried to another
// machine by scripts/gpu-check.sh find their peer program), and small device-memory helpers.
#pragma once

#include <cuda_runtime_api.h>
#include <limits.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::gpu_testing {

// Empty when the CUDA runtime sees a device; otherwise why the GPU tests are skipped.
inline std::string NoGpuReason() {
  static const std::string reason = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return std::string("no usable CUDA device: cudaGetDeviceCount says ") + cudaGetErrorName(e) +
             " (" + cudaGetErrorString(e) + ")";
    }
    if (count == 0) return std::string("no CUDA device: cudaGetDeviceCount says 0");
    return std::string();
  }();
  return reason;
}

// The directory this test binary lies in.
inline std::string SelfDir() {
  char path[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  std::string self(path, n > 0 ? static_cast<size_t>(n) : 0);
  const size_t slash = self.rfind('/');
  return slash == std::string::npos ? "." : self.substr(0, slash);
}

inline uint64_t Fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

// The pattern ferry-gpu-test-peer's "fill" writes.
inline std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(seed * 131 + i * 31);
  return out;
}

// Device bytes [p, p + n) copied to the host (empty on a CUDA error).
inline std::vector<unsigned char> ToHost(const void* p, size_t n) {
  std::vector<unsigned char> out(n);
  if (cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost) != cudaSuccess) return {};
  return out;
}

inline bool ToDevice(void* p, const std::vector<unsigned char>& bytes) {
  return cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess;
}

}  // namespace ferry::gpu_testing
