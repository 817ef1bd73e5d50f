// Who may reach registered memory, through the engine: a local-only region publishes no key and
// gets no remote rights on any transport, and EngineOptions::allow_same_user_ptrace decides
// whether shm lets same-user processes ptrace this one.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/segment_desc_codec.h"
#include "engine/builtin_transports.h"
#include "ferry/transfer_engine.h"
#include "metadata/store_factory.h"
#include "transport/shm/shm_transport.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

constexpr size_t kRegionBytes = 256 << 10;

BatchStatus RunOneBatch(TransferEngine& engine, const TransferRequest& request) {
  Result<BatchId> batch = engine.allocateBatchID(1);
  EXPECT_TRUE(batch.ok()) << batch.status();
  if (!batch.ok()) return {};
  EXPECT_TRUE(engine.submitTransfer(*batch, {request}).ok());
  Result<BatchStatus> summary = engine.waitBatch(*batch, 20s);
  EXPECT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(engine.freeBatchID(*batch).ok());
  return summary.ok() ? *summary : BatchStatus{};
}

class LocalOnlyMemoryTest : public ::testing::TestWithParam<const char*> {
 protected:
  EngineOptions Options(const std::string& name) const {
    EngineOptions options;
    options.metadata_conn = "memory://local-only-" + std::string(GetParam());
    options.local_server_name = name;
    options.transports = {GetParam()};
    if (std::string(GetParam()) == "rdma") options.rdma_provider = "tcp;ofi_rxm";
    options.task_timeout = 10s;
    return options;
  }
};

// The target registers one region local-only and one remote-accessible, both with every
// installed transport. Its published descriptor lists the local-only one without any key, a
// peer's write to it fails and changes nothing, while the other region takes writes, also from
// a local-only region on the initiator's side (a transfer's local side needs no remote rights).
TEST_P(LocalOnlyMemoryTest, PublishesNoKeyAndRefusesPeers) {
  TransferEngine target;
  Status init = target.init(Options("target"));
  if (std::string(GetParam()) == "rdma" && !init.ok()) GTEST_SKIP() << "no rdma here: " << init;
  ASSERT_TRUE(init.ok()) << init;
  std::vector<uint8_t> secret(kRegionBytes, 0x5A);
  std::vector<uint8_t> open(kRegionBytes, 0);
  ASSERT_TRUE(target.registerLocalMemory(secret.data(), kRegionBytes, "cpu", false).ok());
  ASSERT_TRUE(target.registerLocalMemory(open.data(), kRegionBytes, "cpu", true).ok());

  Result<std::unique_ptr<MetadataStore>> store =
      CreateMetadataStore(Options("reader").metadata_conn, {});
  ASSERT_TRUE(store.ok()) << store.status();
  Result<std::string> stored = (*store)->Get("ferry/ram/target");
  ASSERT_TRUE(stored.ok()) << stored.status();
  Result<SegmentDesc> desc = DecodeSegmentDesc(*stored);
  ASSERT_TRUE(desc.ok()) << desc.status();
  ASSERT_EQ(desc->buffers.size(), 2u);
  for (const BufferDesc& b : desc->buffers) {
    if (b.addr == reinterpret_cast<uint64_t>(secret.data())) {
      EXPECT_FALSE(b.remote_accessible);
      EXPECT_TRUE(b.keys.empty()) << "a local-only region published a " << b.keys.begin()->first
                                  << " key";
    } else {
      EXPECT_TRUE(b.remote_accessible);
      EXPECT_EQ(b.keys.count(GetParam()), 1u);
    }
  }

  TransferEngine initiator;
  ASSERT_TRUE(initiator.init(Options("initiator")).ok());
  std::vector<uint8_t> local(kRegionBytes, 0x17);
  ASSERT_TRUE(initiator.registerLocalMemory(local.data(), kRegionBytes, "cpu", false).ok());
  Result<SegmentId> segment = initiator.openSegment("target");
  ASSERT_TRUE(segment.ok()) << segment.status();

  BatchStatus refused =
      RunOneBatch(initiator, {OpCode::kWrite, local.data(), *segment,
                              reinterpret_cast<uint64_t>(secret.data()), kRegionBytes});
  EXPECT_EQ(refused.state, TransferState::kFailed);
  EXPECT_EQ(refused.first_error.code(), StatusCode::kPermissionDenied) << refused.first_error;
  EXPECT_NE(refused.first_error.message().find("not remote-accessible"), std::string::npos)
      << refused.first_error;
  EXPECT_EQ(secret, std::vector<uint8_t>(kRegionBytes, 0x5A))
      << "a refused write changed the region";

  BatchStatus written =
      RunOneBatch(initiator, {OpCode::kWrite, local.data(), *segment,
                              reinterpret_cast<uint64_t>(open.data()), kRegionBytes});
  EXPECT_EQ(written.state, TransferState::kCompleted) << written.first_error;
  EXPECT_EQ(open, local);
}

INSTANTIATE_TEST_SUITE_P(Transports, LocalOnlyMemoryTest, ::testing::Values("tcp", "shm", "rdma"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

ShmTransport* FindShm(const std::vector<std::unique_ptr<Transport>>& transports) {
  for (const auto& t : transports) {
    if (t->name() == "shm") return dynamic_cast<ShmTransport*>(t.get());
  }
  return nullptr;
}

// auto and on let shm call PR_SET_PTRACER (it copies heap memory with CMA); off keeps it from
// it; on is refused when no shm transport is installed to need it.
TEST(SameUserPtraceTest, TheEngineDecidesWhatShmIsTold) {
  EngineOptions options;
  options.transports = {"tcp", "shm"};
  for (Toggle toggle : {Toggle::kAuto, Toggle::kOn, Toggle::kOff}) {
    options.allow_same_user_ptrace = toggle;
    Result<std::vector<std::unique_ptr<Transport>>> made = CreateBuiltinTransports(options);
    ASSERT_TRUE(made.ok()) << made.status();
    ShmTransport* shm = FindShm(*made);
    ASSERT_NE(shm, nullptr);
    EXPECT_EQ(shm->options().allow_same_user_ptrace, toggle != Toggle::kOff)
        << static_cast<int>(toggle);
  }
  options.transports = {"tcp"};
  options.allow_same_user_ptrace = Toggle::kAuto;
  EXPECT_TRUE(CreateBuiltinTransports(options).ok());
  options.allow_same_user_ptrace = Toggle::kOn;
  Result<std::vector<std::unique_ptr<Transport>>> refused = CreateBuiltinTransports(options);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("allow_same_user_ptrace"), std::string::npos)
      << refused.status();
  TransferEngine engine;
  EXPECT_EQ(engine.init(options).code(), StatusCode::kInvalidArgument);
}

// With allow_same_user_ptrace off, managed buffers (shared memfds, copied with memcpy through a
// mapping) move both ways over shm between two engines.
TEST(SameUserPtraceTest, ManagedBuffersMoveOverShmWithItOff) {
  EngineOptions options;
  options.metadata_conn = "memory://ptrace-off";
  options.transports = {"shm"};
  options.allow_same_user_ptrace = Toggle::kOff;
  options.task_timeout = 10s;
  options.local_server_name = "target";
  TransferEngine target;
  ASSERT_TRUE(target.init(options).ok());
  options.local_server_name = "initiator";
  TransferEngine initiator;
  ASSERT_TRUE(initiator.init(options).ok());
  Result<void*> remote = target.allocateManagedBuffer(kRegionBytes);
  Result<void*> local = initiator.allocateManagedBuffer(2 * kRegionBytes);
  ASSERT_TRUE(remote.ok() && local.ok());
  auto* src = static_cast<uint8_t*>(*local);
  for (size_t i = 0; i < kRegionBytes; ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  std::memset(src + kRegionBytes, 0, kRegionBytes);
  Result<SegmentId> segment = initiator.openSegment("target");
  ASSERT_TRUE(segment.ok()) << segment.status();
  const uint64_t remote_addr = reinterpret_cast<uint64_t>(*remote);
  BatchStatus written =
      RunOneBatch(initiator, {OpCode::kWrite, src, *segment, remote_addr, kRegionBytes});
  ASSERT_EQ(written.state, TransferState::kCompleted) << written.first_error;
  EXPECT_EQ(0, std::memcmp(*remote, src, kRegionBytes));
  BatchStatus read = RunOneBatch(
      initiator, {OpCode::kRead, src + kRegionBytes, *segment, remote_addr, kRegionBytes});
  ASSERT_EQ(read.state, TransferState::kCompleted) << read.first_error;
  EXPECT_EQ(0, std::memcmp(src + kRegionBytes, src, kRegionBytes));
  EXPECT_TRUE(initiator.freeManagedBuffer(*local).ok());
  EXPECT_TRUE(target.freeManagedBuffer(*remote).ok());
}

}  // namespace
}  // namespace ferry
