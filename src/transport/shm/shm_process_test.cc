// ShmTransport across two real processes: this test is the initiator, shm_test_peer (spawned)
// is the target. CMA and the mapped path, the kernel refusing process_vm_writev (EPERM), no
// byte landing after unregister, and throughput numbers against raw process_vm_writev/memcpy.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/sanitizers.h"
#include "test_servers.h"
#include "transport/conformance/test_context.h"
#include "transport/shm/shm_encoding.h"
#include "transport/shm/shm_test_pattern.h"
#include "transport/shm/shm_transport.h"

// A namespace of its own: a unity build compiles this file with the other tests of its target,
// whose helpers (kWait, kMiB, ...) differ.
namespace ferry::shm_process_test {
namespace {

using std::chrono::milliseconds;
using transport_testing::SliceBatch;
using transport_testing::TestContext;

constexpr milliseconds kWait{15000};
constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
// Under sanitizers (kSanitized) the throughput test moves less: the numbers mean little.

// Drops CAP_SYS_PTRACE from the calling thread's effective set while alive (threads started
// meanwhile inherit the drop) and restores it after. Without it, root may attach to anything.
class NoPtraceCapability {
 public:
  NoPtraceCapability() {
    ok_ = ::syscall(SYS_capget, &header_, saved_) == 0;
    if (!ok_) return;
    __user_cap_data_struct dropped[2] = {saved_[0], saved_[1]};
    dropped[0].effective &= ~(1u << CAP_SYS_PTRACE);
    ok_ = ::syscall(SYS_capset, &header_, dropped) == 0;
  }
  ~NoPtraceCapability() {
    if (ok_) (void)::syscall(SYS_capset, &header_, saved_);
  }
  bool ok() const { return ok_; }

 private:
  __user_cap_header_struct header_{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[2]{};
  bool ok_ = false;
};

// A target region in the peer process.
struct PeerRegion {
  uint64_t addr = 0;
  std::string key;
};

class ShmProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<testing::TempDir> dir = testing::TempDir::Create("shm-process-test");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<testing::TempDir>(std::move(dir).value());
    SpawnPeer(false);
  }

  // Starts shm_test_peer (after quitting the one running, if any); `noptrace`: its transport
  // does not call PR_SET_PTRACER.
  void SpawnPeer(bool noptrace) {
    if (child_) {
      (void)child_->WriteLine("quit");
      child_->Stop(milliseconds(2000));
    }
    std::vector<std::string> argv = {testing::BinDir() + "/shm_test_peer", dir_->path()};
    if (noptrace) argv.push_back("noptrace");
    Result<std::unique_ptr<testing::ChildProcess>> child =
        testing::ChildProcess::SpawnPiped(argv, dir_->path() + "/peer.log");
    ASSERT_TRUE(child.ok()) << child.status();
    child_ = std::move(child).value();
    Result<std::string> ready = child_->ReadLine(kWait);
    ASSERT_TRUE(ready.ok()) << ready.status() << "\n" << child_->LogTail();
    std::istringstream in(*ready);
    std::string word;
    in >> word >> peer_incarnation_ >> peer_published_;
    ASSERT_EQ(word, "ready") << *ready;
  }

  void TearDown() override {
    if (initiator_) initiator_->Stop();
    if (child_) {
      (void)child_->WriteLine("quit");
      child_->Stop(milliseconds(2000));
    }
  }

  // `published`: the peer's shm bytes to connect with instead of what it published.
  void StartInitiator(bool allow_ptrace = true, const std::string& published = "") {
    ShmTransportOptions options;
    options.socket_dir = dir_->path();
    options.allow_same_user_ptrace = allow_ptrace;
    initiator_ = std::make_unique<ShmTransport>(options);
    ASSERT_TRUE(initiator_->Start(&ctx_, {"initiator", ""}).ok());
    SegmentDesc desc;
    desc.name = "peer";
    desc.incarnation = peer_incarnation_;
    desc.transports["shm"] = published.empty() ? peer_published_ : published;
    Result<std::shared_ptr<PeerLink>> link = initiator_->Connect(desc);
    ASSERT_TRUE(link.ok()) << link.status();
    link_ = *link;
  }

  std::string Command(const std::string& line) {
    if (!child_->WriteLine(line).ok()) return "<stdin closed>";
    Result<std::string> answer = child_->ReadLine(kWait);
    return answer.ok() ? *answer : "<" + answer.status().ToString() + ">";
  }

  PeerRegion Alloc(size_t length, bool shared) {
    std::istringstream in(
        Command("alloc " + std::to_string(length) + (shared ? " shared" : " heap")));
    std::string word;
    PeerRegion region;
    in >> word >> region.addr >> region.key;
    EXPECT_EQ(word, "region") << in.str();
    return region;
  }

  uint64_t PeerHash(uint64_t addr, size_t length) {
    std::istringstream in(Command("hash " + std::to_string(addr) + " " + std::to_string(length)));
    std::string word;
    uint64_t hash = 0;
    in >> word >> hash;
    EXPECT_EQ(word, "hash") << in.str();
    return hash;
  }

  Slice Make(OpCode op, const void* local, uint64_t remote, size_t length,
             const PeerRegion& region) {
    Slice s;
    s.op = op;
    s.local_addr = reinterpret_cast<uint64_t>(local);
    s.remote_addr = remote;
    s.length = length;
    s.remote_generation = 1;
    s.peer_incarnation = peer_incarnation_;
    s.remote_key = region.key;
    return s;
  }

  // Submits (retrying Again) and waits for every slice.
  ::testing::AssertionResult Run(SliceBatch& batch) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    Status s = initiator_->Submit(*link_, batch.ptrs);
    while (s.code() == StatusCode::kAgain && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(1));
      s = initiator_->Submit(*link_, batch.ptrs);
    }
    if (!s.ok()) return ::testing::AssertionFailure() << "Submit: " << s;
    if (!ctx_.WaitAll(batch.ptrs, kWait)) return ::testing::AssertionFailure() << "no completion";
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult AllOk(SliceBatch& batch) {
    for (Slice* s : batch.ptrs) {
      const Status st = ctx_.StatusOf(s);
      if (!st.ok()) return ::testing::AssertionFailure() << st;
    }
    return ::testing::AssertionSuccess();
  }

  // Writes a pattern into the peer's region in slices, checks its hash there, then reads a
  // pattern the peer wrote and compares.
  void WriteReadAcross(const PeerRegion& region, size_t length, size_t slices) {
    std::vector<uint8_t> src(length), back(length, 0), expected(length);
    shm_test::FillPattern(src.data(), length, 11);
    const size_t each = length / slices;
    SliceBatch write(&ctx_);
    for (size_t i = 0; i < slices; ++i) {
      const size_t n = i + 1 == slices ? length - i * each : each;
      write.Add(Make(OpCode::kWrite, &src[i * each], region.addr + i * each, n, region));
    }
    ASSERT_TRUE(Run(write));
    ASSERT_TRUE(AllOk(write));
    EXPECT_EQ(PeerHash(region.addr, length), shm_test::Fnv1a(src.data(), length));

    ASSERT_EQ(
        Command("pattern " + std::to_string(region.addr) + " " + std::to_string(length) + " 23"),
        "ok");
    shm_test::FillPattern(expected.data(), length, 23);
    SliceBatch read(&ctx_);
    for (size_t i = 0; i < slices; ++i) {
      const size_t n = i + 1 == slices ? length - i * each : each;
      read.Add(Make(OpCode::kRead, &back[i * each], region.addr + i * each, n, region));
    }
    ASSERT_TRUE(Run(read));
    ASSERT_TRUE(AllOk(read));
    EXPECT_EQ(0, std::memcmp(back.data(), expected.data(), length));
    EXPECT_EQ(Command("waitnopins 5000"), "ok");
  }

  std::unique_ptr<testing::TempDir> dir_;
  std::unique_ptr<testing::ChildProcess> child_;
  uint64_t peer_incarnation_ = 0;
  std::string peer_published_;
  TestContext ctx_{0x1234};
  std::unique_ptr<ShmTransport> initiator_;
  std::shared_ptr<PeerLink> link_;
};

TEST_F(ShmProcessTest, CmaMovesHeapMemoryAcrossProcesses) {
  StartInitiator();
  const PeerRegion region = Alloc(4 * kMiB + 5, false);
  ASSERT_EQ(region.key, "cma");
  WriteReadAcross(region, 4 * kMiB + 5, 16);
  EXPECT_EQ(initiator_->stats().cma_slices, 32u);
  EXPECT_EQ(initiator_->stats().mapped_slices, 0u);
}

TEST_F(ShmProcessTest, MappedBuffersMoveAcrossProcesses) {
  StartInitiator();
  const PeerRegion region = Alloc(4 * kMiB, true);
  ASSERT_EQ(region.key.rfind("mapped:", 0), 0u) << region.key;
  WriteReadAcross(region, 4 * kMiB, 16);
  WriteReadAcross(region, 4 * kMiB, 1);
  EXPECT_EQ(initiator_->stats().mapped_slices, 34u);
  EXPECT_EQ(initiator_->stats().cma_slices, 0u);
  EXPECT_GE(initiator_->stats().fd_fetches, 1u);
  EXPECT_LE(initiator_->stats().fd_fetches, 2u);  // at most once per worker
}

TEST_F(ShmProcessTest, KernelRefusingAttachFailsTheSliceWithPermissionDenied) {
  ASSERT_EQ(Command("nodump"), "ok");
  const PeerRegion heap = Alloc(64 * kKiB, false);
  const PeerRegion shared = Alloc(64 * kKiB, true);
  NoPtraceCapability no_ptrace;  // before the workers start, so they inherit it
  ASSERT_TRUE(no_ptrace.ok());
  StartInitiator();
  std::vector<uint8_t> local(64 * kKiB, 0x42);
  SliceBatch batch(&ctx_);
  Slice* write = batch.Add(Make(OpCode::kWrite, local.data(), heap.addr, local.size(), heap));
  Slice* read = batch.Add(Make(OpCode::kRead, local.data(), heap.addr, 4096, heap));
  ASSERT_TRUE(Run(batch));
  const Status w = ctx_.StatusOf(write);
  EXPECT_EQ(w.code(), StatusCode::kPermissionDenied) << w;
  EXPECT_NE(w.message().find("process_vm_writev to pid " + std::to_string(child_->pid()) +
                             ": Operation not permitted"),
            std::string::npos)
      << w;
  EXPECT_NE(w.message().find("the engine falls back to another transport"), std::string::npos) << w;
  EXPECT_EQ(ctx_.StatusOf(read).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Command("check " + std::to_string(heap.addr) + " " + std::to_string(64 * kKiB) + " 0"),
            "ok");
  EXPECT_EQ(Command("waitnopins 5000"), "ok") << "a refused copy kept its pins";

  // A shared buffer needs no ptrace access: the mapped path still works.
  SliceBatch mapped(&ctx_);
  Slice* m = mapped.Add(Make(OpCode::kWrite, local.data(), shared.addr, local.size(), shared));
  ASSERT_TRUE(Run(mapped));
  EXPECT_TRUE(ctx_.StatusOf(m).ok()) << ctx_.StatusOf(m);
  EXPECT_EQ(
      Command("check " + std::to_string(shared.addr) + " " + std::to_string(64 * kKiB) + " 66"),
      "ok");
  initiator_->Stop();
}

// process_vm_writev goes to the pid a peer publishes, on the strength of grants from whatever
// answers the grant socket it publishes: the two must be one process. Here the descriptor names
// the peer's pid but a grant socket in this process, whose context grants the peer's region:
// every slice fails PermissionDenied naming both pids, nothing is asked, and no byte moves.
TEST_F(ShmProcessTest, GrantSocketAnsweredByAnotherPidIsRefused) {
  const PeerRegion region = Alloc(64 * kKiB, false);
  ASSERT_EQ(
      Command("memset " + std::to_string(region.addr) + " " + std::to_string(64 * kKiB) + " 90"),
      "ok");
  TestContext impostor_ctx(peer_incarnation_);
  impostor_ctx.AddRegion(reinterpret_cast<const void*>(region.addr), 64 * kKiB, 1, true, "shm");
  ShmTransportOptions options;
  options.socket_dir = dir_->path();
  ShmTransport impostor(options);
  Result<std::string> impostor_published = impostor.Start(&impostor_ctx, {"impostor", ""});
  ASSERT_TRUE(impostor_published.ok()) << impostor_published.status();
  Result<shm::PeerAddress> impostor_address = shm::DecodePeerAddress(*impostor_published);
  Result<shm::PeerAddress> peer_address = shm::DecodePeerAddress(peer_published_);
  ASSERT_TRUE(impostor_address.ok() && peer_address.ok());
  ASSERT_EQ(peer_address->pid, child_->pid());
  StartInitiator(true, shm::EncodePeerAddress({child_->pid(), impostor_address->socket_path}));

  std::vector<uint8_t> src(64 * kKiB, 0x17);
  std::vector<uint8_t> back(64 * kKiB, 0x3C);
  SliceBatch batch(&ctx_);
  batch.Add(Make(OpCode::kWrite, src.data(), region.addr, src.size(), region));
  batch.Add(Make(OpCode::kRead, back.data(), region.addr, back.size(), region));
  ASSERT_TRUE(Run(batch));
  for (Slice* s : batch.ptrs) {
    const Status st = ctx_.StatusOf(s);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st;
    EXPECT_NE(st.message().find("answered by pid " + std::to_string(::getpid())), std::string::npos)
        << st;
    EXPECT_NE(st.message().find("not by pid " + std::to_string(child_->pid())), std::string::npos)
        << st;
  }
  EXPECT_EQ(impostor_ctx.pin_calls(), 0u) << "an impostor's grant was asked for";
  EXPECT_EQ(
      Command("check " + std::to_string(region.addr) + " " + std::to_string(64 * kKiB) + " 90"),
      "ok")
      << "a byte landed in the peer on an impostor's grant";
  for (size_t i = 0; i < back.size(); ++i)
    ASSERT_EQ(back[i], 0x3C) << "read returned bytes at " << i;
  EXPECT_EQ(initiator_->stats().cma_slices, 0u);
  initiator_->Stop();
  impostor.Stop();

  // The same peer through its own socket: the check passes and the bytes move.
  StartInitiator();
  SliceBatch honest(&ctx_);
  honest.Add(Make(OpCode::kWrite, src.data(), region.addr, src.size(), region));
  ASSERT_TRUE(Run(honest));
  ASSERT_TRUE(AllOk(honest));
  EXPECT_EQ(
      Command("check " + std::to_string(region.addr) + " " + std::to_string(64 * kKiB) + " 23"),
      "ok");
}

// allow_same_user_ptrace off on both sides: neither transport asks for PR_SET_PTRACER, and
// shared (managed) buffers still move both ways, copied through the mapping, not with CMA.
// (What the option trades away, CMA into this process under Yama ptrace_scope 1, needs a kernel
// with Yama to show; KernelRefusingAttachFailsTheSliceWithPermissionDenied shows the mapped path
// working where the kernel refuses CMA.)
TEST_F(ShmProcessTest, SharedBuffersMoveWithSameUserPtraceOff) {
  SpawnPeer(true);
  EXPECT_EQ(Command("ptracer"), "ptracer 0");
  StartInitiator(false);
  EXPECT_FALSE(initiator_->stats().same_user_ptrace_requested);
  const PeerRegion region = Alloc(kMiB, true);
  ASSERT_EQ(region.key.rfind("mapped:", 0), 0u) << region.key;
  WriteReadAcross(region, kMiB, 4);
  EXPECT_EQ(initiator_->stats().mapped_slices, 8u);
  EXPECT_EQ(initiator_->stats().cma_slices, 0u);
}

TEST_F(ShmProcessTest, NoByteLandsAfterUnregisterDuringTraffic) {
  StartInitiator();
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "mapped" : "cma");
    const PeerRegion region = Alloc(kMiB, shared);
    std::vector<uint8_t> local(kMiB, 0x77);
    std::atomic<bool> stop{false};
    std::atomic<bool> closed{false};
    std::atomic<int> ok_after_close{0};
    std::atomic<int> hung{0};
    Mutex mu;
    CondVar ran;
    int batches = 0;  // guarded by mu
    // Waits until the writer has run `n` more batches (or stopped), bounded.
    auto wait_batches = [&](int n) {
      MutexLock lock(mu);
      const int target = batches + n;
      const auto until = std::chrono::steady_clock::now() + kWait;
      while (batches < target && hung.load() == 0 && std::chrono::steady_clock::now() < until) {
        (void)ran.WaitUntil(mu, until);
      }
      return batches >= target;
    };
    std::thread writer([&] {
      while (!stop.load()) {
        SliceBatch batch(&ctx_);
        for (size_t off = 0; off < kMiB; off += 128 * kKiB) {
          batch.Add(Make(OpCode::kWrite, &local[off], region.addr + off, 128 * kKiB, region));
        }
        const bool after = closed.load();
        if (!Run(batch)) {
          hung.fetch_add(1);
          return;
        }
        if (after && AllOk(batch)) ok_after_close.fetch_add(1);
        MutexLock lock(mu);
        ++batches;
        ran.NotifyAll();
      }
    });
    ASSERT_TRUE(wait_batches(1)) << "traffic did not start";
    ASSERT_EQ(Command("close " + std::to_string(region.addr)), "ok");
    ASSERT_EQ(Command("waitnopins 10000"), "ok");
    closed.store(true);
    ASSERT_EQ(Command("memset " + std::to_string(region.addr) + " " + std::to_string(kMiB) + " 92"),
              "ok");
    EXPECT_TRUE(wait_batches(3)) << "traffic stopped after the close";
    stop.store(true);
    writer.join();
    EXPECT_EQ(hung.load(), 0);
    EXPECT_EQ(ok_after_close.load(), 0) << "a write was reported done after unregister";
    EXPECT_EQ(Command("check " + std::to_string(region.addr) + " " + std::to_string(kMiB) + " 92"),
              "ok")
        << "a byte landed after unregister";
  }
}

// A target frozen by SIGSTOP (as a user froze one) with slices due in 300 ms: they complete
// Timeout at the deadline (not Unavailable, not at io_timeout), and once the target runs again
// nothing of them lands there.
TEST_F(ShmProcessTest, AFrozenTargetTimesOutAtTheDeadlineAndNothingLandsAfterItResumes) {
  StartInitiator();
  const PeerRegion heap = Alloc(256 * kKiB, false);
  const PeerRegion shared = Alloc(256 * kKiB, true);
  std::vector<uint8_t> local(256 * kKiB, 0x5a);
  {  // map the shared buffer first, so the frozen round uses both paths' copies
    SliceBatch warm(&ctx_);
    warm.Add(Make(OpCode::kRead, local.data(), shared.addr, 4096, shared));
    ASSERT_TRUE(Run(warm));
    ASSERT_TRUE(AllOk(warm));
  }
  ASSERT_TRUE(testing::FreezeProcess(child_->pid(), kWait));
  SliceBatch frozen(&ctx_);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(300);
  for (const PeerRegion* region : {&heap, &shared}) {
    for (size_t off = 0; off < 256 * kKiB; off += 64 * kKiB) {
      frozen.Add(Make(OpCode::kWrite, &local[off], region->addr + off, 64 * kKiB, *region))
          ->deadline = deadline;
    }
  }
  ASSERT_TRUE(initiator_->Submit(*link_, frozen.ptrs).ok());
  const bool all = ctx_.WaitAll(frozen.ptrs, kWait);
  const auto late = std::chrono::steady_clock::now() - deadline;
  ASSERT_EQ(::kill(child_->pid(), SIGCONT), 0);
  ASSERT_TRUE(all);
  EXPECT_GE(late, milliseconds(0));
  EXPECT_LT(late, milliseconds(100)) << "completed long after the deadline";
  for (Slice* s : frozen.ptrs) {
    EXPECT_EQ(ctx_.StatusOf(s).code(), StatusCode::kTimeout) << ctx_.StatusOf(s);
  }
  // The target runs again: a later transfer on the same link goes through, after which the
  // target holds no pin and neither region changed.
  SliceBatch after(&ctx_);
  after.Add(Make(OpCode::kRead, local.data(), heap.addr, 4096, heap));
  ASSERT_TRUE(Run(after));
  EXPECT_TRUE(AllOk(after));
  EXPECT_EQ(Command("waitnopins 5000"), "ok");
  for (const PeerRegion* region : {&heap, &shared}) {
    EXPECT_EQ(
        Command("check " + std::to_string(region->addr) + " " + std::to_string(256 * kKiB) + " 0"),
        "ok")
        << "a byte landed after the slice timed out";
  }
}

// Roles reversed: this process is the target, the peer process an initiator. An initiator
// killed (SIGKILL) while it holds a pin taken through the target's lease table blocks the
// region's unregister only until the kernel closes its grant connection; a new initiator
// process then pins and writes the region registered again, and the old generation is Stale.
TEST_F(ShmProcessTest, AnInitiatorKilledHoldingAPinDoesNotBlockUnregister) {
  constexpr uint64_t kTargetIncarnation = 0x7a7;
  TestContext target_ctx(kTargetIncarnation);
  ShmTransportOptions options;
  options.socket_dir = dir_->path();
  ShmTransport target(options);
  Result<std::string> published = target.Start(&target_ctx, {"target", ""});
  ASSERT_TRUE(published.ok()) << published.status();
  Result<shm::PeerAddress> address = shm::DecodePeerAddress(*published);
  ASSERT_TRUE(address.ok()) << address.status();
  std::vector<uint8_t> region(64 * kKiB, 0);
  const auto addr = reinterpret_cast<uint64_t>(region.data());
  ASSERT_TRUE(
      target.RegisterMemory(addr, region.size(), Location::Cpu(), MemoryAccess::kRemote).ok());
  target_ctx.AddRegion(region.data(), region.size(), 1, true, "shm");
  auto hold = [&](uint64_t generation, const std::string& byte) {
    return Command("hold " + address->socket_path + " " + std::to_string(addr) + " 4096 " +
                   std::to_string(kTargetIncarnation) + " " + std::to_string(generation) + byte);
  };

  ASSERT_EQ(hold(1, ""), "held");
  // The Acquire's socket pin went with its Release; the lease (and the pin on it) stay.
  ASSERT_TRUE(target_ctx.WaitNoPins(kWait));
  EXPECT_EQ(target_ctx.active_leases(), 1);
  // Unregister step 1 revokes the lease; the pin the initiator holds keeps it from draining.
  ASSERT_TRUE(target_ctx.CloseRegion(region.data()));
  EXPECT_FALSE(target_ctx.WaitNoPins(milliseconds(200))) << "the drain ignored a held pin";
  child_->Kill();
  child_.reset();
  // The kernel closes the dead initiator's connection: its pins go, the region drains.
  ASSERT_TRUE(target_ctx.WaitNoPins(kWait)) << "a killed initiator's pin kept the region";
  EXPECT_EQ(target_ctx.active_leases(), 0);
  ASSERT_TRUE(target.UnregisterMemory(addr, region.size()).ok());

  ASSERT_TRUE(
      target.RegisterMemory(addr, region.size(), Location::Cpu(), MemoryAccess::kRemote).ok());
  target_ctx.AddRegion(region.data(), region.size(), 2, true, "shm");
  SpawnPeer(false);
  const std::string stale = hold(1, " 7");
  EXPECT_NE(stale.find("refused Stale"), std::string::npos) << stale;
  EXPECT_EQ(hold(2, " 66"), "held");
  for (size_t i = 0; i < region.size(); ++i) {
    ASSERT_EQ(region[i], i < 4096 ? 66 : 0) << "at " << i;
  }
  EXPECT_EQ(Command("quit"), "bye");
  child_->Stop(milliseconds(2000));
  child_.reset();
  target.Stop();
}

double GiBps(size_t bytes, std::chrono::steady_clock::duration took) {
  return static_cast<double>(bytes) / (1 << 30) / std::chrono::duration<double>(took).count();
}

// Not a benchmark gate: prints shm's numbers next to the raw system calls they wrap, and checks
// that the bytes arrived.
TEST_F(ShmProcessTest, ThroughputAgainstRawCopies) {
  StartInitiator();
  constexpr size_t kRegion = 16 * kMiB;
  constexpr size_t kTotal = (kSanitized ? 64 : 256) * kMiB;
  const PeerRegion heap = Alloc(kRegion, false);
  const PeerRegion shared = Alloc(kRegion, true);
  std::vector<uint8_t> local(kRegion);
  shm_test::FillPattern(local.data(), local.size(), 3);
  void* own = ::mmap(nullptr, kRegion, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(own, MAP_FAILED);
  std::memset(own, 0, kRegion);
  for (size_t size : {64 * kKiB, kMiB, 4 * kMiB}) {
    const size_t per_region = kRegion / size;
    // Raw: one process_vm_writev per chunk.
    auto start = std::chrono::steady_clock::now();
    for (size_t done = 0; done < kTotal; done += size) {
      const size_t off = (done / size % per_region) * size;
      iovec l{&local[off], size};
      iovec r{reinterpret_cast<void*>(heap.addr + off), size};
      ASSERT_EQ(::process_vm_writev(child_->pid(), &l, 1, &r, 1, 0), static_cast<ssize_t>(size));
    }
    const double raw_cma = GiBps(kTotal, std::chrono::steady_clock::now() - start);
    start = std::chrono::steady_clock::now();
    for (size_t done = 0; done < kTotal; done += size) {
      const size_t off = (done / size % per_region) * size;
      std::memcpy(static_cast<uint8_t*>(own) + off, &local[off], size);
    }
    const double raw_memcpy = GiBps(kTotal, std::chrono::steady_clock::now() - start);
    double through_shm[2] = {};
    for (int path = 0; path < 2; ++path) {
      const PeerRegion& region = path == 0 ? heap : shared;
      size_t done = 0;
      for (int round = 0; round < 2; ++round, done = 0) {  // a warm-up round, then the timed one
        start = std::chrono::steady_clock::now();
        for (; done < (round == 0 ? kRegion : kTotal); done += kRegion) {  // a Submit per region
          SliceBatch batch(&ctx_);
          for (size_t off = 0; off < kRegion; off += size) {
            batch.Add(Make(OpCode::kWrite, &local[off], region.addr + off, size, region));
          }
          ASSERT_TRUE(Run(batch));
          ASSERT_TRUE(AllOk(batch));
        }
      }
      through_shm[path] = GiBps(kTotal, std::chrono::steady_clock::now() - start);
      EXPECT_EQ(PeerHash(region.addr, kRegion), shm_test::Fnv1a(local.data(), kRegion));
    }
    std::cout << std::fixed << std::setprecision(2) << "[ info ] shm WRITE " << size / kKiB
              << " KiB slices, " << kTotal / kMiB << " MiB: cma " << through_shm[0]
              << " GiB/s (raw process_vm_writev " << raw_cma << "), mapped " << through_shm[1]
              << " GiB/s (raw memcpy " << raw_memcpy << ")" << std::endl;
  }
  ::munmap(own, kRegion);
}

}  // namespace
}  // namespace ferry::shm_process_test
