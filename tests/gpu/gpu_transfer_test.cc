// Device memory end to end, on a machine with a CUDA device (label "gpu"; scripts/gpu-check.sh
// runs exactly these there). Without one, every case is skipped with the reason printed.
//
//  - two processes on one GPU over cuda-ipc: writes and reads at odd sizes and offsets, every
//    byte of the peer's region and of the guard bytes around it checked on the device; requests
//    leaving the region are refused and change nothing; the target's "*" is reported cuda:0;
//  - the same over tcp alone, device memory staged through host memory on both sides (the
//    initiator's pinned chunks, the target's staging), and from host memory to the device;
//  - the same over rdma (libfabric's shm provider, FI_HMEM) beside tcp: rdma carries device
//    memory where this libfabric registers it, tcp otherwise;
//  - unregister during traffic, over cuda-ipc and over tcp: no byte lands after the target's
//    unregister returned, and a re-registration (new generation) is reachable again;
//  - two engines in one process: each reaches the other's device memory (used at its own
//    address: CUDA cannot open a handle where it was exported), and both reach a peer process's
//    allocation (opened once per process);
//  - local copies between host and device memory and between two device buffers (the engine's
//    own segment: a checked cudaMemcpy), out-of-range ones refused with the guards intact.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/wait_for.h"
#include "ferry/transfer_engine.h"
#include "gpu_support.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using gpu_testing::Fnv;
using gpu_testing::Pattern;
using gpu_testing::ToDevice;
using gpu_testing::ToHost;
using testing::ChildProcess;
using testing::TempDir;

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGuard = 64 * kKiB;
constexpr unsigned char kGuardByte = 0xEE;  // what ferry-gpu-test-peer sets its allocation to

// A cudaMalloc'd buffer, freed on destruction.
struct DeviceBuffer {
  unsigned char* ptr = nullptr;
  size_t size = 0;
  explicit DeviceBuffer(size_t n) : size(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), n) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// A ferry-gpu-test-peer process (gpu_peer.cc).
struct GpuPeer {
  std::unique_ptr<ChildProcess> process;
  std::string name;
  uint64_t addr = 0;
  uint64_t length = 0;

  std::string Ask(const std::string& command) {
    if (!process->WriteLine(command).ok()) return "dead";
    Result<std::string> line = process->ReadLine(20s);
    return line.ok() ? *line : "no answer: " + line.status().ToString();
  }
  // FNV-1a of the peer's allocation bytes [offset, offset + len) (offsets from the allocation's
  // start: its region begins at kGuard).
  std::string Sum(uint64_t offset, uint64_t len) {
    return Ask("sum " + std::to_string(offset) + " " + std::to_string(len));
  }
};

std::string SumLine(const std::vector<unsigned char>& bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "sum %llx",
                static_cast<unsigned long long>(Fnv(bytes.data(), bytes.size())));
  return text;
}

class GpuTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = gpu_testing::NoGpuReason(); !why.empty()) GTEST_SKIP() << why;
    auto dir = TempDir::Create("gpu");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
  }

  void TearDown() override {
    if (peer_.process != nullptr) peer_.Ask("exit");
  }

  Status StartEngine(std::vector<std::string> transports, const std::string& rdma_provider = "") {
    EngineOptions options;
    options.metadata_conn = "P2PHANDSHAKE";
    options.local_server_name = "127.0.0.1";
    options.transports = std::move(transports);
    options.rdma_provider = rdma_provider;
    options.task_timeout = 20s;
    options.request_timeout = 5s;
    return engine_.init(options);
  }

  // Starts the peer with a `region` byte device buffer registered with `location`, its engine
  // running `transports` (a comma list; rdma over `rdma_provider`).
  void StartPeer(size_t region, const std::string& location,
                 const std::string& transports = "cuda-ipc",
                 const std::string& rdma_provider = "") {
    ::setenv("FERRY_PEER_TRANSPORTS", transports.c_str(), 1);  // inherited by the child
    if (!rdma_provider.empty()) ::setenv("FERRY_PEER_RDMA_PROVIDER", rdma_provider.c_str(), 1);
    auto child =
        ChildProcess::SpawnPiped({gpu_testing::SelfDir() + "/ferry-gpu-test-peer",
                                  std::to_string(region), std::to_string(kGuard), location},
                                 dir_->path() + "/peer.log");
    ::unsetenv("FERRY_PEER_TRANSPORTS");
    ::unsetenv("FERRY_PEER_RDMA_PROVIDER");
    ASSERT_TRUE(child.ok()) << child.status();
    peer_.process = std::move(child).value();
    Result<std::string> ready = peer_.process->ReadLine(30s);
    ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << peer_.process->LogTail();
    char name[256] = {};
    unsigned long long addr = 0, len = 0;
    ASSERT_EQ(3,
              std::sscanf(ready->c_str(), "ready name=%255s addr=%llx len=%llu", name, &addr, &len))
        << *ready;
    peer_.name = name;
    peer_.addr = addr;
    peer_.length = len;
  }

  // Runs `requests` as one batch on `engine` (engine_ when null); every task's status.
  std::vector<TransferStatus> Run(const std::vector<TransferRequest>& requests,
                                  TransferEngine* engine = nullptr) {
    TransferEngine& e = engine != nullptr ? *engine : engine_;
    std::vector<TransferStatus> out;
    Result<BatchId> batch = e.allocateBatchID(requests.size());
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) return out;
    Status submitted = e.submitTransfer(*batch, requests);
    EXPECT_TRUE(submitted.ok()) << submitted;
    if (submitted.ok()) {
      Result<BatchStatus> done = e.waitBatch(*batch, 30s);
      EXPECT_TRUE(done.ok()) << done.status();
      for (size_t i = 0; i < requests.size(); ++i) {
        Result<TransferStatus> s = e.getTransferStatus(*batch, i);
        out.push_back(s.ok() ? *s : TransferStatus{});
      }
    }
    EXPECT_TRUE(e.freeBatchID(*batch).ok());
    return out;
  }

  void RoundTripsWithGuards(const std::string& transport, const std::string& rdma_provider = "");
  void UnregisterDuringTraffic(const std::string& transport);

  std::unique_ptr<TempDir> dir_;
  TransferEngine engine_;
  GpuPeer peer_;
};

// Two processes, both sides device memory, over `transport` alone: cuda-ipc, or tcp (staged
// through host memory on both sides: the initiator's pinned chunks, the target's staging). Or
// over "rdma,tcp" with rdma on `rdma_provider`: rdma carries device memory where it registered
// it with FI_HMEM (a libfabric with CUDA support), tcp (staged) where it could not.
void GpuTransferTest::RoundTripsWithGuards(const std::string& transport,
                                           const std::string& rdma_provider) {
  constexpr size_t kRegion = 8 * kMiB;
  std::vector<std::string> transports;
  std::istringstream names(transport);
  for (std::string name; std::getline(names, name, ',');) transports.push_back(name);
  ASSERT_TRUE(StartEngine(transports, rdma_provider).ok());
  ASSERT_NO_FATAL_FAILURE(StartPeer(kRegion, "*", transport, rdma_provider));
  Result<SegmentId> target = engine_.openSegment(peer_.name);
  ASSERT_TRUE(target.ok()) << target.status();
  // The peer registered with "*": the engine detected its device memory.
  Result<std::vector<SegmentBuffer>> buffers = engine_.getSegmentBuffers(*target);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  ASSERT_EQ(1u, buffers->size());
  EXPECT_EQ("cuda:0", buffers->front().location);
  const std::vector<std::string>& reach = buffers->front().transports;
  std::string carrier = transport;
  if (transports.size() > 1) {
    EXPECT_NE(std::find(reach.begin(), reach.end(), "tcp"), reach.end());
    const bool hmem = std::find(reach.begin(), reach.end(), "rdma") != reach.end();
    carrier = hmem ? "rdma" : "tcp";
    std::printf("device memory over rdma (%s): %s\n", rdma_provider.c_str(),
                hmem ? "registered with FI_HMEM, carried by rdma"
                     : "not registered by this libfabric, carried by tcp (staged)");
  } else {
    EXPECT_EQ(transports, reach);
  }

  // Local device memory, registered with its explicit location (checked against the pointer).
  DeviceBuffer local(2 * kRegion);
  ASSERT_NE(nullptr, local.ptr);
  ASSERT_TRUE(engine_.registerLocalMemory(local.ptr, local.size, "cuda:0").ok());
  if (transports.size() > 1) {
    // rdma says which way it went for this side's buffer, as the peer's did for its own:
    // registered with FI_HMEM, or refused (libfabric's shm offers FI_HMEM; a libfabric without
    // CUDA support cannot register device memory with it).
    std::map<std::string, uint64_t> counted;
    for (const TransportMetrics& t : engine_.getMetrics().transports) {
      if (t.name == "rdma") counted.insert(t.counters.begin(), t.counters.end());
    }
    EXPECT_EQ(carrier == "rdma" ? 1u : 0u, counted["device_registrations"]);
    EXPECT_EQ(carrier == "rdma" ? 0u : 1u, counted["device_refusals"]);
  }
  // An explicit cuda:0 on host memory is refused, naming what the memory is.
  std::vector<unsigned char> host(4096);
  Status wrong = engine_.registerLocalMemory(host.data(), host.size(), "cuda:0");
  EXPECT_EQ(StatusCode::kInvalidArgument, wrong.code()) << wrong;

  // What the peer's region must hold, kept here: every check compares the whole region.
  std::vector<unsigned char> mirror(kRegion, kGuardByte);
  const std::string guard_sum = SumLine(std::vector<unsigned char>(kGuard, kGuardByte));
  struct Case {
    size_t offset, size;
  };
  unsigned seed = 1;
  for (const Case& c : {Case{0, 1}, Case{1, 4097}, Case{777, kMiB + 3}, Case{kRegion - 5, 5},
                        Case{0, kRegion}, Case{3 * kMiB + 1, 4 * kMiB + 7}}) {
    SCOPED_TRACE("offset " + std::to_string(c.offset) + " size " + std::to_string(c.size));
    const std::vector<unsigned char> bytes = Pattern(c.size, ++seed);
    ASSERT_TRUE(ToDevice(local.ptr, bytes));
    std::vector<TransferStatus> wrote =
        Run({{OpCode::kWrite, local.ptr, *target, peer_.addr + c.offset, c.size}});
    ASSERT_EQ(1u, wrote.size());
    ASSERT_EQ(TransferState::kCompleted, wrote[0].state) << wrote[0].reason;
    EXPECT_EQ(carrier, wrote[0].transport);
    std::copy(bytes.begin(), bytes.end(), mirror.begin() + static_cast<ptrdiff_t>(c.offset));
    EXPECT_EQ(SumLine(mirror), peer_.Sum(kGuard, kRegion)) << "the peer's region differs";
    EXPECT_EQ(guard_sum, peer_.Sum(0, kGuard)) << "a byte landed before the region";
    EXPECT_EQ(guard_sum, peer_.Sum(kGuard + kRegion, kGuard)) << "a byte landed after it";
    // And back, into the other half of the local buffer.
    unsigned char* back = local.ptr + kRegion;
    ASSERT_EQ(cudaSuccess, cudaMemset(back, 0, c.size));
    std::vector<TransferStatus> read =
        Run({{OpCode::kRead, back, *target, peer_.addr + c.offset, c.size}});
    ASSERT_EQ(1u, read.size());
    ASSERT_EQ(TransferState::kCompleted, read[0].state) << read[0].reason;
    EXPECT_EQ(bytes, ToHost(back, c.size));
  }

  // Requests that leave the region: refused, and nothing changes on the device.
  ASSERT_TRUE(ToDevice(local.ptr, Pattern(2 * kMiB, 99)));
  std::vector<TransferStatus> refused =
      Run({{OpCode::kWrite, local.ptr, *target, peer_.addr + kRegion - 10, 20},
           {OpCode::kWrite, local.ptr, *target, peer_.addr - 1, 2},
           {OpCode::kWrite, local.ptr, *target, peer_.addr + kRegion, 4096},
           {OpCode::kWrite, local.ptr, *target, peer_.addr + kRegion - kMiB, 2 * kMiB},
           {OpCode::kRead, local.ptr, *target, peer_.addr + kRegion - 4096, 8192}});
  ASSERT_EQ(5u, refused.size());
  for (size_t i = 0; i < refused.size(); ++i) {
    EXPECT_EQ(TransferState::kFailed, refused[i].state) << "request " << i;
  }
  EXPECT_EQ(SumLine(mirror), peer_.Sum(kGuard, kRegion));
  EXPECT_EQ(guard_sum, peer_.Sum(0, kGuard));
  EXPECT_EQ(guard_sum, peer_.Sum(kGuard + kRegion, kGuard));
  if (carrier == "cuda-ipc") return;

  // Host memory on this side, device memory on the peer's (not cuda-ipc: it moves device memory
  // only): the target stages (tcp) or its provider moves it (rdma), this side sends from and
  // receives into its own buffer.
  std::vector<unsigned char> host_side(2 * kMiB + 9);
  ASSERT_TRUE(engine_.registerLocalMemory(host_side.data(), host_side.size(), "cpu").ok());
  const std::vector<unsigned char> bytes = Pattern(host_side.size(), 61);
  std::copy(bytes.begin(), bytes.end(), host_side.begin());
  std::vector<TransferStatus> wrote =
      Run({{OpCode::kWrite, host_side.data(), *target, peer_.addr + 3, host_side.size()}});
  ASSERT_EQ(TransferState::kCompleted, wrote.at(0).state) << wrote.at(0).reason;
  std::copy(bytes.begin(), bytes.end(), mirror.begin() + 3);
  EXPECT_EQ(SumLine(mirror), peer_.Sum(kGuard, kRegion));
  std::fill(host_side.begin(), host_side.end(), 0);
  std::vector<TransferStatus> read =
      Run({{OpCode::kRead, host_side.data(), *target, peer_.addr + 3, host_side.size()}});
  ASSERT_EQ(TransferState::kCompleted, read.at(0).state) << read.at(0).reason;
  EXPECT_EQ(bytes, host_side);
  EXPECT_EQ(guard_sum, peer_.Sum(0, kGuard));
  EXPECT_EQ(guard_sum, peer_.Sum(kGuard + kRegion, kGuard));
}

TEST_F(GpuTransferTest, TwoProcessesOverCudaIpcWithGuardsCheckedOnTheDevice) {
  RoundTripsWithGuards("cuda-ipc");
}

TEST_F(GpuTransferTest, TcpStagesDeviceMemoryOnBothSidesWithGuardsCheckedOnTheDevice) {
  RoundTripsWithGuards("tcp");
}

// rdma over libfabric's shm provider with FI_HMEM asked, tcp beside it: whichever carries device
// memory here (rdma when this libfabric registers CUDA memory, else tcp, staged), the bytes and
// the guards are exact, and the carrier is the one the peer's buffer names.
TEST_F(GpuTransferTest, RdmaCarriesDeviceMemoryWithFiHmemOrLeavesItToTcp) {
  RoundTripsWithGuards("rdma,tcp", "shm");
}

void GpuTransferTest::UnregisterDuringTraffic(const std::string& transport) {
  constexpr size_t kRegion = 16 * kMiB;
  constexpr size_t kChunk = kMiB;
  constexpr unsigned char kMark = 0x5C;
  ASSERT_TRUE(StartEngine({transport}).ok());
  ASSERT_NO_FATAL_FAILURE(StartPeer(kRegion, "cuda:0", transport));
  Result<SegmentId> target = engine_.openSegment(peer_.name);
  ASSERT_TRUE(target.ok()) << target.status();
  DeviceBuffer local(kRegion);
  ASSERT_NE(nullptr, local.ptr);
  ASSERT_TRUE(ToDevice(local.ptr, Pattern(kRegion, 7)));
  ASSERT_TRUE(engine_.registerLocalMemory(local.ptr, local.size).ok());  // "*": detected

  // Writes over the whole region, batch after batch, until told to stop.
  std::atomic<bool> stop{false};
  std::atomic<int> completed{0};
  std::atomic<int> failed{0};
  std::thread traffic([&] {
    while (!stop.load()) {
      std::vector<TransferRequest> requests;
      for (size_t off = 0; off < kRegion; off += kChunk) {
        requests.push_back({OpCode::kWrite, local.ptr + off, *target, peer_.addr + off, kChunk});
      }
      for (const TransferStatus& s : Run(requests)) {
        (s.state == TransferState::kCompleted ? completed : failed).fetch_add(1);
      }
    }
  });
  const bool flowing = WaitFor([&] { return completed.load() >= 64; }, 30s);
  EXPECT_TRUE(flowing) << "no traffic: " << completed.load() << " completed, " << failed.load()
                       << " failed";
  // The peer unregisters while writes run, then marks its region: nothing may change it now.
  const std::string unregistered = peer_.Ask("unregister_mark " + std::to_string(kMark));
  const int failed_before = failed.load();
  const bool refusing = WaitFor([&] { return failed.load() > failed_before + 16; }, 30s);
  stop.store(true);
  traffic.join();
  ASSERT_EQ("ok", unregistered);
  EXPECT_TRUE(refusing) << "writes kept completing after the unregister";
  EXPECT_EQ(SumLine(std::vector<unsigned char>(kRegion, kMark)), peer_.Sum(kGuard, kRegion))
      << "a byte landed after the unregister returned";
  const std::string guard_sum = SumLine(std::vector<unsigned char>(kGuard, kGuardByte));
  EXPECT_EQ(guard_sum, peer_.Sum(0, kGuard));
  EXPECT_EQ(guard_sum, peer_.Sum(kGuard + kRegion, kGuard));

  // Registered again (a new generation): reachable once the descriptor is refreshed.
  ASSERT_EQ("ok", peer_.Ask("register"));
  ASSERT_TRUE(engine_.syncSegmentCache(peer_.name).ok());
  std::vector<TransferStatus> again =
      Run({{OpCode::kWrite, local.ptr, *target, peer_.addr, kRegion}});
  ASSERT_EQ(1u, again.size());
  EXPECT_EQ(TransferState::kCompleted, again[0].state) << again[0].reason;
  EXPECT_EQ(SumLine(Pattern(kRegion, 7)), peer_.Sum(kGuard, kRegion));
}

TEST_F(GpuTransferTest, NoByteLandsAfterUnregisterDuringTraffic) {
  UnregisterDuringTraffic("cuda-ipc");
}

TEST_F(GpuTransferTest, NoByteLandsAfterUnregisterDuringTcpTrafficToDeviceMemory) {
  UnregisterDuringTraffic("tcp");
}

// Two engines in one process (common in tests and in one-process prefill/decode): CUDA cannot
// open an IPC handle in the process that exported it, so cuda-ipc uses the other engine's
// memory at its own address; and both engines reach a third process's allocation, which the
// process opens once for both.
TEST_F(GpuTransferTest, TwoEnginesInOneProcessAndBothToAPeer) {
  constexpr size_t kRegion = 4 * kMiB + 3;
  ASSERT_TRUE(StartEngine({"cuda-ipc"}).ok());
  EngineOptions options;
  options.metadata_conn = "P2PHANDSHAKE";
  options.local_server_name = "127.0.0.1";
  options.transports = {"cuda-ipc"};
  options.task_timeout = 20s;
  options.request_timeout = 5s;
  DeviceBuffer theirs(kRegion + 2 * kGuard);  // the second engine's region, with guards
  DeviceBuffer mine(kRegion);
  TransferEngine second;  // goes before the buffers it registered
  ASSERT_TRUE(second.init(options).ok());
  ASSERT_NE(nullptr, theirs.ptr);
  ASSERT_NE(nullptr, mine.ptr);
  ASSERT_EQ(cudaSuccess, cudaMemset(theirs.ptr, kGuardByte, theirs.size));
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
  unsigned char* region = theirs.ptr + kGuard;
  ASSERT_TRUE(second.registerLocalMemory(region, kRegion, "*").ok());
  ASSERT_TRUE(engine_.registerLocalMemory(mine.ptr, kRegion, "cuda:0").ok());
  Result<SegmentId> other = engine_.openSegment(second.localSegmentName());
  ASSERT_TRUE(other.ok()) << other.status();
  const auto at = reinterpret_cast<uint64_t>(region);

  const std::vector<unsigned char> bytes = Pattern(kRegion - 1, 23);
  ASSERT_TRUE(ToDevice(mine.ptr, bytes));
  std::vector<TransferStatus> s = Run({{OpCode::kWrite, mine.ptr, *other, at + 1, bytes.size()}});
  ASSERT_EQ(1u, s.size());
  ASSERT_EQ(TransferState::kCompleted, s[0].state) << s[0].reason;
  EXPECT_EQ("cuda-ipc", s[0].transport);
  std::vector<unsigned char> expected(kRegion, kGuardByte);
  std::copy(bytes.begin(), bytes.end(), expected.begin() + 1);
  EXPECT_EQ(expected, ToHost(region, kRegion));
  const std::vector<unsigned char> guard(kGuard, kGuardByte);
  EXPECT_EQ(guard, ToHost(theirs.ptr, kGuard));
  EXPECT_EQ(guard, ToHost(region + kRegion, kGuard));
  ASSERT_EQ(cudaSuccess, cudaMemset(mine.ptr, 0, kRegion));
  s = Run({{OpCode::kRead, mine.ptr, *other, at + 1, bytes.size()}});
  ASSERT_EQ(TransferState::kCompleted, s.at(0).state) << s.at(0).reason;
  EXPECT_EQ(bytes, ToHost(mine.ptr, bytes.size()));
  // Out of the other engine's region: refused there, the guards intact.
  s = Run({{OpCode::kWrite, mine.ptr, *other, at + kRegion - 4, 8}});
  EXPECT_EQ(TransferState::kFailed, s.at(0).state);
  EXPECT_EQ(guard, ToHost(region + kRegion, kGuard));

  // Both engines of this process write to one peer process's allocation.
  ASSERT_NO_FATAL_FAILURE(StartPeer(kRegion, "cuda:0"));
  std::vector<unsigned char> mirror(kRegion, kGuardByte);
  TransferEngine* engines[] = {&engine_, &second};
  unsigned char* sources[] = {mine.ptr, region};
  for (size_t k = 0; k < 2; ++k) {
    SCOPED_TRACE("engine " + std::to_string(k));
    Result<SegmentId> peer = engines[k]->openSegment(peer_.name);
    ASSERT_TRUE(peer.ok()) << peer.status();
    const std::vector<unsigned char> chunk = Pattern(kMiB, 40 + static_cast<unsigned>(k));
    ASSERT_TRUE(ToDevice(sources[k], chunk));
    s = Run({{OpCode::kWrite, sources[k], *peer, peer_.addr + k * kMiB, kMiB}}, engines[k]);
    ASSERT_EQ(TransferState::kCompleted, s.at(0).state) << s.at(0).reason;
    std::copy(chunk.begin(), chunk.end(), mirror.begin() + static_cast<ptrdiff_t>(k * kMiB));
  }
  EXPECT_EQ(SumLine(mirror), peer_.Sum(kGuard, kRegion));
}

// Requests to this engine's own segment are local copies: a checked cudaMemcpy when device
// memory is involved.
TEST_F(GpuTransferTest, LocalCopiesBetweenHostAndDeviceMemory) {
  constexpr size_t kLength = 3 * kMiB + 5;
  ASSERT_TRUE(StartEngine({"cuda-ipc", "tcp"}).ok());
  DeviceBuffer a(kLength + 2 * kGuard);
  DeviceBuffer b(kLength);
  ASSERT_NE(nullptr, a.ptr);
  ASSERT_NE(nullptr, b.ptr);
  ASSERT_EQ(cudaSuccess, cudaMemset(a.ptr, kGuardByte, a.size));
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
  unsigned char* region = a.ptr + kGuard;
  std::vector<unsigned char> host(kLength);
  std::vector<unsigned char> host_back(kLength, 0);
  ASSERT_TRUE(engine_.registerLocalMemory(region, kLength).ok());  // "*": cuda:0
  ASSERT_TRUE(engine_.registerLocalMemory(b.ptr, kLength, "cuda:0").ok());
  ASSERT_TRUE(engine_.registerLocalMemory(host.data(), host.size()).ok());
  ASSERT_TRUE(engine_.registerLocalMemory(host_back.data(), host_back.size(), "cpu").ok());
  Result<SegmentId> self = engine_.openSegment(engine_.localSegmentName());
  ASSERT_TRUE(self.ok()) << self.status();
  auto addr = [](const void* p) { return reinterpret_cast<uint64_t>(p); };

  const std::vector<unsigned char> bytes = Pattern(kLength, 17);
  std::copy(bytes.begin(), bytes.end(), host.begin());
  // host -> device (a WRITE into device memory)
  std::vector<TransferStatus> s =
      Run({{OpCode::kWrite, host.data(), *self, addr(region), kLength}});
  ASSERT_EQ(TransferState::kCompleted, s.at(0).state) << s.at(0).reason;
  EXPECT_EQ(bytes, ToHost(region, kLength));
  // device -> device (a WRITE from device memory into another device buffer)
  s = Run({{OpCode::kWrite, region, *self, addr(b.ptr), kLength}});
  ASSERT_EQ(TransferState::kCompleted, s.at(0).state) << s.at(0).reason;
  EXPECT_EQ(bytes, ToHost(b.ptr, kLength));
  // device -> host (a READ of device memory into host memory, and a WRITE into a host buffer)
  s = Run({{OpCode::kRead, host_back.data(), *self, addr(b.ptr), kLength}});
  ASSERT_EQ(TransferState::kCompleted, s.at(0).state) << s.at(0).reason;
  EXPECT_EQ(bytes, host_back);
  std::fill(host_back.begin(), host_back.end(), 0);
  s = Run({{OpCode::kWrite, b.ptr, *self, addr(host_back.data()), kLength}});
  ASSERT_EQ(TransferState::kCompleted, s.at(0).state) << s.at(0).reason;
  EXPECT_EQ(bytes, host_back);

  // Out of range: refused, the guards around the device region intact.
  s = Run({{OpCode::kWrite, host.data(), *self, addr(region) + kLength - 10, 20},
           {OpCode::kWrite, host.data(), *self, addr(region) - 1, 2}});
  ASSERT_EQ(2u, s.size());
  EXPECT_EQ(TransferState::kFailed, s[0].state);
  EXPECT_EQ(TransferState::kFailed, s[1].state);
  const std::vector<unsigned char> guard(kGuard, kGuardByte);
  EXPECT_EQ(guard, ToHost(a.ptr, kGuard));
  EXPECT_EQ(guard, ToHost(region + kLength, kGuard));
  EXPECT_EQ(bytes, ToHost(region, kLength));

  // allocateManagedBuffer("cuda:0"): device memory, registered as cuda:0, freed with its
  // registration.
  Result<void*> managed = engine_.allocateManagedBuffer(kLength, "cuda:0");
  ASSERT_TRUE(managed.ok()) << managed.status();
  s = Run({{OpCode::kWrite, host.data(), *self, addr(*managed), kLength}});
  ASSERT_EQ(TransferState::kCompleted, s.at(0).state) << s.at(0).reason;
  EXPECT_EQ(bytes, ToHost(*managed, kLength));
  ASSERT_TRUE(engine_.syncSegmentCache(engine_.localSegmentName()).ok());
  Result<std::vector<SegmentBuffer>> buffers = engine_.getSegmentBuffers(*self);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  bool listed = false;
  for (const SegmentBuffer& buffer : *buffers) {
    if (buffer.addr == addr(*managed)) listed = buffer.location == "cuda:0";
  }
  EXPECT_TRUE(listed) << "the managed device buffer is not published as cuda:0";
  EXPECT_TRUE(engine_.freeManagedBuffer(*managed).ok());
}

}  // namespace
}  // namespace ferry
