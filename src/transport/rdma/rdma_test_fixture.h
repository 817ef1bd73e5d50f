// The fixture the rdma transport's tests share: a target and an initiator RdmaTransport over
// libfabric's "tcp;ofi_rxm" provider on 127.0.0.1, each with a TestContext standing in for its
// engine (Exchange between them reaches the peer's OnExchange), and a registered 32 MiB remote
// region and 32 MiB local region. Every test skips, naming the reason, where the provider is
// missing.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transport/conformance/test_context.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/rdma_transport_impl.h"
#include "common/sanitizers.h"

namespace ferry::rdma {

using namespace std::chrono_literals;
using transport_testing::SliceBatch;
using transport_testing::TestContext;
using Clock = std::chrono::steady_clock;

inline constexpr uint64_t kTargetIncarnation = 0x7a7a7a;
inline constexpr uint64_t kGeneration = 3;
inline constexpr size_t kKiB = size_t{1} << 10;
inline constexpr size_t kMiB = size_t{1} << 20;
inline constexpr size_t kRegionSize = 32 * kMiB;

// What a bound on a failure may exceed op_timeout by (sanitizers slow endpoint set-up).
inline constexpr std::chrono::milliseconds kSlack{kSanitized ? 3000 : 1000};

inline uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }  // NOLINT

inline void Fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed * 131 + i * 31 + (i >> 9));
}

inline RdmaTransportOptions TcpOptions(std::chrono::milliseconds op_timeout = 3000ms) {
  RdmaTransportOptions o;
  o.provider = "tcp;ofi_rxm";
  o.op_timeout = op_timeout;
  return o;
}

class RdmaTransportTest : public ::testing::Test {
 protected:
  RdmaTransportTest()
      : target_ctx_(kTargetIncarnation),
        initiator_ctx_(0x1111),
        remote_(kRegionSize, 0xAA),
        local_(kRegionSize, 0) {}

  void SetUp() override {
    Result<std::string> probe = ProbeRdmaProvider(TcpOptions());
    if (!probe.ok())
      GTEST_SKIP() << "libfabric provider tcp;ofi_rxm unavailable: " << probe.status();
  }

  ~RdmaTransportTest() override {
    if (initiator_) initiator_->Stop();
    if (target_) target_->Stop();
    initiator_.reset();
    target_.reset();
  }

  // Starts the target and registers `remote_` with it (its key in remote_key_).
  void StartTarget(RdmaTransportOptions o = TcpOptions()) {
    target_ = std::make_unique<RdmaTransport>(o);
    Result<std::string> published = target_->Start(&target_ctx_, {"target", "127.0.0.1"});
    ASSERT_TRUE(published.ok()) << published.status();
    published_ = *published;
    initiator_ctx_.AddPeer("target", target_.get());
    Result<std::string> key = target_->RegisterMemory(Addr(remote_.data()), remote_.size(),
                                                      Location::Cpu(), MemoryAccess::kRemote);
    ASSERT_TRUE(key.ok()) << key.status();
    remote_key_ = *key;
    target_ctx_.AddRegion(remote_.data(), remote_.size(), kGeneration, true, "rdma");
  }
  // Starts the initiator and registers `local_` with it.
  void StartInitiator(RdmaTransportOptions o = TcpOptions()) {
    initiator_ = std::make_unique<RdmaTransport>(o);
    Result<std::string> published = initiator_->Start(&initiator_ctx_, {"initiator", "127.0.0.1"});
    ASSERT_TRUE(published.ok()) << published.status();
    Result<std::string> key = initiator_->RegisterMemory(Addr(local_.data()), local_.size(),
                                                         Location::Cpu(), MemoryAccess::kRemote);
    ASSERT_TRUE(key.ok()) << key.status();
  }
  SegmentDesc TargetDesc(const std::string& published) const {
    SegmentDesc desc;
    desc.name = "target";
    desc.incarnation = kTargetIncarnation;
    desc.transports["rdma"] = published;
    return desc;
  }
  std::shared_ptr<PeerLink> Connect() {
    Result<std::shared_ptr<PeerLink>> link = initiator_->Connect(TargetDesc(published_));
    EXPECT_TRUE(link.ok()) << link.status();
    return link.ok() ? *link : nullptr;
  }
  Slice Make(OpCode op, const void* local, uint64_t remote_offset, uint64_t length) const {
    Slice s;
    s.op = op;
    s.local_addr = Addr(local);
    s.remote_addr = Addr(remote_.data()) + remote_offset;
    s.length = length;
    s.remote_generation = kGeneration;
    s.peer_incarnation = kTargetIncarnation;
    s.remote_key = remote_key_;
    return s;
  }
  // Submits the batch and waits for every completion. The tests that use it never fill the
  // queue (its bound is 65536 slices), so Again fails the test instead of being retried.
  ::testing::AssertionResult Run(PeerLink& link, const SliceBatch& batch,
                                 std::chrono::milliseconds timeout = 20s) {
    const Status s = initiator_->Submit(link, batch.ptrs);
    if (!s.ok()) return ::testing::AssertionFailure() << "Submit: " << s;
    if (!initiator_ctx_.WaitAll(batch.ptrs, timeout)) {
      return ::testing::AssertionFailure() << "slices did not complete within the bound";
    }
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult AllOk(const SliceBatch& batch) {
    for (Slice* s : batch.ptrs) {
      const Status st = initiator_ctx_.StatusOf(s);
      if (!st.ok()) return ::testing::AssertionFailure() << st;
    }
    return ::testing::AssertionSuccess();
  }

  TestContext target_ctx_;
  TestContext initiator_ctx_;
  std::vector<uint8_t> remote_;
  std::vector<uint8_t> local_;
  std::unique_ptr<RdmaTransport> target_;
  std::unique_ptr<RdmaTransport> initiator_;
  std::string published_;
  std::string remote_key_;
};

}  // namespace ferry::rdma
