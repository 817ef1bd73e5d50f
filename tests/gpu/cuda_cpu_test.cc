// A build with CUDA compiled in, on any machine (label "unit": it runs in the CPU suite):
//  - without a device (or driver), the engine starts with "auto" transports, leaves cuda-ipc
//    out, refuses a region registered as "cuda:0" with Unavailable naming the cause, and
//    refuses an explicit "cuda-ipc" transport the same way;
//  - everywhere, "*" on host memory is still a cpu location, and host memory moves over tcp and
//    shm between two engines as it always did.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ferry/transfer_engine.h"
#include "gpu_support.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

EngineOptions P2P(std::vector<std::string> transports = {"auto"}) {
  EngineOptions options;
  options.metadata_conn = "P2PHANDSHAKE";
  options.local_server_name = "127.0.0.1";
  options.transports = std::move(transports);
  options.task_timeout = 20s;
  options.request_timeout = 5s;
  return options;
}

TEST(CudaCpuTest, WithoutADeviceCudaRequestsFailWithTheCause) {
  if (gpu_testing::NoGpuReason().empty()) {
    GTEST_SKIP() << "a CUDA device is present: tests/gpu covers device memory here";
  }
  TransferEngine engine;
  ASSERT_TRUE(engine.init(P2P()).ok());
  std::vector<unsigned char> host(64 << 10, 1);
  Status device = engine.registerLocalMemory(host.data(), host.size(), "cuda:0");
  EXPECT_EQ(StatusCode::kUnavailable, device.code()) << device;
  EXPECT_NE(std::string::npos, device.message().find("CUDA: no")) << device;
  // Nothing was registered by the refused call: the same memory registers as host memory.
  ASSERT_TRUE(engine.registerLocalMemory(host.data(), host.size(), "*").ok());
  Result<SegmentId> self = engine.openSegment(engine.localSegmentName());
  ASSERT_TRUE(self.ok()) << self.status();
  Result<std::vector<SegmentBuffer>> buffers = engine.getSegmentBuffers(*self);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  ASSERT_EQ(1u, buffers->size());
  for (const std::string& t : buffers->front().transports) EXPECT_NE("cuda-ipc", t);

  // cuda-ipc asked for by name: the engine does not start, and says why.
  TransferEngine explicit_cuda;
  Status start = explicit_cuda.init(P2P({"cuda-ipc", "tcp"}));
  EXPECT_EQ(StatusCode::kUnavailable, start.code()) << start;
  EXPECT_NE(std::string::npos, start.message().find("CUDA")) << start;
}

TEST(CudaCpuTest, HostMemoryIsCpuAndMovesOverTcpAndShmAsBefore) {
  TransferEngine target;
  TransferEngine initiator;
  ASSERT_TRUE(target.init(P2P()).ok());
  ASSERT_TRUE(initiator.init(P2P()).ok());
  constexpr size_t kBytes = 1 << 20;
  std::vector<unsigned char> remote(kBytes, 0);
  std::vector<unsigned char> local(2 * kBytes, 0);
  ASSERT_TRUE(target.registerLocalMemory(remote.data(), remote.size(), "*").ok());
  ASSERT_TRUE(initiator.registerLocalMemory(local.data(), local.size(), "*").ok());
  Result<SegmentId> peer = initiator.openSegment(target.localSegmentName());
  ASSERT_TRUE(peer.ok()) << peer.status();
  Result<std::vector<SegmentBuffer>> buffers = initiator.getSegmentBuffers(*peer);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  ASSERT_EQ(1u, buffers->size());
  EXPECT_EQ(0u, buffers->front().location.rfind("cpu", 0)) << buffers->front().location;

  const auto addr = reinterpret_cast<uint64_t>(remote.data());
  unsigned seed = 3;
  for (const std::string transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    const std::vector<unsigned char> bytes = gpu_testing::Pattern(kBytes - 7, ++seed);
    std::copy(bytes.begin(), bytes.end(), local.begin());
    std::fill(local.begin() + kBytes, local.end(), 0);
    TransferRequest write{OpCode::kWrite, local.data(), *peer, addr + 7, bytes.size(), transport};
    TransferRequest read{OpCode::kRead, local.data() + kBytes, *peer,
                         addr + 7,      bytes.size(),          transport};
    for (const TransferRequest& r : {write, read}) {
      Result<BatchId> batch = initiator.allocateBatchID(1);
      ASSERT_TRUE(batch.ok());
      ASSERT_TRUE(initiator.submitTransfer(*batch, {r}).ok());
      Result<BatchStatus> done = initiator.waitBatch(*batch, 30s);
      ASSERT_TRUE(done.ok()) << done.status();
      Result<TransferStatus> status = initiator.getTransferStatus(*batch, 0);
      ASSERT_TRUE(status.ok());
      EXPECT_EQ(TransferState::kCompleted, status->state) << status->reason;
      EXPECT_EQ(transport, status->transport);
      ASSERT_TRUE(initiator.freeBatchID(*batch).ok());
    }
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), local.begin() + kBytes));
  }
}

}  // namespace
}  // namespace ferry
