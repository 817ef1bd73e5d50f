// Test support for the tcp transport's tests: the shared TestContext (conformance/), a context
// whose target can be frozen, and small raw-socket helpers for fake peers. Not part of the
// library.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "transport/conformance/test_context.h"
#include "common/wait_for.h"

namespace ferry::tcp::testing {

using transport_testing::SliceBatch;
using transport_testing::TestContext;

// Forwards to a TestContext, except that pinning the gate address blocks the calling thread (a
// target's I/O loop) until Open(): the target stops serving, as a SIGSTOPped process does, while
// its kernel keeps accepting bytes. Thread-safe.
class GatedContext final : public TransportContext {
 public:
  // `inner` is borrowed for the context's life.
  GatedContext(TestContext* inner, const void* gate) : inner_(inner), gate_(gate) {}
  ~GatedContext() override { Open(); }

  Result<AccessPin> PinRemoteAccess(uint64_t addr, uint64_t length, uint64_t incarnation,
                                    uint64_t generation, std::string_view transport) override;
  void CompleteSlice(Slice* slice, const Status& status) override {
    inner_->CompleteSlice(slice, status);
  }
  Result<std::string> Exchange(const SegmentDesc& peer, std::string_view transport,
                               std::string_view payload,
                               std::chrono::milliseconds timeout) override {
    return inner_->Exchange(peer, transport, payload, timeout);
  }
  uint64_t incarnation() const override { return inner_->incarnation(); }

  // Waits until a pin of the gate blocks; false on timeout.
  bool WaitFrozen(std::chrono::milliseconds timeout);
  // Lets every blocked and later pin of the gate through.
  void Open();

 private:
  TestContext* const inner_;
  const void* const gate_;
  Mutex mu_;
  CondVar cv_;
  bool frozen_ GUARDED_BY(mu_) = false;
  bool open_ GUARDED_BY(mu_) = false;
};

// Open file descriptors of this process (entries of /proc/self/fd).
size_t OpenFdCount();

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
