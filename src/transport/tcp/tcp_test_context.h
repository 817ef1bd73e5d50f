// Test support for the tcp transport's tests: the shared TestContext (conformance/) and small
// raw-socket helpers for fake peers. Not part of the library.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "transport/conformance/test_context.h"

namespace ferry::tcp::testing {

using transport_testing::SliceBatch;
using transport_testing::TestContext;

// A plain blocking socket fd, closed on destruction.
class RawSocket {
 public:
  RawSocket() = default;
  explicit RawSocket(int fd) : fd_(fd) {}
  ~RawSocket();
  RawSocket(RawSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  int fd() const { return fd_; }
  void Close();

  // A listener on 127.0.0.1 with a kernel-chosen port (never accepted from unless asked).
  static RawSocket ListenLoopback(uint16_t* port);
  static RawSocket ConnectLoopback(uint16_t port);
  RawSocket Accept(std::chrono::milliseconds timeout) const;
  bool SendAll(const void* data, size_t size) const;
  // Reads up to `size` bytes, waiting up to `timeout`; returns bytes read, 0 on EOF, -1 on
  // timeout or error.
  long RecvSome(void* data, size_t size, std::chrono::milliseconds timeout) const;

 private:
  int fd_ = -1;
};

}  // namespace ferry::tcp::testing
